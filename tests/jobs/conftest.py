"""Fixtures of the Spark build tests: one local[2] SparkSession for the session, and one broker data set
(SeaweedFS objects + PostgreSQL metadata) produced once per module and indexed online by the broker."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage

TOPIC = "orders"
PARTITIONS = 3
WINDOW_MS = 400  # several build windows in a few seconds of producing
ROUNDS = 6
PER_ROUND = 600


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from jobs.spark_session import DAEMON_CONF, EXECUTOR_DAEMON

    # the daemon `mqindex spark-build` gives local executors (jobs/spark_session.py)
    s = (SparkSession.builder.master("local[2]").appName("mqindex-tests")
         .config("spark.ui.enabled", "false").config(DAEMON_CONF, EXECUTOR_DAEMON)
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.default.parallelism", "2").config("spark.driver.memory", "1g").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@dataclass
class Produced:
    store_url: str
    meta_url: str
    online_index: Path  # the broker's own index directory (online dispatch)
    topic: str
    # every produced record: (partition, offset, timestamp, keys by kind)
    records: list[tuple[int, int, int, dict[str, list[str]]]] = field(default_factory=list)
    object_kinds: set[str] = field(default_factory=set)

    def all_keys(self) -> list[str]:
        out: set[str] = set()
        for _p, _o, _t, kinds in self.records:
            for ks in kinds.values():
                out.update(ks)
        return sorted(out)


def _message(i: int, rnd: int) -> InMessage:
    headers: list[tuple[str, bytes]] = [("KEYS", f"cust-{i % 13} region-{i % 4}".encode())]
    if i % 5 == 0:
        headers.append(("UNIQ_KEY", f"uniq-{rnd}-{i}".encode()))
    part = 0 if i % 2 == 0 else 1 + (i // 2) % (PARTITIONS - 1)
    value = (b"v" * 120 if part == 0 else b"small") + str(i).encode()  # partition 0 is heavy: stream objects
    key = f"order-{i % 97}".encode() if i % 11 else None
    return InMessage(value, key=key, headers=headers, partition=part)


def _kinds(m: InMessage) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"record-key": [m.key.decode()] if m.key else []}
    keys: list[str] = []
    uniq: list[str] = []
    for k, v in m.headers:
        if k == "KEYS":
            keys += [p.decode() for p in v.split(b" ") if p]
        elif k == "UNIQ_KEY":
            uniq.append(v.decode())
    out["KEYS"], out["UNIQ_KEY"] = keys, uniq
    return out


@pytest.fixture(scope="module")
def produced(seaweedfs: Any, pg_dsn: str, pg_schema_factory: Callable[[], str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Produced]:
    """ROUNDS x PER_ROUND records over 3 partitions, each round in a later WINDOW_MS window, uploaded
    (stream objects for the heavy partition 0, stream set objects for the others) and indexed online."""
    base = tmp_path_factory.mktemp("spark-data")
    store_url = seaweedfs.store_url("mqindex", f"spark-{uuid.uuid4().hex[:8]}")
    meta_url = f"{pg_dsn}{'&' if '?' in pg_dsn else '?'}schema={pg_schema_factory()}"
    node_dir = base / "node"
    node = BrokerNode.open(node_dir, store_url, meta_url, upload_interval_s=600.0, so_threshold=16 << 10,
                           index_config={"maintain_interval_s": 0})
    out = Produced(store_url, meta_url, node_dir / "index", TOPIC)
    try:
        node.create_topic(TOPIC, PARTITIONS)
        for rnd in range(ROUNDS):
            msgs = [_message(rnd * PER_ROUND + i, rnd) for i in range(PER_ROUND)]
            for j in range(0, len(msgs), 150):
                chunk = msgs[j:j + 150]
                for m, p in zip(chunk, node.produce(TOPIC, chunk), strict=True):
                    out.records.append((p.partition, p.offset, p.timestamp, _kinds(m)))
            node.flush()  # one upload per round: several objects per partition
            last_window = max(r[2] for r in out.records) // WINDOW_MS
            while time.time_ns() // 1_000_000 // WINDOW_MS <= last_window:  # the next round: a later window
                time.sleep(0.005)
        node.sync_index()
        for p in range(PARTITIONS):
            for ref in node.meta.get_objects(node.partition_info(TOPIC, p)["data_stream"], 0, 1 << 40).objects:
                out.object_kinds.add(ref.kind)
    finally:
        node.close()
    yield out
