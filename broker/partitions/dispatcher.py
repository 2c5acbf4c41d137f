"""Dispatcher: hands every acknowledged record's index entry to the IndexService, in offset order per
partition, exactly once across restarts.

Live path: after the WAL acknowledges a batch, the node enqueues the batch's entries (topic, partition,
offset, size, store time, keys) and the dispatcher thread passes them to `IndexService.put_batch`. A
producer that has not decoded its records (a Kafka client's batch stored as sent) enqueues a function
that gives the entries instead; the dispatcher thread calls it, in queue order, so reading the keys out
of the batch costs the acknowledgement nothing.
Restart path: before any live entry, the thread re-dispatches each partition from the index's own
checkpoint + 1 (`IndexService.checkpoint(topic, partition)`) up to the end acknowledged at open, reading
the records back through the broker's read path. The index drops offsets at or below its checkpoint, so
nothing is indexed twice; nothing acknowledged is skipped, since the live entries of a partition only
go after its catch-up range.
Both paths give an entry the same store time: the append time, taken when the batch is queued on the WAL and
stored with its stream record, so a re-dispatched entry is the entry the live path gave (index_time.py).
While the metadata database does not answer (a batch's partition claim is stored there first, index_claims.py),
the batch waits and is put again once it answers; only a stop meanwhile ends the thread, and the next start
re-dispatches from the index's checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from broker.errors import MetadataUnavailable, StreamNotFound
from broker.partitions.topic_errors import TopicNotFound
from index_file import IndexEntry

log = logging.getLogger("mqindex.broker.dispatch")


@dataclass(frozen=True)
class CatchUp:
    topic: str
    partition: int
    start: int  # first offset to re-dispatch
    end: int  # exclusive


@dataclass(frozen=True)
class InOrder:
    """Work run on the dispatch thread between the entries enqueued before and after it."""

    fn: Callable[[], None]
    done: Future[None]


def progress_marker(topic: str, partition: int, offset: int) -> IndexEntry:
    """An entry without keys: the index writes nothing for it, and its checkpoint of the partition moves to
    `offset` (every record up to it dispatched). Partitions whose records have no keys reach their end this
    way; without it their checkpoint never moves and every open would read them again from the start."""
    return IndexEntry(topic, partition, offset, 0, 0, [])


class Dispatcher:
    def __init__(self, put_batch: Callable[[Sequence[IndexEntry]], object],
                 read_entries: Callable[[CatchUp], Iterator[list[IndexEntry]]], flush: Callable[[], None],
                 mark: Callable[[Sequence[IndexEntry]], object] | None = None) -> None:
        self._put_batch = put_batch
        self._read_entries = read_entries
        self._flush = flush
        self._mark = mark  # the index's put without claims, for progress markers (entries without keys)
        self._cond = threading.Condition()
        self._queue: deque[list[IndexEntry] | Callable[[], list[IndexEntry]] | CatchUp | InOrder] = deque()
        self._catch_up: list[CatchUp] = []
        self._enqueued = 0
        self._done = 0
        self._busy = False
        self._stop = False
        self.error: BaseException | None = None
        self.dispatched = 0  # entries handed to the index
        self.redispatched = 0  # of which by catch-up
        self._thread = threading.Thread(target=self._run, name="broker-dispatcher", daemon=True)

    def start(self, catch_up: list[CatchUp]) -> None:
        self._catch_up = [c for c in catch_up if c.end > c.start]
        self._thread.start()

    def enqueue_catch_up(self, c: CatchUp) -> None:
        """Re-dispatch a range of a partition this node starts leading while running (a moved partition);
        entries enqueued after it go after it."""
        if c.end > c.start:
            with self._cond:
                self._queue.append(c)
                self._enqueued += 1
                self._cond.notify_all()

    def in_order(self, fn: Callable[[], None], timeout: float = 60.0) -> None:
        """Run `fn` on the dispatch thread after every entry enqueued before this call and before any enqueued
        after it (the index forgets a deleted topic's queues between the old topic's entries and those of a
        topic created again under the name); returns once it ran, raising what it raised. Before the thread
        starts nothing is dispatched yet, so it runs at once."""
        if self._thread.ident is None:
            fn()
            return
        item = InOrder(fn, Future())
        with self._cond:
            if self._stop or not self._thread.is_alive():
                raise RuntimeError("the dispatcher thread is not running")
            self._queue.append(item)
            self._enqueued += 1
            self._cond.notify_all()
        item.done.result(timeout)

    def enqueue(self, entries: list[IndexEntry] | Callable[[], list[IndexEntry]]) -> None:
        """Entries to index after the ones enqueued before, or a function the dispatcher thread calls for them."""
        if not entries:
            return
        with self._cond:
            self._queue.append(entries)
            self._enqueued += 1
            self._cond.notify_all()

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Wait until everything enqueued before this call (and the catch-up) is in the index, queryable."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._enqueued
            while self._done < target or self._catch_up or self._busy:
                if self.error is not None:
                    raise RuntimeError(f"index dispatch failed: {self.error}") from self.error
                if not self._thread.is_alive():
                    raise RuntimeError("the dispatcher thread is not running")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"dispatch not idle after {timeout}s")
                self._cond.wait(min(left, 0.5))
        self._flush()

    def stop(self) -> None:
        """Dispatch what is queued, then stop."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def _put(self, entries: Sequence[IndexEntry]) -> None:
        """Put the entries; while the metadata database does not answer, wait and put them again (module doc)."""
        pause = 0.05
        while True:
            try:
                self._put_batch(entries)
                return
            except MetadataUnavailable as exc:
                if self._stop:
                    raise
                if pause == 0.05:  # once an outage: the metadata client logs when it answers again
                    log.warning("index dispatch waits for the metadata database", extra={
                        "error": str(exc), "entries": len(entries)})
                time.sleep(pause)
                pause = min(2.0, pause * 2)

    def _redispatch(self, c: CatchUp) -> None:
        n = 0
        last = c.start - 1
        try:
            for entries in self._read_entries(c):
                self._put(entries)
                n += len(entries)
                last = entries[-1].offset
        except (TopicNotFound, StreamNotFound):
            log.info("re-dispatch skipped: the topic was deleted", extra={"topic": c.topic, "partition": c.partition})
            return
        if self._mark is not None and last < c.end - 1:
            # records without keys up to the range's end: a marker moves the index's checkpoint past them, so
            # the next open does not read them again
            self._mark([progress_marker(c.topic, c.partition, c.end - 1)])
        self.dispatched += n
        self.redispatched += n
        log.info("re-dispatched to the index", extra={"topic": c.topic, "partition": c.partition,
                                                       "from_offset": c.start, "to_offset": c.end, "entries": n})

    def _run(self) -> None:
        try:
            for c in list(self._catch_up):
                self._redispatch(c)
                with self._cond:
                    self._catch_up.remove(c)
                    self._cond.notify_all()
            while True:
                with self._cond:
                    while not self._queue and not self._stop:
                        self._cond.wait()
                    if not self._queue and self._stop:
                        return
                    items: list[list[IndexEntry] | Callable[[], list[IndexEntry]]] = []
                    catch_up: CatchUp | InOrder | None = None
                    n = 0
                    size = 0
                    while self._queue and size < 65536:
                        if isinstance(self._queue[0], CatchUp | InOrder):
                            if not items:
                                catch_up = self._queue.popleft()  # type: ignore[assignment]
                                n += 1
                            break
                        item = self._queue.popleft()
                        items.append(item)  # type: ignore[arg-type]
                        size += len(item) if isinstance(item, list) else 1024
                        n += 1
                    self._busy = True
                try:
                    if isinstance(catch_up, InOrder):
                        try:
                            catch_up.fn()
                            catch_up.done.set_result(None)
                        except Exception as exc:  # noqa: BLE001 - the caller gets it; dispatch goes on
                            catch_up.done.set_exception(exc)
                    elif catch_up is not None:
                        self._redispatch(catch_up)
                    batch: list[IndexEntry] = []
                    for item in items:
                        batch.extend(item if isinstance(item, list) else item())
                    if batch:
                        self._put(batch)
                    self.dispatched += len(batch)
                finally:
                    with self._cond:
                        self._busy = False
                        self._done += n
                        self._cond.notify_all()
        except BaseException as exc:  # noqa: BLE001 - surfaced by wait_idle; the restart re-dispatches
            log.exception("index dispatch failed; entries from here are re-dispatched after a restart")
            with self._cond:
                self.error = exc
                self._cond.notify_all()
