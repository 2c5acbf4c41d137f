"""The issue's largest size: a partition holding 1 GiB that only the source's shared WAL holds (uploads held back)
moves under a producer. The target serves at once and reads the gigabyte in the background; every acknowledged
record is at its offset exactly once and is found by key from every node.

Made as cheap as the size allows: the gigabyte goes in 12 MiB requests from two threads, and the checks read it
in small pages comparing each value's unique head and length (a page of the whole gigabyte, or the values kept
in the test's memory, would cost gigabytes)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, Producer, check_everything_found, started_with_topic
from tests.cluster.test_move_shared_wal import _leaders, _lent, _move

VALUE = 1 << 20  # bytes a value
PER_REQUEST = 12  # values a request: 12 MiB, under the 16 MiB WAL record and the 32 MiB request body
TOTAL = 1 << 30
HEAD = 48  # the head of a value that names it: "<key>-<request>-<index>-"


@pytest.fixture
def held_big(tmp_path: Path, seaweedfs: SeaweedFS, pg_url: Callable[[], str]) -> Iterator[Cluster]:
    """Three nodes on a shared WAL, uploads held back (10 min, 3 GiB): the gigabyte stays in the WAL alone."""
    prefix = f"move-big-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"), "--upload-interval-s", "600",
                "--upload-threshold", str(3 << 30), "--max-cache-bytes", str(4 << 30))
    with started_with_topic(c, TOPIC, 6):
        yield c


def _fill_gib(c: Cluster, node: int, partition: int, key: str) -> dict[int, tuple[str, int]]:
    """TOTAL bytes of VALUE-byte values produced to the partition through its leader, two requests at a time;
    offset -> (the value's head, its length) of each acknowledged one."""
    requests = TOTAL // (PER_REQUEST * VALUE) + 1
    filler = "x" * VALUE

    def one(http: httpx.Client, i: int) -> dict[int, tuple[str, int]]:
        msgs = [{"key": key, "value": (f"{key}-{i:04d}-{j:02d}-".ljust(HEAD, "-") + filler)[:VALUE],
                 "partition": partition} for j in range(PER_REQUEST)]
        r = http.post(f"{c.url(node)}/v1/topics/{TOPIC}/messages", json={"messages": msgs})
        assert r.status_code == 200, r.text[:500]
        return {res["offset"]: (m["value"][:HEAD], VALUE) for m, res in zip(msgs, r.json()["results"], strict=True)}

    out: dict[int, tuple[str, int]] = {}
    with httpx.Client(timeout=300) as http, ThreadPoolExecutor(2) as pool:
        for got in pool.map(lambda i: one(http, i), range(requests)):
            out |= got
    return out


def _page(base: str, path: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """GET following 421s to the leader and retrying 503s (a partition being opened) within a bound."""
    for _ in range(600):
        r = httpx.get(f"{base}{path}", params=params, timeout=120)
        if r.status_code == 421:
            base = r.json()["leader_url"]
            continue
        if r.status_code == 503:
            continue
        assert r.status_code == 200, r.text[:500]
        return base, r.json()
    raise AssertionError(f"{path}: not served")


def _check_partition(c: Cluster, p: int, big: dict[int, tuple[str, int]], small: dict[int, str]) -> None:
    """Partition p read whole in pages of 16: offsets contiguous from 0, each acknowledged record at its offset,
    no value twice."""
    base, offset, seen = c.url(c.running()[0]), 0, set()
    while True:
        base, body = _page(base, f"/v1/topics/{TOPIC}/partitions/{p}/messages", {"offset": offset, "max": 16})
        if not body["messages"]:
            break
        for m in body["messages"]:
            assert m["offset"] == offset, f"partition {p}: offset {m['offset']} where {offset} was expected"
            head = (m["value"][:HEAD], len(m["value"]))
            if offset in big:
                assert head == big[offset], (p, offset, head, big[offset])
            elif offset in small:
                assert m["value"] == small[offset], (p, offset, m["value"], small[offset])
            assert head not in seen, f"partition {p}: value stored twice at {offset}"
            seen.add(head)
            offset += 1
    missing = [o for o in (*big, *small) if o >= offset]
    assert not missing, f"partition {p}: acknowledged offsets {missing[:5]} missing (end {offset})"


def _check_big_by_key(c: Cluster, key: str, p: int, big: dict[int, tuple[str, int]], node: int) -> None:
    """Every record of `key` found by key from `node` (pages of 32), each once, exactly the acknowledged ones."""
    got: dict[int, tuple[str, int]] = {}
    params: dict[str, Any] = {"topic": TOPIC, "key": key, "max": 32}
    while True:
        _, body = _page(c.url(node), "/v1/messages", params)
        for m in body["messages"]:
            assert m["partition"] == p and m["offset"] not in got, (node, m["partition"], m["offset"])
            got[m["offset"]] = (m["value"][:HEAD], len(m["value"]))
        if not body["next_cursor"]:
            break
        params["cursor"] = body["next_cursor"]
    assert got == big, f"node {node}, key {key}: {len(got)} found, {len(big)} acknowledged"


@pytest.mark.slow(seconds=85)
def test_a_move_of_1_gib_unuploaded_under_a_producer_keeps_every_record_once(held_big: Cluster) -> None:
    c = held_big
    producer = Producer(c)
    producer.start()
    try:
        p = next(q for q, n in sorted(_leaders(c).items()) if n == 0)
        big = _fill_gib(c, 0, p, "big-1g")
        assert len(big) * VALUE >= TOTAL
        producer.wait_acked(len(producer.acked) + 20, 60)
        answer = _move(c, p, 1, via=2)
        assert answer["from"] == 0 and answer["to"] == 1 and answer["seconds"] < 30
        producer.wait_acked(len(producer.acked) + 50, 60)
        producer.stop_flag.set()
        producer.join(60)
        assert set(producer.statuses) <= {200, 421, 503}, producer.statuses
        assert _lent(c, 0) == 1  # lent from the shared WAL: nothing uploaded first
        for q in range(6):
            small = {a["offset"]: a["value"] for a in producer.acked if a["partition"] == q}
            _check_partition(c, q, big if q == p else {}, small)
        check_everything_found(c, producer.acked, [0, 1, 2])
        for node in (0, 1, 2):
            _check_big_by_key(c, "big-1g", p, big, node)
    finally:
        producer.stop_flag.set()
