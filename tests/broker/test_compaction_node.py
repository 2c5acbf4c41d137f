"""200 partitions produced in small uploads through a BrokerNode (SeaweedFS + PostgreSQL): after one
compaction cycle far fewer objects, every record and every key lookup unchanged, fewer GETs per partition."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker.compaction import CompactionConfig
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.streams.stream_reader import StreamReader
from storage_tier import open_store

PARTITIONS = 200
ROUNDS = 15  # one stream set object per round (scaled to run in well under a minute)


def test_two_hundred_partitions(seaweedfs, pg_url, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store_url = seaweedfs.store_url("mqindex", f"n200-{uuid.uuid4().hex[:8]}")
    node = BrokerNode.open(tmp_path / "node", store_url, pg_url(), upload_interval_s=3600,
                           compaction=CompactionConfig(interval_s=0, grace_ms=0))
    store = open_store(store_url)
    try:
        node.create_topic("t", PARTITIONS)
        for r in range(ROUNDS):
            node.produce("t", [InMessage(b"v%d-%d" % (r, p) * 20, key=b"k%d" % (p % 50 + 50 * (r % 2)), partition=p)
                               for p in range(PARTITIONS)])
            node.flush()
        ssos_before = node.meta.object_counts()["stream_set_objects"]
        assert ssos_before >= ROUNDS

        def snapshot() -> tuple[list[list[bytes]], dict[str, list[tuple[int, int]]]]:
            records = []
            for p in range(PARTITIONS):
                msgs, nxt = node.fetch("t", p, 0, 1000)
                assert nxt == ROUNDS
                records.append([m.value for m in msgs])
            hits = {}
            for k in ("k0", "k7", "k63", "k99"):
                page, _ = node.find_by_key("t", k, 0, None, 1000, None)
                hits[k] = sorted((m.partition, m.offset) for m in page)
            return records, hits

        def gets_to_read(partition: int) -> int:
            sid = node.partitions.get("t", partition).data_stream
            before = store.meter.snapshot()
            recs = StreamReader(store, node.meta).read(sid, 0, node.meta.get_stream(sid).end_offset, 1 << 40)
            assert recs[-1].last_offset == node.meta.get_stream(sid).end_offset
            return (store.meter.snapshot() - before)["GET"]

        before = snapshot()
        gets_before = gets_to_read(17)
        report = node.compact()
        assert not report["errors"], report["errors"]
        assert report["objects_in"] == ssos_before and report["stream_set_objects"] <= 2
        assert before == snapshot()
        gets_after = gets_to_read(17)
        assert gets_after * 7 <= gets_before, (gets_before, gets_after)
        print(f"SSOs {ssos_before} -> {report['stream_set_objects']}, GETs to read a partition "
              f"{gets_before} -> {gets_after}")
    finally:
        node.close()
        store.close()

