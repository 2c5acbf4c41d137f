"""A Spark standalone cluster for tests: one master and one worker started from the pyspark package on
127.0.0.1, every port given, state under one directory; stopped by killing their process groups."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Standalone:
    master_url: str  # spark://127.0.0.1:PORT
    master_ui: str  # http://127.0.0.1:PORT (JSON at /json/)
    base: Path

    def state(self) -> dict:
        """The master's JSON status; {} while it is still starting (its UI answers an HTML page first)."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as r:
            body = r.read()
        try:
            return json.loads(body)
        except ValueError:
            return {}

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.base.glob("*.log")))


def _env(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_DIRS=str(base / "local"),
               SPARK_WORKER_DIR=str(base / "work"), SPARK_LOG_DIR=str(base / "logs"),
               SPARK_CONF_DIR=str(base / "conf"))
    for d in ("local", "work", "logs", "conf"):
        (base / d).mkdir(parents=True, exist_ok=True)
    return env


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as f:
        return subprocess.Popen([str(SPARK_CLASS), *args], env=env, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Kill each process group (the JVM and whatever it started: executors, Python workers): SIGTERM to
    all, then SIGKILL to any group whose leader has not exited within 15 s."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15.0
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):  # stragglers of the group (or a leader ignoring TERM)
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(15.0)


def _wait(cluster: Standalone, procs: list[subprocess.Popen[bytes]], deadline: float,
          ready: Callable[[dict], bool], what: str) -> None:
    """Poll the master's JSON until `ready`; fail at once if a process exited, or at the deadline."""
    while True:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"a Spark process exited with {p.returncode}:\n{cluster.logs()}")
        try:
            if ready(cluster.state()):
                return
        except OSError:
            pass  # the master's UI is not listening yet
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} at {cluster.master_ui} in time:\n{cluster.logs()}")
        time.sleep(0.2)


@contextlib.contextmanager
def standalone_cluster(base: Path, cores: int = 1, memory: str = "1g", timeout: float = 90.0) -> Iterator[Standalone]:
    """Start the master, then one worker; yield once the master's JSON reports the worker ALIVE."""
    env = _env(base)
    m_port, m_ui, m_rest, w_port, w_ui = (free_port() for _ in range(5))
    props = base / "conf" / "spark-defaults.conf"
    props.write_text(f"spark.master.rest.port {m_rest}\n")
    procs: list[subprocess.Popen[bytes]] = []
    cluster = Standalone(f"spark://127.0.0.1:{m_port}", f"http://127.0.0.1:{m_ui}", base)
    try:
        procs.append(_start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(m_port),
                             "--webui-port", str(m_ui), "--properties-file", str(props)], env, base / "master.log"))
        deadline = time.monotonic() + timeout
        # the worker starts once the master is up: a worker refused at first retries only after long pauses
        _wait(cluster, procs, deadline, lambda st: st.get("status") == "ALIVE", "master ALIVE")
        procs.append(_start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(w_port),
                             "--webui-port", str(w_ui), "--cores", str(cores), "--memory", memory,
                             "--work-dir", str(base / "work"), "--properties-file", str(props), cluster.master_url],
                            env, base / "worker.log"))
        _wait(cluster, procs, deadline, lambda st: any(w.get("state") == "ALIVE" for w in st.get("workers", [])),
              "a worker ALIVE")
        yield cluster
    finally:
        _stop(list(reversed(procs)))
