"""`mqindex serve` stops at start, with one line naming the flag to change, when it could not work: an object
store, a WAL store or a metadata database that does not answer, a port in use, a data directory another
server holds. Nothing says "serving" first."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import ServerProcess, free_port

MQINDEX = str(Path(sys.executable).parent / "mqindex")
SECRET = "s3cretKEYvalue-0123456789"


def serve(tmp_path: Path, *flags: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(tmp_path / "data"), *flags],
                       capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return r, time.monotonic() - started


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The server stopped with exit 1 and exactly one error line, before anything said it serves."""
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    errors = [ln for ln in out.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1, out
    assert errors[0].startswith("mqindex serve: error: "), out
    assert "serving" not in out and "Application startup complete" not in out and "Traceback" not in out, out
    return errors[0]


def test_store_endpoint_nobody_listens_on(tmp_path: Path) -> None:
    port = free_port()  # bound and closed: nobody listens there
    store = f"s3://mqindex/prod?endpoint=http://127.0.0.1:{port}&secret_key={SECRET}"
    r, took = serve(tmp_path, "--port", str(free_port()), "--store", store)
    line = one_error_line(r)
    assert line.startswith(f"mqindex serve: error: --store s3://mqindex/prod?endpoint=http://127.0.0.1:{port}"), line
    assert "secret_key=***" in line and SECRET not in r.stdout + r.stderr
    assert "Could not connect" in line and "10s" in line  # the cause, after the default wait of 10 s
    assert took < 45, took


def test_wal_store_nobody_listens_on(tmp_path: Path) -> None:
    wal = f"s3://mqindex/prod-wal?endpoint=http://127.0.0.1:{free_port()}"
    r, _ = serve(tmp_path, "--port", str(free_port()), "--wal", wal, "--startup-wait-s", "1")
    line = one_error_line(r)
    assert line.startswith(f"mqindex serve: error: --wal {wal} cannot be used: "), line
    assert "Could not connect" in line


def test_metadata_database_refuses(tmp_path: Path) -> None:
    metadata = f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/test?schema=prod"
    r, took = serve(tmp_path, "--port", str(free_port()), "--metadata", metadata, "--startup-wait-s", "2")
    line = one_error_line(r)
    assert line.startswith("mqindex serve: error: --metadata postgresql://postgres:***@127.0.0.1:"), line
    assert "refused" in line.lower() and "after 2s" in line, line
    assert SECRET not in r.stdout + r.stderr
    assert took < 30, took


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_http_port_in_use(tmp_path: Path, taken_port: int) -> None:
    r, _ = serve(tmp_path, "--port", str(taken_port))
    line = one_error_line(r)
    assert line == (f"mqindex serve: error: --port: 127.0.0.1:{taken_port} is already in use by another process: "
                    "stop it, or choose another port with --port")
    assert not (tmp_path / "data").exists()  # stopped before anything opened


def test_kafka_port_in_use(tmp_path: Path, taken_port: int) -> None:
    r, _ = serve(tmp_path, "--port", str(free_port()), "--kafka-listener", f"127.0.0.1:{taken_port}")
    line = one_error_line(r)
    assert line.startswith(f"mqindex serve: error: --kafka-listener: 127.0.0.1:{taken_port} is already in use"), line
    assert line.endswith("choose another port with --kafka-listener")
    assert not (tmp_path / "data").exists()


def test_data_dir_held_by_another_server(tmp_path: Path) -> None:
    first = ServerProcess(tmp_path / "data").start()
    try:
        r, _ = serve(tmp_path, "--port", str(free_port()))
        line = one_error_line(r)
        assert "is in use by another broker process" in line, line
        assert "stop that process, or give this one another data directory (--data-dir)" in line
    finally:
        assert first.stop() == 0


def test_a_data_dir_started_with_another_metadata_or_node_id_is_refused_and_loses_nothing(tmp_path: Path) -> None:
    """Acknowledged records only in the WAL (no upload yet), then kill -9; a start with another --metadata (a
    typo) or another --node-id is refused naming what to give, and leaves the WAL as it is: the start with the
    right flags restores every record."""
    first = ServerProcess(tmp_path / "data", "--upload-interval-s", "3600").start()
    try:
        assert httpx.post(f"{first.url}/v1/topics", json={"name": "t", "partitions": 1}, timeout=30).status_code == 201
        r = httpx.post(f"{first.url}/v1/topics/t/messages", timeout=30,
                       json={"messages": [{"key": f"k{i}", "value": f"v{i}"} for i in range(5)]})
        assert r.status_code == 200, r.text
    finally:
        first.stop(signal.SIGKILL)
    wrong = tmp_path / "wrong.sqlite"
    r, _ = serve(tmp_path, "--port", str(free_port()), "--metadata", f"sqlite:///{wrong}")
    line = one_error_line(r)
    assert f"belongs to the cluster of --metadata sqlite:///{tmp_path / 'data'}/metadata.sqlite" in line, line
    assert f"not to that of --metadata sqlite:///{wrong}" in line and "nothing was started" in line, line
    r, _ = serve(tmp_path, "--port", str(free_port()), "--node-id", "1")
    line = one_error_line(r)
    assert "it is node 0's, not node 1's (--node-id)" in line and "Start with --node-id 0" in line, line

    again = ServerProcess(tmp_path / "data", "--upload-interval-s", "3600").start()
    try:
        page = httpx.get(f"{again.url}/v1/topics/t/partitions/0/messages", params={"offset": 0}, timeout=30).json()
        assert [m["value"] for m in page["messages"]] == [f"v{i}" for i in range(5)]
        found = httpx.get(f"{again.url}/v1/messages", params={"topic": "t", "key": "k3"}, timeout=30).json()
        assert [m["value"] for m in found["messages"]] == ["v3"]
    finally:
        assert again.stop() == 0
