"""200 partitions produced through a BrokerNode that uploads every few milliseconds (SeaweedFS; SQLite
metadata, whose commits are the fastest, so hundreds of uploads fit the test's time):
hundreds of small stream set objects; after one compaction cycle far fewer objects, every record
byte-identical at its offset, every key lookup unchanged, far fewer GETs to read one partition."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from broker.compaction import CompactionConfig
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from broker.streams.stream_reader import StreamReader
from storage_tier import open_store

PARTITIONS = 200
SSOS = 200  # the producing node's uploads before compaction (hundreds, kept small to bound the test's time)
KEYS = ("k0", "k7", "k63", "k500")  # each on ~70 records spread over partitions and uploads


@pytest.mark.slow(seconds=65)
def test_two_hundred_partitions(seaweedfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store_url = seaweedfs.store_url("mqindex", f"n200-{uuid.uuid4().hex[:8]}")
    # an upload every 20 ms: each produce round lands in its own small stream set object or two
    node = BrokerNode.open(tmp_path / "node", store_url, f"sqlite:///{tmp_path}/meta.sqlite", upload_interval_s=0.02,
                           compaction=CompactionConfig(interval_s=0, grace_ms=0))
    store = open_store(store_url)
    try:
        node.create_topic("t", PARTITIONS)
        produced: dict[tuple[int, int], tuple[bytes, bytes]] = {}  # (partition, offset) -> (key, value)
        started = time.monotonic()
        deadline = started + 120
        r = 0
        while node.meta.object_counts()["stream_set_objects"] < SSOS:
            assert time.monotonic() < deadline, node.meta.object_counts()
            msgs = [InMessage(b"v%d-%d" % (r, p) * 20, key=b"k%d" % ((31 * p + r) % 997), partition=p)
                    for p in range(PARTITIONS)]
            for m, ack in zip(msgs, node.produce("t", msgs), strict=True):
                assert m.key is not None and m.value is not None
                produced[(ack.partition, ack.offset)] = (m.key, m.value)
            r += 1
        node.flush()
        node.sync_index()
        ssos_before = node.meta.object_counts()["stream_set_objects"]

        def hits() -> dict[str, list[tuple[int, int, bytes | None]]]:
            out = {}
            for k in KEYS:
                page, _ = node.find_by_key("t", k, 0, None, 10_000, None)
                out[k] = sorted((m.partition, m.offset, m.value) for m in page)
            return out

        def read_partition(partition: int) -> tuple[list[bytes], int]:
            """The partition's raw stream records (encoded) and the GETs it took."""
            sid = node.partitions.get("t", partition).data_stream
            before = store.meter.snapshot()
            recs = StreamReader(store, node.meta).read(sid, 0, node.meta.get_stream(sid).end_offset, 1 << 40)
            assert recs[-1].last_offset == node.meta.get_stream(sid).end_offset
            return [r.encode() for r in recs], (store.meter.snapshot() - before)["GET"]

        t0 = time.monotonic()
        hits_before = hits()
        assert all(len(h) > 10 for h in hits_before.values())
        raw_before, gets_before = read_partition(17)
        t1 = time.monotonic()
        report = node.compact()
        t2 = time.monotonic()
        assert not report["errors"], report["errors"]
        assert report["objects_in"] >= 0.95 * ssos_before  # (an SSO sharing no stream with another stays)
        objects_after = report["stream_set_objects"] + report["stream_objects"]
        assert objects_after * 20 <= ssos_before, (ssos_before, report)
        # every acknowledged record, at its offset, byte-identical
        for p in range(PARTITIONS):
            msgs, _ = node.fetch("t", p, 0, 100_000)
            assert {(p, m.offset): (m.key, m.value) for m in msgs} == {
                k: v for k, v in produced.items() if k[0] == p}
        assert hits() == hits_before
        raw_after, gets_after = read_partition(17)
        assert raw_after == raw_before
        assert gets_after * 20 <= gets_before, (gets_before, gets_after)
        print(f"{r} produce rounds in {t0 - started:.1f} s, reads before {t1 - t0:.1f} s, "
              f"compaction {t2 - t1:.1f} s, checks after {time.monotonic() - t2:.1f} s; "
              f"SSOs {ssos_before} -> {report['stream_set_objects']} (+{report['stream_objects']} SOs), "
              f"GETs to read a partition {gets_before} -> {gets_after}")
    finally:
        node.close()
        store.close()
