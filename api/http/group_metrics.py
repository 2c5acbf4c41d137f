"""/metrics of consumer groups, for the groups this node coordinates (across a cluster each group's series come
from one node):

- `mqindex_group_lag{group,topic,partition}`: the messages a group has not consumed (end offset - committed);
- `mqindex_group_lag_seconds{group,topic,partition}`: the age of the oldest message it has not consumed (now -
  the timestamp of the record at the committed offset, in whole seconds; 0 when caught up).

Computed at each scrape from memory, without a scan and without reading records again: a table of rows (one per
committed offset of a coordinated group) is kept between scrapes and rebuilt only for the keys whose stored
text changed, and only when the metadata image moved (`image.offset`); each row keeps its label text, already
escaped, its committed offset and the timestamp of the record at that offset. A scrape takes the end offsets of
the partitions (a led partition's acknowledged end; another node's: the end in the metadata image, which trails
the leader by up to an upload interval), computes every lag at once (numpy) and writes the lines (the lag
lines are used again while no lag changed). The record timestamps are read once per (partition, committed
offset), at most READ_BUDGET_S of reads a scrape: a row whose record is not read yet has no `_seconds` line in
that scrape (the next one adds it).

The lines are exposition text (`render()`, in pieces), appended to the registry's on /metrics (api/http/app.py):
prometheus_client's per-sample objects and formatting cost microseconds a series, too much for 100,000 of them.
"""

from __future__ import annotations

import json
import threading
import time
import zlib
from dataclasses import dataclass

import numpy as np

from api.kafka.context import Context
from broker.partitions.kafka_clients import group_offsets
from broker.partitions.kafka_clients.group_admin import oldest_unconsumed_ms

READ_BUDGET_S = 0.02  # record reads (for the lag in time) per scrape; the rest waits for the next scrape
HEADER = (b"# HELP mqindex_group_lag Messages a consumer group has not consumed: the partition's end offset minus "
          b"the group's committed offset\n# TYPE mqindex_group_lag gauge\n")
HEADER_S = (b"# HELP mqindex_group_lag_seconds Age of the oldest message a consumer group has not consumed (now "
            b"minus the timestamp of the record at its committed offset; 0 when caught up)\n"
            b"# TYPE mqindex_group_lag_seconds gauge\n")


def _offset(text: str) -> int:
    """The offset of a stored commit: group_offsets.commit writes '{"offset": N, ...' (read without a JSON parse,
    a third of a scrape after every group moved); anything else is parsed."""
    if text.startswith('{"offset": '):
        end = text.find(",", 11)
        digits = text[11:end] if end > 0 else ""
        if digits.isdigit():
            return int(digits)
    return int(json.loads(text)["offset"])


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@dataclass
class _Row:
    text: str  # the stored value the row was parsed from
    labels: str  # '{group="..",partition="..",topic=".."}'
    tp: tuple[str, int]
    offset: int
    coordinated: bool
    ts_ms: float = np.nan  # the timestamp of the record at `ts_at` (NaN: not read yet)
    ts_at: int = -1  # max(offset, the partition's start) when it was read


