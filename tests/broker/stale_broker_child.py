"""A second broker process with a stale view of a partition, for tests/broker/test_two_processes.py.

argv: METADATA_URL STORE_URL TOPIC. It reads the partition's data stream (CLOSED at some epoch), prints
"ready", waits for a line on stdin (meanwhile the first broker takes the partition again), then acts on its
stale view: opens the stream at the epoch it saw + 1 and at the epoch it saw, and tries to commit an object.
It prints one JSON line saying what each attempt raised.
"""

from __future__ import annotations

import json
import sys

from broker.errors import Fenced
from broker.metadata import MetadataClient
from broker.objects.format import StreamRecord
from broker.partitions.object_listing import open_topic
from broker.partitions.records import ProducerRecord, build_batch
from broker.streams.uploader import upload_batch
from storage_tier import open_store


def attempt(fn) -> str:  # type: ignore[no-untyped-def]
    try:
        fn()
        return "applied"
    except Fenced as exc:
        return f"Fenced: {exc}"


def main() -> int:
    meta_url, store_url, topic = sys.argv[1:4]
    meta = MetadataClient(meta_url, 1, namespace="_kafka_mqindex")
    meta.register_node()
    sid = open_topic(meta, topic).streams[0].data_stream
    seen = meta.get_stream(sid, refresh=True)
    epoch, end = seen.epoch, seen.end_offset
    print(json.dumps({"ready": True, "stream": sid, "epoch": epoch, "state": seen.state, "end": end}), flush=True)
    sys.stdin.readline()
    store = open_store(store_url)
    payload = build_batch([ProducerRecord(b"intruder")], base_offset=end)
    out = {
        "open_next": attempt(lambda: meta.open_stream(sid, epoch + 1)),
        "open_same": attempt(lambda: meta.open_stream(sid, epoch)),
        "commit": attempt(lambda: upload_batch({sid: [StreamRecord(sid, epoch + 1, end, 1, payload)]}, store, meta,
                                               ttl_ms=1)),
    }
    print(json.dumps(out), flush=True)
    store.close()
    meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
