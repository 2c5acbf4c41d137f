"""Value searches over HTTP (POST/GET/DELETE /v1/searches) on a real `mqindex serve` whose searches run on local
Spark in the serving process: the matches are exactly the records the predicate selects (checked against the
key search's own answer for each one), progress reaches the scan's partitions, bad input is a 400 naming the
field with nothing started (hypothesis draws the bodies), the concurrency bound answers 429, a cancelled
search's Spark job is cancelled (Spark's own job status), and the access rules apply (a read token searches, a
principal without READ on the topic gets 403)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.security.tokens import fingerprint
from jobs.value_search import SearchSpec, plan_search
from tests.api.server import ServerProcess, wait_for

ADMIN, READER, OTHER = "admin-tok-0123456789abcdef", "reader-tok-0123456789abcdef", "other-tok-0123456789abcdef"
TOPIC, PARTITIONS, N = "orders", 2, 300
SPARK_START_S = 600  # the first search starts the node's Spark session: a JVM, minutes on a loaded machine
# a predicate that keeps one task busy for tens of seconds (9 million additions per record)
SLOW = "aggregate(sequence(1, 3000), 0L, (a, x) -> a + aggregate(sequence(1, 3000), 0L, (b, y) -> b + y)) > 0"


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def value(i: int) -> str:
    return json.dumps({"i": i, "status": "failed" if i % 7 == 0 else "ok"})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("searches")
    config = d / "mqindex.toml"
    config.write_text(f'superusers = ["token-{fingerprint(ADMIN)}"]\n')
    s = ServerProcess(d / "node", "--config", str(config), "--kafka-listener", "", "--upload-interval-s", "0.2",
                      env={"MQINDEX_TOKENS": f"{ADMIN}=admin;{READER}=read;{OTHER}=read"}).start()
    try:
        r = httpx.post(f"{s.url}/v1/topics", json={"name": TOPIC, "partitions": PARTITIONS}, headers=as_(ADMIN))
        assert r.status_code == 201, r.text
        r = httpx.post(f"{s.url}/v1/topics/{TOPIC}/messages", headers=as_(ADMIN), timeout=60,
                       json={"messages": [{"key": f"k{i}", "value": value(i), "partition": i % PARTITIONS}
                                          for i in range(N)]})
        assert r.status_code == 200, r.text
        spec = SearchSpec(TOPIC, f"sqlite:///{d / 'node' / 'metadata.sqlite'}", f"file://{d / 'node' / 'objects'}")
        wait_for("every record uploaded",
                 lambda: sum(r.committed_end for r in plan_search(spec).plan.ranges) == N, timeout=60, interval=0.3)
        rule = subprocess.run([str(Path(sys.executable).parent / "mqindex"), "acls", "add", "--principal",
                               f"User:token-{fingerprint(READER)}", "--topic", TOPIC, "--operation", "read",
                               "--url", s.url, "--token", ADMIN], capture_output=True, text=True, timeout=60,
                              env=os.environ)
        assert rule.returncode == 0, rule.stderr
        wait_for("the rule applies", lambda: httpx.get(f"{s.url}/v1/messages", params={"topic": TOPIC, "key": "k1"},
                                                       headers=as_(OTHER)).status_code == 403, timeout=30)
        yield s
    finally:
        s.stop()


def start(server: ServerProcess, body: dict[str, Any], token: str = READER) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/searches", json=body, headers=as_(token), timeout=SPARK_START_S)


def get(server: ServerProcess, search_id: str, token: str = READER, **params: Any) -> dict[str, Any]:
    r = httpx.get(f"{server.url}/v1/searches/{search_id}", params=params, headers=as_(token), timeout=60)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def finished(server: ServerProcess, search_id: str, timeout: float = SPARK_START_S) -> dict[str, Any]:
    last: dict[str, Any] = {}

    def ended() -> bool:
        last.update(get(server, search_id))
        return last["state"] not in ("queued", "running")

    wait_for(f"search {search_id} ended", ended, timeout=timeout, interval=0.5)
    return last


def listed(server: ServerProcess) -> list[str]:
    r = httpx.get(f"{server.url}/v1/searches", headers=as_(ADMIN), timeout=60)
    assert r.status_code == 200, r.text
    return [s["id"] for s in r.json()["searches"]]


@pytest.mark.slow(seconds=30)
def test_value_search_finds_exactly_the_matching_records(server: ServerProcess) -> None:
    r = start(server, {"topic": TOPIC, "where": "value LIKE '%\"failed\"%'"})
    assert r.status_code == 202, r.text
    sid = r.json()["id"]
    done = finished(server, sid)
    assert done["state"] == "done" and done["error"] is None, done
    want = {f"k{i}": value(i) for i in range(N) if i % 7 == 0}
    got = {m["key"]: m["value"] for m in done["matches"]}
    assert got == want and done["matches_total"] == len(want) and not done["truncated"]
    p = done["progress"]
    assert p["partitions_total"] >= 1 and p["partitions_done"] == p["partitions_total"] and p["splits"] >= PARTITIONS
    assert done["spark"]["jobs_done"] >= 1 and done["spark"]["jobs_active"] == 0
    # each match is the message the id lookup answers (same fields as the key search's)
    for m in done["matches"][:5]:
        one = httpx.get(f"{server.url}/v1/messages/{m['msg_id']}", headers=as_(READER), timeout=60).json()
        assert {k: one[k] for k in m} == m
    # matches from an index on; the list names it
    assert get(server, sid, after=len(want) - 2)["matches"] == done["matches"][-2:]
    assert sid in listed(server)

    # by key (raw key), a window with nothing in it, a limit
    k = finished(server, start(server, {"topic": TOPIC, "key": ["k7", "k8"]}).json()["id"])
    assert sorted((m["key"], m["value"]) for m in k["matches"]) == [("k7", value(7)), ("k8", value(8))]
    window = {"topic": TOPIC, "where": "true", "from": 0, "to": "1970-01-02"}
    empty = finished(server, start(server, window).json()["id"])
    assert empty["state"] == "done" and empty["matches"] == []
    five = finished(server, start(server, {"topic": TOPIC, "where": "partition = 1", "limit": 5}).json()["id"])
    assert five["state"] == "done" and five["truncated"] and len(five["matches"]) == 5
    assert all(m["partition"] == 1 for m in five["matches"])


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"topic": "nosuchtopic", "where": "true"}, "topic", "unknown topic 'nosuchtopic'"),
    ({"topic": TOPIC, "where": "nosuchcolumn = 1"}, "where", "nosuchcolumn"),
    ({"topic": TOPIC, "where": "value LIKE ('a' OR"}, "where", "PARSE_SYNTAX_ERROR"),
    ({"topic": TOPIC, "where": "reflect('java.lang.System', 'exit', 0) IS NULL"}, "where", "reflect() is not allowed"),
    ({"topic": TOPIC, "where": "value = (SELECT max(id) FROM range(3))"}, "where", "subquery is not allowed"),
    ({"topic": TOPIC, "where": "true", "from": "yesterday"}, "from", "ISO 8601"),
    ({"topic": TOPIC, "where": "true", "from": 2000, "to": 1000}, "to", "before it starts"),
    ({"topic": TOPIC}, "where", "give a predicate"),
    ({"topic": TOPIC, "key": ""}, "key", "empty key"),
    ({"topic": TOPIC, "where": "true", "limit": 1001}, "limit", "at most 1000"),
]


@pytest.mark.parametrize("body,field,message", BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_is_a_400_naming_the_field_and_starts_nothing(server: ServerProcess, body: dict[str, Any],
                                                                field: str, message: str) -> None:
    before = listed(server)
    r = start(server, body, ADMIN)  # a superuser: the input is judged, not the rights
    assert r.status_code == 400 and r.json()["field"] == field and message in r.json()["error"], r.text
    assert listed(server) == before


# bodies that are wrong before any Spark work: each field's wrong types and values, unknown fields
_topic = st.one_of(st.just(""), st.text(min_size=250, max_size=260), st.integers(), st.none(), st.lists(st.text()))
_time = st.one_of(st.text(alphabet="abcxyz:-/ ", min_size=1, max_size=12), st.booleans(), st.floats(allow_nan=False),
                  st.lists(st.integers(), max_size=2))
_limit = st.one_of(st.integers(max_value=0), st.integers(min_value=1001), st.text(max_size=3), st.floats(0.5, 9.5))


@st.composite
def bad_body(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    body: dict[str, Any] = {"topic": TOPIC, "where": "true"}
    wrong = draw(st.sets(st.sampled_from(["topic", "from", "to", "limit", "extra", "where"]), min_size=1))
    if "topic" in wrong:
        body["topic"] = draw(_topic)
    if "from" in wrong:
        body["from"] = draw(_time)
    if "to" in wrong:
        body["to"] = draw(_time)
    if "limit" in wrong:
        body["limit"] = draw(_limit)
    if "where" in wrong:
        body["where"] = draw(st.one_of(st.just(""), st.integers(), st.text(min_size=4097, max_size=4100)))
    if "extra" in wrong:
        body[draw(st.sampled_from(["master", "store", "metadata", "Topic"]))] = "x"
    return body, wrong | {"master", "store", "metadata", "Topic"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=bad_body())
def test_post_body_validation(server: ServerProcess, case: tuple[dict[str, Any], set[str]]) -> None:
    body, wrong = case
    before = listed(server)
    r = start(server, body, ADMIN)  # a superuser: the input is judged, not the rights
    assert r.status_code == 400, (body, r.text)
    assert r.json()["field"].split(".")[0] in wrong, (body, r.text)  # "from.int": the union member at fault
    assert listed(server) == before


def test_access_rules_apply(server: ServerProcess) -> None:
    assert httpx.post(f"{server.url}/v1/searches", json={"topic": TOPIC, "where": "true"}).status_code == 401
    other = [start(server, {"topic": TOPIC, "where": "true"}, OTHER),
             start(server, {"topic": "nosuchtopic", "where": "true"}, OTHER)]  # same answer, topic or not
    assert [r.status_code for r in other] == [403, 403] and other[0].json() == other[1].json()
    sid = start(server, {"topic": TOPIC, "key": "k1"}).json()["id"]
    r = httpx.get(f"{server.url}/v1/searches/{sid}", headers=as_(OTHER), timeout=60)
    assert r.status_code == 403
    assert httpx.delete(f"{server.url}/v1/searches/{sid}", headers=as_(OTHER), timeout=60).status_code == 403
    assert sid not in [s["id"] for s in httpx.get(f"{server.url}/v1/searches", headers=as_(OTHER)).json()["searches"]]
    assert finished(server, sid)["matches"][0]["key"] == "k1"
    assert httpx.get(f"{server.url}/v1/searches/nosuch", headers=as_(READER)).status_code == 404


def test_concurrency_bound_and_cancel_stops_the_spark_job(server: ServerProcess) -> None:
    r = start(server, {"topic": TOPIC, "where": SLOW})
    assert r.status_code == 202, r.text
    sid = r.json()["id"]
    busy = start(server, {"topic": TOPIC, "where": "true"})
    assert busy.status_code == 429 and "search_max_concurrent=1" in busy.json()["error"], busy.text
    wait_for("the search's Spark task runs", lambda: get(server, sid)["spark"]["tasks_running"] >= 1,
             timeout=SPARK_START_S, interval=0.5)
    r = httpx.delete(f"{server.url}/v1/searches/{sid}", headers=as_(READER), timeout=120)
    assert r.status_code == 200, r.text
    gone = r.json()
    assert gone["state"] == "cancelled" and gone["cancel_requested"], gone
    # Spark's own record of the job group: its job failed (cancelled), none is left running
    assert gone["spark"]["jobs_failed"] >= 1 and gone["spark"]["jobs_active"] == 0, gone
    assert gone["spark"]["tasks_running"] == 0 and gone["matches_total"] == 0
    # the slot is free again
    again = start(server, {"topic": TOPIC, "key": "k2"})
    assert again.status_code == 202, again.text
    assert finished(server, again.json()["id"])["matches"][0]["value"] == value(2)
    assert get(server, sid)["state"] == "cancelled"


def test_settings_bound_the_searches(tmp_path: Path) -> None:
    """search_max_rows bounds the limit (and is its default), search_max_concurrent=0 turns searches off: both
    answered before any Spark work; the flags and MQINDEX_* reach the app."""
    for name, extra, env in (("rows", ["--search-max-rows", "3"], {}),
                             ("off", [], {"MQINDEX_SEARCH_MAX_CONCURRENT": "0"})):
        s = ServerProcess(tmp_path / name, "--kafka-listener", "", *extra, env=env).start()
        try:
            r = httpx.post(f"{s.url}/v1/topics", json={"name": TOPIC, "partitions": 1}, timeout=60)
            assert r.status_code == 201, r.text
            r = httpx.post(f"{s.url}/v1/searches", json={"topic": TOPIC, "where": "true", "limit": 4}, timeout=60)
            if name == "rows":
                assert r.status_code == 400 and r.json()["error"] == "limit must be at most 3 (search_max_rows), got 4"
            else:
                assert r.status_code == 403 and "search_max_concurrent=0" in r.json()["error"], r.text
            bounds = httpx.get(f"{s.url}/v1/searches", timeout=60).json()
            assert bounds == {"searches": [], "max_concurrent": 1 if name == "rows" else 0,
                              "max_rows": 3 if name == "rows" else 1000}
        finally:
            assert s.stop() == 0
