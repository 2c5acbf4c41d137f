"""Bounded exponential backoff for transient backend faults."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from storage_tier.errors import StorageUnavailable

T = TypeVar("T")
log = logging.getLogger("mqindex.storage")

#: a store that does not answer logs its retries once per this many seconds per backend and operation, with the
#: count of the warnings left out since the last one
WARN_EVERY_S = 30.0
_warned: dict[tuple[str, str], tuple[float, int]] = {}  # (backend, op) -> (when last logged, left out since)
_warned_lock = threading.Lock()


def _warn_retrying(backend: str, key: str | None, op: str, attempt: int, cause: str) -> None:
    now = time.monotonic()
    with _warned_lock:
        last, left_out = _warned.get((backend, op), (-math.inf, 0))
        if now - last < WARN_EVERY_S:
            _warned[(backend, op)] = (last, left_out + 1)
            return
        _warned[(backend, op)] = (now, 0)
    more = f" ({left_out} more like it in the last {now - last:.0f}s)" if left_out else ""
    log.warning("transient storage fault, retrying" + more,
                extra={"backend": backend, "key": key, "op": op, "attempt": attempt, "cause": cause,
                       "suppressed": left_out})


@dataclass(frozen=True)
class RetryPolicy:
    """Retry until `deadline_s` has passed since the first attempt (and at most `max_attempts`)."""

    deadline_s: float = 30.0
    max_attempts: int = 100
    first_backoff_s: float = 0.05
    max_backoff_s: float = 2.0

    def run(
        self,
        fn: Callable[[], T],
        *,
        backend: str,
        key: str | None,
        op: str,
        is_transient: Callable[[BaseException], bool],
        bound: Callable[[], float] | None = None,
    ) -> T:
        """bound: read before each retry, the retry bound in seconds then (default `deadline_s`): a store whose
        bound is cut while a call retries (a server stopping while the store does not answer) ends that call too."""
        start = time.monotonic()
        backoff = self.first_backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified just below
                if not is_transient(exc):
                    raise
                elapsed = time.monotonic() - start
                deadline_s = self.deadline_s if bound is None else min(self.deadline_s, bound())
                if attempt >= self.max_attempts or elapsed + backoff > deadline_s:
                    raise StorageUnavailable(
                        backend,
                        key,
                        f"{op} failed after {attempt} attempts over {elapsed:.1f}s "
                        f"(retry bound {deadline_s:g}s): {type(exc).__name__}: {exc}",
                    ) from exc
                _warn_retrying(backend, key, op, attempt, f"{type(exc).__name__}: {exc}")
                time.sleep(backoff * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, self.max_backoff_s)
