"""A background thread that runs one function every `interval_s` until stopped (maintenance tasks)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("mqindex.broker.periodic")


class Periodic:
    def __init__(self, name: str, interval_s: float, fn: Callable[[], object]) -> None:
        self.name = name
        self.interval_s = interval_s
        self._fn = fn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.runs = 0

    def start(self) -> None:
        if self.interval_s > 0:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._fn()
                self.runs += 1
            except Exception as exc:  # noqa: BLE001 - retried next interval
                log.warning("periodic task failed", extra={"task": self.name,
                                                           "error": f"{type(exc).__name__}: {exc}"})

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
