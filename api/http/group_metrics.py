"""/metrics of consumer groups, for the groups this node coordinates (across a cluster each group's series come
from one node):

- `mqindex_group_lag{group,topic,partition}`: the messages a group has not consumed (end offset - committed);
- `mqindex_group_lag_seconds{group,topic,partition}`: the age of the oldest message it has not consumed (now -
  the timestamp of the record at the committed offset, in whole seconds; 0 when caught up).

Computed at each scrape from memory, without a scan and without reading the committed offsets again: the rows (one
per committed offset of a coordinated group: its label text, already escaped, its committed offset and the
timestamp of the record at that offset) are arrays kept up to date as the commits are applied (`_Rows.apply`,
called by the metadata image for every put and delete of `group_offsets/`, MetadataClient.kv_watch): a commit
changes its row's offset in place, a new key appends a row, a deleted key's row is replaced by the last one. The
rows are also kept by class, (partition, committed offset) (`_Class`: rows of a class show the same lag and the
same age in every scrape), a commit moving its row from one class to another (a few dict operations; the CPU the
applies take is exported, mqindex_group_lag_apply_cpu_seconds_total / mqindex_group_lag_applies_total). While the
rows are in few classes (a class per 4 rows at most: many groups at the same offsets), a scrape works per class
(`_render_classes`): the lag and age of each class, and a class's lines made from its template (its line prefixes
kept contiguous as commits land, a newline after each: one `replace` of the newline by the value and a newline),
done again only when the class's members or value changed. Otherwise a scrape copies the arrays,
takes the end offsets of the partitions (a led partition's acknowledged end; another node's: the end in the
metadata image, which trails the leader by up to an upload interval), computes every lag at once (numpy) and writes
the lines: rows that show the same value are written as one `bytes.join` of their line prefixes with the value as
the separator (`_classes`), and the text is used again while no value changed. The record timestamps are read once
per (partition, offset) and kept (api/http/group_lag_times.py: read ahead on a thread of their own when a commit
brings a new pair; the rows are grouped by pair with numpy, Python works per pair), a scrape reading what is still
missing within READ_BUDGET_S: a row whose record is not read yet has no
`_seconds` line in that scrape (the next one adds it).

The rows are built again from the whole KV segment only when the set of Kafka listeners changes (which node
coordinates which group) or the metadata image was reloaded from a snapshot.

The lines are exposition text (`render()`, in pieces), sent after the registry's on /metrics without being joined
into one body (api/http/metrics_route.py):
prometheus_client's per-sample objects and formatting cost microseconds a series, too much for 100,000 of them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Callable

import numpy as np

from api.http.group_lag_times import RecordTimes
from api.kafka.context import Context
from broker.partitions.kafka_clients import group_offsets

log = logging.getLogger(__name__)

READ_BUDGET_S = 0.01  # record reads (for the lag in time) per scrape; the rest waits for the next scrape
HEADER = (b"# HELP mqindex_group_lag Messages a consumer group has not consumed: the partition's end offset minus "
          b"the group's committed offset\n# TYPE mqindex_group_lag gauge\n")
HEADER_CPU = (b"# HELP mqindex_group_lag_render_cpu_seconds CPU time this scrape's consumer group lag lines took "
              b"to compute, on the thread that wrote them\n# TYPE mqindex_group_lag_render_cpu_seconds gauge\n")
HEADER_APPLY = (b"# HELP mqindex_group_lag_apply_cpu_seconds_total CPU time spent keeping the consumer group lag rows "
                b"up to date as committed offsets were stored or deleted\n"
                b"# TYPE mqindex_group_lag_apply_cpu_seconds_total counter\n"
                b"# HELP mqindex_group_lag_applies_total Committed offsets stored or deleted that the consumer group "
                b"lag rows followed\n# TYPE mqindex_group_lag_applies_total counter\n"
                b"# HELP mqindex_group_lag_time_read_cpu_seconds_total CPU time spent reading ahead the times of the "
                b"records at newly committed offsets (for mqindex_group_lag_seconds)\n"
                b"# TYPE mqindex_group_lag_time_read_cpu_seconds_total counter\n")
HEADER_S = (b"# HELP mqindex_group_lag_seconds Age of the oldest message a consumer group has not consumed (now "
            b"minus the timestamp of the record at its committed offset; 0 when caught up)\n"
            b"# TYPE mqindex_group_lag_seconds gauge\n")


def _offset(text: str) -> int:
    """The offset of a stored commit: group_offsets.commit writes '{"offset": N, ...' (read without a JSON parse);
    anything else is parsed."""
    if text.startswith('{"offset": '):
        end = text.find(",", 11)
        digits = text[11:end] if end > 0 else ""
        if digits.isdigit():
            return int(digits)
    return int(json.loads(text)["offset"])


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _classes(key: np.ndarray, prefixes: list[bytes]) -> list[tuple[int, list[bytes]]]:
    """The rows grouped by equal `key` (NaN: no line): (a row of the class, the line prefixes of its rows)."""
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    order = order[~np.isnan(sorted_key)]
    sorted_key = key[order]
    cuts = np.flatnonzero(sorted_key[1:] != sorted_key[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(order)] if len(order) else []
    ordered = [prefixes[i] for i in order.tolist()]
    firsts = order[bounds[:-1]].tolist() if bounds else []
    return [(first, ordered[a:b]) for first, a, b in zip(firsts, bounds, bounds[1:], strict=False)]


def _lines(classes: list[tuple[int, list[bytes]]] | None, prefixes: list[bytes], values: list[int]) -> list[bytes]:
    """The lines `prefix value` of the rows with a value >= 0, in pieces: a class's lines are one `bytes.join` of
    its prefixes with its value as the separator; without classes (mostly distinct values), a line each."""
    if classes is None:
        return [b"".join([b"%s%d\n" % (p, v) for p, v in zip(prefixes, values, strict=True) if v >= 0])]
    out: list[bytes] = []
    for first, members in classes:
        sep = b"%d\n" % values[first]
        out.append(sep.join(members))
        out.append(sep)
    return out


def _cut(template: bytearray, prefix: bytes) -> bool:
    """Take `prefix` and its newline out of a class's template (False: not found at the start of an entry)."""
    entry = prefix + b"\n"
    at = template.find(entry)
    if at < 0 or (at and template[at - 1] != 10):
        return False
    del template[at:at + len(entry)]
    return True


