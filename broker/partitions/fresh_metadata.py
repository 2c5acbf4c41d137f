"""FreshMetadata: a catch-up of the metadata begun after the caller asked, shared by concurrent callers.

A leader learns that another node deleted a topic at its watcher's next look (every 0.1 s). Until then it
would acknowledge produces to the deleted topic's streams, records that the deletion drops: acknowledged,
then dropped. Before acknowledging, a produce waits for a catch-up of the metadata log that began after its
records were durable (`wait`), and refuses if the topic is gone: a deletion committed before that catch-up
is seen, one committed after it came after the acknowledgement (and drops the records as it drops every
earlier one). Concurrent produces share one catch-up (at most one runs, and each waiter needs one that began
after it asked), so under load this costs one metadata read per catch-up, not per request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class FreshMetadata:
    def __init__(self, catch_up: Callable[[], object]) -> None:
        self._catch_up = catch_up
        self._cond = threading.Condition()
        self._started = 0  # catch-ups begun
        self._done = 0  # the latest catch-up finished without an error (its number)
        self._running = False

    def wait(self) -> None:
        """Return once a catch-up that began after this call finished (raising its error if this caller ran it
        and it failed)."""
        with self._cond:
            need = self._started + 1
            while self._done < need:
                if self._running:
                    self._cond.wait()
                    continue
                self._running = True
                self._started += 1
                mine = self._started
                ok = False
                self._cond.release()
                try:
                    self._catch_up()
                    ok = True
                finally:
                    self._cond.acquire()
                    self._running = False
                    if ok:
                        self._done = max(self._done, mine)
                    self._cond.notify_all()
