"""Moves over the shared WAL: the source does not upload what a partition holds before it hands it over; the
target continues at the source's acknowledged end and reads the rest from the source's WAL objects. Under a
producer, with uploads held back (so the moved data really is only in the source's WAL): every acknowledged
record at its offset exactly once, found by key from every node; the source killed -9 around the move loses
nothing."""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.cluster.handoff import KILL_AT_ENV
from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import (
    TOPIC,
    Cluster,
    Producer,
    all_by_key,
    check_everything_found,
    check_offsets,
    started_with_topic,
    wait_until,
)

VALUE = 16 << 10


@pytest.fixture
def held(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    """Three nodes on a shared WAL, uploads held back (10 min, 1 GiB)."""
    prefix = f"move-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"), "--upload-interval-s", "600",
                "--upload-threshold", str(1 << 30), "--max-cache-bytes", str(2 << 30))
    with started_with_topic(c, TOPIC, 6):
        yield c


def _leaders(c: Cluster) -> dict[int, int]:
    via = c.url(c.running()[0])
    body = httpx.get(f"{via}/v1/cluster/nodes", timeout=10).json()
    return {int(p.rsplit("-", 1)[1]): n["node_id"] for n in body["nodes"] if n["state"] == "alive"
            for p in n["partitions"]}