class _Class:
    """The rows at one (partition, committed offset): in every scrape they show the same lag and the same age, so
    their lines are the class's template with the value in place of each newline. Kept by `_Rows.apply` as commits
    land (a row that moves leaves its class for another); `version` moves with the members.

    The templates (`lag_t`, `age_t`) are the members' line prefixes, each followed by a newline, in one contiguous
    buffer: `template.replace(b"\n", b"%d\n" % value)` is the class's lines (a prefix never holds a newline: label
    values are escaped). A joining row's prefixes are appended at commit time, while they are in the CPU's cache; a
    scrape then reads 7 KB a class from one place instead of 100 prefixes scattered over the heap (the prefixes
    were made group by group as the commits came: joining them at a scrape was mostly cache misses, ~30 ms for
    200,000 of them). A row leaving cuts its prefixes out of the templates (found by their text: a prefix followed
    by a newline appears once in a class, at the start of an entry, as the labels' quotes inside values are
    escaped); were one not found, the class would be `stale` and its templates made again from the members by the
    next scrape."""

    __slots__ = ("where", "offset", "lag", "age", "version", "lag_t", "age_t", "stale")

    def __init__(self, where: int, offset: int) -> None:
        self.where, self.offset, self.version, self.stale = where, offset, 0, False
        self.lag: dict[str, bytes] = {}  # KV key -> its lag line prefix
        self.age: dict[str, bytes] = {}  # KV key -> its lag_seconds line prefix
        self.lag_t, self.age_t = bytearray(), bytearray()

    def add(self, key: str, lag_prefix: bytes, age_prefix: bytes) -> None:
        self.lag[key], self.age[key] = lag_prefix, age_prefix
        self.version += 1
        if not self.stale:
            self.lag_t += lag_prefix
            self.lag_t += b"\n"
            self.age_t += age_prefix
            self.age_t += b"\n"

    def drop(self, key: str) -> None:
        lag_prefix, age_prefix = self.lag.pop(key), self.age.pop(key)
        self.version += 1
        if not self.stale and not (_cut(self.lag_t, lag_prefix) and _cut(self.age_t, age_prefix)):
            self.stale = True
            self.lag_t, self.age_t = bytearray(), bytearray()

    def templates(self) -> tuple[bytearray, bytearray]:
        """The templates, made again from the members if a row left."""
        if self.stale:
            self.lag_t, self.age_t = bytearray(b"\n".join(self.lag.values())), bytearray(b"\n".join(self.age.values()))
            self.lag_t += b"\n"
            self.age_t += b"\n"
            self.stale = False
        return self.lag_t, self.age_t


