"""Consumer groups over HTTP on a real `mqindex serve` with its Kafka listener: confluent-kafka and kafka-python
groups are described with each member's assignment and the lag the test counts itself, before and after they
consume; a stopped group's offsets are reset (dry run first) and an aiokafka consumer of the group starts there;
resets and deletion are refused while the group has members."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.wire import Wire

TOPIC = "http-groups"
PER_PARTITION = 6  # messages in each of the 2 partitions
T0 = 1_700_000_000_000  # the first message's timestamp; message i is T0 + i * 1000


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    s = KafkaServerProcess(Path(tmp_path_factory.mktemp("groups")) / "node").start()
    try:
        admin = AdminClient({"bootstrap.servers": s.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        p = KafkaProducer(bootstrap_servers=s.bootstrap, acks="all")
        for i in range(2 * PER_PARTITION):
            p.send(TOPIC, value=str(i).encode(), partition=i % 2, timestamp_ms=T0 + i * 1000)
        p.flush(30)
        p.close()
        yield s
    finally:
        s.stop()


def confluent(server: KafkaServerProcess, group: str, client_id: str) -> Consumer:
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "client.id": client_id,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 300})
    c.subscribe([TOPIC])
    return c


def take(c: Consumer, n: int) -> dict[int, int]:
    """Poll n messages and commit; the next offset of each partition read."""
    nxt: dict[int, int] = {}
    got = 0
    deadline = time.monotonic() + 30
    while got < n and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            nxt[m.partition()] = m.offset() + 1
            got += 1
    assert got == n
    c.commit(asynchronous=False)
    return nxt


def describe(server: KafkaServerProcess, group: str) -> dict[str, Any]:
    r = httpx.get(f"{server.url}/v1/groups/{group}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def lag_rows(body: dict[str, Any]) -> dict[int, tuple[int | None, int, int | None]]:
    return {r["partition"]: (r["committed_offset"], r["end_offset"], r["lag"]) for r in body["offsets"]}


def test_describe_shows_members_assignments_and_lag_before_and_after_consuming(server: KafkaServerProcess) -> None:
    c = confluent(server, "http-watched", "watcher")
    try:
        nxt = take(c, 4)
        body = describe(server, "http-watched")
        assert (body["group"], body["state"], body["protocol_type"], body["protocol"], body["members"]) == (
            "http-watched", "Stable", "consumer", "range", 1)
        [m] = body["member_details"]
        assert (m["client_id"], m["client_host"]) == ("watcher", "/127.0.0.1")
        assert sorted((a["topic"], a["partition"]) for a in m["assignment"]) == [(TOPIC, 0), (TOPIC, 1)]
        expected = {p: (nxt.get(p), PER_PARTITION, PER_PARTITION - nxt[p] if p in nxt else None) for p in (0, 1)}
        assert lag_rows(body) == expected
        assert body["lag"] == sum(v[2] or 0 for v in expected.values())
        for r in body["offsets"]:
            assert (r["member_id"], r["client_id"]) == (m["member_id"], "watcher")
            if r["lag"]:  # the oldest unconsumed message was stored at T0 + its index seconds: long ago
                assert r["lag_ms"] >= time.time() * 1000 - (T0 + 2 * PER_PARTITION * 1000)
        take(c, 2 * PER_PARTITION - 4)
        after = describe(server, "http-watched")
        assert lag_rows(after) == {p: (PER_PARTITION, PER_PARTITION, 0) for p in (0, 1)}
        assert (after["lag"], after["lag_ms"]) == (0, 0)
        listed = {g["group"]: g for g in httpx.get(f"{server.url}/v1/groups", timeout=30).json()}
        assert listed["http-watched"] == dict(group="http-watched", state="Stable", protocol_type="consumer",
                                              protocol="range", members=1, coordinator=0)
    finally:
        c.close()


def test_kafka_python_group_is_described_with_its_lag(server: KafkaServerProcess) -> None:
    c = KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id="kp-http", client_id="kp-client",
                      auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 * PER_PARTITION and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=200).values():
                got += msgs
        c.commit()
        body = describe(server, "kp-http")
        [m] = body["member_details"]
        assert m["client_id"] == "kp-client"
        assert sorted(a["partition"] for a in m["assignment"]) == [0, 1]
        assert lag_rows(body) == {p: (PER_PARTITION, PER_PARTITION, 0) for p in (0, 1)}
    finally:
        c.close()


def reset(server: KafkaServerProcess, group: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/groups/{group}/offsets", json=body, timeout=30)


async def first_offsets(server: KafkaServerProcess, group: str) -> dict[int, int]:
    c = AIOKafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False,
                         auto_offset_reset="latest")
    await c.start()
    try:
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            for tp, msgs in (await c.getmany(timeout_ms=200)).items():
                first.setdefault(tp.partition, msgs[0].offset)
        return first
    finally:
        await c.stop()


def test_reset_offsets_moves_a_stopped_group_and_is_refused_while_it_runs(server: KafkaServerProcess) -> None:
    c = confluent(server, "http-reset", "resetter")
    try:
        take(c, 2 * PER_PARTITION)
        refused = reset(server, "http-reset", to="earliest")
        assert refused.status_code == 409 and refused.json()["field"] == "group", refused.text
        assert "active member" in refused.json()["error"]
        assert reset(server, "http-reset", to="earliest", dry_run=True).status_code == 200  # a preview is fine
        gone = httpx.delete(f"{server.url}/v1/groups/http-reset", timeout=30)
        assert gone.status_code == 409 and gone.json()["field"] == "group"
    finally:
        c.close()
    dry = reset(server, "http-reset", to="shift", shift_by=-2, dry_run=True)
    assert dry.status_code == 200, dry.text
    assert [(r["partition"], r["current_offset"], r["new_offset"]) for r in dry.json()["offsets"]] == [
        (0, PER_PARTITION, PER_PARTITION - 2), (1, PER_PARTITION, PER_PARTITION - 2)]
    assert lag_rows(describe(server, "http-reset"))[0][0] == PER_PARTITION  # a dry run stores nothing
    plans = {
        "earliest": ({}, [0, 0]), "latest": ({}, [PER_PARTITION] * 2), "offset": ({"offset": 4}, [4, 4]),
        "shift": ({"shift_by": -100}, [0, 0]),
        # message i (partition i % 2, offset i // 2) was stored at T0 + i s: at T0 + 5 s comes partition 1's
        # offset 2 (i = 5) and partition 0's offset 3 (i = 6)
        "datetime": ({"datetime": "2023-11-14T22:13:25Z"}, [3, 2]),
    }
    for to, (extra, want) in plans.items():
        r = reset(server, "http-reset", to=to, topics=[TOPIC], dry_run=True, **extra)
        assert r.status_code == 200, (to, r.text)
        assert [x["new_offset"] for x in r.json()["offsets"]] == want, to
    done = reset(server, "http-reset", to="offset", offset=3, topics=[f"{TOPIC}:1"])
    assert done.status_code == 200, done.text
    assert lag_rows(describe(server, "http-reset"))[1] == (3, PER_PARTITION, PER_PARTITION - 3)
    assert reset(server, "http-reset", to="earliest", topics=[f"{TOPIC}:0"]).status_code == 200
    assert asyncio.run(first_offsets(server, "http-reset")) == {0: 0, 1: 3}


def test_bad_resets_and_unknown_groups_answer_the_documented_errors(server: KafkaServerProcess) -> None:
    missing = httpx.get(f"{server.url}/v1/groups/no-such-group", timeout=30)
    assert missing.status_code == 404 and missing.json() == {
        "error": "group 'no-such-group' does not exist (no members, no committed offsets)", "field": "group"}
    assert httpx.delete(f"{server.url}/v1/groups/no-such-group", timeout=30).status_code == 404
    cases = [
        (dict(to="offset"), 400, "offset"), (dict(to="backwards"), 400, "to"),
        (dict(to="datetime", datetime="yesterday"), 400, "datetime"),
        (dict(to="earliest"), 400, "topics"),  # a group with no committed offsets: name the topics
        (dict(to="earliest", topics=["no-such-topic"]), 404, "topic"),
        (dict(to="earliest", topics=[f"{TOPIC}:9"]), 404, "topic"),
    ]
    for body, status, field in cases:
        r = reset(server, "fresh-group", **body)
        assert (r.status_code, r.json()["field"]) == (status, field), (body, r.text)
    assert httpx.get(f"{server.url}/v1/groups/fresh-group", timeout=30).status_code == 404  # nothing stored


def test_delete_removes_a_stopped_group(server: KafkaServerProcess) -> None:
    assert reset(server, "to-delete", to="latest", topics=[TOPIC]).status_code == 200
    assert describe(server, "to-delete")["state"] == "Empty"
    r = httpx.delete(f"{server.url}/v1/groups/to-delete", timeout=30)
    assert r.status_code == 200 and r.json() == {"group": "to-delete", "deleted": True, "offsets_deleted": 2}
    assert "to-delete" not in {g["group"] for g in httpx.get(f"{server.url}/v1/groups", timeout=30).json()}


def cli(server: KafkaServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "api.cli.main", "groups", *args, "--url", server.url],
                          capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2])


def test_a_group_without_committed_offsets_has_no_lag_not_zero(server: KafkaServerProcess) -> None:
    """A member assigned partitions it has committed nothing of: no lag to tell. HTTP says null (it said 0 for
    the group, as if caught up), the CLI `-` as kafka-consumer-groups prints CURRENT-OFFSET and LAG then; once one
    partition is committed, the group's lag is that partition's."""
    c = confluent(server, "uncommitted", "idle")
    try:
        def assigned() -> bool:
            c.poll(0.1)  # joins the group (reads, commits nothing: enable.auto.commit is off)
            return len(c.assignment()) == 2

        wait_for("the member's assignment", assigned)
        body = describe(server, "uncommitted")
        assert (body["state"], body["members"]) == ("Stable", 1)
        assert lag_rows(body) == {0: (None, PER_PARTITION, None), 1: (None, PER_PARTITION, None)}
        assert (body["lag"], body["lag_ms"]) == (None, None)
        shown = cli(server, "describe", "uncommitted")
        assert shown.returncode == 0, shown.stderr
        assert "  lag=-  lag_ms=-" in shown.stdout.splitlines()[0], shown.stdout
        rows = [line.split() for line in shown.stdout.splitlines() if line.startswith(TOPIC)]
        assert [r[:6] for r in rows] == [[TOPIC, str(p), "-", str(PER_PARTITION), "-", "-"] for p in (0, 1)]
        as_json = cli(server, "describe", "uncommitted", "--json")
        assert json.loads(as_json.stdout)["lag"] is None, as_json.stdout

        c.commit(offsets=[TopicPartition(TOPIC, 1, 2)], asynchronous=False)
        body = describe(server, "uncommitted")
        assert lag_rows(body) == {0: (None, PER_PARTITION, None), 1: (2, PER_PARTITION, PER_PARTITION - 2)}
        assert body["lag"] == PER_PARTITION - 2 and body["lag_ms"] > 0
        assert f"  lag={PER_PARTITION - 2}  " in cli(server, "describe", "uncommitted").stdout.splitlines()[0]
    finally:
        c.close()


def test_cli_lists_describes_resets_and_deletes(server: KafkaServerProcess) -> None:
    assert reset(server, "cli-group", to="offset", offset=2, topics=[TOPIC]).status_code == 200
    listed = cli(server, "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["GROUP", "STATE", "PROTOCOL_TYPE", "PROTOCOL", "MEMBERS",
                                                     "COORDINATOR"]
    assert ["cli-group", "Empty", "consumer", "0", "0"] in [line.split() for line in listed.stdout.splitlines()]
    shown = cli(server, "describe", "cli-group")
    assert shown.returncode == 0, shown.stderr
    assert "state=Empty" in shown.stdout and f"lag={2 * (PER_PARTITION - 2)}" in shown.stdout
    rows = [line.split() for line in shown.stdout.splitlines() if line.startswith(TOPIC)]
    assert [r[:5] for r in rows] == [[TOPIC, "0", "2", str(PER_PARTITION), str(PER_PARTITION - 2)],
                                     [TOPIC, "1", "2", str(PER_PARTITION), str(PER_PARTITION - 2)]]
    dry = cli(server, "reset-offsets", "cli-group", "--to-earliest", "--topic", f"{TOPIC}:1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [line.split() for line in dry.stdout.splitlines()] == [
        ["TOPIC", "PARTITION", "CURRENT_OFFSET", "NEW_OFFSET"], [TOPIC, "1", "2", "0"], ["dry", "run:", "nothing",
                                                                                         "stored"]]
    moved = cli(server, "reset-offsets", "cli-group", "--shift-by", "1", "--json")
    assert moved.returncode == 0, moved.stderr
    assert [r["new_offset"] for r in json.loads(moved.stdout)["offsets"]] == [3, 3]
    described = json.loads(cli(server, "describe", "cli-group", "--json").stdout)
    assert [r["committed_offset"] for r in described["offsets"]] == [3, 3]
    bad = cli(server, "reset-offsets", "cli-group", "--to-datetime", "soon")
    assert bad.returncode == 2 and "error: argument --to-datetime: 'soon' is not a time (ISO 8601" in bad.stderr
    at = cli(server, "reset-offsets", "cli-group", "--to-datetime", "2023-11-14T22:13:25", "--dry-run", "--json")
    assert at.returncode == 0, at.stderr  # UTC without a zone: T0 + 5 s, partition 0's offset 3, partition 1's 2
    assert [r["new_offset"] for r in json.loads(at.stdout)["offsets"]] == [3, 2]
    gone = cli(server, "delete", "cli-group")
    assert gone.returncode == 0 and "True" in gone.stdout, gone.stderr
    missing = cli(server, "describe", "cli-group")
    assert missing.returncode != 0 and "404: group 'cli-group' does not exist" in missing.stderr


def test_metrics_export_each_partition_lag(server: KafkaServerProcess) -> None:
    assert reset(server, "metered", to="offset", offset=1, topics=[f"{TOPIC}:0"]).status_code == 200
    assert reset(server, "metered", to="latest", topics=[f"{TOPIC}:1"]).status_code == 200
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    lag = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
           for line in text.splitlines() if line.startswith("mqindex_group_lag{") and 'group="metered"' in line}
    assert lag == {f'group="metered",partition="0",topic="{TOPIC}"': PER_PARTITION - 1,
                   f'group="metered",partition="1",topic="{TOPIC}"': 0}
    [cost] = [float(line.split()[1]) for line in text.splitlines()
              if line.startswith("mqindex_group_lag_render_cpu_seconds ")]  # the lines' own cost, on their thread
    assert 0 < cost < 5


def test_metrics_export_each_partition_lag_in_seconds(server: KafkaServerProcess) -> None:
    """The age of the oldest unconsumed message: the timestamp of the record at the committed offset, the same
    figure describe shows as lag_ms; 0 for a caught-up partition."""
    assert reset(server, "aged", to="offset", offset=1, topics=[f"{TOPIC}:0"]).status_code == 200
    assert reset(server, "aged", to="latest", topics=[f"{TOPIC}:1"]).status_code == 200
    before = time.time()
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    after = time.time()
    age = {line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
           for line in text.splitlines() if line.startswith("mqindex_group_lag_seconds{") and 'group="aged"' in line}
    oldest = (T0 + 2 * 1000) / 1000  # offset 1 of partition 0 is message 2
    assert set(age) == {f'group="aged",partition="0",topic="{TOPIC}"', f'group="aged",partition="1",topic="{TOPIC}"'}
    assert before - oldest - 1 <= age[f'group="aged",partition="0",topic="{TOPIC}"'] <= after - oldest + 1
    assert age[f'group="aged",partition="1",topic="{TOPIC}"'] == 0
    described = describe(server, "aged")
    assert described["lag_ms"] / 1000 == pytest.approx(age[f'group="aged",partition="0",topic="{TOPIC}"'], abs=5)
    # the group moves on: the next scrape shows the new offset's lag and the age of its record (message 4)
    assert reset(server, "aged", to="offset", offset=2, topics=[f"{TOPIC}:0"]).status_code == 200
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    now = time.time()
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if 'group="aged",partition="0"' in line}
    assert lines[f'mqindex_group_lag{{group="aged",partition="0",topic="{TOPIC}"}}'] == PER_PARTITION - 2
    moved = lines[f'mqindex_group_lag_seconds{{group="aged",partition="0",topic="{TOPIC}"}}']
    assert now - (T0 + 4 * 1000) / 1000 - 2 <= moved <= now - (T0 + 4 * 1000) / 1000 + 1



def group_lines(server: KafkaServerProcess, prefix: str) -> tuple[dict[str, float], dict[str, float], float]:
    """One scrape: the lag and lag_seconds of the groups named `prefix`N by 'group,partition', and when it was
    taken."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    now = time.time()
    lag: dict[str, float] = {}
    age: dict[str, float] = {}
    for line in text.splitlines():
        if f'{{group="{prefix}' in line and f'topic="{TOPIC}"' in line:
            labels, value = line.rsplit(" ", 1)
            group = labels.split('group="')[1].split('"')[0]
            partition = labels.split('partition="')[1].split('"')[0]
            (age if labels.startswith("mqindex_group_lag_seconds{") else lag)[f"{group},{partition}"] = float(value)
    return lag, age, now


