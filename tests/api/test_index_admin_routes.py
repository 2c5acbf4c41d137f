"""POST /v1/admin/index/roll and /v1/admin/index/maintain (admin scope): a key is found by lookup while its
index file is WRITING, COMPACTED (held local) and UPLOADED."""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi.testclient import TestClient

TOKENS = {"reader": ["read"], "writer": ["produce"], "root": ["admin"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def states(files: list[dict[str, object]]) -> list[str]:
    return [str(f["state"]) for f in files if f["items"]]


def wait_until(what: str, done: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.05)


def found(c: TestClient, key: str) -> bool:
    r = c.get("/v1/messages", params={"topic": "t", "key": key}, headers=bearer("reader"))
    assert r.status_code == 200, r.text
    return [m["key"] for m in r.json()["messages"]] == [key]


def test_roll_holds_the_compacted_file_until_maintain(make_client: Callable[..., TestClient]) -> None:
    c = make_client(TOKENS)
    assert c.post("/v1/topics", json={"name": "t", "partitions": 2}, headers=bearer("root")).status_code == 201
    msgs = {"messages": [{"key": f"k{i}", "value": "v", "partition": i % 2} for i in range(20)]}
    assert c.post("/v1/topics/t/messages", json=msgs, headers=bearer("writer")).status_code == 200
    assert found(c, "k7")

    for tok in ("reader", "writer"):
        assert c.post("/v1/admin/index/roll", headers=bearer(tok)).status_code == 403
        assert c.post("/v1/admin/index/maintain", headers=bearer(tok)).status_code == 403
    assert c.post("/v1/admin/index/roll").status_code == 401
    assert c.post("/v1/admin/index/roll", params={"hold_upload_s": -1}, headers=bearer("root")).status_code == 400

    r = c.post("/v1/admin/index/roll", params={"hold_upload_s": 3600}, headers=bearer("root"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["rolled"] and states(out["files"]) == ["COMPACTED"]
    rolled = next(f for f in out["files"] if f["name"] == out["rolled"])
    assert rolled["items"] == 20 and rolled["size_bytes"] > 0
    background = c.app.state.backend.index.background  # type: ignore[attr-defined]
    ran = background.runs
    wait_until("two background cycles", lambda: background.runs >= ran + 2)  # they leave the held file alone
    files = c.post("/v1/admin/index/roll", headers=bearer("root")).json()  # nothing new: the WRITING file is empty
    assert files["rolled"] is None and states(files["files"]) == ["COMPACTED"]
    assert found(c, "k7") and found(c, "k18")

    r = c.post("/v1/admin/index/maintain", headers=bearer("root"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["uploaded"] == [rolled["name"]] and states(out["files"]) == ["UPLOADED"]
    assert found(c, "k7") and found(c, "k18")


def test_roll_without_hold_uploads_in_the_background(make_client: Callable[..., TestClient]) -> None:
    c = make_client()
    assert c.post("/v1/topics", json={"name": "t", "partitions": 1}).status_code == 201
    assert c.post("/v1/topics/t/messages", json={"messages": [{"key": "a", "value": "v"}]}).status_code == 200
    assert c.post("/v1/admin/index/roll").json()["rolled"]
    wait_until("the background uploads the rolled file",
               lambda: states(c.get("/v1/index/files").json()["files"]) == ["UPLOADED"])
    assert found(c, "a")
