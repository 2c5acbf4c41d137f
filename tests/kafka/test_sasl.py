"""SASL on the Kafka listener, principals and scopes shared with the HTTP tokens: SASL/PLAIN (a bearer token as
the password of the user `token`) and SASL/SCRAM-SHA-256 (configured users), over plaintext and over TLS,
through confluent-kafka and kafka-python. The right scope produces and consumes, the wrong one is refused with
Kafka's authorization errors, a wrong password is refused, and a request before SASL closes the connection."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaError as PyKafkaError
from kafka.errors import TopicAuthorizationFailedError

from api.security.scram import derive_credential
from tests.api.test_security_serve import _cert
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_acls import produce
from tests.kafka.test_kafka_python import consume_all

ADMIN_TOKEN = "admin-token-0123456789abcdef"
READ_TOKEN = "read-token-0123456789abcdef"
USERS = {"alice": ("alice-password-1", ["read"]), "bob": ("bob-password-22", ["produce"])}


def config_file(d: Path) -> Path:
    lines = []
    for name, (password, scopes) in USERS.items():
        lines += [f"[users.{name}]", f"scopes = {scopes!r}".replace("'", '"'),
                  f'scram_sha_256 = "{derive_credential(password).encode()}"']
    path = d / "mqindex.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def secured(d: Path, *extra: str) -> KafkaServerProcess:
    d.mkdir(parents=True, exist_ok=True)
    return KafkaServerProcess(d / "node", "--config", str(config_file(d)), *extra,
                              env={"MQINDEX_TOKENS": f"{ADMIN_TOKEN}=admin;{READ_TOKEN}=read"})


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaServerProcess]:
    server = secured(tmp_path_factory.mktemp("sasl")).start()
    try:
        yield server
    finally:
        server.stop()


def conf(server: KafkaServerProcess, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
         protocol: str = "SASL_PLAINTEXT") -> dict[str, str]:
    return {"bootstrap.servers": server.bootstrap, "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def create(c: dict[str, str], topic: str) -> None:
    with AdminClient(c) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)


def test_scopes_over_sasl_plain_and_scram(sasl_server: KafkaServerProcess, kafka_clients: ExitStack) -> None:
    create(conf(sasl_server, "token", ADMIN_TOKEN, "PLAIN"), "secure")

    # read scope (a token over PLAIN): creating a topic is a cluster operation it may not do
    reader = kafka_clients.enter_context(AdminClient(conf(sasl_server, "token", READ_TOKEN, "PLAIN")))
    with pytest.raises(KafkaException) as denied:
        reader.create_topics([NewTopic("nope", 1, 1)])["nope"].result(20)
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    # bob has produce: his records are stored
    assert produce(conf(sasl_server, "bob", USERS["bob"][0]), "secure", 20) == [None] * 20
    # alice has read only: her produce is refused per partition
    refused = produce(conf(sasl_server, "alice", USERS["alice"][0]), "secure", 3)
    assert refused and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in refused)

    # alice reads what bob wrote; bob may not read
    c = Consumer(conf(sasl_server, "alice", USERS["alice"][0]) | {"group.id": "g-alice",
                                                                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("secure", 0, 0)])
        got = []
        while len(got) < 20:
            m = c.poll(10)
            assert m is not None and m.error() is None, m and m.error()
            got.append(m.value())
        assert got == [f"v{i}".encode() for i in range(20)]
    finally:
        c.close()
    c = Consumer(conf(sasl_server, "bob", USERS["bob"][0]) | {"group.id": "g-bob", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition("secure", 0, 0)])
        seen: set[int] = set()
        deadline = time.monotonic() + 15
        while KafkaError.TOPIC_AUTHORIZATION_FAILED not in seen and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is not None, "bob read a record without the read scope"
                seen.add(m.error().code())
        # the fetch is refused; the consumer's group lookup too (FindCoordinator needs read, as Kafka's ACLs)
        assert KafkaError.TOPIC_AUTHORIZATION_FAILED in seen, seen
        assert seen <= {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}, seen
    finally:
        c.close()


def test_wrong_password_is_refused(sasl_server: KafkaServerProcess) -> None:
    for c in (conf(sasl_server, "alice", "not-her-password"), conf(sasl_server, "token", "no-such-token", "PLAIN"),
              conf(sasl_server, "mallory", "whatever")):
        seen: list[KafkaError] = []
        p = Producer(c | {"error_cb": seen.append})
        try:
            deadline = time.monotonic() + 15
            while not any(e.code() == KafkaError._AUTHENTICATION for e in seen) and time.monotonic() < deadline:
                p.poll(0.1)
            assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen
            assert "authentication failed" in str(seen), seen
        finally:
            p.close()  # nothing queued: returns at once
    refusals = sasl_server.log.read_text().count("authentication failed for 'alice'")
    with pytest.raises(PyKafkaError):  # kafka-python retries the bootstrap until its timeout, then gives up
        KafkaProducer(bootstrap_servers=sasl_server.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice",
                      sasl_plain_password="not-her-password", bootstrap_timeout_ms=3000)
    assert sasl_server.log.read_text().count("authentication failed for 'alice'") > refusals
    assert "not-her-password" not in sasl_server.log.read_text()


def test_kafka_python_scram(sasl_server: KafkaServerProcess) -> None:
    create(conf(sasl_server, "token", ADMIN_TOKEN, "PLAIN"), "kp")
    opts = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256")
    p = KafkaProducer(bootstrap_servers=sasl_server.bootstrap, sasl_plain_username="bob",
                      sasl_plain_password=USERS["bob"][0], **opts)
    try:
        for i in range(10):
            p.send("kp", key=f"k{i}".encode(), value=f"v{i}".encode()).get(20)
    finally:
        p.close()
    got = consume_all(sasl_server.bootstrap, "kp", 1, 10, sasl_plain_username="alice",
                      sasl_plain_password=USERS["alice"][0], **opts)
    assert [m.value for m in got] == [f"v{i}".encode() for i in range(10)]
    p = KafkaProducer(bootstrap_servers=sasl_server.bootstrap, sasl_plain_username="alice",
                      sasl_plain_password=USERS["alice"][0], retries=0, **opts)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send("kp", value=b"denied").get(20)
    finally:
        p.close()


def test_request_before_sasl_closes_the_connection(sasl_server: KafkaServerProcess) -> None:
    # Metadata v1 for all topics, with no SaslHandshake before it
    body = struct.pack(">hhih", 3, 1, 7, 4) + b"test" + struct.pack(">i", -1)
    with socket.create_connection(("127.0.0.1", sasl_server.kafka_port), timeout=10) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(4) == b"", "the server answered a request made before SASL authentication"


def test_a_large_frame_before_sasl_closes_the_connection_at_its_size(sasl_server: KafkaServerProcess) -> None:
    """An anonymous peer cannot make the listener read (and hold) more than 512 KiB: a frame declaring 1 MiB
    closes the connection at its size field, before any of its body is sent."""
    with socket.create_connection(("127.0.0.1", sasl_server.kafka_port), timeout=10) as s:
        s.sendall(struct.pack(">i", 1 << 20) + struct.pack(">hhi", 20, 5, 7))  # DeleteTopics, body never sent
        assert s.recv(4) == b"", "the server waited for a 1 MiB frame from an unauthenticated peer"


def test_sasl_ssl(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir()
    _cert(pki, "server", _cert(pki, "ca", None), server=True)
    server = secured(tmp_path, "--kafka-tls-cert", str(pki / "server.pem"),
                     "--kafka-tls-key", str(pki / "server.key")).start()
    try:
        tls = {"ssl.ca.location": str(pki / "ca.pem")}
        create(conf(server, "token", ADMIN_TOKEN, "PLAIN", "SASL_SSL") | tls, "s")
        assert produce(conf(server, "bob", USERS["bob"][0], protocol="SASL_SSL") | tls, "s", 5) == [None] * 5
        with pytest.raises(KafkaException):  # SASL without TLS against the TLS listener
            AdminClient(conf(server, "bob", USERS["bob"][0]) | {"socket.timeout.ms": 3000}).list_topics(timeout=4)
    finally:
        server.stop()


def test_protected_mode_on_the_kafka_listener(tmp_path: Path) -> None:
    mqindex = str(Path(sys.executable).parent / "mqindex")
    out = subprocess.run([mqindex, "serve", "--data-dir", str(tmp_path / "d"), "--port", "0",
                          "--kafka-listener", "0.0.0.0:0", "--kafka-advertised", "broker.example.com:9092"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "refusing to serve Kafka on 0.0.0.0" in out.stdout + out.stderr and "--allow-anonymous" in out.stderr


def _exchange(s: socket.socket, payload: bytes) -> bytes:
    s.sendall(struct.pack(">i", len(payload)) + payload)
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        assert chunk, "connection closed"
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        assert chunk, "connection closed"
        body += chunk
    return body


def test_sasl_handshake_v0_with_raw_tokens(sasl_server: KafkaServerProcess) -> None:
    """The exchange of clients from before SaslAuthenticate: SaslHandshake v0, then the SASL token raw."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.sasl import SaslHandshakeRequest, SaslHandshakeResponse

    with socket.create_connection(("127.0.0.1", sasl_server.kafka_port), timeout=10) as s:
        req = SaslHandshakeRequest(version=0, mechanism="PLAIN")
        req.with_header(correlation_id=1, client_id="raw")
        resp = SaslHandshakeResponse.decode(_exchange(s, req.encode(header=True))[4:], version=0)
        assert resp.error_code == 0 and "PLAIN" in resp.mechanisms
        assert _exchange(s, f"\0token\0{READ_TOKEN}".encode()) == b""  # PLAIN: an empty token back
        meta = MetadataRequest(version=1, topics=None)
        meta.with_header(correlation_id=2, client_id="raw")
        body = _exchange(s, meta.encode(header=True))
        assert struct.unpack(">i", body[:4])[0] == 2
        assert [b.port for b in MetadataResponse.decode(body[4:], version=1).brokers] == [sasl_server.kafka_port]
    with socket.create_connection(("127.0.0.1", sasl_server.kafka_port), timeout=10) as s:
        req = SaslHandshakeRequest(version=0, mechanism="PLAIN")
        req.with_header(correlation_id=1, client_id="raw")
        _exchange(s, req.encode(header=True))
        bad = b"\0token\0not-a-token-at-all"
        s.sendall(struct.pack(">i", len(bad)) + bad)
        assert s.recv(4) == b"", "a wrong raw PLAIN token must close the connection"