def test_metrics_of_many_groups_at_the_same_offsets(server: KafkaServerProcess) -> None:
    """60 groups at two offsets (the rows in few classes: a scrape renders them a class at a time): every group's
    lag and age as the test computes them from the messages; then half the groups move, one is deleted, and the
    next scrape shows exactly that."""
    groups = {f"shared-{i}": 1 + 2 * (i % 2) for i in range(60)}  # offset 1 or 3 on both partitions

    def check(want: dict[str, int]) -> None:
        expected = {f"{g},{p}": PER_PARTITION - k for g, k in want.items() for p in (0, 1)}
        got: tuple[dict[str, float], dict[str, float], float] = ({}, {}, 0.0)

        def complete() -> bool:  # every lag_seconds line is there once the records' times were read
            nonlocal got
            got = group_lines(server, "shared-")
            return set(got[1]) == set(expected)

        wait_for("a lag_seconds line for every group and partition", complete)
        lag, age, now = got
        assert lag == expected
        for g, k in want.items():
            for p in (0, 1):  # offset k of partition p is message 2k + p
                oldest = (T0 + (2 * k + p) * 1000) / 1000
                assert now - oldest - 2 <= age[f"{g},{p}"] <= now - oldest + 1, (g, p, age[f"{g},{p}"])

    for g, k in groups.items():
        assert reset(server, g, to="offset", offset=k, topics=[TOPIC]).status_code == 200
    check(groups)
    for g in list(groups)[::2]:
        groups[g] = 4
        assert reset(server, g, to="offset", offset=4, topics=[TOPIC]).status_code == 200
    assert httpx.delete(f"{server.url}/v1/groups/shared-1", timeout=30).status_code == 200
    del groups["shared-1"]
    check(groups)

