"""Rolling upgrades: every versioned persistent format is read at its previous version and refused, with an error
that says what it found, at a newer one (a node of an earlier release reading what a later one wrote). Unit tests,
one per format; docs/OPERATIONS.md ("Upgrading a cluster") lists the formats and which carry no version."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import crc32c
import numpy as np
import pytest

from broker.errors import MetadataError, ObjectFormatError, WalError
from broker.metadata import MetadataImage, SnapshotDamaged
from broker.metadata.leases import announcement
from broker.metadata.snapshot import NewerSnapshot, checksum, encode
from broker.metadata.snapshot import decode as decode_snapshot
from broker.objects.format import (
    RECORD_MAGIC,
    TIMED_RECORD_MAGIC,
    StreamRecord,
    decode_block,
    encode_block_header,
    encode_record,
)
from broker.partitions.partition_state import PartitionState
from broker.streams.storage import decode_stream_record
from index_file.errors import FormatError
from index_file.key_filter import encode_filter, verify_filter
from index_file.native_unsealed import NativeIndexWriter, NativeUnsealedReader

NEWER = 0x24  # a stream record magic no version reads yet


def block(*records: bytes) -> bytes:
    body = b"".join(records)
    return encode_block_header(len(records), len(body)) + body


def with_magic(rec: bytes, magic: int) -> bytes:
    return bytes([magic]) + rec[1:]


# -- stream records (object data blocks and WAL bodies) ----------------------------------------------------------
def test_stream_records_of_the_previous_magic_are_read_and_a_newer_one_refused() -> None:
    old = encode_record(StreamRecord(1, 0, 0, 1, b"v0.3.0"))  # 0x22: what 0.3.0 writes
    new = encode_record(StreamRecord(1, 0, 1, 1, b"now", 1_700_000_000_000))
    assert old[0] == RECORD_MAGIC and new[0] == TIMED_RECORD_MAGIC
    got = decode_block("obj", block(old, new))
    assert [(r.payload, r.append_ms) for r in got] == [(b"v0.3.0", None), (b"now", 1_700_000_000_000)]
    with pytest.raises(ObjectFormatError, match="magic 0x24 is not one this version reads.*newer version"):
        decode_block("obj", block(old, with_magic(encode_record(StreamRecord(1, 0, 1, 1, b"x")), NEWER)))
    assert decode_stream_record(old).append_ms is None  # a WAL body of 0.3.0
    with pytest.raises(WalError, match="magic 36"):
        decode_stream_record(with_magic(old, NEWER))


# -- metadata log records ---------------------------------------------------------------------------------------
def test_metadata_log_records_without_a_version_are_read_and_newer_ones_refused() -> None:
    img = MetadataImage()
    img.apply(1, {"type": "kv_put", "key": "a", "value": "1"})  # as 0.3.0 writes them: no "v" (version 1)
    img.apply(2, {"type": "kv_put", "key": "b", "value": "2", "v": 1})
    assert img.kv == {"a": "1", "b": "2"}
    with pytest.raises(MetadataError, match="version 2.*not one this version of mqindex reads"):
        img.apply(3, {"type": "kv_put", "key": "c", "value": "3", "v": 2})
    with pytest.raises(MetadataError, match="type 'stream_teleport'.*newer version"):
        img.apply(3, {"type": "stream_teleport", "stream_id": 1})
    assert img.offset == 2 and "c" not in img.kv


# -- metadata snapshots -----------------------------------------------------------------------------------------
def test_a_snapshot_of_a_newer_version_is_refused_naming_its_version() -> None:
    payload = encode(MetadataImage())
    assert decode_snapshot(payload, checksum(payload), "snap-1").offset == MetadataImage().offset
    state = json.loads(zlib.decompress(payload))
    state["v"] = 2
    newer = zlib.compress(json.dumps(state).encode())
    with pytest.raises(NewerSnapshot, match="snap-2: a version 2 image, newer than this version of mqindex") as exc:
        decode_snapshot(newer, checksum(newer), "snap-2")
    assert not isinstance(exc.value, SnapshotDamaged)  # not marked damaged: the nodes that read it keep using it


# -- partition state records ------------------------------------------------------------------------------------
def test_a_partition_state_record_of_a_newer_version_is_refused() -> None:
    rec = PartitionState(5, True, 4, 1, 2, 3)
    assert PartitionState.decode(rec.encode()) == rec
    body = json.loads(rec.encode())
    body["v"] = 2
    with pytest.raises(ValueError, match="a version 2 partition state record, newer than"):
        PartitionState.decode(json.dumps(body).encode())


# -- lease announcements ----------------------------------------------------------------------------------------
def test_a_lease_announcement_of_a_newer_version_announces_nothing() -> None:
    """Read as nothing announced: the node writes only what the previous release reads (the safe side)."""
    doc = {"v": 1, "epoch": 3, "version": "0.4.0", "reads": ["stream_record_0x23"]}
    assert announcement(json.dumps(doc), 3) == doc
    assert announcement(json.dumps(doc | {"v": 2}), 3) is None
    assert announcement(None, 3) is None  # a 0.3.0 row


# -- index files and key filters --------------------------------------------------------------------------------
def rewrite_version(data: bytes, at: int, crc_end: int, version: int) -> bytes:
    out = bytearray(data)
    struct.pack_into("<H", out, at, version)
    struct.pack_into("<I", out, crc_end, crc32c.crc32c(bytes(out[:crc_end])))
    return bytes(out)


def test_a_native_index_file_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "idx"
    NativeIndexWriter.create(path, 1_700_000_000_000, 16, 16).close()
    NativeUnsealedReader(path).close()
    path.write_bytes(rewrite_version(path.read_bytes(), 4, 60, 2))
    with pytest.raises(FormatError, match="version 2"):
        NativeUnsealedReader(path)


def test_a_key_filter_of_a_newer_version_is_refused() -> None:
    data = encode_filter(np.array([1, 2, 3], dtype=np.uint64))
    verify_filter(data)
    with pytest.raises(FormatError, match="version 2"):
        verify_filter(rewrite_version(data, 4, 28, 2))
