"""Damage in the store on SeaweedFS: broker objects damaged three ways (a flipped payload byte, a damaged footer,
a truncated object) and an uploaded index file with a flipped data byte. Reads answer a 502 naming the object
for messages inside damaged objects and serve the rest; key lookups return the readable hits and list the
unreadable ones; `mqindex scrub` and POST /v1/admin/scrub list exactly the damaged objects and their ranges."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.cli.main import main as cli_main
from api.config import Settings
from api.http.app import app_for_node
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from storage_tier import open_store

PER_OBJECT = 10
OBJECTS = 5  # A ok, B flipped payload byte, C ok, D damaged footer, E truncated


@pytest.fixture
def node_env(seaweedfs, tmp_path: Path) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    store_url = seaweedfs.store_url("mqindex", f"scrub-{uuid.uuid4().hex[:8]}")
    meta_url = f"sqlite:///{tmp_path}/meta.sqlite"
    node = BrokerNode.open(tmp_path / "data", store_url, meta_url, upload_interval_s=3600,
                           index_config={"maintain_interval_s": 3600}, read_your_writes_s=10)
    settings = Settings(data_dir=str(tmp_path / "data"), store=store_url, metadata=meta_url).resolved()
    client = TestClient(app_for_node(settings, node), raise_server_exceptions=False)
    raw = open_store(store_url)
    try:
        yield {"node": node, "client": client, "raw": raw, "store_url": store_url, "meta_url": meta_url,
               "data_dir": tmp_path / "data"}
    finally:
        client.close()
        node.close()
        raw.close()


def produce_objects(node: BrokerNode, ids: dict[int, str]) -> list[tuple[str, int, int]]:
    """OBJECTS uploads of PER_OBJECT messages each (key "k" on every message): [(object key, start, end)]."""
    node.create_topic("t", 1)
    out = []
    for n in range(OBJECTS):
        before = set(node.meta.committed_objects())
        produced = node.produce("t", [InMessage(f"value-{n}-{i}-".encode() * 4, key=b"k", partition=0)
                                      for i in range(PER_OBJECT)])
        ids.update((p.offset, p.msg_id) for p in produced)
        node.flush()
        new = [o for o in node.meta.committed_objects() if o not in before]
        holder = node.meta.get_objects(node.partitions.get("t", 0).data_stream, n * PER_OBJECT, (n + 1) * PER_OBJECT)
        data = [o for o in new if holder.objects[0].object_id == o]
        assert len(data) == 1, new
        out.append((node.meta.object_key(data[0]), n * PER_OBJECT, (n + 1) * PER_OBJECT))
    return out


def damage_objects(raw: Any, objects: list[tuple[str, int, int]]) -> dict[str, str]:
    """Damage B, D, E; returns key -> expected check."""
    b, d, e = objects[1][0], objects[3][0], objects[4][0]
    data = bytearray(raw.get(b))
    at = data.index(b"value-1-3-")
    data[at] ^= 0x01  # a payload byte under the batch CRC
    raw.put(b, bytes(data))
    data = bytearray(raw.get(d))
    data[-1] ^= 0xFF  # footer magic
    raw.put(d, bytes(data))
    data = raw.get(e)
    raw.put(e, data[: len(data) // 2])
    return {b: "record batch crc", d: "bad footer magic", e: "truncated object"}


def assert_damage(r: Any, key: str, check: str) -> None:
    assert r.status_code == 502, r.text
    body = r.json()
    assert body["object"] == key and body["check"] == check and body["error"] and "field" in body


def test_damaged_objects_answer_502_serve_the_rest_and_scrub_lists_them(node_env: dict[str, Any],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    node, client, raw = node_env["node"], node_env["client"], node_env["raw"]
    ids: dict[int, str] = {}
    objects = produce_objects(node, ids)
    node.sync_index()
    expected = damage_objects(raw, objects)
    by_key = {k: (s, e) for k, s, e in objects}

    with client:  # one client, one connection pool: every answer below comes back on it
        # offset 0: the messages of A, then the read stops before B
        r = client.get("/v1/topics/t/partitions/0/messages", params={"offset": 0, "max": 100})
        assert r.status_code == 200
        assert [m["offset"] for m in r.json()["messages"]] == list(range(PER_OBJECT))
        for key, check in expected.items():
            start, end = by_key[key]
            for off in (start, end - 1):
                assert_damage(client.get("/v1/topics/t/partitions/0/messages", params={"offset": off}), key, check)
                assert_damage(client.get(f"/v1/messages/{ids[off]}"), key, check)
        r = client.get("/v1/topics/t/partitions/0/messages", params={"offset": 2 * PER_OBJECT, "max": PER_OBJECT})
        assert [m["offset"] for m in r.json()["messages"]] == list(range(2 * PER_OBJECT, 3 * PER_OBJECT))

        # the key lookup: readable hits answered, the damaged ones listed with object and offset
        r = client.get("/v1/messages", params={"topic": "t", "key": "k", "max": 1000})
        assert r.status_code == 200, r.text
        body = r.json()
        assert sorted(m["offset"] for m in body["messages"]) == list(range(PER_OBJECT)) + list(
            range(2 * PER_OBJECT, 3 * PER_OBJECT))
        unreadable = {(u["object"], u["offset"]) for u in body["unreadable"]}
        assert unreadable == {(k, off) for k in expected for off in range(*by_key[k])}
        assert {u["check"] for u in body["unreadable"] if u["object"] == objects[1][0]} == {"record batch crc"}

        metrics = client.get("/metrics").text
        line = [x for x in metrics.splitlines() if x.startswith('mqindex_corrupt_reads_total{component="broker"}')]
        assert line and float(line[0].split()[-1]) >= 3 * PER_OBJECT

        # the admin endpoint
        r = client.post("/v1/admin/scrub")
        assert r.status_code == 200, r.text
        damaged = {d["object"]: d for d in r.json()["damaged"]}
        assert set(damaged) == set(expected)
        for key, d in damaged.items():
            assert d["check"] == expected[key]
            data_ranges = [(x["partition"], x["start"], x["end"]) for x in d["ranges"] if x["kind"] == "data"]
            assert data_ranges == [("t-0", *by_key[key])]

    # the command line: exit 2, the same objects in --json, progress on stderr
    rc = cli_main(["scrub", "--data-dir", str(node_env["data_dir"]), "--store", node_env["store_url"],
                   "--metadata", node_env["meta_url"], "--json"])
    out, err = capsys.readouterr()
    assert rc == 2
    report = json.loads(out)
    assert {d["object"] for d in report["damaged"]} == set(expected)
    assert report["objects_checked"] >= OBJECTS and "scrub: object" in err


def uploaded_files(node: BrokerNode) -> list[dict[str, Any]]:
    return [f for f in node.index_files() if f["state"].lower() == "uploaded"]


def upload_index_file(node: BrokerNode, n: int) -> None:
    """Index `n` more messages with key "ik" into a file of their own and upload it (bounded wait)."""
    before = len(uploaded_files(node))
    node.produce("ix", [InMessage(b"iv-%d-%d" % (n, i), key=b"ik", partition=0) for i in range(5)])
    node.sync_index()
    deadline = time.monotonic() + 60
    node.index.roll()
    while len(uploaded_files(node)) <= before:
        assert time.monotonic() < deadline, node.index_files()
        node.index.maintain()
        time.sleep(0.05)


def test_damaged_index_file_is_skipped_reported_and_scrubbed(node_env: dict[str, Any]) -> None:
    node, client, raw = node_env["node"], node_env["client"], node_env["raw"]
    node.create_topic("ix", 1)
    upload_index_file(node, 0)
    time.sleep(0.01)  # the next file begins at a later millisecond than the first
    upload_index_file(node, 1)
    files = uploaded_files(node)
    assert len(files) == 2
    manifests = sorted((node_env["data_dir"] / "index" / "uploaded").glob("*.json"))
    keys = [json.loads(json.loads(p.read_text())["body"])["key"] for p in manifests]
    damaged_key = keys[0]
    data = bytearray(raw.get(damaged_key))
    data[64 + 3] ^= 0x01  # first data block, past the 64-byte header
    raw.put(damaged_key, bytes(data))

    r = client.get("/v1/messages", params={"topic": "ix", "key": "ik", "max": 100})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["messages"]) == 5 and all(m["value"].startswith("iv-1-") for m in body["messages"])
    assert [(u["component"], u["object"], u["check"]) for u in body["unreadable"]] == [
        ("index", damaged_key, "block crc32c")]
    metrics = client.get("/metrics").text
    assert 'mqindex_corrupt_reads_total{component="index"} 1.0' in metrics

    r = client.post("/v1/admin/scrub")
    assert r.status_code == 200
    report = r.json()
    assert [(d["component"], d["object"], d["check"]) for d in report["damaged"]] == [
        ("index", damaged_key, "block crc32c")]
    assert report["index_files_checked"] == 2


def test_scrub_checks_the_key_filters_of_uploaded_index_files(node_env: dict[str, Any]) -> None:
    node, client, raw = node_env["node"], node_env["client"], node_env["raw"]
    node.create_topic("ix", 1)
    for i in range(3):
        upload_index_file(node, i)
        time.sleep(0.01)  # the next file begins at a later millisecond
    manifests = sorted((node_env["data_dir"] / "index" / "uploaded").glob("*.json"))
    keys = [json.loads(json.loads(p.read_text())["body"])["key"] for p in manifests]
    assert len(keys) == 3
    r = client.post("/v1/admin/scrub")
    assert r.status_code == 200
    assert r.json()["damaged"] == [] and r.json()["filters_checked"] == 3 and r.json()["filters_missing"] == []

    flipped = bytearray(raw.get(keys[0] + ".filter"))
    flipped[-1] ^= 0x40
    raw.put(keys[0] + ".filter", bytes(flipped))
    raw.delete(keys[1] + ".filter")  # as a file uploaded before filters existed
    report = client.post("/v1/admin/scrub").json()
    assert [(d["component"], d["object"]) for d in report["damaged"]] == [("index", keys[0] + ".filter")]
    assert report["filters_missing"] == [keys[1]] and report["filters_checked"] == 1
    # the lookup still answers completely from the files themselves
    r = client.get("/v1/messages", params={"topic": "ix", "key": "ik", "max": 100})
    assert r.status_code == 200 and len(r.json()["messages"]) == 15, r.text


@pytest.fixture
def closing() -> Iterator[list[Any]]:
    """Objects the test opens, closed at the end in reverse order whatever happens."""
    opened: list[Any] = []
    yield opened
    for obj in reversed(opened):
        obj.close()


def _scrub_cli(h: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    rc = cli_main(["scrub", "--store", h.store_url, "--metadata", h.meta_url, "--index-dir",
                   str(tmp_path / "no-index-dir"), *extra])
    return rc, capsys.readouterr().out


def test_scrub_checks_the_clusters_merged_index_files_and_their_filters(
        tmp_path: Path, seaweedfs: Any, pg_url: Callable[[], str], closing: list[Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    """The files the published merge wrote under index-merged/ (a departed node's day, a rescue's day) are read by
    `mqindex scrub` through the cluster's merged lists: clean ones pass, a damaged file and a damaged or missing
    filter are named."""
    from broker.cluster.published_merge import MERGED_OBJECTS, PublishedMerger
    from tests.cluster.test_published_merge import CONFIG, History

    h = History(tmp_path, seaweedfs, pg_url(), closing)
    merged = sorted(PublishedMerger(h.meta0, h.store, h.clock, CONFIG).run_once(alive={0}).merged)
    assert len(merged) == 2 and all(k.startswith(MERGED_OBJECTS) for k in merged)
    rc, out = _scrub_cli(h, tmp_path, capsys, "--json")
    report = json.loads(out)
    assert rc == 0, out
    assert report["merged_files_checked"] == 2 and report["filters_checked"] == 2 and report["damaged"] == []
    assert report["bytes_read"] > 0

    data = bytearray(h.store.get(merged[0]))
    data[64 + 3] ^= 0x01  # the first data block, past the 64-byte header
    h.store.put(merged[0], bytes(data))
    flt = bytearray(h.store.get(merged[1] + ".filter"))
    flt[-1] ^= 0x40
    h.store.put(merged[1] + ".filter", bytes(flt))
    rc, out = _scrub_cli(h, tmp_path, capsys, "--json")
    report = json.loads(out)
    assert rc == 2, out
    assert sorted((d["component"], d["object"], d["check"]) for d in report["damaged"]) == sorted([
        ("index", merged[0], "block crc32c"), ("index", merged[1] + ".filter", "filter crc32c")])
    assert report["merged_files_checked"] == 2 and report["filters_checked"] == 1

    h.store.delete([merged[1] + ".filter"])  # a merge always writes one: a missing filter is damage here
    rc, out = _scrub_cli(h, tmp_path, capsys)
    assert rc == 2
    assert f"DAMAGED index {merged[0]}: block crc32c" in out
    assert f"DAMAGED index {merged[1]}.filter: missing key filter" in out
    assert "2 merged index files" in out
