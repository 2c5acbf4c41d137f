"""End to end through a real `mqindex serve` process: produce, find by key across pages, by id, fetch by offset,
and restarts (SIGTERM and SIGKILL) that keep everything acknowledged."""

from __future__ import annotations

import signal
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.api.server import ServerProcess

N_MESSAGES, N_KEYS, N_PARTITIONS = 1000, 50, 4


def produce_all(url: str, topic: str, n: int = N_MESSAGES, batch: int = 100) -> list[dict[str, Any]]:
    """Produce n messages with N_KEYS repeating keys; returns what the server acknowledged, with what was sent."""
    r = httpx.post(f"{url}/v1/topics", json={"name": topic, "partitions": N_PARTITIONS})
    assert r.status_code == 201, r.text
    sent: list[dict[str, Any]] = []
    for start in range(0, n, batch):
        msgs = [{"key": f"k{i % N_KEYS}", "value": f"value-{i}",
                 "headers": {"KEYS": f"alt{i % N_KEYS} order-{i}", "app": "e2e"}} for i in range(start, start + batch)]
        r = httpx.post(f"{url}/v1/topics/{topic}/messages", json={"messages": msgs}, timeout=60)
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert len(results) == len(msgs)
        for i, (m, res) in enumerate(zip(msgs, results, strict=True)):
            sent.append({**res, "key": m["key"], "value": m["value"], "headers": m["headers"], "i": start + i})
    return sent


def order(m: dict[str, Any]) -> tuple[int, int, int]:
    return (m["timestamp"], m["offset"], m["partition"])


def query_all(url: str, topic: str, key: str, page: int, **params: Any) -> tuple[list[dict[str, Any]], int]:
    out: list[dict[str, Any]] = []
    cursor, pages = None, 0
    while True:
        q = {"topic": topic, "key": key, "max": page, **params}
        if cursor:
            q["cursor"] = cursor
        r = httpx.get(f"{url}/v1/messages", params=q, timeout=60)
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["messages"]) <= page
        out += body["messages"]
        pages += 1
        cursor = body["next_cursor"]
        if not cursor:
            return out, pages
        assert pages < 1000, "paging does not end"


def check_everything_found(url: str, topic: str, sent: list[dict[str, Any]]) -> None:
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in sent:
        by_key[m["key"]].append(m)
    for key, expected in by_key.items():
        got, pages = query_all(url, topic, key, page=7)
        want = sorted(expected, key=order, reverse=True)
        assert [g["msg_id"] for g in got] == [w["msg_id"] for w in want], key
        assert pages >= len(want) // 7
        for g, w in zip(got, want, strict=True):
            assert (g["key"], g["value"], g["partition"], g["offset"]) == (w["key"], w["value"], w["partition"],
                                                                          w["offset"])
            assert g["headers"] == w["headers"] and g["topic"] == topic
    for m in sent:
        r = httpx.get(f"{url}/v1/messages/{m['msg_id']}")
        assert r.status_code == 200, r.text
        got = r.json()
        assert (got["partition"], got["offset"], got["key"], got["value"]) == (m["partition"], m["offset"], m["key"],
                                                                               m["value"])


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory, seaweedfs: SeaweedFS) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("e2e") / "data"
    server = ServerProcess(data, "--store", seaweedfs.store_url("mqindex", f"e2e-{uuid.uuid4().hex[:8]}")).start()
    yield server
    server.stop()


