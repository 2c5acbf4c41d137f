"""The console's read-only views over a real BrokerNode (local objects, SQLite metadata): partitions with leader,
epochs, offsets and bytes; objects; index files with upload lag; this node. Any `topic` parameter gets a 200,
a 400 naming the field or a 404, never a server error."""

from __future__ import annotations

import string

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from broker.overview import index_files


def test_views_follow_produce_upload_and_compaction(client: TestClient) -> None:
    empty = client.get("/v1/console/partitions")
    assert empty.status_code == 200 and empty.json() == {"partitions": []}
    objs = client.get("/v1/console/objects").json()
    assert objs["stream_set_objects"]["count"] == 0 and objs["compaction"]["last"] is None
    assert client.get("/v1/console/index").json() == {"files": []}

    assert client.post("/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    msgs = [{"key": f"k{i}", "value": "x" * 200, "partition": i % 2} for i in range(9)]
    assert client.post("/v1/topics/orders/messages", json={"messages": msgs}).status_code == 200
    node = client.app.state.backend  # type: ignore[attr-defined]
    assert client.get("/v1/console/node").json()["wal_bytes_not_uploaded"] > 0
    node.flush()
    assert client.get("/v1/console/node").json()["wal_bytes_not_uploaded"] == 0

    parts = client.get("/v1/console/partitions", params={"topic": "orders"}).json()["partitions"]
    assert [(p["partition"], p["leader"], p["leader_epoch"] is not None, p["start_offset"], p["end_offset"])
            for p in parts] == [(0, 0, True, 0, 5), (1, 0, True, 0, 4)]
    objs = client.get("/v1/console/objects").json()
    total = objs["stream_set_objects"]["bytes"] + objs["stream_objects"]["bytes"]
    assert all(p["bytes"] > 0 and p["objects"] >= 1 for p in parts)
    assert sum(p["bytes"] for p in parts) <= total  # shares of the objects, never more than they hold
    assert sum(p["bytes"] for p in parts) >= 9 * 200  # the values at least

    ran = client.post("/v1/admin/compaction").json()
    assert ran["errors"] == []
    after = client.get("/v1/console/objects").json()["compaction"]
    assert after["runs"] == 1 and after["last"]["objects_in"] == ran["objects_in"]

    node.sync_index()  # the index is fed after the acknowledgement, on its own thread
    files = client.get("/v1/console/index").json()["files"]
    assert sum(f["items"] for f in files) >= 9
    assert all(f["upload_lag_ms"] is None if f["state"] == "WRITING" else f["upload_lag_ms"] >= 0 for f in files)


def test_upload_lag_counts_only_files_waiting_for_their_upload() -> None:
    files = [{"state": s, "begin_ms": 1_000, "end_ms": 2_000, "items": 1, "location": "x"}
             for s in ("WRITING", "SEALED", "COMPACTED", "UPLOADED", "IMPORTED", "EXPIRED")]
    # a file still being written has no upload lag (None): it is not waiting for the upload yet
    assert [f["upload_lag_ms"] for f in index_files(files, now_ms=5_000)] == [None, 4_000, 4_000, 0, 0, 0]
    assert index_files(files[1:2], now_ms=500)[0]["upload_lag_ms"] == 0  # a clock behind: never negative


def test_session_names_the_callers_scopes(client: TestClient) -> None:
    assert client.get("/v1/console/session").json() == {"scopes": ["admin", "produce", "read"]}  # no tokens


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.one_of(st.text(max_size=300), st.text(alphabet=string.ascii_letters + "._-", min_size=1,
                                                         max_size=20), st.just("orders")))
@example(topic=".")
@example(topic="..")
def test_any_topic_parameter_is_answered_cleanly(client: TestClient, topic: str) -> None:
    if not client.get("/v1/topics").json():
        client.post("/v1/topics", json={"name": "orders", "partitions": 1})
    r = client.get("/v1/console/partitions", params={"topic": topic})
    assert r.status_code in (200, 400, 404), r.text
    if r.status_code != 200:
        assert r.json()["field"] == "topic"
    else:
        assert {p["topic"] for p in r.json()["partitions"]} == {topic}


def test_offset_at_a_time_and_its_bad_input(client: TestClient) -> None:
    assert client.post("/v1/topics", json={"name": "timed", "partitions": 1}).status_code == 201
    first = client.post("/v1/topics/timed/messages", json={"messages": [{"value": "a"}, {"value": "b"}]}).json()
    stamp = first["results"][0]["timestamp"]
    at = client.get("/v1/console/offset", params={"topic": "timed", "partition": 0, "time": stamp})
    assert at.status_code == 200 and at.json() == {"offset": 0, "timestamp": stamp}
    later = client.get("/v1/console/offset", params={"topic": "timed", "partition": 0, "time": "2999-01-01"})
    assert later.json() == {"offset": 2, "timestamp": None}  # every message older: the end offset
    cases = [({"topic": "timed", "partition": 0, "time": "yesterday"}, 400, "time"),
             ({"topic": "timed", "partition": -1, "time": 0}, 400, "partition"),
             ({"topic": "..", "partition": 0, "time": 0}, 400, "topic"),
             ({"topic": "nope", "partition": 0, "time": 0}, 404, None),
             ({"topic": "timed", "partition": 5, "time": 0}, 404, None)]
    for params, status, field in cases:
        r = client.get("/v1/console/offset", params=params)
        assert r.status_code == status, (params, r.text)
        assert field is None or r.json()["field"] == field, (params, r.text)


def test_console_scripts_are_in_the_page_and_served_and_unknown_ones_are_404(client: TestClient) -> None:
    page = client.get("/").text
    assert 'src="/console/' not in page  # every script written into the page: no request per script
    for name in ("groups", "browser"):
        r = client.get(f"/console/{name}.js")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
        assert f'<script data-script="{name}">\n{r.text}</script>' in page
    assert client.get("/console/nope.js").status_code == 404
