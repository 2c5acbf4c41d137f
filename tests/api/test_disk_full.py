"""Disk full against a real `mqindex serve` whose data directory is a 40 MiB tmpfs.

A producer of 240 KB batches fills it: writes are refused with 507 + Retry-After and a JSON error naming the
path, readiness says why (liveness stays 200), /metrics shows it, reads by id and by key go on; once a filler
file is deleted the node resumes by itself and every acknowledged record is found by key and by id. The same
across a clean stop and a restart while full: the stop does not fill the disk further, the restart comes up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import ServerProcess
from tests.disk_fs import fill, free, small_tmpfs

FLOOR = 4 << 20
BATCH = 8  # messages of 30 KB: 240 KB a request


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "fs", 40) as mnt:
        yield mnt


@pytest.fixture
def server(fs: Path) -> Iterator[ServerProcess]:
    # the data directory is the mount itself; the server log lands beside it, off the small filesystem
    srv = ServerProcess(fs, "--min-free-bytes", str(FLOOR))
    try:
        yield srv.start()
    finally:
        if srv.proc is not None:
            srv.stop()


def produce(url: str, n: int) -> httpx.Response:
    msgs = [{"key": f"k{n}-{j}", "value": f"{n}-{j}-" + "v" * 30_000} for j in range(BATCH)]
    return httpx.post(f"{url}/v1/topics/orders/messages", json={"messages": msgs}, timeout=60)


def fill_until_refused(url: str, acked: dict[str, str], start: int) -> tuple[httpx.Response, int]:
    """Produce until a request is refused; records every acknowledged key -> message id."""
    for n in range(start, start + 400):
        r = produce(url, n)
        if r.status_code != 200:
            return r, n
        for j, res in enumerate(r.json()["results"]):
            acked[f"k{n}-{j}"] = res["msg_id"]
    raise AssertionError("the disk never filled")


def wait_ready(url: str, want: int, timeout: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.get(f"{url}/healthz/ready", timeout=5)
        if r.status_code == want or time.monotonic() > deadline:
            assert r.status_code == want, r.text
            return r
        time.sleep(0.1)


def assert_all_found(url: str, acked: dict[str, str]) -> None:
    with httpx.Client(base_url=url, timeout=30) as c:
        for key, msg_id in acked.items():
            r = c.get(f"/v1/messages/{msg_id}")
            assert r.status_code == 200, (key, r.text)
            assert r.json()["key"] == key
            r = c.get("/v1/messages", params={"topic": "orders", "key": key})
            assert r.status_code == 200, (key, r.text)
            assert [m["msg_id"] for m in r.json()["messages"]] == [msg_id], key


def assert_out_of_disk(url: str, refused: httpx.Response, fs: Path) -> None:
    assert refused.status_code == 507, refused.text
    body = refused.json()
    assert body["field"] is None and "out of disk on " + str(fs) in body["error"], body
    assert int(refused.headers["Retry-After"]) > 0
    ready = wait_ready(url, 503)
    assert ready.json()["ready"] is False
    assert ready.json()["status"].startswith("not accepting writes: out of disk on " + str(fs))
    assert httpx.get(f"{url}/healthz/live").status_code == 200
    assert httpx.get(f"{url}/healthz").status_code == 200
    text = httpx.get(f"{url}/metrics").text
    assert "mqindex_out_of_disk 1.0" in text
    assert 'mqindex_disk_free_bytes{data="wal",path="' + str(fs / "wal") + '"}' in text


def test_fill_refuse_read_and_resume(server: ServerProcess, fs: Path) -> None:
    url = server.url
    assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    assert wait_ready(url, 200).json() == {"status": "ok", "ready": True}
    fill(fs / "filler", leave=FLOOR + (8 << 20))
    acked: dict[str, str] = {}
    refused, n = fill_until_refused(url, acked, 0)
    assert len(acked) >= 4 * BATCH
    assert_out_of_disk(url, refused, fs)
    assert produce(url, n).status_code == 507  # still refused: nothing is retried into the floor
    assert_all_found(url, acked)  # reads and key lookups go on during the episode

    (fs / "filler").unlink()
    wait_ready(url, 200)
    assert "mqindex_out_of_disk 0.0" in httpx.get(f"{url}/metrics").text
    offsets = {int(m_id[8:16], 16): set() for m_id in acked.values()}  # partition -> acknowledged offsets
    for m_id in acked.values():
        offsets[int(m_id[8:16], 16)].add(int(m_id[16:], 16))
    for m in range(n, n + 3):  # writing resumed by itself
        r = produce(url, m)
        assert r.status_code == 200, r.text
        for j, res in enumerate(r.json()["results"]):
            acked[f"k{m}-{j}"] = res["msg_id"]
            offsets.setdefault(res["partition"], set()).add(res["offset"])
    for part, offs in offsets.items():  # the refused requests' offsets were used again: no gap in any partition
        assert sorted(offs) == list(range(len(offs))), part
    assert_all_found(url, acked)


def test_clean_stop_and_restart_while_full(server: ServerProcess, fs: Path) -> None:
    url = server.url
    assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 2}).status_code == 201
    fill(fs / "filler", leave=FLOOR + (8 << 20))
    acked: dict[str, str] = {}
    refused, n = fill_until_refused(url, acked, 0)
    assert_out_of_disk(url, refused, fs)
    before = free(fs)
    assert server.stop() == 0
    assert free(fs) >= before - (256 << 10)  # the stop did not upload the cache into the full filesystem
    server.restart()  # comes up while still full
    url = server.url
    assert wait_ready(url, 503).json()["status"].startswith("not accepting writes: out of disk on " + str(fs))
    assert produce(url, n).status_code == 507
    assert_all_found(url, acked)

    (fs / "filler").unlink()
    wait_ready(url, 200)
    r = produce(url, n)
    assert r.status_code == 200, r.text
    for j, res in enumerate(r.json()["results"]):
        acked[f"k{n}-{j}"] = res["msg_id"]
    assert server.stop() == 0
    server.start()
    assert_all_found(server.url, acked)
