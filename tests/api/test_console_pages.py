"""POST /v1/console/page on a real `mqindex serve`: the message browser's pages over all partitions of a topic in
one request each, merged by store time. Hypothesis draws page sizes, partition subsets and starting positions:
paging forward shows every message at or after the positions exactly once, in store time order; a previous page
from a page's start is the page before it; paging back from the newest shows everything once. Bad bodies get a
400 naming the field."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.api.server import ServerProcess

TOPIC, PARTITIONS = "paged", 5
COUNTS = [9, 0, 4, 13, 6]  # messages a partition (partition 1 stays empty)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("pages") / "data").start()
    try:
        httpx.post(f"{s.url}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=30).raise_for_status()
        batches: list[list[dict[str, Any]]] = [[] for _ in range(6)]  # several messages share a store time
        for p, count in enumerate(COUNTS):
            for i in range(count):
                batches[(i * 7 + p) % 6].append({"value": f"p{p}-{i}", "partition": p})
        for batch in batches:
            httpx.post(f"{s.url}/v1/topics/{TOPIC}/messages", json={"messages": batch}, timeout=30).raise_for_status()
            ms = time.time_ns() // 1_000_000
            while time.time_ns() // 1_000_000 == ms:  # the next batch a millisecond later
                pass
        yield s
    finally:
        s.stop()


def everything(server: ServerProcess) -> list[tuple[int, int, int]]:
    """(store time, partition, offset) of every message, read a partition at a time."""
    out = []
    for p in range(PARTITIONS):
        r = httpx.get(f"{server.url}/v1/topics/{TOPIC}/partitions/{p}/messages?offset=0&max=1000", timeout=30)
        out += [(m["timestamp"], p, m["offset"]) for m in r.json()["messages"]]
    return sorted(out)


def page(server: ServerProcess, body: dict[str, Any], topic: str = TOPIC) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/console/page", params={"topic": topic}, json=body, timeout=30)


def ok(server: ServerProcess, body: dict[str, Any]) -> dict[str, Any]:
    r = page(server, body)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def keys(body: dict[str, Any]) -> list[tuple[int, int, int]]:
    return [(m["timestamp"], m["partition"], m["offset"]) for m in body["messages"]]


def test_the_topic_holds_what_was_produced(server: ServerProcess) -> None:
    assert len(everything(server)) == sum(COUNTS)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(n=1, subset=None)
@given(n=st.integers(3, 12), subset=st.none() | st.sets(st.integers(0, PARTITIONS - 1), min_size=1))
def test_next_pages_show_every_message_once_and_previous_returns_the_page_before(
        server: ServerProcess, n: int, subset: set[int] | None) -> None:
    chosen = set(range(PARTITIONS)) if subset is None else subset
    want = [k for k in everything(server) if k[1] in chosen]
    body: dict[str, Any] = {"n": n, "offset": 0}
    if subset is not None:
        body["partitions"] = sorted(subset)
    pages = [ok(server, body)]
    while pages[-1]["messages"]:
        assert len(pages) <= len(want) + 1, "paging does not end"
        pages.append(ok(server, {"n": n, "after": pages[-1]["next"]}))
    shown = [k for p in pages for k in keys(p)]
    assert shown == want  # each once, oldest first
    assert all(len(keys(p)) == n for p in pages[:-2])  # only the last pages run short
    for before, after in zip(pages, pages[1:-1], strict=False):
        assert keys(ok(server, {"n": n, "before": after["start"]})) == keys(before)
    # and back from the newest page to the first, each message once
    back = [ok(server, {"n": n} | ({"partitions": sorted(subset)} if subset else {}))]
    while back[-1]["messages"]:
        assert len(back) <= len(want) + 1, "paging back does not end"
        back.append(ok(server, {"n": n, "before": back[-1]["start"]}))
    assert [k for p in reversed(back) for k in keys(p)] == want


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 15), positions=st.dictionaries(st.integers(0, PARTITIONS - 1), st.integers(0, 20),
                                                        min_size=1))
def test_paging_on_from_any_positions_shows_each_later_message_once(
        server: ServerProcess, n: int, positions: dict[int, int]) -> None:
    want = sorted(k for k in everything(server) if k[1] in positions and k[2] >= positions[k[1]])
    got: list[tuple[int, int, int]] = []
    cursor: dict[Any, int] = dict(positions)
    for _ in range(len(want) + 2):
        body = ok(server, {"n": n, "after": cursor})
        assert set(body["bounds"]) == {str(p) for p in positions}
        got += keys(body)
        if not body["messages"]:
            break
        cursor = body["next"]
    assert sorted(got) == want and len(got) == len(set(got))


def test_from_a_time_starts_at_the_first_message_stored_then(server: ServerProcess) -> None:
    all_keys = everything(server)
    middle = all_keys[len(all_keys) // 2][0]
    body = ok(server, {"n": 1000, "time": middle})
    assert keys(body) == [k for k in all_keys if k[0] >= middle]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle // 1000 + 3600))  # an hour later: nothing yet
    assert ok(server, {"n": 5, "time": iso})["messages"] == []


@pytest.mark.parametrize(("body", "field"), [
    ({"after": {"0": 1}, "before": {"0": 1}}, "before"),
    ({"offset": 1, "time": 5}, "time"),
    ({"after": {"0": -1}}, "after"),
    ({"after": {"zero": 1}}, "after"),
    ({"n": 0}, "n"),
    ({"n": 1001}, "n"),
    ({"time": "soon"}, "time"),
    ({"after": {"0": 0}, "partitions": [0]}, "partitions"),
    ({"colour": "red"}, "colour"),
])
def test_bad_bodies_are_refused_naming_the_field(server: ServerProcess, body: dict[str, Any], field: str) -> None:
    r = page(server, body)
    assert r.status_code == 400, r.text
    assert field in r.json()["field"], r.json()


def test_an_unknown_topic_or_partition_is_not_found(server: ServerProcess) -> None:
    assert page(server, {}, topic="no-such-topic").status_code == 404
    for body, field in (({"after": {"9": 0}}, "after"), ({"partitions": [7]}, "partitions")):
        r = page(server, body)
        assert r.status_code == 404 and r.json()["field"] == field, r.text
        assert "has no partition" in r.json()["error"]


def test_a_time_as_a_whole_json_number_is_its_milliseconds(server: ServerProcess) -> None:
    assert keys(ok(server, {"n": 3, "time": 10.0})) == keys(ok(server, {"n": 3, "time": 10}))
