"""A background thread that runs one function every `interval_s` until stopped (maintenance tasks)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from broker.errors import MetadataUnavailable

log = logging.getLogger("mqindex.broker.periodic")


class Periodic:
    def __init__(self, name: str, interval_s: float, fn: Callable[[], object], from_start: bool = False) -> None:
        """from_start: the next run is due `interval_s` after this one began, however long it took (a lease
        renewal, whose period must not stretch with the database's answer); otherwise `interval_s` after it ended."""
        self.name = name
        self.interval_s = interval_s
        self.from_start = from_start
        self._fn = fn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.runs = 0

    def start(self) -> None:
        if self.interval_s > 0:
            self._thread.start()

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            began = time.monotonic()
            try:
                self._fn()
                self.runs += 1
            except MetadataUnavailable:  # retried next interval; the metadata link logs each change of state once
                pass
            except Exception as exc:  # noqa: BLE001 - retried next interval
                log.warning("periodic task failed", extra={"task": self.name,
                                                           "error": f"{type(exc).__name__}: {exc}"})
            wait = max(0.0, began + self.interval_s - time.monotonic()) if self.from_start else self.interval_s

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
