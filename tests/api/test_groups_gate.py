"""A JoinGroup that lands between a reset's (or delete's) member check and its stored change, made to land there
every time: the server runs with the test hook of api/kafka/group_admin.py (MQINDEX_TEST_GROUP_CHANGE_GATE), which
holds the change of a group the test names after its member check until the test lets it go. The test lets it go
once the member has either read the group's offsets (it joined while the change was pending: what the coordinator's
hold must prevent) or is seen waiting at the coordinator (the server logs it). Either way the change goes on (its
check found no member), so the member must start from the changed offsets and its own commit must stay.

With GroupCoordinator.hold disabled (a hold that holds nothing) both cases fail: the member joins at once and reads
the old offsets (checked by hand when this test was written)."""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from api.kafka.group_admin import CHANGE_GATE_ENV
from tests.api.server import wait_for
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import Wire

TOPIC = "gated"
PER_PARTITION = 6


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaServerProcess, Path]]:
    root = Path(tmp_path_factory.mktemp("gated"))
    gate = root / "gate"
    gate.mkdir()
    server = KafkaServerProcess(root / "node", env={CHANGE_GATE_ENV: str(gate)}).start()
    try:
        r = httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC, "partitions": 2}, timeout=60)
        assert r.status_code == 201, r.text
        r = httpx.post(f"{server.url}/v1/topics/{TOPIC}/messages", timeout=30, json={
            "messages": [{"value": f"m{i}", "partition": i % 2} for i in range(2 * PER_PARTITION)]})
        assert r.status_code == 200, r.text
        yield server, gate
    finally:
        server.stop()


def committed(server: KafkaServerProcess, group: str) -> dict[int, int]:
    with Wire(server.kafka_port) as w:
        answer = w.committed(group, TOPIC, [0, 1])
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def member(server: KafkaServerProcess, group: str, read: threading.Event, done: threading.Event) -> dict[int, int]:
    """Join the group (raw JoinGroup and SyncGroup), read its committed offsets at once (where it starts), set
    `read`, commit 2 on both partitions, stay until `done`, leave. Returns what it read."""
    with Wire(server.kafka_port, timeout=60) as w:
        joined = w.join(group, session_timeout_ms=30_000)
        assert joined.error_code == 0, joined
        assert w.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b""}).error_code == 0
        answer = w.committed(group, TOPIC, [0, 1])
        read.set()
        assert w.commit(group, joined.generation_id, joined.member_id, {(TOPIC, 0): 2, (TOPIC, 1): 2}) == [0, 0]
        done.wait(60)
        w.leave(group, joined.member_id)
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


@pytest.mark.parametrize("kind", ["reset", "delete"])
def test_a_member_joining_between_the_check_and_the_change_starts_from_the_change(
        gated: tuple[KafkaServerProcess, Path], kind: str) -> None:
    server, gate = gated
    group = f"gated-{kind}"
    r = httpx.post(f"{server.url}/v1/groups/{group}/offsets", json={"to": "earliest", "topics": [TOPIC]}, timeout=30)
    assert r.status_code == 200, r.text
    assert committed(server, group) == {0: 0, 1: 0}
    name = urllib.parse.quote(group, safe="")
    (gate / f"{name}.gate").touch()  # from now on a change of this group waits at the gate after its check
    waits = f'JoinGroup waits for an admin change of the group group="{group}"'
    read, done = threading.Event(), threading.Event()
    with ThreadPoolExecutor(2) as pool:
        change = pool.submit(
            httpx.post, f"{server.url}/v1/groups/{group}/offsets", json={"to": "latest", "topics": [TOPIC]},
            timeout=90) if kind == "reset" else pool.submit(httpx.delete, f"{server.url}/v1/groups/{group}",
                                                            timeout=90)
        try:
            try:
                wait_for("the change's member check", (gate / f"{name}.checked").exists, timeout=30)
                joined = pool.submit(member, server, group, read, done)
                wait_for("the member's read of the offsets, or its JoinGroup waiting for the change",
                         lambda: read.is_set() or waits in server.log.read_text(), timeout=30)
            finally:
                (gate / f"{name}.go").touch()
            status = change.result(90).status_code
        finally:
            done.set()  # the member leaves once the change answered (or the test failed)
        started_at = joined.result(90)
    assert status == 200  # the check found no member: the change goes on
    new = {0: PER_PARTITION, 1: PER_PARTITION} if kind == "reset" else {0: -1, 1: -1}
    assert started_at == new, f"the member joined while the {kind} was pending and read {started_at}, not {new}"
    assert committed(server, group) == {0: 2, 1: 2}  # the member's own commit, made after its read, stays