RACES = 16  # attempts a kind
RACE_TOPIC, RACE_PARTITIONS = "race-wide", 300  # a change of 300 offsets: a window of milliseconds to land in
BATCHES = 20
LATER = "2100-01-01T00:00:00Z"  # a reset to this time: every partition's end, found partition by partition


@pytest.fixture(scope="module")
def race_topic(server: KafkaServerProcess) -> str:
    """A topic of RACE_PARTITIONS partitions: 6 messages in partitions 0 and 1, and BATCHES batches of one message
    in every partition (a reset to a time reads each partition's batches: the change takes a while)."""
    r = httpx.post(f"{server.url}/v1/topics", json={"name": RACE_TOPIC, "partitions": RACE_PARTITIONS}, timeout=120)
    assert r.status_code == 201, r.text
    r = httpx.post(f"{server.url}/v1/topics/{RACE_TOPIC}/messages", timeout=30,
                   json={"messages": [{"value": f"m{i}", "partition": i % 2} for i in range(12)]})
    assert r.status_code == 200, r.text
    for _ in range(BATCHES):
        r = httpx.post(f"{server.url}/v1/topics/{RACE_TOPIC}/messages", timeout=30,
                       json={"messages": [{"value": "x", "partition": p} for p in range(RACE_PARTITIONS)]})
        assert r.status_code == 200, r.text
    return RACE_TOPIC


