"""Filters Spark pushes into the mqindex source, and what the source does with them.

Taken (answered exactly by the source, so Spark does not evaluate them again):
- `offset` and `partition` comparisons (=, <, <=, >, >=, IN for partition): they narrow each partition's
  offset range before the metadata lookup, so objects outside it are never listed nor read;
- `timestamp` comparisons: rows are filtered by record timestamp while reading, and object parts whose
  data was committed before the lower bound are pruned at planning (plan.py);
- `key = b` / `key IN (...)`: only records with one of these keys are returned; with the `index` option
  the keys are looked up in the cluster's key index (HTTP of an `mqindex serve` node) first, and only the
  blocks holding the hits are read.
- `IS NOT NULL` of any column (Spark adds it to every comparison).
Everything else is returned to Spark, which filters the rows itself.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from jobs.spark_source.plan import Bounds

NEVER_NULL = frozenset({"topic", "partition", "offset", "timestamp", "timestampType", "headers"})


def _us(v: Any) -> int | None:
    """A timestamp literal in microseconds since the epoch (naive datetimes are local time, as PySpark's)."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.astimezone()
        delta = v - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


@dataclass
class Pushed:
    """What the source took from Spark's filters."""

    bounds: Bounds = field(default_factory=Bounds)
    keys: frozenset[bytes] | None = None  # rows must have one of these keys
    not_null: frozenset[str] = frozenset()  # of key / value: rows must have one
    taken: list[str] = field(default_factory=list)  # the filters taken, as text for explain and logs

    def describe(self) -> str:
        return ", ".join(self.taken) if self.taken else "none"


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _take(p: Pushed, f: Filter) -> bool:
    """Tighten `p` with `f`; False when the source cannot answer `f` exactly."""
    if not isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In, IsNotNull)):
        return False
    if len(f.attribute) != 1:
        return False
    col = f.attribute[0]
    if isinstance(f, IsNotNull):
        if col in NEVER_NULL:
            return True
        if col in ("key", "value"):
            p.not_null = p.not_null | {col}
            return True
        return False
    if col == "key":
        if isinstance(f, EqualTo) and isinstance(f.value, (bytes, bytearray)):
            vals = {bytes(f.value)}
        elif isinstance(f, In) and f.value and all(isinstance(v, (bytes, bytearray)) for v in f.value):
            vals = {bytes(v) for v in f.value}
        else:
            return False
        p.keys = frozenset(vals) if p.keys is None else p.keys & vals
        return True
    if col == "partition":
        if isinstance(f, In) and all(_int(v) is not None for v in f.value):
            p.bounds = p.bounds.tighten(partitions=frozenset(f.value))
            return True
        v = _int(getattr(f, "value", None))
        if v is None or isinstance(f, In):
            return False
        lo, hi = {EqualTo: (v, v + 1), GreaterThan: (v + 1, None), GreaterThanOrEqual: (v, None),
                  LessThan: (None, v), LessThanOrEqual: (None, v + 1)}[type(f)]
        rng = range(max(lo or 0, 0), hi if hi is not None else 1 << 16)
        p.bounds = p.bounds.tighten(partitions=frozenset(rng))
        return True
    if col == "offset":
        v = _int(getattr(f, "value", None))
        if v is None or isinstance(f, In):
            return False
        lo, hi = {EqualTo: (v, v + 1), GreaterThan: (v + 1, None), GreaterThanOrEqual: (v, None),
                  LessThan: (None, v), LessThanOrEqual: (None, v + 1)}[type(f)]
        p.bounds = p.bounds.tighten(offset_lo=lo, offset_hi=hi)
        return True
    if col == "timestamp":
        us = _us(getattr(f, "value", None))
        if us is None or isinstance(f, In):
            return False
        floor_ms, ceil_ms = us // 1000, math.ceil(us / 1000)
        lo, hi = {EqualTo: (ceil_ms, floor_ms + 1), GreaterThan: (floor_ms + 1, None),
                  GreaterThanOrEqual: (ceil_ms, None), LessThan: (None, ceil_ms),
                  LessThanOrEqual: (None, floor_ms + 1)}[type(f)]
        p.bounds = p.bounds.tighten(from_ms=lo, to_ms=hi)
        return True
    return False


def _text(f: Filter) -> str:
    value = getattr(f, "value", None)
    if isinstance(value, dt.datetime):
        value = value.isoformat()
    return f"{type(f).__name__}({'.'.join(f.attribute)}, {value!r})"


def push(p: Pushed, filters: Iterable[Filter]) -> Iterator[Filter]:
    """Take what the source answers exactly into `p`; yield the rest (for Spark to evaluate)."""
    for f in filters:
        if _take(p, f):
            p.taken.append(_text(f))
        else:
            yield f
