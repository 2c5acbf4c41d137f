"""Kafka transactions and the batch index: a Spark build (and the broker's own re-indexing from stored records)
never indexes a control record (a commit or abort marker), and indexes a transaction's records as the online
index does; key lookups then leave out the records of aborted and open transactions at read time, whichever
index found them (broker/partitions/reads.py `message_at`).

Against real servers: SeaweedFS objects, PostgreSQL metadata, Spark local[2] (tests/jobs/conftest.py)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.node import BrokerNode
from broker.partitions.reads import index_entries
from index_service import IndexService
from jobs.spark_build import BuildOptions, run_build
from tests.broker.test_txn_interleavings import batch

TOPIC = "txn-build"
COMMIT_KEY, ABORT_KEY = "\x00\x00\x00\x01", "\x00\x00\x00\x00"  # a marker record's key (version 0, type)
KEYS = {"plain": -1, "committed": 7, "aborted": 8, "open": 9}  # key prefix -> producer id (-1: not transactional)


@dataclass
class Stored:
    store_url: str
    meta_url: str
    node_dir: Path
    markers: dict[int, list[int]]  # partition -> offsets of its markers
    offsets: dict[str, tuple[int, int]]  # key -> (partition, offset)


@pytest.fixture(scope="module")
def stored(seaweedfs: Any, pg_dsn: str, pg_schema_factory: Callable[[], str],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stored]:
    """Two partitions, each with plain records, a committed, an aborted and an open transaction, uploaded."""
    store_url = seaweedfs.store_url("mqindex", f"spark-txn-{uuid.uuid4().hex[:8]}")
    meta_url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema_factory()}"
    node_dir = tmp_path_factory.mktemp("spark-txn") / "node"
    node = BrokerNode.open(node_dir, store_url, meta_url, upload_interval_s=600.0,
                           index_config={"maintain_interval_s": 0})
    out = Stored(store_url, meta_url, node_dir, {0: [], 1: []}, {})
    try:
        node.create_topic(TOPIC, 2)
        cb, parts = node.client_batches, node.partitions
        for q in range(2):
            p = parts.partition(parts.topic(TOPIC), q)
            for prefix, pid in KEYS.items():
                keys = [f"{prefix}-{q}-{i}" for i in range(3)]
                results, queued = cb.append(p, batch(keys, pid + 100 * q if pid >= 0 else -1, 0 if pid >= 0 else -1))
                queued.wait()
                out.offsets.update({k: (q, results[0].base_offset + i) for i, k in enumerate(keys)})
                if prefix in ("committed", "aborted"):
                    assert p.data is not None
                    out.markers[q].append(p.data.next_offset)
                    cb.append_marker(p, pid + 100 * q, 0, prefix == "committed").result(30)
        node.flush()
        node.sync_index()
    finally:
        node.close()
    yield out


def test_the_broker_reindexing_from_stored_records_skips_the_markers(stored: Stored) -> None:
    node = BrokerNode.open(stored.node_dir, stored.store_url, stored.meta_url, upload_interval_s=600.0,
                           index_config={"maintain_interval_s": 0})
    try:
        for q in range(2):
            entries = [e for chunk in index_entries(node.partitions, TOPIC, q, 0, 1 << 40) for e in chunk]
            offsets = {e.offset for e in entries}
            assert offsets == {o for k, (p, o) in stored.offsets.items() if p == q}
            assert not offsets & set(stored.markers[q]), stored.markers[q]
            assert not any(k in (COMMIT_KEY, ABORT_KEY) for e in entries for k in e.keys)
        # key lookups: the committed and plain records, never an aborted or open one
        for key in stored.offsets:
            found, _ = node.find_by_key(TOPIC, key, 0, None, 10, None)
            shown = key.startswith(("plain", "committed"))
            assert [m.key for m in found] == ([key.encode()] if shown else []), key
    finally:
        node.close()


def test_a_spark_build_indexes_no_marker_and_what_the_online_index_has(stored: Stored, spark: Any,
                                                                      tmp_path: Path) -> None:
    out = io.StringIO()
    opts = BuildOptions(metadata_url=stored.meta_url, store_url=stored.store_url, index_dir=str(tmp_path / "built"),
                        topic=TOPIC, window_ms=3_600_000, max_items=1_000, progress_interval_s=0.5)
    summary = run_build(opts, spark=spark, out=out)
    assert summary.served, out.getvalue()
    assert summary.records_indexed == len(stored.offsets)  # the 24 data records; the 4 markers are not read in
    with IndexService.open(stored.node_dir / "index", store=stored.store_url, maintain_interval_s=0) as online, \
            IndexService.open(tmp_path / "built", store=stored.store_url, maintain_interval_s=0) as built:
        for marker_key in (COMMIT_KEY, ABORT_KEY):
            assert built.query(TOPIC, marker_key, max_count=100) == []
            assert online.query(TOPIC, marker_key, max_count=100) == []
        for key, (q, offset) in stored.offsets.items():
            hits = built.query(TOPIC, key, max_count=10)
            assert [(h.queue_id, h.offset) for h in hits] == [(q, offset)], key
            assert hits == online.query(TOPIC, key, max_count=10), key