def join_and_read(server: KafkaServerProcess, group: str, start: threading.Barrier, delay: float,
                  done: threading.Event) -> dict[int, int]:
    """A member joins the group (raw JoinGroup and SyncGroup) `delay` after the barrier, reads the group's
    committed offsets at once (the offsets it starts from), commits 2 on partitions 0 and 1, stays a member until
    `done`, then leaves."""
    with Wire(server.kafka_port) as w:
        start.wait(10)
        time.sleep(delay)
        joined = w.join(group, session_timeout_ms=10_000)
        assert joined.error_code == 0, joined
        assert w.sync(group, joined.generation_id, joined.member_id, {joined.member_id: b""}).error_code == 0
        answer = w.committed(group, RACE_TOPIC, [0, 1])
        assert w.commit(group, joined.generation_id, joined.member_id, {(RACE_TOPIC, 0): 2, (RACE_TOPIC, 1): 2}) == [
            0, 0]
        done.wait(30)
        w.leave(group, joined.member_id)
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


def change(server: KafkaServerProcess, kind: str, group: str, start: threading.Barrier,
           done: threading.Event) -> tuple[int, float]:
    """Right after the barrier, a reset of the group to a later time or its deletion: (status, seconds it took)."""
    start.wait(10)
    t0 = time.monotonic()
    try:
        r = (reset(server, group, to="datetime", datetime=LATER) if kind == "reset"
             else httpx.delete(f"{server.url}/v1/groups/{group}", timeout=30))
        assert r.status_code in (200, 409), r.text
        return r.status_code, time.monotonic() - t0
    finally:
        done.set()


