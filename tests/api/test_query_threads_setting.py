"""`--index-query-threads` sizes the pool that answers index queries, seen from outside a real process: after a
burst of concurrent key lookups, py-spy lists exactly that many query threads in the server (the pool starts a
thread only when every one it has is busy, so a burst fills it; the default of 4 would show more)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.api.server import ServerProcess

THREADS = 2
BURST = 64


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path / "data", "--index-query-threads", str(THREADS))
    try:
        yield srv.start()
    finally:
        if srv.proc is not None:
            srv.stop()


def query_threads(server: ServerProcess) -> set[str]:
    assert server.proc is not None
    py_spy = str(Path(sys.executable).parent / "py-spy")
    out = subprocess.run([py_spy, "dump", "--pid", str(server.proc.pid)], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return set(re.findall(r'"(mqindex-query_\d+)"', out))


def test_index_query_threads(server: ServerProcess) -> None:
    url = server.url
    assert httpx.post(f"{url}/v1/topics", json={"name": "t", "partitions": 2}, timeout=60).status_code == 201
    r = httpx.post(f"{url}/v1/topics/t/messages", timeout=60,
                   json={"messages": [{"key": f"k{i}", "value": "v"} for i in range(BURST)]})
    assert r.status_code == 200, r.text

    def lookup(i: int) -> int:
        with httpx.Client(base_url=url, timeout=60) as c:
            found = 0
            for _ in range(5):
                r = c.get("/v1/messages", params={"topic": "t", "key": f"k{i}"})
                assert r.status_code == 200, r.text
                found = len(r.json()["messages"])
            return found

    with ThreadPoolExecutor(BURST) as pool:
        assert list(pool.map(lookup, range(BURST))) == [1] * BURST
    assert query_threads(server) == {f"mqindex-query_{i}" for i in range(THREADS)}
