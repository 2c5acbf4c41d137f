"""A real `mqindex serve` process on a free loopback port, for the end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: the console tests' two principals: an admin token and a read-only one (`console_server` in conftest.py)
TOKENS = {"MQINDEX_TOKENS": "admin-tok=read,produce,admin;reader-tok=read"}
ADMIN = {"Authorization": "Bearer admin-tok"}
READER = {"Authorization": "Bearer reader-tok"}


class ServerProcess:
    def __init__(self, data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.extra = list(extra)
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> ServerProcess:
        mqindex = str(Path(sys.executable).parent / "mqindex")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [mqindex, "serve", "--data-dir", str(self.data_dir), "--port", str(self.port), *self.extra],
                stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        # stopped here: a caller whose start failed never holds the process, so nobody else would stop it
        self.proc.kill()
        self.proc.wait(30)
        raise AssertionError(f"server not healthy after {timeout}s:\n{self.log.read_text()[-3000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    def restart(self, sig: int = signal.SIGTERM) -> int:
        rc = self.stop(sig)
        self.port = free_port()
        self.start()
        return rc


def get(url: str, **kw: object) -> httpx.Response:
    return httpx.get(url, timeout=60, **kw)  # type: ignore[arg-type]  # a loaded machine: slow is not a failure


def post(url: str, **kw: object) -> httpx.Response:
    return httpx.post(url, timeout=60, **kw)  # type: ignore[arg-type]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30, interval: float = 0.1) -> None:
    """Wait until check() is true, at most `timeout` seconds (AssertionError naming `what` after that)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout}s: {what}")
        time.sleep(interval)
