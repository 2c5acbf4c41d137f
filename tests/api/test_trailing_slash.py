"""A path a trailing slash away from a route, on a real `mqindex serve`: a 404 whose JSON names the route's path
(`POST /v1/topics/` answered 307 with an empty body, which a client not following redirects for POST stops at),
nothing done; an unknown path stays a plain 404."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(Path(tmp_path_factory.mktemp("slash")) / "node").start()
    try:
        yield s
    finally:
        s.stop()


def test_a_trailing_slash_is_a_404_naming_the_path(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30, follow_redirects=False) as http:
        r = http.post("/v1/topics/", json={"name": "slashed", "partitions": 2})
        assert (r.status_code, r.json()) == (404, {
            "error": "no route POST /v1/topics/: the path is /v1/topics (without the trailing slash)",
            "field": "path"})
        assert "slashed" not in {t["name"] for t in http.get("/v1/topics").json()}  # nothing created
        assert http.post("/v1/topics", json={"name": "slashed", "partitions": 2}).status_code == 201
        r = http.post("/v1/topics/slashed/messages/", json={"messages": [{"value": "v"}]})
        assert (r.status_code, r.json()["error"]) == (404, "no route POST /v1/topics/slashed/messages/: the path is "
                                                           "/v1/topics/slashed/messages (without the trailing slash)")
        assert http.get("/v1/topics/slashed/partitions/0/messages", params={"offset": 0}).json()["messages"] == []
        assert http.get("/healthz/").json()["error"] == \
            "no route GET /healthz/: the path is /healthz (without the trailing slash)"
        # no route a slash away, or none for the method: as any unknown path
        for method, path in (("GET", "/v1/nothing/"), ("DELETE", "/v1/topics/"), ("GET", "/v1/nothing")):
            r = http.request(method, path)
            assert (r.status_code, r.json()) == (404, {"error": "Not Found", "field": None}), (method, path)


def test_every_route_of_the_openapi_document_a_slash_away_names_its_path(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30, follow_redirects=False) as http:
        paths = http.get("/openapi.json").json()["paths"]
        assert len(paths) > 20
        for template, operations in paths.items():
            path = re.sub(r"\{[^}]+\}", "x1", template)  # a name or number every parameter takes
            for method in operations:
                r = http.request(method.upper(), path + "/")
                assert r.status_code == 404 and r.headers["content-type"] == "application/json", (method, path)
                assert r.json() == {"error": f"no route {method.upper()} {path}/: the path is {path} (without the "
                                             "trailing slash)", "field": "path"}, (method, path)
