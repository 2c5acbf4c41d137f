"""kill -9 of a compaction at each step (after uploading, before the commit; after the commit, before the
deletes), in a child process running only the compaction and in a real `mqindex serve` under a producer:
no acknowledged record lost or readable twice, leaked prepared outputs cleaned after expiry."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from broker.compaction import CompactionConfig, Compactor
from broker.compaction.compactor import KILL_AT_ENV
from broker.metadata.client import MetadataClient
from storage_tier import open_store
from tests.api.server import ServerProcess
from tests.broker.compaction_helpers import open_streams, read_stream, upload_rounds

CHILD = Path(__file__).with_name("compaction_child.py")


@pytest.mark.parametrize("step", ["uploaded", "committed"])
def test_kill_at_each_step(step: str, seaweedfs, meta_url_factory: Callable[[], str]) -> None:  # type: ignore[no-untyped-def]
    store_url = seaweedfs.store_url("mqindex", f"crash-{uuid.uuid4().hex[:8]}")
    url = meta_url_factory()
    store = open_store(store_url)
    meta, sids = open_streams(url, 4)
    written = upload_rounds(store, meta, sids, rounds=6, payload=1500)
    meta.close()
    child = subprocess.Popen([sys.executable, str(CHILD), store_url, url, step], stdout=subprocess.PIPE, text=True,
                             cwd=str(Path(__file__).parents[2]))
    try:
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -9 and f"STEP {step}" in out and "DONE" not in out, (child.returncode, out)
    after = MetadataClient(url, 0)
    after.register_node()
    try:
        for sid in sids:  # every record once, byte-identical, at its offset
            assert read_stream(store, after, sid) == written[sid]
        counts = after.object_counts()
        assert counts["stream_set_objects"] == (6 if step == "uploaded" else 1)
        # cleanup once the prepared ids expired (clock moved past the TTL): the store holds exactly the
        # committed objects, no leaked output, no compacted source
        far = int(time.time() * 1000) + CompactionConfig().prepared_ttl_ms + 60_000
        after.cleanup_objects(store, now_ms=far)
        after.cleanup_objects(store, now_ms=far)
        keys = {k for k in store.list() if k.split("/")[1] == after.namespace}
        assert keys == {after.object_key(o) for o in after.committed_objects()}
        for sid in sids:
            assert read_stream(store, after, sid) == written[sid]
        # a new cycle finishes the work
        report = Compactor(store, after, CompactionConfig(interval_s=0, grace_ms=0)).run_once()
        assert not report.errors
        assert after.object_counts()["stream_set_objects"] == 1
        for sid in sids:
            assert read_stream(store, after, sid) == written[sid]
    finally:
        after.close()
        store.close()


class _Producer(threading.Thread):
    """Produces one message per partition per request until stopped or the server is gone; keeps what was
    acknowledged: (partition, offset) -> value."""

    def __init__(self, url: str, partitions: int) -> None:
        super().__init__(daemon=True)
        self.url, self.partitions = url, partitions
        self.acked: dict[tuple[int, int], str] = {}
        self.sent: set[str] = set()
        self.stop = threading.Event()
        self.failure: str | None = None

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            values = [f"m{i}-{p}" for p in range(self.partitions)]
            self.sent.update(values)
            try:
                r = httpx.post(f"{self.url}/v1/topics/c/messages", timeout=10, json={"messages": [
                    {"value": v, "key": f"k{i % 7}", "partition": p} for p, v in enumerate(values)]})
            except httpx.HTTPError as exc:  # the server was killed: nothing more is acknowledged
                self.failure = f"{type(exc).__name__}: {exc}"
                return
            if r.status_code != 200:
                self.failure = f"{r.status_code} {r.text[:200]}"
                return
            for v, res in zip(values, r.json()["results"], strict=True):
                self.acked[(res["partition"], res["offset"])] = v
            i += 1


def _fetch_all(url: str, partitions: int) -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for p in range(partitions):
        offset = 0
        while True:
            r = httpx.get(f"{url}/v1/topics/c/partitions/{p}/messages", params={"offset": offset, "max": 1000},
                          timeout=60)
            assert r.status_code == 200, r.text
            body = r.json()
            for m in body["messages"]:
                assert (p, m["offset"]) not in out
                out[(p, m["offset"])] = m["value"]
            if len(body["messages"]) < 1000:
                break
            offset = body["next_offset"]
    return out


@pytest.mark.parametrize("step", ["uploaded", "committed"])
def test_kill_a_producing_server_at_each_step(step: str, seaweedfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A real `mqindex serve` under a producer kills itself (SIGKILL) at the compaction step; restarted, it
    serves every acknowledged record exactly once and the store ends up holding exactly the committed
    objects (the crashed cycle's prepared outputs cleaned once expired, its sources after the commit)."""
    store_url = seaweedfs.store_url("mqindex", f"crash-serve-{uuid.uuid4().hex[:8]}")
    meta_url = f"sqlite:///{tmp_path}/meta.sqlite"
    args = ["--store", store_url, "--metadata", meta_url, "--upload-interval-s", "0.05",
            "--compaction-interval-s", "1", "--compaction-grace-ms", "0", "--compaction-prepared-ttl-ms", "2000",
            "--maintenance-interval-s", "0.5"]
    partitions = 4
    server = ServerProcess(tmp_path / "data", *args, env={KILL_AT_ENV: step}).start()
    producer: _Producer | None = None
    restarted: ServerProcess | None = None
    try:
        r = httpx.post(f"{server.url}/v1/topics", json={"name": "c", "partitions": partitions}, timeout=30)
        assert r.status_code == 201, r.text
        producer = _Producer(server.url, partitions)
        producer.start()
        assert server.proc is not None
        rc = server.proc.wait(timeout=90)  # the first compaction cycle with something to merge kills it
        assert rc == -signal.SIGKILL, rc
        producer.join(timeout=30)
        assert not producer.is_alive() and producer.failure is not None
        assert "killing the process at a compaction step" in server.log.read_text()
        assert len(producer.acked) >= partitions
        restarted = ServerProcess(tmp_path / "data", *args).start()
        got = _fetch_all(restarted.url, partitions)
        # every acknowledged record at its offset; nothing readable twice; nothing that was never sent
        assert {k: got.get(k) for k in producer.acked} == producer.acked
        assert len(set(got.values())) == len(got) and set(got.values()) <= producer.sent
        # the store converges to exactly the committed objects (leaked outputs expire after 2 s)
        store = open_store(store_url)
        reader = MetadataClient(meta_url, 99)
        try:
            deadline = time.monotonic() + 60
            while True:
                reader.catch_up()
                keys = {k for k in store.list() if k.split("/")[1] == reader.namespace}
                committed = {reader.object_key(o) for o in reader.committed_objects()}
                if keys == committed:
                    break
                assert time.monotonic() < deadline, (sorted(keys - committed), sorted(committed - keys))
                time.sleep(0.2)
        finally:
            reader.close()
            store.close()
        assert _fetch_all(restarted.url, partitions) == got
    finally:
        if producer is not None:
            producer.stop.set()
        server.stop(signal.SIGKILL)
        if restarted is not None:
            restarted.stop()