@pytest.mark.slow(seconds=40)
def test_produce_then_find_every_key_by_pages_id_and_offset(s3_server: ServerProcess) -> None:
    url = s3_server.url
    sent = produce_all(url, "orders")
    # offsets per partition are dense from 0, and partitions are all used
    per_part: dict[int, list[int]] = defaultdict(list)
    for m in sent:
        per_part[m["partition"]].append(m["offset"])
    assert sorted(per_part) == list(range(N_PARTITIONS))
    for offsets in per_part.values():
        assert sorted(offsets) == list(range(len(offsets)))
    assert len({m["msg_id"] for m in sent}) == N_MESSAGES

    check_everything_found(url, "orders", sent)

    # a KEYS header key finds exactly its message
    got, _ = query_all(url, "orders", "order-123", page=5)
    assert [g["value"] for g in got] == ["value-123"]
    # fetch by offset returns each partition in order
    for p, offsets in per_part.items():
        r = httpx.get(f"{url}/v1/topics/orders/partitions/{p}/messages", params={"offset": 0, "max": 1000})
        assert r.status_code == 200
        body = r.json()
        assert [m["offset"] for m in body["messages"]] == sorted(offsets)
        assert body["next_offset"] == len(offsets) == int(r.headers["x-next-offset"])
        # paging by the header alone (read before the body) walks the same messages
        pos, walked = 0, []
        while pos < len(offsets):
            r = httpx.get(f"{url}/v1/topics/orders/partitions/{p}/messages", params={"offset": pos, "max": 7})
            page = r.json()
            assert int(r.headers["x-next-offset"]) == page["next_offset"] > pos
            walked += [m["offset"] for m in page["messages"]]
            pos = int(r.headers["x-next-offset"])
        assert walked == sorted(offsets)
        r = httpx.get(f"{url}/v1/topics/orders/partitions/{p}/messages", params={"offset": len(offsets) + 5})
        assert r.json()["next_offset"] == int(r.headers["x-next-offset"]) == len(offsets) + 5
        expect = {m["offset"]: m["value"] for m in sent if m["partition"] == p}
        assert all(m["value"] == expect[m["offset"]] for m in body["messages"])
    # a time window selects only what was stored in it
    times = sorted(m["timestamp"] for m in sent if m["key"] == "k7")
    mid = times[len(times) // 2]
    got, _ = query_all(url, "orders", "k7", page=3, begin=mid)
    assert got and all(g["timestamp"] >= mid for g in got)
    assert len(got) == sum(1 for t in times if t >= mid)
    r = httpx.get(f"{url}/v1/index/files")
    assert r.status_code == 200 and r.json()["files"] and sum(f["items"] for f in r.json()["files"]) >= N_MESSAGES


def test_index_hits_page_where_a_key_is_without_reading_the_records(s3_server: ServerProcess) -> None:
    """/v1/index/hits: [partition, offset] of every record indexed under the key, newest first as /v1/messages
    orders them, paged by the same cursor; the same bad input refused as /v1/messages refuses it."""
    url = s3_server.url
    sent = produce_all(url, "hits", n=400)
    for key in ("k7", "alt9", "order-123"):  # a record key, a KEYS part shared by 8 records, one record's
        want = [m for m in sent if m["key"] == key or key in m["headers"]["KEYS"].split(" ")]
        messages, _ = query_all(url, "hits", key, page=1000)
        assert [(m["partition"], m["offset"]) for m in messages] == \
            [(m["partition"], m["offset"]) for m in sorted(want, key=order, reverse=True)]
        got: list[list[int]] = []
        cursor, pages = None, 0
        while True:
            r = httpx.get(f"{url}/v1/index/hits", params={"topic": "hits", "key": key, "max": 3,
                                                           **({"cursor": cursor} if cursor else {})}, timeout=60)
            assert r.status_code == 200, r.text
            body = r.json()
            assert len(body["hits"]) <= 3 and body["unreadable"] == []
            got += body["hits"]
            pages += 1
            cursor = body["next_cursor"]
            if not cursor:
                break
        assert got == [[m["partition"], m["offset"]] for m in messages], key
        assert pages == -(-len(want) // 3)
    r = httpx.get(f"{url}/v1/index/hits", params={"topic": "nosuch", "key": "k1"})
    assert r.status_code == 404 and "nosuch" in r.text
    # how the Spark source tells this 404 from a node's without the route (it then asks /v1/messages)
    from jobs.spark_source.index_lookup import _unknown_topic

    no_route = httpx.get(f"{url}/v1/index/no-such-route", params={"topic": "hits", "key": "k1"})
    assert no_route.status_code == 404 and _unknown_topic(r) and not _unknown_topic(no_route)
    for bad in ({"max": 0}, {"cursor": "AAAA"}, {"begin": 10, "end": 5}, {"key": ""},
                {"key": "%%%", "key_encoding": "base64"}):
        q = {"topic": "hits", "key": "k1", **bad}
        ours = httpx.get(f"{url}/v1/index/hits", params=q)
        theirs = httpx.get(f"{url}/v1/messages", params=q)
        assert 400 <= ours.status_code < 500 and ours.status_code == theirs.status_code, (bad, ours.text)
        assert ours.json() == theirs.json(), bad


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_restart_keeps_everything_acknowledged(tmp_path: Path, sig: int) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        sent = produce_all(server.url, "payments", n=300)
        rc = server.restart(sig)
        assert rc == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
        check_everything_found(server.url, "payments", sent)
        # and the topic goes on from where it was
        r = httpx.post(f"{server.url}/v1/topics/payments/messages",
                       json={"messages": [{"key": "k1", "value": "after restart", "partition": 0}]})
        assert r.status_code == 200
        before = max(m["offset"] for m in sent if m["partition"] == 0)
        assert r.json()["results"][0]["offset"] == before + 1
    finally:
        server.stop(signal.SIGKILL)
