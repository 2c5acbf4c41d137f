"""A build's attempts in the index store: the per-build lock, an aborted attempt's objects deleted, an
earlier failed attempt's leftovers cleaned."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jobs.spark_build.files import abort_marker
from jobs.spark_build.options import BUILD_PREFIX, BuildError
from storage_tier import BlobStore

log = logging.getLogger("mqindex.index_service.spark_build")


@contextlib.contextmanager
def _build_lock(index_dir: Path, name: str) -> Iterator[None]:
    d = index_dir / "builds"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BuildError(f"build {name} is already running against {index_dir}") from None
        yield
    finally:
        os.close(fd)


def _attempt_prefix(name: str, attempt: str) -> str:
    return f"{BUILD_PREFIX}{name}/{attempt}/"


def delete_attempt(store: BlobStore, name: str, attempt: str) -> int:
    keys = store.list(_attempt_prefix(name, attempt))
    if keys:
        store.delete(keys)
    return len(keys)


def clean_leftovers(store: BlobStore, index_dir: Path, name: str) -> int:
    """Delete objects of earlier attempts of this build that no service serves or will serve."""
    from index_service.external_builds import registered_attempts

    keep = registered_attempts(index_dir, name)
    prefix = f"{BUILD_PREFIX}{name}/"
    doomed = [k for k in store.list(prefix) if k[len(prefix):].split("/", 1)[0] not in keep]
    if doomed:
        store.delete(doomed)
        log.warning("deleted objects of an earlier failed attempt", extra={"build": name, "objects": len(doomed)})
    return len(doomed)


def _wait_tasks_gone(sc: Any, timeout: float = 120.0) -> bool:
    """Wait until Spark reports no active job, stage or task (killed tasks end asynchronously)."""
    deadline = time.monotonic() + timeout
    tracker = sc.statusTracker()
    while time.monotonic() < deadline:
        stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
        if not tracker.getActiveJobsIds() and not any(st is not None and st.numActiveTasks for st in stages):
            return True
        time.sleep(0.1)
    return False


def abort_attempt(sc: Any, store: BlobStore, name: str, attempt: str) -> int:
    """After a failure: mark the attempt aborted, cancel its jobs, delete every object it uploaded; once
    no task runs any more, delete the marker too. Returns how many objects were deleted."""
    marker = abort_marker(name, attempt)
    store.put(marker, b"aborted")
    with contextlib.suppress(Exception):
        sc.cancelAllJobs()
    deleted = 0
    keys = [k for k in store.list(_attempt_prefix(name, attempt)) if k != marker]
    if keys:
        store.delete(keys)
        deleted += len(keys)
    quiet = False
    with contextlib.suppress(Exception):
        quiet = _wait_tasks_gone(sc)
    # Spark may report a killed task gone while its Python worker still finishes an upload (the worker deletes
    # what it put once it sees the marker): watch the attempt's prefix until it has stayed empty for a while
    settle_s, empty_since, deadline = 3.0, None, time.monotonic() + 60
    while time.monotonic() < deadline:
        keys = [k for k in store.list(_attempt_prefix(name, attempt)) if k != marker]
        if keys:  # uploaded after the first listing by a task that had not seen the marker yet
            store.delete(keys)
            deleted += len(keys)
            empty_since = None
        elif empty_since is None:
            empty_since = time.monotonic()
        elif time.monotonic() - empty_since >= settle_s:
            break
        time.sleep(0.2)
    if quiet:
        store.delete(marker)
    else:
        log.warning("tasks of a failed build still running; its abort marker stays until the next run of the "
                    "build deletes it", extra={"build": name, "attempt": attempt})
    return deleted