class _Table:
    """The coordinated rows as arrays and their line prefixes, built again when rows come or go; a committed
    offset that moved is changed in place (`move`)."""

    def __init__(self, rows: list[_Row]) -> None:
        self.rows = rows
        self.tps = sorted({r.tp for r in rows})
        index = {tp: i for i, tp in enumerate(self.tps)}
        n = len(rows)
        self.where = np.fromiter((index[r.tp] for r in rows), np.int64, n)
        self.offset = np.fromiter((r.offset for r in rows), np.int64, n)
        self.ts = np.fromiter((r.ts_ms for r in rows), np.float64, n)
        self.ts_at = np.fromiter((r.ts_at for r in rows), np.int64, n)
        self.lag_prefix = [f"mqindex_group_lag{r.labels} " for r in rows]
        self.age_prefix = [f"mqindex_group_lag_seconds{r.labels} ".encode() for r in rows]
        self.pos = {id(r): i for i, r in enumerate(rows)}
        self.lag_text: bytes | None = None  # the lag lines of the last scrape, for `lag_shown` and `shown`
        self.lag_shown = np.zeros(0, np.int64)
        self.shown = np.zeros(0, bool)
        self.age_key: np.ndarray | None = None  # the classes' key (`age_text`) they were built for
        self.age_classes: list[tuple[int, list[bytes]]] = []  # (a row of the class, its line prefixes)

    def age_text(self, ages: np.ndarray, behind: np.ndarray) -> list[bytes]:
        """The lag_seconds lines of `ages` (-1: no line), in pieces to join. Rows that read the same record time
        (and are behind, or are all caught up) show the same age in every scrape: their line prefixes are kept in
        classes while the times stay, and a class's lines are one `bytes.join` with its value as the separator;
        the series' order within the family is by class (the exposition format does not order series)."""
        key = np.where(behind, self.ts, -np.inf)  # caught up: 0, one class; NaN (not read): its own lines
        key = np.where(ages < 0, np.nan, key)
        if self.age_key is None or not np.array_equal(key, self.age_key, equal_nan=True):
            order = np.argsort(key, kind="stable")
            sorted_key = key[order]
            valid = ~np.isnan(sorted_key)
            order, sorted_key = order[valid], sorted_key[valid]
            cuts = np.flatnonzero(sorted_key[1:] != sorted_key[:-1]) + 1
            bounds = [0, *cuts.tolist(), len(order)] if len(order) else []
            prefix = self.age_prefix
            self.age_classes = [(int(order[a]), [prefix[i] for i in order[a:b].tolist()])
                                for a, b in zip(bounds, bounds[1:], strict=False)]
            self.age_key = key
        values = ages.tolist()
        if len(self.age_classes) * 4 > len(values):  # mostly distinct times: a line each is as quick
            return [b"%s%d\n" % (p, v) for p, v in zip(self.age_prefix, values, strict=True) if v >= 0]
        out = []
        for first, prefixes in self.age_classes:
            sep = b"%d\n" % values[first]
            out.append(sep.join(prefixes))
            out.append(sep)
        return out

    def move(self, old: _Row, new: _Row) -> None:
        """`new` (same key, partition and coordinator, another offset) stands for `old`."""
        i = self.pos.pop(id(old))
        self.rows[i] = new
        self.pos[id(new)] = i
        self.offset[i], self.ts[i], self.ts_at[i] = new.offset, new.ts_ms, new.ts_at


