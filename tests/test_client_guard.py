"""The guard of tests/client_guard.py (loaded by tests/conftest.py) against Kafka clients left open: a pytest run in a
subprocess, with the guard loaded as a plugin (`-p tests.conftest`) on tests of a temporary file whose clients point
at a closed port. A test that leaks a client fails, naming it; one that closes its clients passes; the run ends (the
guard closed the leaks)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.api.server import free_port

REPO = Path(__file__).resolve().parent.parent

INNER = '''
import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

CONF = {{"bootstrap.servers": "127.0.0.1:{port}", "log_level": 0}}
KEPT = []


def test_leaks_a_producer():
    KEPT.append(Producer(CONF))  # LEAKED-PRODUCER


def test_closes_its_clients():
    p = Producer(CONF)
    p.produce("t", b"x")
    p.purge()
    p.close()
    with AdminClient(CONF):
        pass
    c = Consumer(CONF | {{"group.id": "g"}})
    c.close()
    AdminClient(CONF).list_topics(timeout=0) if False else None  # destroyed at once: nothing left open


def test_leaks_through_a_raises_block():
    admin = AdminClient(CONF)  # CYCLE-ADMIN
    with pytest.raises(KafkaException) as excinfo:
        admin.list_topics(timeout=0.2)
    assert excinfo.value is not None


def test_leaks_a_kafka_python_producer():
    KEPT.append(KafkaProducer(bootstrap_servers="127.0.0.1:{port}", api_version=(2, 5)))  # KAFKA-PYTHON


@pytest.fixture(scope="module")
def shared_consumer():
    return Consumer(CONF | {{"group.id": "g"}})  # FIXTURE-CONSUMER


def test_uses_a_module_fixture(shared_consumer):
    assert shared_consumer is not None


def test_last_of_the_module():
    pass
'''


def line_of(text: str, marker: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if marker in line)


def test_a_leaked_client_fails_its_test_by_name_and_a_closed_one_passes(tmp_path: Path) -> None:
    port = free_port()  # closed: the clients only ever get "connection refused"
    source = INNER.format(port=port)
    (tmp_path / "test_inner.py").write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400"}  # short summary lines in full
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), "-rA", "-q",
                          "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    # every test passes its call; each leak is an error at the teardown of the test that made it, the module
    # fixture's at the module's last test; the test that closed its clients has none
    errors = set(re.findall(r"^ERROR test_inner\.py::(\w+) - Failed: Kafka client\(s\) left open", out, re.M))
    assert errors == {"test_leaks_a_producer", "test_leaks_through_a_raises_block",
                      "test_leaks_a_kafka_python_producer", "test_last_of_the_module"}, out
    assert re.search(r"\b6 passed\b.*\b4 errors\b", out), out

    def error_of(test: str) -> str:
        return out[out.index(f"ERROR at teardown of {test}"):].split("\n_", 1)[0]

    def site(marker: str, where: str) -> str:
        return f"created at {tmp_path}/test_inner.py:{line_of(source, marker)} in {where}"

    assert (f"confluent_kafka.Producer (bootstrap 127.0.0.1:{port}) {site('LEAKED-PRODUCER', 'test_leaks_a_producer')}"
            ": still referenced") in error_of("test_leaks_a_producer"), out
    assert "close each client in a finally or a fixture" in error_of("test_leaks_a_producer")
    assert (f"confluent_kafka.admin.AdminClient (bootstrap 127.0.0.1:{port}) "
            f"{site('CYCLE-ADMIN', 'test_leaks_through_a_raises_block')}: held only by a reference cycle"
            ) in error_of("test_leaks_through_a_raises_block"), out
    assert (f"kafka.KafkaProducer (bootstrap 127.0.0.1:{port}) "
            f"{site('KAFKA-PYTHON', 'test_leaks_a_kafka_python_producer')}: still referenced"
            ) in error_of("test_leaks_a_kafka_python_producer"), out
    assert (f"confluent_kafka.Consumer (bootstrap 127.0.0.1:{port}) {site('FIXTURE-CONSUMER', 'shared_consumer')}"
            ": still referenced (by the module-scoped fixture shared_consumer)") in error_of("test_last_of_the_module")