def race(server: KafkaServerProcess, kind: str, seed: int) -> list[tuple[int, dict[int, int], dict[int, int]]]:
    """RACES attempts, one after another, each a fresh group at offset 0 of every partition of RACE_TOPIC where a
    member joins while `kind` (a reset to a later time, or a delete) is sent: both wait on one barrier, then the
    member waits a random delay up to 1.2 times what the change before took (on this machine, now), so across the
    attempts its join lands before the change's member check, between the check and the stored change, and
    after. Each outcome: (the change's status, the offsets the member read, the group's offsets after both)."""
    rng = random.Random(seed)
    out = []
    took = 0.0
    for i in range(RACES):
        group = f"race-{kind}-{seed}-{i}"
        t0 = time.monotonic()
        assert reset(server, group, to="earliest", topics=[RACE_TOPIC]).status_code == 200
        took = took or time.monotonic() - t0
        start, done = threading.Barrier(2), threading.Event()
        with ThreadPoolExecutor(2) as pool:
            changed = pool.submit(change, server, kind, group, start, done)
            member = pool.submit(join_and_read, server, group, start, rng.uniform(0, 1.2 * took), done)
            (status, took), read = changed.result(60), member.result(60)
        with Wire(server.kafka_port) as w:
            answer = w.committed(group, RACE_TOPIC, [0, 1])
        out.append((status, read, {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}))
    return out


