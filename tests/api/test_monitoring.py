"""docs/monitoring/: the Grafana dashboard and the Prometheus alert rules name only metrics (and labels) that a
real `mqindex serve` exports on /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.api.server import ServerProcess, free_port
from tests.kafka.wire import Wire

MONITORING = Path(__file__).resolve().parents[2] / "docs" / "monitoring"
METRIC = re.compile(r"\bmqindex_[a-z0-9_]+")
BY = re.compile(r"\bby\s*\(([^)]*)\)")
SELECTOR_LABEL = re.compile(r"[{,]\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!=|!~|=)")
ADDED_BY_PROMETHEUS = {"instance", "job", "le"}


def dashboard_exprs() -> list[str]:
    dash = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dash["panels"], "the dashboard has no panels"
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert all(METRIC.search(e) for e in exprs)
    return exprs


def alert_rules() -> list[dict[str, object]]:
    doc = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    for r in rules:
        assert r["alert"].startswith("Mqindex") and r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"]
    return rules


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """Sample name -> label names, from a real server that has served requests, written and indexed."""
    kafka_port = free_port()
    server = ServerProcess(tmp_path_factory.mktemp("monitoring") / "data", "--kafka-listener",
                           f"127.0.0.1:{kafka_port}").start()  # with a listener: consumer group lag
    try:
        url = server.url
        with Wire(kafka_port) as w:  # a Kafka request answered: mqindex_kafka_request_seconds{api}
            w.call((3, 1), topics=[])
        assert httpx.post(f"{url}/v1/topics", json={"name": "orders", "partitions": 1}).status_code == 201
        r = httpx.post(f"{url}/v1/topics/orders/messages", json={"messages": [{"key": "k", "value": "v"}] * 5})
        assert r.status_code == 200
        assert httpx.get(f"{url}/v1/messages", params={"topic": "orders", "key": "k"}).status_code == 200
        assert httpx.get(f"{url}/v1/topics/orders/partitions/0/messages").status_code == 200
        r = httpx.post(f"{url}/v1/groups/readers/offsets", json={"to": "offset", "offset": 2, "topics": ["orders"]})
        assert r.status_code == 200, r.text
        text = httpx.get(f"{url}/metrics").text
    finally:
        server.stop()
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def check(expr: str, exported: dict[str, set[str]]) -> None:
    names = set(METRIC.findall(expr))
    missing = sorted(n for n in names if n not in exported)
    assert not missing, f"{expr!r} names metrics the server does not export: {missing}"
    labels = {x.strip() for group in BY.findall(expr) for x in group.split(",") if x.strip()}
    labels |= set(SELECTOR_LABEL.findall(expr))
    known = set().union(*(exported[n] for n in names)) | ADDED_BY_PROMETHEUS
    assert labels <= known, f"{expr!r} uses labels {sorted(labels - known)} none of its metrics has"


def test_every_dashboard_metric_is_exported(exported: dict[str, set[str]]) -> None:
    exprs = dashboard_exprs()
    for expr in exprs:
        check(expr, exported)
    # the dashboard covers every family the server exports (a new metric gets a panel)
    shown = {n for e in exprs for n in METRIC.findall(e)}
    families = {re.sub(r"_(bucket|count|sum|created)$", "", n) for n in exported if n.startswith("mqindex_")}
    uncovered = sorted(f for f in families if not any(s == f or s.startswith(f + "_") for s in shown))
    assert not uncovered, f"metrics without a panel: {uncovered}"


def test_every_alert_rule_metric_is_exported(exported: dict[str, set[str]]) -> None:
    rules = alert_rules()
    assert len(rules) >= 5
    for r in rules:
        check(str(r["expr"]), exported)


def test_a_misspelt_metric_is_caught(exported: dict[str, set[str]]) -> None:
    with pytest.raises(AssertionError, match="mqindex_wal_fsyncs_seconds_bucket"):
        check("rate(mqindex_wal_fsyncs_seconds_bucket[5m])", exported)
    with pytest.raises(AssertionError, match="topic"):
        check("sum by (topic) (mqindex_index_files)", exported)