class _Rows:
    """The committed offsets of the groups this node coordinates (as `ids`, the listener node ids, assign them),
    as arrays kept up to date by `apply` (the metadata image's watch of group_offsets/, in the thread applying
    records, under the metadata client's lock). `layout` moves when a row comes or goes (the line prefixes'
    order changed). The rows are also kept by class (`_Class`, `classes`): what a scrape renders when the rows
    are in few classes. `apply_ns` and `applied`: the CPU the applies took and their number (/metrics)."""

    def __init__(self, ids: list[int], node_id: int,
                 ahead: Callable[[str, int, int], None] | None = None) -> None:
        self.ids, self.node_id = ids, node_id
        self.ahead = ahead  # told of each new (partition, offset): its record's time is read ahead (RecordTimes)
        self.lock = threading.Lock()  # apply vs a scrape's copy (held for copies only)
        self.index: dict[str, int] = {}  # KV key -> row
        self.keys: list[str] = []
        self.lag_prefix: list[bytes] = []
        self.age_prefix: list[bytes] = []
        self.tps: list[tuple[str, int]] = []  # the partitions the rows point at (`where`)
        self.tp_index: dict[tuple[str, int], int] = {}
        self.coordinated: dict[str, bool] = {}  # group -> whether this node coordinates it
        self.n = 0
        self.layout = 0
        self.where = np.zeros(1024, np.int64)
        self.offset = np.zeros(1024, np.int64)
        self.ts = np.full(1024, np.nan)  # the timestamp of the record at `ts_at` (NaN: not read yet)
        self.ts_at = np.full(1024, -1, np.int64)  # max(offset, the partition's start) when it was read
        self.cls: list[_Class] = []  # each row's class
        self.classes: dict[tuple[int, int], _Class] = {}  # (where, offset) -> its rows
        self.apply_ns = self.applied = 0

    def apply(self, key: str, value: str | None) -> None:
        """A put (`value`) or delete (None) of a committed offset; never raises into the metadata apply."""
        t0 = time.thread_time_ns()
        try:
            with self.lock:
                self._apply(key, value)
        except Exception:  # noqa: BLE001 - a bad stored value must not stop the metadata image
            log.warning("consumer group lag: a committed offset not understood, left out of /metrics",
                        extra={"key": key}, exc_info=True)
            with self.lock:
                if key in self.index:
                    self._remove(self.index[key])
        self.apply_ns += time.thread_time_ns() - t0
        self.applied += 1

    def _join(self, i: int, key: str, where: int, offset: int) -> None:
        """Row i (KV key `key`) joins the class of (where, offset)."""
        c = self.classes.get((where, offset))
        if c is None:
            c = self.classes[(where, offset)] = _Class(where, offset)
            if self.ahead is not None:
                self.ahead(*self.tps[where], offset)
        c.add(key, self.lag_prefix[i], self.age_prefix[i])
        if i == len(self.cls):
            self.cls.append(c)
        else:
            self.cls[i] = c

    def _leave(self, i: int, key: str) -> None:
        c = self.cls[i]
        c.drop(key)
        if not c.lag:
            del self.classes[(c.where, c.offset)]

    def _apply(self, key: str, value: str | None) -> None:
        i = self.index.get(key)
        if value is None:
            if i is not None:
                self._remove(i)
            return
        if i is not None:
            offset = _offset(value)
            if offset != self.cls[i].offset:
                self._leave(i, key)
                self.offset[i] = offset
                self._join(i, key, self.cls[i].where, offset)
            return
        group, _, rest = key[len(group_offsets.PREFIX):].rpartition("/")
        group, _, topic = group.rpartition("/")
        if not group or not rest.isdigit():
            return
        coordinated = self.coordinated.get(group)
        if coordinated is None:  # Context.coordinator_for's rule, with the listeners read once
            coordinated = self.ids[zlib.crc32(group.encode("utf-8")) % len(self.ids)] == self.node_id
            self.coordinated[group] = coordinated
        if not coordinated:
            return
        offset = _offset(value)
        tp = (topic, int(rest))
        where = self.tp_index.get(tp)
        if where is None:
            where = self.tp_index[tp] = len(self.tps)
            self.tps.append(tp)
        if self.n == len(self.offset):
            self._grow()
        i = self.n
        self.n += 1
        self.index[key] = i
        self.keys.append(key)
        labels = f'{{group="{_escape(group)}",partition="{rest}",topic="{_escape(topic)}"}}'
        self.lag_prefix.append(f"mqindex_group_lag{labels} ".encode())
        self.age_prefix.append(f"mqindex_group_lag_seconds{labels} ".encode())
        self.where[i], self.offset[i], self.ts[i], self.ts_at[i] = where, offset, np.nan, -1
        self._join(i, key, where, offset)
        self.layout += 1

    def _grow(self) -> None:
        size = 2 * len(self.offset)
        for name, fill in (("where", 0), ("offset", 0), ("ts", np.nan), ("ts_at", -1)):
            old = getattr(self, name)
            new = np.full(size, fill, old.dtype)
            new[:len(old)] = old
            setattr(self, name, new)

    def _remove(self, i: int) -> None:
        """Row i goes; the last row takes its place."""
        last = self.n - 1
        self._leave(i, self.keys[i])
        del self.index[self.keys[i]]
        if i != last:
            self.keys[i], self.lag_prefix[i], self.age_prefix[i], self.cls[i] = (
                self.keys[last], self.lag_prefix[last], self.age_prefix[last], self.cls[last])
            self.index[self.keys[i]] = i
            for a in (self.where, self.offset, self.ts, self.ts_at):
                a[i] = a[last]
        self.keys.pop()
        self.cls.pop()
        self.lag_prefix.pop()
        self.age_prefix.pop()
        self.n = last
        self.layout += 1

    def copy(self, last: _View | None = None) -> _View:
        """The rows now (the lists of `last`, a copy of the same layout, are used again: rows did not come or go)."""
        with self.lock:
            n = self.n
            if last is not None and last.layout == self.layout:
                tps, lag_prefix, age_prefix = last.tps, last.lag_prefix, last.age_prefix
            else:
                tps, lag_prefix, age_prefix = list(self.tps), self.lag_prefix[:], self.age_prefix[:]
            return _View(self.layout, tps, self.where[:n].copy(), self.offset[:n].copy(), self.ts[:n].copy(),
                         self.ts_at[:n].copy(), lag_prefix, age_prefix)

    def keep_times(self, layout: int, rows: np.ndarray, ts: np.ndarray, ts_at: np.ndarray) -> None:
        """The record times a scrape read for `rows` of the view of `layout` (dropped if rows came or went)."""
        with self.lock:
            if layout == self.layout:
                self.ts[rows], self.ts_at[rows] = ts, ts_at


