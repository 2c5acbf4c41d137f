"""`mqindex spark-build --master spark://...` on a real Spark standalone cluster (master + one worker
from the pyspark package, on 127.0.0.1), run as a user would: the installed command, from a working
directory outside the project. The built index must answer every key exactly as the online index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from index_service import IndexService
from jobs.code_zip import write_code_zip
from jobs.spark_session import CONSOLE_PROGRESS_CONF, DAEMON_CONF, EXECUTOR_DAEMON, session_setup
from tests.jobs.conftest import TOPIC, Produced
from tests.jobs.standalone import Standalone, free_port, standalone_cluster
from tests.jobs.test_spark_build import expected, sample_keys

MQINDEX = Path(sys.executable).parent / "mqindex"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone")) as c:
        yield c


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python without mqindex: a fresh virtualenv that sees the third-party packages of this one (a
    path line in a .pth file; the editable mqindex install's own .pth is not processed from there)."""
    venv = tmp_path_factory.mktemp("bare-venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin" / "python"


def spark_build(p: Produced, cluster: Standalone, index_dir: Path, cwd: Path,
                *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    args = [str(MQINDEX), "spark-build", "--master", cluster.master_url, "--metadata", p.meta_url,
            "--store", p.store_url, "--index-dir", str(index_dir), "--topic", TOPIC, "--progress-interval", "0.5",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", f"spark.driver.port={free_port()}", "--conf", f"spark.blockManager.port={free_port()}",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
            "--conf", "spark.cores.max=1", "--conf", "spark.task.maxFailures=1", *extra]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def assert_answers_like_online(p: Produced, index_dir: Path) -> None:
    with IndexService.open(p.online_index, store=p.store_url, maintain_interval_s=0) as online, \
            IndexService.open(index_dir, store=p.store_url, maintain_interval_s=0) as built:
        assert {f.state.value for f in built.files()} == {"UPLOADED"}
        checked = 0
        for key in sample_keys(p):
            a = online.query(TOPIC, key, max_count=100_000)
            assert built.query(TOPIC, key, max_count=100_000) == a, key
            assert {(h.queue_id, h.offset) for h in a} == expected(p, key), key
            checked += len(a)
        assert checked > 5000


def assert_progress_lines_alone(stderr: str) -> None:
    """Spark's console progress bar ([Stage N:> ...] redrawn with carriage returns) never appears."""
    assert "\r" not in stderr and "[Stage " not in stderr, stderr[-2000:]
    assert "[spark-build] done: files" in stderr


def test_cluster_build_with_the_documented_python_conf(produced: Produced, cluster: Standalone,
                                                       tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"  # outside the project: nothing importable from the working directory
    work.mkdir()
    r = spark_build(produced, cluster, tmp_path / "idx", work, "--conf", f"spark.pyspark.python={sys.executable}")
    assert r.returncode == 0, r.stderr[-4000:] + cluster.logs()
    assert f"executors run {sys.executable} (daemon pyspark.daemon); console progress bar off" in r.stderr
    assert "[spark-build] note:" not in r.stderr  # the python was given: nothing to explain
    assert_progress_lines_alone(r.stderr)
    assert "served" in r.stdout and f"from {len(produced.records):,} records" in r.stdout
    assert_answers_like_online(produced, tmp_path / "idx")
    apps = cluster.state()["completedapps"]
    assert any(a["name"] == "mqindex-spark-build" and a["state"] == "FINISHED" for a in apps), apps


def test_worker_python_without_mqindex_gets_the_code_shipped(produced: Produced, cluster: Standalone,
                                                             bare_python: Path, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    # the executors' Python has the third-party packages but not mqindex
    probe = subprocess.run([str(bare_python), "-c", "import crc32c, numpy, xxhash, boto3\nimport jobs"], cwd=work,
                           capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
    assert probe.returncode == 1 and "No module named 'jobs'" in probe.stderr, probe.stderr
    r = spark_build(produced, cluster, tmp_path / "idx", work, "--ship-code",
                    "--conf", f"spark.pyspark.python={bare_python}")
    assert r.returncode == 0, r.stderr[-4000:] + cluster.logs()
    assert "shipping the project's packages to the executors as" in r.stderr
    assert f"executors run {bare_python} (daemon pyspark.daemon);" in r.stderr
    assert_progress_lines_alone(r.stderr)
    assert_answers_like_online(produced, tmp_path / "idx")


def test_session_setup_translates_the_python_conf_and_says_what_workers_need() -> None:
    py = "/opt/env/bin/python"
    s = session_setup("spark://h:7077", {"spark.pyspark.python": py, "spark.pyspark.driver.python": sys.executable},
                      environ={}, executable=sys.executable)
    assert s.env == {"PYSPARK_PYTHON": py, "PYSPARK_DRIVER_PYTHON": sys.executable} and s.notes == []
    assert s.conf[CONSOLE_PROGRESS_CONF] == "false"
    # a cluster master and neither conf: one line on what the workers need
    s = session_setup("spark://h:7077", {}, environ={}, executable=sys.executable)
    assert s.env == {} and len(s.notes) == 1
    assert "run 'python3'" in s.notes[0] and "mqindex installed" in s.notes[0] and "spark.pyspark.python" in s.notes[0]
    s = session_setup("spark://h:7077", {}, environ={"PYSPARK_PYTHON": py}, ships_code=True)
    assert len(s.notes) == 1 and f"run '{py}'" in s.notes[0] and "third-party packages" in s.notes[0]
    # local: this interpreter unless the environment names one; the progress bar stays on when asked for
    s = session_setup("local[2]", {CONSOLE_PROGRESS_CONF: "true"}, environ={}, executable=sys.executable)
    assert s.env == {"PYSPARK_PYTHON": sys.executable} and s.notes == [] and s.conf[CONSOLE_PROGRESS_CONF] == "true"
    assert session_setup("local[*]", {}, environ={"PYSPARK_PYTHON": py}).env == {}
    # local executors fork from the daemon that has the build's code imported; not a cluster's, not shipped
    # code's (the daemon starts before the zip reaches the workers), and a daemon named in the conf wins
    assert s.conf[DAEMON_CONF] == EXECUTOR_DAEMON
    assert DAEMON_CONF not in session_setup("local[2]", {}, environ={}, ships_code=True).conf
    assert DAEMON_CONF not in session_setup("spark://h:7077", {}, environ={}).conf
    assert session_setup("local[2]", {DAEMON_CONF: "pyspark.daemon"}, environ={}).conf[DAEMON_CONF] == "pyspark.daemon"
    # a driver python other than this process: said, since the driver is this process
    s = session_setup("local[1]", {"spark.pyspark.driver.python": py}, environ={}, executable=sys.executable)
    assert len(s.notes) == 1 and "the driver runs in this process" in s.notes[0]


def test_code_zip_is_complete_and_the_same_for_the_same_code(bare_python: Path, tmp_path: Path) -> None:
    first = write_code_zip(tmp_path / "a")
    second = write_code_zip(tmp_path / "b")
    assert first.name == second.name and first.read_bytes() == second.read_bytes()
    names = set(zipfile.ZipFile(first).namelist())
    assert {"jobs/spark_build/__init__.py", "jobs/code_zip.py", "broker/partitions/record_entries.py",
            "index_file/__init__.py", "storage_tier/__init__.py"} <= names
    assert not any("__pycache__" in n or not n.endswith(".py") for n in names)
    # a Python without mqindex imports the executor side (and everything it imports) from the zip alone
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import jobs.spark_build as m, index_service; "
            "print(m.__file__); print(index_service.__file__)")
    r = subprocess.run([str(bare_python), "-c", code, str(first)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env={"PATH": os.environ["PATH"]})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{first}/jobs/spark_build/__init__.py", f"{first}/index_service/__init__.py"]


def search_cli(p: Produced, cluster: Standalone, cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """`mqindex search` as a user runs it against the cluster (the executors run this project's Python)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    args = [str(MQINDEX), "search", *argv, "--master", cluster.master_url, "--metadata", p.meta_url,
            "--store", p.store_url, "--progress-interval", "0.5",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", f"spark.driver.port={free_port()}", "--conf", f"spark.blockManager.port={free_port()}",
            "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1",
            "--conf", "spark.task.maxFailures=1", "--conf", f"spark.pyspark.python={sys.executable}"]
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def produced_value(p: Produced, i: int) -> str:
    """The value of the i-th produced record (tests/jobs/conftest._message)."""
    return ("v" * 120 if p.records[i][0] == 0 else "small") + str(i)


@pytest.mark.slow(seconds=60)
def test_search_cli_on_the_cluster(produced: Produced, cluster: Standalone, tmp_path: Path) -> None:
    work = tmp_path / "elsewhere"
    work.mkdir()
    # a value predicate and a header: the records of partitions 1-2 whose KEYS header starts with cust-3
    r = search_cli(produced, cluster, work, TOPIC, "--where", "value LIKE 'small%' AND headers['KEYS'] LIKE 'cust-3 %'",
                   "--json")
    assert r.returncode == 0, r.stderr[-4000:] + cluster.logs()
    got = sorted((m["partition"], m["offset"], m["value"]) for m in map(json.loads, r.stdout.splitlines()))
    want = sorted((part, off, produced_value(produced, i)) for i, (part, off, _t, kinds) in enumerate(produced.records)
                  if part != 0 and "cust-3" in kinds["KEYS"])
    assert got == want and len(want) > 100
    assert f"spark {cluster.master_url} app " in r.stderr and f"[search] done: {len(want)} matches" in r.stderr
    apps = cluster.state()["completedapps"]
    assert any(a["name"] == "mqindex-search" and a["state"] == "FINISHED" for a in apps), apps
    # no match: exit 1, nothing printed; a bad argument: exit 2 before any Spark work
    r = search_cli(produced, cluster, work, TOPIC, "--where", "value LIKE 'no such value%'")
    assert r.returncode == 1 and r.stdout == "" and "[search] done: 0 matches" in r.stderr, r.stderr[-4000:]
    r = search_cli(produced, cluster, work, "nosuchtopic", "--where", "true")
    assert r.returncode == 2 and "unknown topic 'nosuchtopic'" in r.stderr and "[search] done" not in r.stderr
