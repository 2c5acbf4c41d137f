"""`mqindex serve` refuses a malformed listener or advertised address with one line saying what form it takes,
before it opens anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MQINDEX = str(Path(sys.executable).parent / "mqindex")


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--kafka-listener", "notaport", "is not HOST:PORT"),
    ("--kafka-listener", "127.0.0.1:", "is not HOST:PORT"),
    ("--kafka-listener", ":9092", "is not HOST:PORT"),
    ("--kafka-listener", "127.0.0.1:99999", "is not HOST:PORT"),
    ("--kafka-listener", "0.0.0.0:nine", "is not HOST:PORT"),
    ("--kafka-advertised", "broker.example.com", "is not HOST:PORT"),
    ("--advertised-url", "10.0.0.5:8080", "is not http(s)://HOST:PORT"),
    ("--advertised-url", "http://host:8080-x", "is not http(s)://HOST:PORT"),
])
def test_malformed_address_is_one_line_naming_the_flag(tmp_path: Path, flag: str, value: str, says: str) -> None:
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(tmp_path / "data"), "--port", "0", flag, value],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("mqindex serve: error: ") and flag in lines[0] and says in lines[0], lines[0]
    assert repr(value) in lines[0]
    # not mistaken for a security matter, and nothing opened
    assert "authentication" not in r.stderr and "refusing" not in r.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("flags", "named"), [
    (["--kafka-listener", "0.0.0.0:0"], "--kafka-listener 0.0.0.0:0 binds every interface"),
    (["--kafka-listener", "[::]:0"], "--kafka-listener [::]:0 binds every interface"),
    (["--kafka-listener", "[::0]:0"], "--kafka-listener [::0]:0 binds every interface"),
    (["--kafka-listener", "0:0"], "--kafka-listener 0:0 binds every interface"),
    (["--kafka-listener", "0.0.0.0:0", "--kafka-advertised", "0.0.0.0:9092"], "--kafka-advertised 0.0.0.0:9092 is a"),
])
def test_a_wildcard_address_told_to_kafka_clients_is_refused(tmp_path: Path, flags: list[str], named: str) -> None:
    """Clients are told where to connect in every Metadata answer: 0.0.0.0 would send them to themselves (Kafka
    refuses it too). Anonymous access is allowed here so that protected mode is not what refuses."""
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(tmp_path / "data"), "--port", "0", "--allow-anonymous",
                        *flags], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("mqindex serve: error: ") and named in lines[0], lines[0]
    assert "give the address they reach this node by with --kafka-advertised HOST:PORT" in lines[0]
    assert not (tmp_path / "data").exists()
