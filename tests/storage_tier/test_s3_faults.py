"""S3 transient faults against a real SeaweedFS that is stopped and started under the client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage_tier import StorageUnavailable, open_store
from storage_tier.seaweedfs_server import SeaweedFS


@pytest.fixture
def own_seaweedfs(tmp_path: Path) -> Iterator[SeaweedFS]:
    """A SeaweedFS of this test's own, since the test stops it."""
    server = SeaweedFS(tmp_path / "weed")
    server.start(bucket="faults")
    yield server
    server.stop(grace=5)


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def test_get_retries_through_a_restart(own_seaweedfs: SeaweedFS) -> None:
    store = open_store(own_seaweedfs.store_url("faults", "x", retry_seconds="120"))
    store.put("k", b"survives the restart")
    own_seaweedfs.stop(grace=5)

    result: list[bytes] = []
    failure: list[BaseException] = []
    before = store.meter.snapshot()["GET"]

    def reader() -> None:
        try:
            result.append(store.get("k"))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            failure.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    # the server is down: the get must be failing and retrying, not finished
    wait_until(lambda: store.meter.snapshot()["GET"] - before >= 3, 30, "three GET attempts while the server is down")
    assert t.is_alive() and not result and not failure
    own_seaweedfs.start(bucket=None)
    t.join(120)
    assert not failure, failure
    assert result == [b"survives the restart"]
    assert store.meter.snapshot()["GET"] - before >= 4  # the failed attempts were counted too


def test_stopped_for_good_fails_clearly_within_the_bound(own_seaweedfs: SeaweedFS) -> None:
    store = open_store(own_seaweedfs.store_url("faults", "y", retry_seconds="3"))
    store.put("k", b"v")
    own_seaweedfs.stop(grace=5)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable) as err:
        store.get("k")
    elapsed = time.monotonic() - started
    # bound 3 s plus at most one connect timeout (2 s) for the attempt in flight
    assert elapsed < 3 + 2 + 1.5, elapsed
    msg = str(err.value)
    assert "s3" in msg and "'k'" in msg and "attempts" in msg and "retry bound 3s" in msg
