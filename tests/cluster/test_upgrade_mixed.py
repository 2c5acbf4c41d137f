"""A rolling upgrade from the previous release: a node built from the release's commit (CHANGELOG.md names it; the
commit's files exported and installed into a virtualenv of their own) runs beside nodes of the working tree on
one PostgreSQL metadata database, one SeaweedFS bucket and the shared WAL. Under a producer, partitions move
from the old node to a new one and back, a new node killed with kill -9 is failed over by the old node (the
lowest id leads failovers) and the old node killed is failed over by a new one; nothing acknowledged is lost or
stored twice, and every key is found from the old node and from the new ones.

The previous release's virtualenv is built once per machine and reused (bench/failover_release.py: under
MQINDEX_UPGRADE_CACHE, default ~/.cache/mqindex/upgrade/<commit>, a lock file keeping two test workers from
building it at once); `mqindex bench failover` upgrades a cluster of it node by node under a producer."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from bench.failover_release import previous_release, release_venv
from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess
from tests.cluster.harness import TOPIC, Cluster, Producer, check_everything_found, check_offsets, wait_until

ROOT = Path(__file__).resolve().parents[2]
OLD = 0  # the previous release's node: the lowest id, so it leads the failover of a new node


class OldServer(ServerProcess):
    """`mqindex serve` of the previous release."""

    def __init__(self, mqindex: Path, data_dir: Path, *extra: str) -> None:
        super().__init__(data_dir, *extra)
        self.mqindex = mqindex

    def start(self, timeout: float = 60) -> ServerProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.mqindex), "serve", "--data-dir", str(self.data_dir), "--port", str(self.port),
                 *self.extra], stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"old server exited with {self.proc.returncode}:\n"
                                     f"{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"old server not healthy after {timeout}s:\n{self.log.read_text()[-3000:]}")


class MixedCluster(Cluster):
    def __init__(self, tmp: Path, store: str, meta: str, old_mqindex: Path, *extra: str) -> None:
        super().__init__(tmp, store, meta, *extra)
        self.old_mqindex = old_mqindex

    def start_old(self, node_id: int) -> ServerProcess:
        s = OldServer(self.old_mqindex, self.tmp / f"node{node_id}", "--store", self.store, "--metadata",
                      self.meta, "--node-id", str(node_id), "--lease-ms", "3000", *self.extra)
        self.nodes[node_id] = s.start()
        return s


@pytest.fixture(scope="module")
def old_mqindex() -> Path:
    _, commit = previous_release()
    return release_venv(commit) / "bin" / "mqindex"


@pytest.fixture
def mixed(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str], old_mqindex: Path
          ) -> Iterator[MixedCluster]:
    prefix = f"upgrade-{uuid.uuid4().hex[:8]}"
    c = MixedCluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(), old_mqindex,
                     "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"))
    try:
        c.start_old(OLD)  # the metadata tables as the previous release makes them
        c.start(1)
        c.start(2)
        yield c
    finally:
        c.stop_all()


def versions(c: Cluster, via: int) -> dict[int, str | None]:
    nodes = httpx.get(f"{c.url(via)}/v1/cluster/nodes", timeout=10).json()["nodes"]
    return {n["node_id"]: n.get("version") for n in nodes if n["state"] == "alive"}


def move(c: Cluster, partition: int, to: int) -> None:
    r = httpx.post(f"{c.url(to)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": partition, "to": to},
                   timeout=60)
    assert r.status_code == 200, r.text
    wait_until(lambda: f"{TOPIC}-{partition}" in c.leaders(via=to).get(to, []), 60,
               f"{TOPIC}-{partition} served by node {to}")


def restart(c: Cluster, node_id: int) -> None:
    """Start the node again (a new node), as Cluster.start does but with more time for a loaded machine, and
    once more if the store did not answer its start-up check in time (`serve` gives the store 10 s)."""
    for attempt in range(2):
        s = ServerProcess(c.tmp / f"node{node_id}", "--store", c.store, "--metadata", c.meta, "--node-id",
                          str(node_id), "--lease-ms", "3000", *c.extra)
        try:
            c.nodes[node_id] = s.start(timeout=180)
            return
        except AssertionError as exc:
            if s.proc is not None and s.proc.poll() is None:
                s.stop(9)
            if attempt or "no answer within" not in str(exc):
                raise


@pytest.mark.slow(seconds=90)
def test_a_previous_release_node_beside_new_ones_moves_and_fails_over_both_ways(mixed: MixedCluster) -> None:
    c = mixed
    assert versions(c, 1)[OLD] is None and versions(c, 1)[1] is not None  # the old release announces nothing
    r = httpx.post(f"{c.url(OLD)}/v1/topics", json={"name": TOPIC, "partitions": 6}, timeout=60)
    assert r.status_code in (200, 201), r.text
    producer = Producer(c)
    producer.start()
    try:
        producer.wait_acked(100)
        led = c.leaders(via=1)
        p_old = int(led[OLD][0].rsplit("-", 1)[1])
        move(c, p_old, 1)  # old -> new
        producer.wait_acked(len(producer.acked) + 50)
        move(c, p_old, OLD)  # new -> old
        producer.wait_acked(len(producer.acked) + 50)
        c.nodes[2].stop(9)  # a new node killed: the old node fails it over
        wait_until(lambda: 2 not in c.leaders(via=OLD) and sum(map(len, c.leaders(via=OLD).values())) == 6, 60,
                   "node 2 failed over by the old node")
        producer.wait_acked(len(producer.acked) + 50)
        restart(c, 2)
        producer.wait_acked(len(producer.acked) + 50)
        acked_beside_old = list(producer.acked)
        # the producer goes on meanwhile: values it sends after this snapshot (v<i> with a higher i) may be found
        last = max(int(a["value"][1:]) for a in acked_beside_old)
        later = {f"v{i}" for i in range(last + 1, last + 100_000)}
        check_everything_found(c, acked_beside_old, [OLD, 1], producer.in_doubt | later)
        c.nodes[OLD].stop(9)  # the old node killed: a new one fails it over
        wait_until(lambda: OLD not in c.leaders(via=1) and sum(map(len, c.leaders(via=1).values())) == 6, 60,
                   "the old node failed over by a new node")
        producer.wait_acked(len(producer.acked) + 50)
    finally:
        producer.stop_flag.set()
        producer.join(60)
    assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
    check_everything_found(c, producer.acked, [1, 2], producer.in_doubt)
    check_offsets(c, producer.acked)
