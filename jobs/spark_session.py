"""The builder's in-process SparkSession: which Python the executors run, Spark's console progress bar.

`spark-submit` turns `spark.pyspark.python` / `spark.pyspark.driver.python` into PYSPARK_PYTHON /
PYSPARK_DRIVER_PYTHON before Python starts; a session created in-process (as `mqindex spark-build`
does) reads only the environment when its SparkContext starts, so the conf alone would never reach
the executors. `session_setup` makes that translation; `spark_session` applies it around the start of
the SparkContext and restores the environment afterwards (the context has read it by then).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

PYTHON_CONF = "spark.pyspark.python"
DRIVER_PYTHON_CONF = "spark.pyspark.driver.python"
CONSOLE_PROGRESS_CONF = "spark.ui.showConsoleProgress"
DAEMON_CONF = "spark.python.daemon.module"
EXECUTOR_DAEMON = "jobs.spark_daemon"  # PySpark's daemon with the build's code imported before it forks


@dataclass
class SessionSetup:
    conf: dict[str, str]  # the Spark configuration the session is built with
    env: dict[str, str]  # environment variables set while the SparkContext starts
    notes: list[str] = field(default_factory=list)  # one line each, for the user


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


def session_setup(master: str, spark_conf: Mapping[str, str], environ: Mapping[str, str] | None = None,
                  executable: str | None = None, ships_code: bool = False) -> SessionSetup:
    """The conf and environment of the builder's session. The console progress bar is off unless asked
    for (its carriage-return lines would interleave with the builder's progress lines on stderr). Local
    executors run this interpreter, so they get the daemon that imports the build's code once before it
    forks its workers (jobs/spark_daemon.py); a cluster's executors keep PySpark's daemon unless the conf
    names one (they may not have mqindex installed: `ships_code`)."""
    environ = os.environ if environ is None else environ
    executable = executable or sys.executable
    conf = dict(spark_conf)
    conf.setdefault(CONSOLE_PROGRESS_CONF, "false")
    env: dict[str, str] = {}
    notes: list[str] = []
    if conf.get(PYTHON_CONF):
        env["PYSPARK_PYTHON"] = conf[PYTHON_CONF]
    if conf.get(DRIVER_PYTHON_CONF):
        env["PYSPARK_DRIVER_PYTHON"] = conf[DRIVER_PYTHON_CONF]
        if os.path.realpath(conf[DRIVER_PYTHON_CONF]) != os.path.realpath(executable):
            notes.append(f"the driver runs in this process ({executable}); {DRIVER_PYTHON_CONF}="
                         f"{conf[DRIVER_PYTHON_CONF]} applies to Python the driver starts, not to the driver itself")
    if is_local(master):
        if not ships_code:
            conf.setdefault(DAEMON_CONF, EXECUTOR_DAEMON)
        if "PYSPARK_PYTHON" not in env and not environ.get("PYSPARK_PYTHON"):
            env["PYSPARK_PYTHON"] = executable  # local workers run this interpreter (and this mqindex)
    elif not conf.get(PYTHON_CONF) and not conf.get(DRIVER_PYTHON_CONF):
        runs = environ.get("PYSPARK_PYTHON") or "python3"
        need = ("its third-party packages" if ships_code else "mqindex installed (or --ship-code)")
        notes.append(f"executors on {master} run {runs!r} (no --conf {PYTHON_CONF}=...): each worker needs that "
                     f"Python {sys.version_info.major}.{sys.version_info.minor} with {need} and access to the object "
                     f"store; see docs/SPARK.md")
    return SessionSetup(conf, env, notes)


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """Set `env` in os.environ for the duration, then restore what was there."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def spark_session(master: str, setup: SessionSetup, app_name: str = "mqindex-spark-build") -> Any:
    """Create (or get) the SparkSession with the setup's conf, its environment set while the context starts."""
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(master).appName(app_name)
    for k, v in setup.conf.items():
        b = b.config(k, v)
    with environment(setup.env):
        return b.getOrCreate()


def describe_session(sc: Any) -> str:
    """One line read back from the running SparkContext: its master, app id, the executors' Python and
    whether Spark's console progress bar is on."""
    progress = sc.getConf().get(CONSOLE_PROGRESS_CONF, "false")
    daemon = sc.getConf().get(DAEMON_CONF, "pyspark.daemon")
    return (f"spark {sc.master} app {sc.applicationId}: executors run {sc.pythonExec} (daemon {daemon}); console "
            f"progress bar {'on' if progress == 'true' else 'off'}")