def _fill(c: Cluster, node: int, partition: int, mib: float, key: str, size: int = VALUE) -> list[dict[str, Any]]:
    """`mib` MiB of `size`-byte values produced to the partition through its leader; the acknowledgements."""
    acked = []
    value = "x" * (size - 16)
    with httpx.Client(timeout=60) as http:
        for i in range(max(1, int(mib * (1 << 20)) // (16 * size))):
            msgs = [{"key": key, "value": f"{key}-{i}-{j:02d}-{value}", "partition": partition} for j in range(16)]
            r = http.post(f"{c.url(node)}/v1/topics/{TOPIC}/messages", json={"messages": msgs})
            assert r.status_code == 200, r.text
            acked += [{**m, **res} for m, res in zip(msgs, r.json()["results"], strict=True)]
    return acked


def _move(c: Cluster, partition: int, to: int, via: int) -> dict[str, Any]:
    r = httpx.post(f"{c.url(via)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": partition, "to": to},
                   timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _lent(c: Cluster, node: int) -> int:
    """Hand-offs node `node` made by lending its WAL (its log)."""
    return c.nodes[node].log.read_text().count('upload="lent from the shared WAL"')


def _check_big(c: Cluster, big: list[dict[str, Any]], key: str, via: list[int]) -> None:
    want = sorted((a["partition"], a["offset"], a["value"]) for a in big if a["key"] == key)
    for node in via:
        got = sorted((m["partition"], m["offset"], m["value"]) for m in all_by_key(c.url(node), key))
        assert got == want, f"node {node}, key {key}: {len(got)} found, {len(want)} acknowledged"


@pytest.mark.slow(seconds=25)
def test_moves_of_unuploaded_partitions_under_a_producer_keep_every_record_once(held: Cluster) -> None:
    c = held
    producer = Producer(c)
    producer.start()
    try:
        p = next(q for q, n in sorted(_leaders(c).items()) if n == 0)
        big = _fill(c, 0, p, 1, "big-1m")
        answer = _move(c, p, 1, via=2)
        assert answer["from"] == 0 and answer["to"] == 1 and not answer["unchanged"]
        producer.wait_acked(len(producer.acked) + 20, 60)
        big += _fill(c, 1, p, 32, "big-32m")
        _move(c, p, 2, via=0)
        _move(c, p, 0, via=1)  # on again before node 2 has uploaded what it took over
        producer.wait_acked(len(producer.acked) + 20, 60)
        producer.stop_flag.set()
        producer.join(60)
        assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
        assert _lent(c, 0) >= 1 and _lent(c, 1) >= 1 and _lent(c, 2) >= 1  # no upload first
        check_offsets(c, producer.acked + big)
        check_everything_found(c, producer.acked, [0, 1, 2])
        for key in ("big-1m", "big-32m"):
            _check_big(c, big, key, [0, 1, 2])
    finally:
        producer.stop_flag.set()


@pytest.mark.slow(seconds=45)
def test_a_move_of_256_mib_unuploaded_under_a_producer_keeps_every_record_once(held: Cluster) -> None:
    """The issue's size: the source holds 256 MiB in its WAL alone; the target serves at once and reads them in
    the background while the producer goes on."""
    c = held
    producer = Producer(c)
    producer.start()
    try:
        p = next(q for q, n in sorted(_leaders(c).items()) if n == 0)
        big = _fill(c, 0, p, 256, "big-256m", size=256 << 10)
        assert len(big) == 1024
        producer.wait_acked(len(producer.acked) + 20, 60)
        answer = _move(c, p, 1, via=2)
        assert answer["from"] == 0 and answer["to"] == 1 and answer["seconds"] < 30
        producer.wait_acked(len(producer.acked) + 50, 60)
        producer.stop_flag.set()
        producer.join(60)
        assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
        assert _lent(c, 0) == 1  # no upload first
        check_offsets(c, producer.acked + big)
        check_everything_found(c, producer.acked, [0, 1, 2])
        _check_big(c, big, "big-256m", [0, 1, 2])
    finally:
        producer.stop_flag.set()


@pytest.mark.slow(seconds=15)
@pytest.mark.parametrize("when", ["after the target serves", "as the move begins"])
def test_the_source_killed_during_a_move_loses_nothing(held: Cluster, when: str) -> None:
    c = held
    producer = Producer(c)
    producer.start()
    try:
        p = next(q for q, n in sorted(_leaders(c).items()) if n == 1)
        big = _fill(c, 1, p, 8, "big-killed")
        producer.wait_acked(len(producer.acked) + 20, 60)
        if when == "after the target serves":
            _move(c, p, 2, via=0)  # answered once node 2 serves it; node 1's WAL holds the 16 MiB
            assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL
        else:
            mover = threading.Thread(target=lambda: httpx.post(
                f"{c.url(0)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": p, "to": 2}, timeout=120))
            mover.start()
            wait_until(lambda: _leaders(c).get(p) == 2, 30, "the move recorded")  # node 1 hands off at its next look
            assert c.nodes[1].stop(signal.SIGKILL) == -signal.SIGKILL
            mover.join(130)
        # node 1's partitions fail over; the moved one is served by node 2 with what node 1 acknowledged
        wait_until(lambda: len(_leaders(c)) == 6 and set(_leaders(c).values()) <= {0, 2}, 60,
                   "node 1 failed over")
        producer.wait_acked(len(producer.acked) + 20, 60)
        producer.stop_flag.set()
        producer.join(60)
        assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
        check_offsets(c, producer.acked + big)
        check_everything_found(c, producer.acked, [0, 2], producer.in_doubt)
        _check_big(c, big, "big-killed", [0, 2])
    finally:
        producer.stop_flag.set()


@pytest.mark.slow(seconds=25)
def test_the_target_killed_after_it_serves_and_restarted_loses_nothing(held: Cluster) -> None:
    """The target holds what it appended in its own WAL, above the range it read from the source's: its restart
    (or the failover of it, whichever comes first) restores both, in order."""
    c = held
    producer = Producer(c)
    producer.start()
    try:
        p = next(q for q, n in sorted(_leaders(c).items()) if n == 1)
        big = _fill(c, 1, p, 8, "big-target")
        _move(c, p, 2, via=0)  # killed at once: before it has committed the range it reads from node 1's WAL
        assert c.nodes[2].stop(signal.SIGKILL) == -signal.SIGKILL
        c.start(2)
        wait_until(lambda: len(_leaders(c)) == 6, 60, "every partition led again")
        producer.wait_acked(len(producer.acked) + 20, 60)
        producer.stop_flag.set()
        producer.join(60)
        assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
        check_offsets(c, producer.acked + big)
        check_everything_found(c, producer.acked, [0, 1, 2], producer.in_doubt)
        _check_big(c, big, "big-target", [0, 1, 2])
    finally:
        producer.stop_flag.set()


def _long_lease_cluster(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Cluster:
    prefix = f"move-{uuid.uuid4().hex[:8]}"
    return Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                   "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"), "--upload-interval-s", "600",
                   "--upload-threshold", str(1 << 30), "--max-cache-bytes", str(2 << 30), "--lease-ms", "60000")


