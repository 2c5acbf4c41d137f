"""The snapshot codec: a `MetadataImage` as of one log offset <-> a checksummed, compressed payload.

A snapshot replaces replaying the log up to its offset: a client loads the newest valid snapshot and
applies only the records after it (see `MetadataClient`). The payload is zlib-compressed JSON of the
image's live state (streams with ranges and stream objects, nodes with their stream set objects,
objects, KV, id counters); the per-node `parts` index is derived again on load, not stored.
The checksum (SHA-256 of the payload) is stored beside it: a damaged payload is refused with
`SnapshotDamaged` naming the snapshot, and the client falls back to an older one.

Written by hand because the image is this project's own structure: JSON of plain lists keeps the
format readable and the decoder strict; `zlib` and `hashlib` are the standard library's.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import zlib
from typing import Any

from broker.errors import MetadataError
from broker.metadata.image import (
    CLOSED,
    COMMITTED,
    MARK_DESTROYED,
    OPENED,
    PREPARED,
    MetadataImage,
    NodeMeta,
    ObjectMeta,
    RangeMeta,
    StreamMeta,
    StreamObjectMeta,
    StreamSetObjectMeta,
)
from broker.metadata.value_version import NewerValueVersion, check_value

FORMAT_VERSION = 1
_STREAM_STATES = {OPENED, CLOSED}
_OBJECT_STATES = {PREPARED, COMMITTED, MARK_DESTROYED}


class SnapshotDamaged(MetadataError):
    """A stored snapshot fails its checksum or does not decode: the store holds damaged metadata."""


class NewerSnapshot(MetadataError):
    """A stored snapshot of a version newer than this version of mqindex reads (its "v", or a KV value in it):
    not damage, so it is not marked damaged (the nodes that read it still use it); the load stops with this."""


def checksum(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def image_state(img: MetadataImage) -> dict[str, Any]:
    """The image as plain, canonically ordered lists (what a snapshot stores; also used to compare images)."""
    return {
        "v": FORMAT_VERSION,
        "offset": img.offset,
        "next_stream_id": img.next_stream_id,
        "next_object_id": img.next_object_id,
        "kv": sorted([k, v] for k, v in img.kv.items()),
        "streams": [[s.stream_id, s.epoch, s.state, s.start_offset, s.end_offset,
                     [[g.index, g.node_id, g.epoch, g.start, g.end] for g in s.ranges],
                     [[o.object_id, o.start, o.end, o.size] for o in s.stream_objects]]
                    for s in sorted(img.streams.values(), key=lambda s: s.stream_id)],
        "nodes": [[n.node_id, n.epoch,
                   [[o.object_id, o.size, sorted([sid, a, b] for sid, (a, b) in o.ranges.items())]
                    for o in sorted(n.sso.values(), key=lambda o: o.object_id)]]
                  for n in sorted(img.nodes.values(), key=lambda n: n.node_id)],
        "objects": [[o.object_id, o.state, o.prepared_at, o.expires_at, o.size, o.committed_at, o.destroyed_at,
                     o.node_id, o.node_epoch]
                    for o in sorted(img.objects.values(), key=lambda o: o.object_id)],
        # compaction outputs' per-stream data times (StreamSetObjectMeta.data_at), apart from "nodes" so that a
        # reader of images written before them, which has no such key, reads the same image
        "sso_data_at": sorted([o.object_id, sid, t] for n in img.nodes.values() for o in n.sso.values()
                              for sid, t in o.data_at.items()),
    }


def encode(img: MetadataImage) -> bytes:
    body = json.dumps(image_state(img), separators=(",", ":")).encode()
    return zlib.compress(body, 1)


def decode(payload: bytes, expected_checksum: str, where: str) -> MetadataImage:
    """The image stored in `payload`; raises `SnapshotDamaged` (naming `where`) when it is damaged."""
    if checksum(payload) != expected_checksum:
        raise SnapshotDamaged(f"{where}: checksum mismatch ({len(payload)} bytes), the payload is damaged")
    try:
        state = json.loads(zlib.decompress(payload))
        return _build(state)
    except NewerSnapshot as exc:
        raise NewerSnapshot(f"{where}: {exc}") from exc
    except SnapshotDamaged:
        raise
    except (zlib.error, ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise SnapshotDamaged(f"{where}: the payload does not decode as a metadata image ({exc})") from exc


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ValueError(f"expected an integer, found {v!r}")
    return v


def _opt_int(v: Any) -> int | None:
    return None if v is None else _int(v)


def _state(v: Any, allowed: set[str]) -> str:
    if v not in allowed:
        raise ValueError(f"unknown state {v!r}")
    return str(v)


def _rows(v: Any, width: int) -> list[list[Any]]:
    if not isinstance(v, list) or not all(isinstance(r, list) and len(r) == width for r in v):
        raise ValueError(f"expected a list of {width}-item lists")
    return v


def _build(state: Any) -> MetadataImage:
    if not isinstance(state, dict) or type(state.get("v")) is not int or state["v"] != FORMAT_VERSION:
        v = state.get("v") if isinstance(state, dict) else None
        if type(v) is int and v > FORMAT_VERSION:
            raise NewerSnapshot(f"a version {v} image, newer than this version of mqindex reads ({FORMAT_VERSION}): "
                             "written by a newer version? Upgrade this node")
        raise ValueError(f"not a version {FORMAT_VERSION} image")
    img = MetadataImage()
    img.offset = _int(state["offset"])
    img.next_stream_id = _int(state["next_stream_id"])
    img.next_object_id = _int(state["next_object_id"])
    for k, v in _rows(state["kv"], 2):
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError("KV keys and values are strings")
        try:
            check_value(k, v)
        except NewerValueVersion as exc:
            raise NewerSnapshot(f"the image holds a KV value of a newer version: {exc}") from exc
        img.kv[k] = v
    for sid, epoch, st, start, end, ranges, sos in _rows(state["streams"], 7):
        s = StreamMeta(_int(sid), _int(epoch), _state(st, _STREAM_STATES), _int(start), _int(end))
        s.ranges = [RangeMeta(_int(i), _int(n), _int(e), _int(a), _int(b)) for i, n, e, a, b in _rows(ranges, 5)]
        s.stream_objects = [StreamObjectMeta(_int(oid), s.stream_id, _int(a), _int(b), _int(size))
                            for oid, a, b, size in _rows(sos, 4)]
        img.streams[s.stream_id] = s
    for node_id, epoch, ssos in _rows(state["nodes"], 3):
        node = NodeMeta(_int(node_id), _int(epoch))
        for oid, size, ranges in _rows(ssos, 3):
            sso = StreamSetObjectMeta(_int(oid), node.node_id, _int(size),
                                      {_int(sid): (_int(a), _int(b)) for sid, a, b in _rows(ranges, 3)})
            node.sso[sso.object_id] = sso
            for sid, (a, b) in sso.ranges.items():
                bisect.insort(node.parts.setdefault(sid, []), (a, b, sso.object_id))
        img.nodes[node.node_id] = node
    ssos = {oid: sso for n in img.nodes.values() for oid, sso in n.sso.items()}
    for oid, sid, t in _rows(state.get("sso_data_at", []), 3):  # absent in images written before it was kept
        sso = ssos.get(_int(oid))
        if sso is not None and _int(sid) in sso.ranges:  # a part no longer held has no time to keep
            sso.data_at[_int(sid)] = _int(t)
    # rows of 9 (with the preparing incarnation), or of 7 in images written before it was recorded
    objects = state["objects"]
    wide = _rows(objects, 9) if objects and isinstance(objects[0], list) and len(objects[0]) == 9 else [
        [*r, None, None] for r in _rows(objects, 7)]
    for oid, st, prepared_at, expires_at, size, committed_at, destroyed_at, node_id, node_epoch in wide:
        img.objects[_int(oid)] = ObjectMeta(_int(oid), _state(st, _OBJECT_STATES), _int(prepared_at),
                                            _int(expires_at), _int(size), _opt_int(committed_at),
                                            _opt_int(destroyed_at), _opt_int(node_id), _opt_int(node_epoch))
    return img