@pytest.mark.parametrize("kind", ["reset", "delete"])
def test_a_change_racing_a_joining_member_is_refused_or_seen_by_it(server: KafkaServerProcess, race_topic: str,
                                                                   kind: str) -> None:
    """The member check and the change are one step at the coordinator (a JoinGroup waits while a reset or delete
    of the empty group is planned and stored): on every attempt, either the change answers 409 (the member joined
    first: it read the old offsets) or 200 (the member joined after it: its first read shows the change), and the
    member's own commit, made after its read, is what stays. Never a member that read the old offsets, or whose
    commit was overwritten, while the change went on (the window of a check made apart from the change).
    The timings are random: a join rarely lands between the check and the stored change (this test passed with the
    coordinator's hold disabled); tests/api/test_groups_gate.py lands one there every time."""
    outcomes = race(server, kind, seed=41)
    new = {0: 6 + BATCHES, 1: 6 + BATCHES} if kind == "reset" else {0: -1, 1: -1}
    for i, (status, read, after) in enumerate(outcomes):
        want = {0: 0, 1: 0} if status == 409 else new
        assert (read, after) == (want, {0: 2, 1: 2}), (
            f"attempt {i}: {kind} answered {status}; the member read {read}, the group ends at {after}")
    print(f"{kind} outcomes while a member joined:", sorted(Counter(s for s, _, _ in outcomes).items()))
