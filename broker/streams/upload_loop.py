"""The uploader thread: uploads the log cache when it passes a size threshold or an interval elapses.

`notify(cache_bytes)` is called after each acknowledged append and wakes the thread once the cache holds
`threshold` bytes; otherwise it runs every `interval_s` when the cache is not empty. `upload_now()`
runs one upload on the thread and waits for it (close, tests, benchmarks). A failing upload is logged
and retried at the next trigger with backoff; the records stay in the cache and the WAL meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("mqindex.broker.upload")


class UploadLoop:
    def __init__(self, upload: Callable[[], int], cache_bytes: Callable[[], int], threshold: int,
                 interval_s: float) -> None:
        self._upload = upload
        self._cache_bytes = cache_bytes
        self.threshold = threshold
        self.interval_s = interval_s
        self._cond = threading.Condition()
        self._requested = 0  # upload_now() calls made
        self._served = 0  # upload_now() calls whose upload ran (after they were made)
        self._error: BaseException | None = None
        self._stop = False
        self.uploads = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="broker-uploader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def notify(self, cache_bytes: int) -> None:
        if cache_bytes >= self.threshold:
            with self._cond:
                self._cond.notify_all()

    def request(self) -> None:
        """Ask for an upload soon, without waiting for it."""
        with self._cond:
            self._requested += 1
            self._cond.notify_all()

    def upload_now(self, timeout: float | None = 120.0) -> None:
        """Upload everything cached now; raises the upload's error if it failed."""
        with self._cond:
            self._requested += 1
            target = self._requested
            self._cond.notify_all()
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._served < target:
                if not self._thread.is_alive():
                    raise RuntimeError("the uploader thread is not running")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"upload not done after {timeout}s")
                self._cond.wait(0.5 if left is None else min(left, 0.5))
            if self._error is not None:
                raise self._error

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        last = time.monotonic()
        backoff = 0.0
        while True:
            with self._cond:
                while True:
                    if self._stop:
                        return
                    due = last + max(self.interval_s, backoff)
                    now = time.monotonic()
                    if self._requested > self._served:
                        break
                    if backoff == 0.0 and self._cache_bytes() >= self.threshold:
                        break  # re-checked here: bytes that arrived during the last upload may be few
                    if now >= due and self._cache_bytes() > 0:
                        break
                    self._cond.wait(max(0.01, min(due - now, 1.0)) if now < due else min(self.interval_s, 1.0))
                target = self._requested
            err: BaseException | None = None
            try:
                self._upload()
                self.uploads += 1
                backoff = 0.0
            except BaseException as exc:  # noqa: BLE001 - reported to upload_now callers, retried
                err = exc
                self.failures += 1
                backoff = min(max(backoff * 2, 0.5), 30.0)
                log.warning("upload failed, retrying", extra={"error": f"{type(exc).__name__}: {exc}",
                                                              "retry_in_s": backoff})
            last = time.monotonic()
            with self._cond:
                self._error = err
                self._served = max(self._served, target)
                self._cond.notify_all()
