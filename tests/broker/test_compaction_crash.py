"""kill -9 of a compaction at each step (after uploading, before the commit; after the commit, before the
deletes) in a child process: no record lost or readable twice, leaked prepared outputs cleaned after expiry."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.compaction import CompactionConfig, Compactor
from broker.metadata.client import MetadataClient
from storage_tier import open_store
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
