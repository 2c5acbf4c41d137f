"""One real `mqindex serve` process for the benchmarks that measure a running server (broker, failover,
reassign, kafka): its own process group, so a stop or kill -9 takes the whole node and nothing outlives the run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    """`mqindex serve --data-dir DATA --port P ARGS`, started and healthy when constructed. With kafka=True it
    also listens for Kafka clients on a free port (`bootstrap`); without, its Kafka listener is off. `mqindex`:
    another installation's executable (a previous release's), default this one's."""

    def __init__(self, data_dir: Path, args: Sequence[str], log_path: Path, *, kafka: bool = False,
                 start_timeout_s: float = 90, what: str = "mqindex serve", mqindex: Path | None = None) -> None:
        self.port = free_port()
        self.kafka_port = free_port() if kafka else 0
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()/kill()
        cmd = [str(mqindex or Path(sys.executable).parent / "mqindex"), "serve", "--data-dir", str(data_dir),
               "--port", str(self.port), *args]
        env = dict(os.environ)
        if kafka:
            cmd += ["--kafka-listener", self.bootstrap]
        else:
            env["MQINDEX_KAFKA_LISTENER"] = ""
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{what} did not start; see {log_path}")
            time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def kill(self) -> None:
        """kill -9 of the whole process group."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()

    def stop(self, timeout_s: float = 60) -> None:
        """SIGTERM (a clean stop: the node uploads what it holds), kill -9 after timeout_s."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
