"""Lookup by key across a topic's partitions: index hits -> exact-key check on the fetched record -> pages.

Order: store time desc, then offset desc, then partition desc (the index's total order). The cursor is
opaque to clients: base64url of JSON {"v": 1, "t": store time, "o": offset, "p": partition} of the last
message returned; the next page holds the messages strictly after it in that order.

Paging over the index needs no cap: hits are asked for newest first with a growing `max_count`; when the
index returns as many hits as asked, the oldest store time in the answer may be cut short, so only the
store times strictly newer than it are taken as complete, and the next round asks again up to that
time. Each candidate's record is fetched and kept only when `index_keys(record)` holds the key, so
a fingerprint collision or an inexact (RocketMQ hash-only) hit never returns a wrong message.

Damage does not fail the page: a hit whose record sits in a damaged object, and an index file the index
skipped as damaged, are listed in `LookupPage.unreadable` (object, check, partition and offset when known)
and the page holds the hits that could be read.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from broker.errors import InvalidField, ObjectFormatError
from broker.partitions.client_messages import OutMessage
from index_file import IndexHit

Order = tuple[int, int, int]  # store time, offset, partition

_MIN_ASK = 16


@dataclass(frozen=True)
class Unreadable:
    """A hit that could not be read: the damaged object (a broker object or an index file), the failed
    check, and the partition and offset of the message when known (None for a damaged index file)."""

    component: str  # "broker" (an object holding messages) or "index" (an index file)
    object: str
    check: str
    error: str
    partition: int | None = None
    offset: int | None = None


class LookupPage(tuple):  # type: ignore[type-arg]
    """(messages, next_cursor), unpacking as the 2-tuple callers expect, plus `unreadable`."""

    unreadable: list[Unreadable]

    def __new__(cls, messages: list[OutMessage], next_cursor: str | None,
                unreadable: list[Unreadable] | None = None) -> LookupPage:
        page = super().__new__(cls, (messages, next_cursor))
        page.unreadable = list(unreadable or [])
        return page


def encode_cursor(k: Order) -> str:
    raw = json.dumps({"v": 1, "t": k[0], "o": k[1], "p": k[2]}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Order:
    if not isinstance(cursor, str) or not cursor or len(cursor) > 256:
        raise InvalidField("cursor", "is not a cursor this server returned")
    try:
        body = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(body, dict) or body.get("v") != 1:
            raise ValueError("version")
        t, o, p = body["t"], body["o"], body["p"]
        if not all(type(x) is int for x in (t, o, p)) or o < 0 or p < 0:
            raise ValueError("fields")
    except (binascii.Error, ValueError, KeyError, UnicodeDecodeError):
        raise InvalidField("cursor", "is not a cursor this server returned") from None
    return (t, o, p)


def _candidates(query: Callable[[int, int | None], list[IndexHit]], end_ms: int | None,
                after: Order | None, first_ask: int, unreadable: list[Unreadable]) -> Iterator[Order]:
    """(store time, offset, partition) of every hit strictly after `after`, in order, paging the index."""
    end = end_ms if after is None else (after[0] if end_ms is None else min(end_ms, after[0]))
    ask = max(first_ask, _MIN_ASK)
    while True:
        hits = query(ask, end)
        for d in getattr(hits, "damaged", ()):  # index files the index skipped (index_service.query.Hits)
            u = Unreadable("index", d.object, d.check, d.error)
            if u not in unreadable:
                unreadable.append(u)
        complete = len(hits) < ask
        if complete:
            group = hits
        else:
            oldest = hits[-1].store_time_ms
            group = [h for h in hits if h.store_time_ms > oldest]
            if not group:  # every hit shares one millisecond: ask for more
                ask *= 2
                continue
        keys = sorted({(h.store_time_ms, h.offset, h.queue_id) for h in group}, reverse=True)
        for k in keys:
            if after is None or k < after:
                after = k
                yield k
        if complete:
            return
        end = oldest  # the next round re-reads the cut millisecond in full


def find_by_key(query: Callable[[int, int | None], list[IndexHit]],
                fetch: Callable[[int, int], OutMessage | None], has_key: Callable[[OutMessage], bool],
                end_ms: int | None, max_count: int, cursor: str | None) -> LookupPage:
    """One page: `query(max_count, end_ms)` asks the index, `fetch(partition, offset)` reads a record."""
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
        raise InvalidField("max", f"must be a positive integer, got {max_count!r}")
    after = decode_cursor(cursor) if cursor is not None else None
    out: list[OutMessage] = []
    last: Order | None = None
    unreadable: list[Unreadable] = []
    for k in _candidates(query, end_ms, after, max_count + 1, unreadable):
        try:
            msg = fetch(k[2], k[1])
        except ObjectFormatError as exc:
            unreadable.append(Unreadable("broker", exc.key, exc.check, str(exc), k[2], k[1]))
            continue
        if msg is None or not has_key(msg):
            continue  # trimmed by retention, or not really this key
        if len(out) == max_count:
            return LookupPage(out, encode_cursor(last), unreadable)  # type: ignore[arg-type]
        out.append(msg)
        last = k
    return LookupPage(out, None, unreadable)


def key_hits_page(query: Callable[[int, int | None], list[IndexHit]], end_ms: int | None, max_count: int,
                  cursor: str | None) -> tuple[list[tuple[int, int]], str | None, list[Unreadable]]:
    """One page of the index's candidates, (partition, offset) each, in the lookup's order, *not* checked
    against their records (no record is read): a fingerprint collision or a hash-only hit may name a record of
    another key, so the caller checks the records it reads. The cursor is `find_by_key`'s."""
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
        raise InvalidField("max", f"must be a positive integer, got {max_count!r}")
    after = decode_cursor(cursor) if cursor is not None else None
    out: list[tuple[int, int]] = []
    last: Order | None = None
    unreadable: list[Unreadable] = []
    for k in _candidates(query, end_ms, after, max_count + 1, unreadable):
        if len(out) == max_count:
            return out, encode_cursor(last), unreadable  # type: ignore[arg-type]
        out.append((k[2], k[1]))
        last = k
    return out, None, unreadable


def check_key_query(key: object, begin_ms: object, end_ms: object) -> None:
    """The arguments of a key lookup, checked before the index is asked."""
    if not isinstance(key, str) or not key:
        raise InvalidField("key", "must be a non-empty string")
    if isinstance(begin_ms, bool) or not isinstance(begin_ms, int) or begin_ms < 0:
        raise InvalidField("begin", f"must be a non-negative integer, got {begin_ms!r}")
    if end_ms is not None and (isinstance(end_ms, bool) or not isinstance(end_ms, int) or end_ms < begin_ms):
        raise InvalidField("end", f"must be an integer at or after begin ({begin_ms}), got {end_ms!r}")
