"""`mqindex serve` as a real process: starts on the embedded defaults, answers, stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from api.config import ConfigError, load_settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"server exited with {proc.returncode}"
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} not healthy after {timeout}s")


def test_serve_embedded_defaults_and_sigterm(tmp_path: Path) -> None:
    port = free_port()
    mqindex = Path(sys.executable).parent / "mqindex"
    proc = subprocess.Popen([str(mqindex), "serve", "--port", str(port)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc)
        assert httpx.get(url + "/healthz").json() == {"status": "ok"}
        text = httpx.get(url + "/metrics").text
        assert 'mqindex_object_store_requests_total{backend="local",component="broker",kind="PUT"}' in text
        assert "mqindex_wal_group_commits_total" in text and "mqindex_index_files{" in text
        r = httpx.post(url + "/v1/topics", json={"name": "m", "partitions": 1})
        assert r.status_code == 201
        assert httpx.post(url + "/v1/topics/m/messages", json={"messages": [{"value": "x"}]}).status_code == 200
        text = httpx.get(url + "/metrics").text
        fsyncs = [ln for ln in text.splitlines() if ln.startswith("mqindex_wal_fsync_seconds_count")]
        assert fsyncs and float(fsyncs[0].split()[-1]) >= 1
        assert 'mqindex_http_requests_total{route="/v1/topics/{topic}/messages",status="200"} 1.0' in text
        assert (tmp_path / "data" / "objects").is_dir()  # the embedded local-disk store under ./data
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_settings_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "mqindex.toml"
    cfg.write_text('port = 9000\nhost = "0.0.0.0"\ndata_dir = "/srv/x"\n[tokens]\nabc = ["read"]\n')
    s = load_settings(str(cfg), env={"MQINDEX_PORT": "9100", "MQINDEX_STORE": "s3://b/p"}, port=9200)
    assert (s.port, s.host, s.data_dir, s.store, s.tokens) == (9200, "0.0.0.0", "/srv/x", "s3://b/p", {"abc": ["read"]})
    r = load_settings(env={"MQINDEX_DATA_DIR": str(tmp_path)}).resolved()
    assert r.store == f"file://{tmp_path}/objects" and r.metadata == f"sqlite:///{tmp_path}/metadata.sqlite"
    assert load_settings(env={"MQINDEX_NODE_ID": "3"}, node_id=5).resolved().node_id == 5
    assert load_settings(env={"MQINDEX_TOKENS": "t1=read,produce;t2=admin"}).tokens == {
        "t1": ["read", "produce"], "t2": ["admin"]}


@pytest.mark.parametrize(
    ("env", "message"),
    [({"MQINDEX_PORT": "http"}, "port must be an integer"), ({"MQINDEX_PORT": "70000"}, "port must be 0-65535"),
     ({"MQINDEX_TOKENS": "t=write"}, "unknown scopes"), ({"MQINDEX_NODE_ID": "one"}, "node_id must be an integer"),
     ({"MQINDEX_NODE_ID": "-1"}, "node_id must be 0")],
)
def test_bad_settings_are_clear_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env=env)


def test_bad_config_file_names_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings(str(cfg), env={})
    r = subprocess.run([str(Path(sys.executable).parent / "mqindex"), "serve", "--config", str(cfg)],
                       capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PATH": os.environ["PATH"]})
    assert r.returncode == 1
    assert r.stderr.strip().startswith("mqindex serve: error: config file") and "Traceback" not in r.stderr