@pytest.fixture
def long_lease(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    """Three nodes as `held`, with leases of a minute: a node killed and started again comes back before anyone
    fails it over."""
    c = _long_lease_cluster(tmp_path, seaweedfs, pg_url)
    with started_with_topic(c, TOPIC, 6):
        yield c


@pytest.mark.slow(seconds=35)
def test_the_source_restarted_in_the_middle_of_a_move_loses_nothing(long_lease: Cluster) -> None:
    """The source killed -9 as it hands the partition off and started again before its lease expires (no
    failover): the restarted source reads its WAL, hands the partition to the target, which serves everything
    the source acknowledged; the source serves its other partitions again."""
    _move_through_a_death(long_lease, 1, None)


@pytest.fixture(params=["state_record", "lend_doc", "close"])
def source_dies_at(request: pytest.FixtureRequest, tmp_path: Path, seaweedfs: SeaweedFS,
                   pg_url: Callable[[], str]) -> Iterator[tuple[Cluster, str]]:
    """As `long_lease`, node 1 killing itself (SIGKILL) right after the hand-off step `request.param`: no longer
    serving the partition (state record written), the WAL ranges recorded for the target (streams still open), the
    streams closed."""
    c = _long_lease_cluster(tmp_path, seaweedfs, pg_url)
    c.env[1] = {KILL_AT_ENV: request.param}
    with started_with_topic(c, TOPIC, 6):
        yield c, request.param


@pytest.fixture(params=["claim", "borrow"])
def target_dies_at(request: pytest.FixtureRequest, tmp_path: Path, seaweedfs: SeaweedFS,
                   pg_url: Callable[[], str]) -> Iterator[tuple[Cluster, str]]:
    """As `long_lease`, node 2 killing itself (SIGKILL) right after the take-over step `request.param`: the streams
    opened at the new epoch, the source's WAL ranges borrowed (not yet served)."""
    c = _long_lease_cluster(tmp_path, seaweedfs, pg_url)
    with started_with_topic(c, TOPIC, 6):
        assert c.nodes[2].stop() == 0  # started again to die at the step of its next take-over (a topic's creation
        c.env[2] = {KILL_AT_ENV: request.param}  # has each node take over the partitions assigned to it)
        c.start(2)
        wait_until(lambda: len(_leaders(c)) == 6 and 2 in c.leaders(), 60, "node 2 back")
        yield c, request.param


def _move_through_a_death(c: Cluster, dying: int, step: str | None) -> None:
    """A partition of node 1 moved to node 2 under a producer while node `dying` kills itself at `step` (None: the
    test kills it once the move is recorded); that node started again within its lease: the move is answered as
    done, no failover, every acknowledged record at its offset once and found by key from every node."""
    producer = Producer(c)
    producer.start()
    key = f"big-{step or 'restarted'}"
    try:
        p = next(q for q, n in sorted(_leaders(c).items()) if n == 1)
        big = _fill(c, 1, p, 8, key)
        producer.wait_acked(len(producer.acked) + 20, 60)
        answers: list[httpx.Response] = []
        mover = threading.Thread(target=lambda: answers.append(httpx.post(
            f"{c.url(0)}/v1/admin/reassignments", json={"topic": TOPIC, "partition": p, "to": 2}, timeout=120)))
        mover.start()
        if step is None:
            wait_until(lambda: _leaders(c).get(p) == 2, 30, "the move recorded")
            assert c.nodes[dying].stop(signal.SIGKILL) == -signal.SIGKILL
        else:
            proc = c.nodes[dying].proc
            assert proc is not None and proc.wait(60) == -signal.SIGKILL, f"node {dying} did not die at {step}"
            assert f'killing the process at a hand-off step step="{step}"' in c.nodes[dying].log.read_text()
            del c.env[dying]
        c.start(dying)
        mover.join(130)
        assert [r.status_code for r in answers] == [200], [r.text for r in answers]  # the move is reported done
        wait_until(lambda: len(_leaders(c)) == 6 and _leaders(c).get(p) == 2, 60, "every partition led again")
        producer.wait_acked(len(producer.acked) + 20, 60)
        producer.stop_flag.set()
        producer.join(60)
        assert httpx.get(f"{c.url(0)}/v1/cluster/failovers", timeout=10).json()["failovers"] == []  # none
        assert set(producer.statuses) <= {0, 200, 421, 503}, producer.statuses
        check_offsets(c, producer.acked + big)
        check_everything_found(c, producer.acked, [0, 1, 2], producer.in_doubt)
        _check_big(c, big, key, [0, 1, 2])
    finally:
        producer.stop_flag.set()


@pytest.mark.slow(seconds=30)
def test_the_source_killed_at_each_step_of_a_hand_off_and_restarted_loses_nothing(
        source_dies_at: tuple[Cluster, str]) -> None:
    """Each step of the source's hand-off (broker/cluster/handoff.py) as the moment it dies, restarted before its
    lease expires: the restarted source takes its streams back if it had not closed them (no other node can open
    them meanwhile) and hands the partition on; the target serves everything the source acknowledged."""
    c, step = source_dies_at
    _move_through_a_death(c, 1, step)


@pytest.mark.slow(seconds=30)
def test_the_target_killed_at_each_step_of_a_take_over_and_restarted_loses_nothing(
        target_dies_at: tuple[Cluster, str]) -> None:
    """The target dies having opened the moved partition's streams (and borrowed the source's WAL ranges) before
    serving it, and is restarted within its lease: it takes the streams back, reads the ranges again and serves
    everything the source acknowledged."""
    c, step = target_dies_at
    _move_through_a_death(c, 2, step)