class _Shown:
    """A class's lines as the last scrape rendered them: for its members at `version` and a value."""

    __slots__ = ("version", "lag_value", "lag_text", "age_value", "age_text")

    def __init__(self, version: int) -> None:
        self.version = version
        self.lag_value = self.age_value = -1
        self.lag_text: bytes | bytearray = b""
        self.age_text: bytes | bytearray = b""


class _View:
    """A scrape's copy of the rows."""

    def __init__(self, layout: int, tps: list[tuple[str, int]], where: np.ndarray, offset: np.ndarray,
                 ts: np.ndarray, ts_at: np.ndarray, lag_prefix: list[bytes], age_prefix: list[bytes]) -> None:
        self.layout, self.tps, self.where, self.offset, self.ts, self.ts_at = layout, tps, where, offset, ts, ts_at
        self.lag_prefix, self.age_prefix = lag_prefix, age_prefix


class GroupLagExposition:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()  # one scrape at a time
        self._rows: _Rows | None = None
        self._view: _View | None = None  # the last scrape's copy of the rows
        self._image: object = None  # the metadata image `_rows` watches
        self._listeners: set[int] = set()  # the listener node ids `_rows` was built for
        # the text of the last scrape, used again while its values and the rows stay
        self._lag_key: tuple[int, np.ndarray] | None = None
        self._lag_text: list[bytes] = []
        self._age_key: tuple[int, np.ndarray] | None = None
        self._age_classes: list[tuple[int, list[bytes]]] = []
        self._streams: list[int] = []  # the data stream of each partition of the last scrape's view (`_bounds`)
        self._times = RecordTimes(lambda: ctx.node.partitions)  # the records' times, read ahead or by scrapes
        self._shown: dict[_Class, _Shown] = {}  # the classes the last scrape rendered by class
        try:
            self._watch()  # the rows are built now, not by the first scrape
        except Exception:  # noqa: BLE001 - the first scrape tries again
            log.warning("consumer group lag: rows not built at start", exc_info=True)

    def _watch(self) -> _Rows:
        """The rows, built again (watching the metadata image anew) when the listeners or the image changed."""
        meta = self.ctx.node.meta
        listeners = set(self.ctx.brokers())
        if self._rows is not None and listeners == self._listeners and meta.image is self._image:
            return self._rows
        if self._rows is not None and hasattr(self._image, "kv"):
            self._image.kv.unwatch(group_offsets.PREFIX, self._rows.apply)  # type: ignore[attr-defined]
        rows = _Rows(sorted(listeners), self.ctx.node_id, self._times.ahead)
        if self._rows is not None:  # the counters go on
            rows.apply_ns, rows.applied = self._rows.apply_ns, self._rows.applied
        self._image = meta.kv_watch(group_offsets.PREFIX, rows.apply)
        self._rows, self._listeners, self._view, self._shown = rows, listeners, None, {}
        self._lag_key = self._age_key = None
        return rows

    def _bounds(self, tps: list[tuple[str, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """start, end and known (0/1) of each partition of `tps`, from memory."""
        parts = self.ctx.node.partitions
        start, end, known = np.zeros(len(tps), np.int64), np.zeros(len(tps), np.int64), np.zeros(len(tps), bool)
        self._streams = streams = [-1] * len(tps)
        for i, (topic, partition) in enumerate(tps):
            try:
                p = parts.get(topic, partition)
            except LookupError:
                continue
            s = parts.meta.get_stream(p.data_stream, refresh=False)
            streams[i] = p.data_stream
            start[i], end[i], known[i] = s.start_offset, p.acked_end if p.owned else s.end_offset, True
        return start, end, known

    # -- a scrape ---------------------------------------------------------------------------------
    def render(self) -> list[bytes | bytearray]:
        """The two families' exposition text (HELP, TYPE and one line per series), in pieces (/metrics sends them
        without joining them whole), and the CPU this render took on its thread (its own cost, apart from the
        rest of the process)."""
        with self._lock:
            t0 = time.thread_time()
            pieces = self._render()
            cost = time.thread_time() - t0
            rows = self._rows
            applied = (rows.apply_ns, rows.applied) if rows is not None else (0, 0)
            return [*pieces, HEADER_CPU, b"mqindex_group_lag_render_cpu_seconds %.6f\n" % cost, HEADER_APPLY,
                    b"mqindex_group_lag_apply_cpu_seconds_total %.9f\nmqindex_group_lag_applies_total %d\n"
                    b"mqindex_group_lag_time_read_cpu_seconds_total %.9f\n"
                    % (applied[0] / 1e9, applied[1], self._times.read_ns / 1e9)]

    def _render(self) -> list[bytes | bytearray]:
        rows = self._watch()
        by_class = self._render_classes(rows)
        if by_class is not None:
            return by_class
        v = self._view = rows.copy(self._view)
        if not len(v.offset):
            return [HEADER, HEADER_S]
        start, end, known = self._bounds(v.tps)
        shown, end_r, start_r = known[v.where], end[v.where], start[v.where]
        lag = np.maximum(end_r - v.offset, 0)
        at = np.maximum(v.offset, start_r)
        behind = end_r > at
        stale = np.isnan(v.ts) | (v.ts_at != at)
        self._read_times(rows, v, np.flatnonzero(shown & behind & stale), at)
        age = np.where(behind, np.maximum((time.time() * 1000 - v.ts) / 1000, 0.0), 0.0)
        age[behind & (v.ts_at != at)] = np.nan  # not read yet: no line this scrape
        if not shown.all():
            age[~shown] = np.nan
        return [HEADER, *self._lag_lines(v, np.where(shown, lag, -1)), HEADER_S, *self._age_lines(v, age, behind)]

    def _render_classes(self, rows: _Rows) -> list[bytes | bytearray] | None:
        """The lines by class (`_Class`), when the rows are in few classes (a class per 4 rows at most; None
        otherwise): a scrape works per class, not per row. The classes' figures are computed first (numpy, and the
        record times still missing read within the budget), then the lines are taken in one hold of the rows'
        lock (one state of the rows: a row that moves meanwhile shows once), each class's lines made again from
        its templates (`_Class`: contiguous, not the scattered prefixes) only when its members or its value
        changed."""
        with rows.lock:
            if not rows.n or len(rows.classes) * 4 > rows.n:
                return None
            tps = rows.tps[:]
            keys = list(rows.classes)
        self._view = None
        n = len(keys)
        where = np.fromiter((w for w, _ in keys), np.int64, n)
        offset = np.fromiter((o for _, o in keys), np.int64, n)
        start, end, known = self._bounds(tps)
        shown, end_c = known[where], end[where]
        lag = np.maximum(end_c - offset, 0)
        at = np.maximum(offset, start[where])
        behind = end_c > at
        ts = self._class_times(tps, where, at, shown & behind)
        now_ms = time.time() * 1000
        age = np.where(behind, np.maximum((now_ms - ts) / 1000, 0.0), 0.0)
        ages = np.where(np.isnan(age) | ~shown, -1, age).astype(np.int64)  # whole seconds; -1: no line
        lag = np.where(shown, lag, -1)
        figures = dict(zip(keys, zip(lag.tolist(), ages.tolist(), strict=True), strict=True))
        seen: dict[_Class, _Shown] = {}
        lag_out: list[bytes | bytearray] = [HEADER]
        age_out: list[bytes | bytearray] = [HEADER_S]
        with rows.lock:
            # the texts of classes gone (every group moved) are freed first: the new texts reuse their memory
            # instead of touching 15 MB of fresh pages
            last = self._shown
            for c in [c for c in last if rows.classes.get((c.where, c.offset)) is not c]:
                del last[c]
            for key, c in rows.classes.items():
                got = figures.get(key)
                lv, av = got if got is not None else self._late(key, tps, start, end, known, now_ms)
                r = last.pop(c, None)
                if r is None or r.version != c.version:
                    r = _Shown(c.version)
                seen[c] = r
                if lv < 0:
                    continue
                if r.lag_value != lv:
                    r.lag_value, r.lag_text = lv, c.templates()[0].replace(b"\n", b"%d\n" % lv)
                lag_out.append(r.lag_text)
                if av >= 0:
                    if r.age_value != av:
                        r.age_value, r.age_text = av, c.templates()[1].replace(b"\n", b"%d\n" % av)
                    age_out.append(r.age_text)
        self._shown = seen
        return lag_out + age_out

    def _late(self, key: tuple[int, int], tps: list[tuple[str, int]], start: np.ndarray, end: np.ndarray,
              known: np.ndarray, now_ms: float) -> tuple[int, int]:
        """(lag, age) of a class that came between the figures and the lines (-1: no line; a partition not known
        yet, or a record time not read yet: its lines come with the next scrape)."""
        w, o = key
        if w >= len(tps) or not known[w]:
            return -1, -1
        e, at = int(end[w]), max(o, int(start[w]))
        if e <= at:
            return max(e - o, 0), 0
        t = self._times.times.get((self._streams[w], at))
        return max(e - o, 0), (-1 if t is None else int(max((now_ms - t) / 1000, 0.0)))

    def _class_times(self, tps: list[tuple[str, int]], where: np.ndarray, at: np.ndarray,
                     need: np.ndarray) -> np.ndarray:
        """The record time at `at` of each class `need`s (NaN: not read yet, or not needed)."""
        ts = np.full(len(where), np.nan)
        idx = np.flatnonzero(need)
        ts[idx] = self._times.get(tps, self._streams, list(zip(where[idx].tolist(), at[idx].tolist(), strict=True)),
                                  READ_BUDGET_S)
        return ts

    def _lag_lines(self, v: _View, lag: np.ndarray) -> list[bytes]:
        """The lag lines (-1: no line), the last scrape's while no lag changed."""
        if self._lag_key is None or self._lag_key[0] != v.layout or not np.array_equal(self._lag_key[1], lag):
            key = np.where(lag < 0, np.nan, lag.astype(np.float64))
            classes = _classes(key, v.lag_prefix) if len(np.unique(lag)) * 4 <= len(lag) else None
            self._lag_text = _lines(classes, v.lag_prefix, lag.tolist())
            self._lag_key = (v.layout, lag)
        return self._lag_text

    def _age_lines(self, v: _View, age: np.ndarray, behind: np.ndarray) -> list[bytes]:
        """The lag_seconds lines. Rows that read the same record time (and are behind, or are all caught up) show
        the same age in every scrape: their classes are kept while the times stay."""
        ages = np.where(np.isnan(age), -1, age).astype(np.int64)  # whole seconds; -1: no line
        key = np.where(behind, v.ts, -np.inf)  # caught up: 0, one class; NaN (not read): its own lines
        key = np.where(ages < 0, np.nan, key)
        if (self._age_key is None or self._age_key[0] != v.layout
                or not np.array_equal(key, self._age_key[1], equal_nan=True)):
            self._age_classes = _classes(key, v.age_prefix)
            self._age_key = (v.layout, key)
        classes = self._age_classes if len(self._age_classes) * 4 <= len(ages) else None
        return _lines(classes, v.age_prefix, ages.tolist())

    def _read_times(self, rows: _Rows, v: _View, missing: np.ndarray, ats: np.ndarray) -> None:
        """Fill in the record time at `ats` of rows `missing`, kept in the view and the rows. The rows are grouped
        by (partition, offset) with numpy (many groups at the same offsets share one time), whose times
        RecordTimes gives. Python work per pair, not per row."""
        if not len(missing):
            return
        where, at = v.where[missing], ats[missing]
        order = np.lexsort((at, where))
        sw, sa = where[order], at[order]
        first = np.ones(len(order), bool)
        first[1:] = (sw[1:] != sw[:-1]) | (sa[1:] != sa[:-1])
        pair_of = np.empty(len(order), np.int64)
        pair_of[order] = np.cumsum(first) - 1  # each missing row's pair
        got = self._times.get(v.tps, self._streams, list(zip(sw[first].tolist(), sa[first].tolist(), strict=True)),
                              READ_BUDGET_S)
        ts = np.array(got, np.float64)[pair_of]
        known = ~np.isnan(ts)
        idx = missing[known]
        v.ts[idx], v.ts_at[idx] = ts[known], at[known]
        if len(idx):
            rows.keep_times(v.layout, idx, v.ts[idx], v.ts_at[idx])
