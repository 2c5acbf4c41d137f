"""Index entries of stored records, read back from one object: the executor side of batch index builds.

`object_entries` reads the blocks of one stream range of one object (ranged GETs through
`ObjectReader`), decodes the Kafka record batches and yields, for each record whose store time falls
in [lo, hi), the same entry the broker's dispatcher hands to the index when the record is produced:
offset, size (key + value + header names and values, as the produce path counts it), store time (the
append time stored with the record, as the broker indexed it live; for a record stored without one, the
record's timestamp: see broker/partitions/index_time.py) and the record's index keys.

`record_keys(record, kinds)` is `broker.partitions.records.index_keys` restricted to the chosen kinds (the key,
header KEYS split on spaces, header UNIQ_KEY); with all three it returns exactly `index_keys(record)`.

Imports only the object and record codecs and storage_tier (no metadata client), so Spark executors
can run it with nothing but network access to the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

from broker.objects.reader import ObjectReader, RangeSource
from broker.partitions.key_text import key_text
from broker.partitions.records import HEADER_KEYS, HEADER_UNIQ_KEY, Record, parse_batches, record_size

KIND_RECORD_KEY = "record-key"
KIND_KEYS = "KEYS"
KIND_UNIQ_KEY = "UNIQ_KEY"
ALL_KINDS: tuple[str, ...] = (KIND_RECORD_KEY, KIND_KEYS, KIND_UNIQ_KEY)


def parse_kinds(spec: str | Iterable[str]) -> tuple[str, ...]:
    """'record-key,KEYS' -> ('record-key', 'KEYS'), in the canonical order; ValueError on an unknown kind."""
    items = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [s for s in items if s not in ALL_KINDS]
    if unknown:
        raise ValueError(f"unknown key kind(s) {', '.join(map(repr, unknown))}; use {','.join(ALL_KINDS)}")
    if not items:
        raise ValueError(f"no key kind given; use some of {','.join(ALL_KINDS)}")
    return tuple(k for k in ALL_KINDS if k in items)


def record_keys(record: Record, kinds: tuple[str, ...] = ALL_KINDS) -> list[str]:
    """Keys the record is indexed under, de-duplicated in order (see broker.partitions.records.index_keys)."""
    out: list[str] = []

    def add(raw: bytes | None) -> None:
        if raw:
            k = key_text(raw)
            if k not in out:
                out.append(k)

    if KIND_RECORD_KEY in kinds:
        add(record.key)
    if KIND_KEYS in kinds:
        for name, value in record.headers:
            if name == HEADER_KEYS and value:
                for part in value.split(b" "):
                    add(part)
    if KIND_UNIQ_KEY in kinds:
        for name, value in record.headers:
            if name == HEADER_UNIQ_KEY:
                add(value)
    return out


class RecordEntry(NamedTuple):
    offset: int
    size: int
    store_time_ms: int
    keys: list[str]


def object_entries(store: RangeSource, key: str, size: int | None, stream_id: int, start: int, end: int,
                   kinds: tuple[str, ...] = ALL_KINDS, lo: int = 0, hi: int = 1 << 62) -> Iterator[RecordEntry]:
    """Entries of the records at offsets [start, end) of `stream_id` in the object at `key`, whose
    store time is in [lo, hi) and which have at least one key of `kinds`, in offset order."""
    reader = ObjectReader(store, key, size=size)
    for sr in reader.read(stream_id, start, end):
        for batch in parse_batches(sr.payload):
            if batch.header.is_control:
                continue  # a transaction marker (control batch): never indexed, as the broker indexes live
            for r in batch.records:
                if not start <= r.offset < end:
                    continue
                t = r.timestamp_ms if sr.append_ms is None else sr.append_ms
                if not lo <= t < hi:
                    continue
                keys = record_keys(r, kinds)
                if keys:
                    yield RecordEntry(r.offset, record_size(r), t, keys)