class GroupLagExposition:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._rows: dict[str, _Row] = {}  # KV key -> row
        self._seen_offset: int | None = None  # the metadata image's offset when the rows were last checked
        self._coordinators: set[int] = set()  # the listener node ids the coordinated flags were computed for
        self._lock = threading.Lock()  # one scrape at a time updates the table
        self._table: _Table | None = None  # the coordinated rows as arrays, until a row changes

    # -- the table of rows ------------------------------------------------------------------------
    def _refresh_rows(self) -> None:
        meta = self.ctx.node.meta
        image_offset = int(getattr(meta.image, "offset", -1))
        listeners = set(self.ctx.brokers())
        ids = sorted(listeners)
        if image_offset == self._seen_offset and listeners == self._coordinators:
            return
        coordinated: dict[str, bool] = {}
        rows: dict[str, _Row] = {}
        kept = 0
        moved: list[tuple[_Row, _Row]] = []  # (old, new) of a key whose offset moved, nothing else
        for key, text in meta.kv_items(group_offsets.PREFIX, refresh=False).items():
            old = self._rows.get(key)
            if old is not None and old.text is text and listeners == self._coordinators:
                rows[key] = old
                kept += 1
                continue
            if old is not None and listeners == self._coordinators:  # the same key: only its offset moved
                row = _Row(text, old.labels, old.tp, _offset(text), old.coordinated)
                if row.offset == old.offset:
                    row.ts_ms, row.ts_at = old.ts_ms, old.ts_at
                moved.append((old, row))
                rows[key] = row
                continue
            group, _, rest = key[len(group_offsets.PREFIX):].rpartition("/")
            group, _, topic = group.rpartition("/")
            if not group or not rest.isdigit():
                continue
            if group not in coordinated:  # Context.coordinator_for's rule, with the listeners read once
                coordinated[group] = ids[zlib.crc32(group.encode("utf-8")) % len(ids)] == self.ctx.node_id
            offset = _offset(text)
            labels = f'{{group="{_escape(group)}",partition="{rest}",topic="{_escape(topic)}"}}'
            row = _Row(text, labels, (topic, int(rest)), offset, coordinated[group])
            if old is not None and old.offset == offset and old.tp == row.tp:
                row.ts_ms, row.ts_at = old.ts_ms, old.ts_at
            rows[key] = row
        if kept + len(moved) != len(rows) or len(rows) != len(self._rows):
            self._table = None  # rows came or went: the arrays are built again
        elif self._table is not None:
            for old, new in moved:
                if new.coordinated:
                    self._table.move(old, new)
        self._rows = rows
        self._seen_offset, self._coordinators = image_offset, listeners

    def _bounds(self, tps: list[tuple[str, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """start, end and known (0/1) of each partition of `tps`, from memory."""
        parts = self.ctx.node.partitions
        start, end, known = np.zeros(len(tps), np.int64), np.zeros(len(tps), np.int64), np.zeros(len(tps), bool)
        for i, (topic, partition) in enumerate(tps):
            try:
                p = parts.get(topic, partition)
            except LookupError:
                continue
            s = parts.meta.get_stream(p.data_stream, refresh=False)
            start[i], end[i], known[i] = s.start_offset, p.acked_end if p.owned else s.end_offset, True
        return start, end, known

    # -- a scrape ---------------------------------------------------------------------------------
    def render(self) -> list[bytes]:
        """The two families' exposition text (HELP, TYPE and one line per series), in pieces to join (the body's
        single copy is made by /metrics)."""
        with self._lock:
            self._refresh_rows()
            if self._table is None:
                self._table = _Table([r for r in self._rows.values() if r.coordinated])
            t = self._table
            if not t.rows:
                return [HEADER, HEADER_S]
            start, end, known = self._bounds(t.tps)
            shown, end_r, start_r = known[t.where], end[t.where], start[t.where]
            lag = np.maximum(end_r - t.offset, 0)
            at = np.maximum(t.offset, start_r)
            behind = end_r > at
            stale = np.isnan(t.ts) | (t.ts_at != at)
            self._read_times(t, np.flatnonzero(shown & behind & stale), at)
            age = np.where(behind, np.maximum((time.time() * 1000 - t.ts) / 1000, 0.0), 0.0)
            age[behind & (t.ts_at != at)] = np.nan  # not read yet: no line this scrape
            if not shown.all():
                age[~shown] = np.nan
            if t.lag_text is None or not np.array_equal(lag, t.lag_shown) or not np.array_equal(shown, t.shown):
                lags = lag.tolist()
                lag_lines = ([f"{p}{v}\n" for p, v in zip(t.lag_prefix, lags, strict=True)] if shown.all() else
                             [f"{t.lag_prefix[i]}{lags[i]}\n" for i in np.flatnonzero(shown).tolist()])
                t.lag_text, t.lag_shown, t.shown = "".join(lag_lines).encode(), lag, shown
            ages = np.where(np.isnan(age), -1, age).astype(np.int64)  # whole seconds; -1: no line
            return [HEADER, t.lag_text, HEADER_S, *t.age_text(ages, behind)]

    def _read_times(self, t: _Table, missing: np.ndarray, ats: np.ndarray) -> None:
        """Read the record at `ats` of rows `missing`, within the budget (rows at the same partition and offset
        share one read); kept in the table and its rows."""
        until = time.monotonic() + READ_BUDGET_S
        done: dict[tuple[str, int, int], float] = {}
        for i in missing.tolist():
            r = t.rows[i]
            at = (r.tp[0], r.tp[1], int(ats[i]))
            if at not in done:
                if time.monotonic() >= until:
                    continue
                got = oldest_unconsumed_ms(self.ctx.node.partitions, at[0], at[1], at[2])
                done[at] = np.nan if got is None else float(got)
            r.ts_ms, r.ts_at = done[at], at[2]
            t.ts[i], t.ts_at[i] = done[at], at[2]
