"""The Kafka listener over TLS with client certificates (a CA the test makes), through confluent-kafka's
security.protocol=SSL: a client presenting a certificate signed by the CA produces and consumes, a client
without one is refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from tests.api.test_security_serve import _cert
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_confluent import create, read


@pytest.fixture
def kafka_pki(tmp_path: Path) -> Path:
    d = tmp_path / "pki"
    d.mkdir()
    ca = _cert(d, "ca", None)
    _cert(d, "server", ca, server=True)
    _cert(d, "client", ca)
    _cert(d, "stranger", _cert(d, "other-ca", None))  # signed by a CA the server does not trust
    return d


REFUSED = {KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


def connection_errors(conf: dict[str, str], timeout: float = 15) -> set[int]:
    """The codes of the errors a client with `conf` reports while it tries to connect, once it has reported one
    and failed to get metadata (bounded wait)."""
    seen: list[KafkaError] = []
    p = Producer(conf | {"error_cb": seen.append, "socket.timeout.ms": 2000})
    try:
        deadline = time.monotonic() + timeout
        while not seen and time.monotonic() < deadline:
            p.poll(0.1)
        assert seen, "the client connected"
        md_error = None
        try:
            p.list_topics(timeout=1)
        except KafkaException as exc:
            md_error = exc
        assert md_error is not None, "the client got metadata"
        return {int(e.code()) for e in seen}
    finally:
        p.purge()
        p.close()


def ssl_config(bootstrap: str, pki: Path, client: str | None) -> dict[str, str]:
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki / "ca.pem")}
    if client:
        conf |= {"ssl.certificate.location": str(pki / f"{client}.pem"),
                 "ssl.key.location": str(pki / f"{client}.key")}
    return conf


def test_ssl_with_client_certificates(tmp_path: Path, kafka_pki: Path) -> None:
    server = KafkaServerProcess(tmp_path / "node", "--kafka-tls-cert", str(kafka_pki / "server.pem"),
                                "--kafka-tls-key", str(kafka_pki / "server.key"),
                                "--kafka-tls-client-ca", str(kafka_pki / "ca.pem")).start()
    try:
        conf = ssl_config(server.bootstrap, kafka_pki, "client")
        create(server.bootstrap, "tls", 1, conf)
        p = Producer(conf | {"acks": "all"})
        try:
            for i in range(50):
                p.produce("tls", key=f"k{i}".encode(), value=f"v{i}".encode())
            assert p.flush(30) == 0
        finally:
            p.purge()
            p.close()
        got = read(server.bootstrap, "tls", 1, 50, conf=conf)
        assert [m.value() for m in got] == [f"v{i}".encode() for i in range(50)]

        for who in (None, "stranger"):  # no certificate, or one the CA did not sign: the handshake fails
            assert connection_errors(ssl_config(server.bootstrap, kafka_pki, who)) <= REFUSED
        # PLAINTEXT against the TLS listener gets no Kafka answer
        assert connection_errors({"bootstrap.servers": server.bootstrap}) <= REFUSED
    finally:
        server.stop()
