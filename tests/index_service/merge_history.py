"""Histories of uploaded index files for the merge tests: written through the real writer, compaction and upload,
one file per 'hour' of a clock the test moves, and the answers a set of lookups gives over them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from index_service import IndexHit, IndexService
from tests.index_service.helpers import ManualClock, open_service

HOUR = 3_600_000
DAY = 24 * HOUR
WEEK = 7 * DAY
T0 = 1_700_000_000_000 - 1_700_000_000_000 % WEEK  # a week boundary (the tiers' windows are epoch-aligned)
TOPIC = "orders"
#: (queue, offset, size, time offset from the file's start, keys)
Record = tuple[int, int, int, int, tuple[str, ...]]


def write_history(data: Path, url: str, clock: ManualClock, files: Sequence[tuple[int, Sequence[Record]]],
                  **config: Any) -> None:
    """Write `files` ((start ms, records) each, in order) as one uploaded index file each, nothing merged, and
    close the service."""
    svc = open_service(data, url, clock, max_items=10_000, slots=64, roll_age_ms=1 << 50, merge_tiers_ms=(),
                       **config)
    for start, records in files:
        clock.now = start
        svc.put_batch([(TOPIC, q, off, size, start + dt, list(keys)) for q, off, size, dt, keys in records])
        svc.flush()
        svc.roll()
        svc.flush()
    svc.put(TOPIC, 99, 0, 1, ["roll"], clock.now)  # the last roll happens at the next write
    svc.flush()
    svc.roll()
    svc.flush()
    rep = svc.maintain()
    assert not rep.failed, rep
    svc.close()


def reopen(data: Path, url: str, clock: ManualClock, **config: Any) -> IndexService:
    """The service over a written history, cold, merging by default."""
    return open_service(data, url, clock, max_items=10_000, slots=64, roll_age_ms=1 << 50, **config)


def hourly(days: float, per_hour: int = 3, keys: int = 7, start: int = T0) -> list[tuple[int, list[Record]]]:
    """`days` of hourly files, `per_hour` records each, keys k0..k{keys-1} repeating and one unique key per
    record (u<offset>), over four queues."""
    out: list[tuple[int, list[Record]]] = []
    off = 0
    for h in range(int(days * 24)):
        recs: list[Record] = []
        for j in range(per_hour):
            recs.append((off % 4, off, 100 + off % 7, j * 1000 + 17, (f"k{off % keys}", f"u{off}")))
            off += 1
        out.append((start + h * HOUR, recs))
    return out


def answers(svc: IndexService, lookups: Sequence[tuple[str, int, int, int | None]]) -> list[list[IndexHit]]:
    return [svc.query(TOPIC, key, m, lo, hi) for key, m, lo, hi in lookups]


def _rank(h: IndexHit) -> tuple[int, int, int]:
    return (h.store_time_ms, h.offset, h.queue_id)


def pages(svc: IndexService, key: str, page: int, lo: int = 0, hi: int | None = None) -> list[IndexHit]:
    """Every hit of `key`, page by page, each page resuming below the last hit (a cursor of time, offset, queue)."""
    out: list[IndexHit] = []
    end = hi
    while True:
        last = out[-1] if out else None
        skip = 0 if last is None else sum(1 for h in out if h.store_time_ms == last.store_time_ms)
        got = svc.query(TOPIC, key, page + skip, lo, end)
        new = [h for h in got if last is None or _rank(h) < _rank(last)][:page]
        if not new:
            return out
        out.extend(new)
        end = new[-1].store_time_ms
