"""/metrics of consumer groups, for the groups this node coordinates (across a cluster each group's series come
from one node):

- `mqindex_group_lag{group,topic,partition}`: the messages a group has not consumed (end offset - committed);
- `mqindex_group_lag_seconds{group,topic,partition}`: the age of the oldest message it has not consumed (now -
  the timestamp of the record at the committed offset; 0 when caught up).

Computed at each scrape from memory, without a scan and without reading records again: a table of rows (one per
committed offset of a coordinated group) is kept between scrapes and rebuilt only for the keys whose stored
text changed, and only when the metadata image moved (`image.offset`); each row keeps its label text, already
escaped, its committed offset and the timestamp of the record at that offset. A scrape takes the end offsets of
the partitions (a led partition's acknowledged end; another node's: the end in the metadata image, which trails
the leader by up to an upload interval), computes every lag at once (numpy) and writes the lines. The record
timestamps are read once per (partition, committed offset), at most READ_BUDGET_S of reads a scrape: a row whose
record is not read yet has no `_seconds` line in that scrape (the next one adds it).

The lines are exposition text (`render()`), appended to the registry's on /metrics (api/http/app.py):
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


class GroupLagExposition:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._rows: dict[str, _Row] = {}  # KV key -> row
        self._seen_offset: int | None = None  # the metadata image's offset when the rows were last checked
        self._coordinators: set[int] = set()  # the listener node ids the coordinated flags were computed for
        self._lock = threading.Lock()  # one scrape at a time updates the table

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
        for key, text in meta.kv_items(group_offsets.PREFIX, refresh=False).items():
            old = self._rows.get(key)
            if old is not None and old.text is text and listeners == self._coordinators:
                rows[key] = old
                continue
            group, _, rest = key[len(group_offsets.PREFIX):].rpartition("/")
            group, _, topic = group.rpartition("/")
            if not group or not rest.isdigit():
                continue
            if group not in coordinated:  # Context.coordinator_for's rule, with the listeners read once
                coordinated[group] = ids[zlib.crc32(group.encode("utf-8")) % len(ids)] == self.ctx.node_id
            offset = int(json.loads(text)["offset"])
            labels = f'{{group="{_escape(group)}",partition="{rest}",topic="{_escape(topic)}"}}'
            row = _Row(text, labels, (topic, int(rest)), offset, coordinated[group])
            if old is not None and old.offset == offset and old.tp == row.tp:
                row.ts_ms, row.ts_at = old.ts_ms, old.ts_at
            rows[key] = row
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
    def render(self) -> bytes:
        """The two families' exposition text (HELP, TYPE and one line per series)."""
        with self._lock:
            self._refresh_rows()
            rows = [r for r in self._rows.values() if r.coordinated]
            if not rows:
                return HEADER + HEADER_S
            tps = sorted({r.tp for r in rows})
            index = {tp: i for i, tp in enumerate(tps)}
            start, end, known = self._bounds(tps)
            where = np.fromiter((index[r.tp] for r in rows), np.int64, len(rows))
            offset = np.fromiter((r.offset for r in rows), np.int64, len(rows))
            shown = known[where]
            lag = np.maximum(end[where] - offset, 0)
            behind = np.maximum(end[where] - np.maximum(offset, start[where]), 0) > 0
            ts = np.fromiter((r.ts_ms for r in rows), np.float64, len(rows))
            at = np.maximum(offset, start[where])
            stale = np.isnan(ts) | (np.fromiter((r.ts_at for r in rows), np.int64, len(rows)) != at)
            ts[stale] = np.nan
            self._read_times(rows, np.flatnonzero(shown & behind & stale), at, ts)
            age = np.where(behind, (time.time() * 1000 - ts) / 1000, 0.0)
            age = np.maximum(age, 0.0)
            with_age = shown & ~np.isnan(age)
            lines = [HEADER]
            lag_text = lag.astype(str)
            lines.append("".join(f"mqindex_group_lag{rows[i].labels} {lag_text[i]}\n"
                                 for i in np.flatnonzero(shown).tolist()).encode())
            lines.append(HEADER_S)
            age_text = np.char.mod("%.3f", age)
            lines.append("".join(f"mqindex_group_lag_seconds{rows[i].labels} {age_text[i]}\n"
                                 for i in np.flatnonzero(with_age).tolist()).encode())
            return b"".join(lines)

    def _read_times(self, rows: list[_Row], missing: np.ndarray, ats: np.ndarray, ts: np.ndarray) -> None:
        """Read the record at the committed offset of rows `missing`, within the budget; fill `ts` and the rows
        (rows at the same partition and offset share one read)."""
        until = time.monotonic() + READ_BUDGET_S
        done: dict[tuple[str, int, int], float] = {}
        for i in missing.tolist():
            r = rows[i]
            at = (r.tp[0], r.tp[1], int(ats[i]))
            if at not in done:
                if time.monotonic() >= until:
                    continue
                got = oldest_unconsumed_ms(self.ctx.node.partitions, at[0], at[1], at[2])
                done[at] = np.nan if got is None else float(got)
            r.ts_ms, r.ts_at = done[at], at[2]
            ts[i] = done[at]