def test_kcat_scram(sasl_server: KafkaServerProcess) -> None:
    """Debian's kcat (librdkafka before 2.6.1, which repeats its own nonce in the client-final message) logs in with
    SCRAM-SHA-256; a wrong password is still refused."""
    create(conf(sasl_server, "token", ADMIN_TOKEN, "PLAIN"), "kcat-scram")
    assert produce(conf(sasl_server, "token", ADMIN_TOKEN, "PLAIN"), "kcat-scram", 3) == [None] * 3

    def kcat(password: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kcat", "-b", sasl_server.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
                               "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice",
                               "-X", f"sasl.password={password}", "-C", "-t", "kcat-scram", "-e", "-f", "%k\\n"],
                              capture_output=True, text=True, timeout=60)

    ok = kcat(USERS["alice"][0])
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["k0", "k1", "k2"]
    bad = kcat("wrong-password")
    assert bad.returncode != 0 and "k0" not in bad.stdout


def test_transaction_apis_need_the_produce_scope(sasl_server: KafkaServerProcess) -> None:
    """A read-only principal's transactional requests are refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED at
    every version, and nothing of them is carried out."""
    from tests.kafka.wire import Wire

    txn = dict(transactional_id="ro-txn", producer_id=1, producer_epoch=0)
    calls: dict[int, dict[str, object]] = {
        24: dict(v3_and_below_transactional_id="ro-txn", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                 v3_and_below_topics=[dict(name="secure", partitions=[0])]),
        25: dict(**txn, group_id="ro-group"),
        26: dict(**txn, committed=True),
        28: dict(**txn, group_id="ro-group", generation_id=-1, member_id="", group_instance_id=None,
                 topics=[dict(name="secure", partitions=[dict(partition_index=0, committed_offset=5,
                                                              committed_leader_epoch=-1, committed_metadata="")])]),
    }
    with Wire(sasl_server.kafka_port) as w:
        assert w.call((17, 1), mechanism="PLAIN").error_code == 0
        assert w.call((36, 2), auth_bytes=b"\0token\0" + READ_TOKEN.encode()).error_code == 0
        for api, fields in calls.items():
            for v in range(4):
                resp = w.call((api, v), **fields)
                codes = {resp.error_code} if hasattr(resp, "error_code") and api != 24 else set()
                if api == 24:
                    codes = {p.partition_error_code for t in resp.results_by_topic_v3_and_below
                             for p in t.results_by_partition}
                if api == 28:
                    codes = {p.error_code for t in resp.topics for p in t.partitions}
                assert codes == {53}, (api, v, resp)
        # nothing was committed for the group
        fetched = w.call((9, 1), group_id="ro-group", topics=[dict(name="secure", partition_indexes=[0])])
        assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [-1]
