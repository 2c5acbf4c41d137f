"""Bounded exponential backoff for transient backend faults."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from storage_tier.errors import StorageUnavailable

T = TypeVar("T")
log = logging.getLogger("mqindex.storage")


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
    ) -> T:
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
                if attempt >= self.max_attempts or elapsed + backoff > self.deadline_s:
                    raise StorageUnavailable(
                        backend,
                        key,
                        f"{op} failed after {attempt} attempts over {elapsed:.1f}s "
                        f"(retry bound {self.deadline_s:g}s): {type(exc).__name__}: {exc}",
                    ) from exc
                log.warning(
                    "transient storage fault, retrying",
                    extra={"backend": backend, "key": key, "op": op, "attempt": attempt,
                           "cause": f"{type(exc).__name__}: {exc}"},
                )
                time.sleep(backoff * (0.5 + random.random() / 2))
                backoff = min(backoff * 2, self.max_backoff_s)
