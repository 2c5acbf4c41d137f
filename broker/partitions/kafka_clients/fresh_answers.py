"""FreshAnswers: callbacks run once a catch-up of the metadata that began after they were handed over has
finished, on one thread of their own, without blocking the caller.

The Kafka produce path's counterpart of broker/partitions/fresh_metadata.py (the HTTP path's, which blocks its
caller). A leader learns that another node deleted a topic at its watcher's next look (every 0.1 s); a produce
answer decided before that would acknowledge records the deletion drops. The Kafka listener decides a produce
answer on the WAL's thread once its batches are durable, where it must not wait: it hands a callback here
(`after`), and the answer is ready once the callback ran after a catch-up that began after the batches were
durable, so a deletion committed before that catch-up is seen. Every callback waiting when a catch-up begins
shares it: under load this is one metadata read per catch-up, not per request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("mqindex.broker.fresh_answers")

#: called with None after a fresh catch-up, or with the catch-up's error (the metadata store away)
Callback = Callable[[BaseException | None], None]


class FreshAnswers:
    def __init__(self, catch_up: Callable[[], object], name: str = "fresh-metadata") -> None:
        self._catch_up = catch_up
        self._cond = threading.Condition()
        self._waiting: list[Callback] = []
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def after(self, callback: Callback) -> None:
        """Run `callback` once a catch-up that begins after this call has finished (on this object's thread)."""
        with self._cond:
            if self._closed:
                closed = True
            else:
                closed = False
                self._waiting.append(callback)
                self._cond.notify()
        if closed:
            callback(RuntimeError("the node is closing: the metadata was not read again"))

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(10)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                taken, self._waiting = self._waiting, []
                closed = self._closed
            error: BaseException | None = None
            if closed:
                error = RuntimeError("the node is closing: the metadata was not read again")
            elif taken:
                try:
                    self._catch_up()
                except Exception as exc:  # noqa: BLE001 - handed to each callback, which decides
                    error = exc
            for cb in taken:
                try:
                    cb(error)
                except Exception:  # noqa: BLE001 - one answer's failure must not stop the others'
                    log.exception("a produce answer's check after the metadata catch-up failed")
            if closed:
                return
