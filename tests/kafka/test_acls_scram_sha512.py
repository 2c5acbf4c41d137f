"""SASL/SCRAM-SHA-512 on the Kafka listener beside SCRAM-SHA-256, with confluent-kafka and kcat: a user with a
SHA-512 credential produces and consumes, a wrong password is refused."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from api.security.scram import derive_credential
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_acls import consume, produce

PASSWORD = "carol-password-512"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    d = tmp_path_factory.mktemp("scram512")
    config = d / "mqindex.toml"
    config.write_text("[users.carol]\nscopes = [\"admin\"]\n"
                      f'scram_sha_512 = "{derive_credential(PASSWORD, mechanism="SCRAM-SHA-512").encode()}"\n')
    s = KafkaServerProcess(d / "node", "--config", str(config)).start()
    try:
        yield s
    finally:
        s.stop()


def conf(s: KafkaServerProcess) -> dict[str, str]:
    return {"bootstrap.servers": s.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": PASSWORD}


def test_confluent_and_kcat_over_scram_sha512(server: KafkaServerProcess) -> None:
    with AdminClient(conf(server)) as admin:
        admin.create_topics([NewTopic("sha512", 1, 1)])["sha512"].result(20)
    assert produce(conf(server), "sha512", 3) == [None] * 3
    assert consume(conf(server), "sha512", "g512", 3) == ([b"v0", b"v1", b"v2"], set())

    def kcat(password: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kcat", "-b", server.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                               "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=carol",
                               "-X", f"sasl.password={password}", "-C", "-t", "sha512", "-e", "-f", "%k\\n"],
                              capture_output=True, text=True, timeout=60)

    ok = kcat(PASSWORD)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["k0", "k1", "k2"]
    bad = kcat("wrong-password")  # (that SHA-256 alone does not open a SHA-512-only user: test_security_sasl.py)
    assert bad.returncode != 0 and "k0" not in bad.stdout
    assert "SASL authentication failed" in server.log.read_text()
