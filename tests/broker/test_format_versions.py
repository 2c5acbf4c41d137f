"""Format versions of the formats that had none before 0.4.0 (docs/OPERATIONS.md, "Upgrading a cluster"): WAL
frames (local segments and shared WAL objects), the local WAL's trim file, stream objects (their footer), metadata KV
values (log records and snapshots) and the index service's JSON documents. Each: what today's code writes (version
1, the layout of every file written so far) reads, and a later version is refused with an error naming the file,
object or key and both versions, leaving what is stored untouched (nothing cut, marked damaged or quarantined)."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.errors import MetadataError, ObjectFormatError, WalError
from broker.metadata import MetadataClient, MetadataImage
from broker.metadata.log_store import open_log
from broker.metadata.snapshot import NewerSnapshot, SnapshotDamaged, checksum, encode
from broker.metadata.snapshot import decode as decode_snapshot
from broker.metadata.value_version import NewerValueVersion, value_version
from broker.objects.format import FOOTER_SIZE, StreamRecord, decode_footer, encode_record
from broker.objects.reader import ObjectReader
from broker.objects.writer import ObjectWriter
from broker.streams.object_wal import ObjectWal, read_wal, wal_prefix
from broker.streams.wal import FRAME_VERSION, HEADER_SIZE, MAGIC, Wal, _crc, _segments, frame_version, scan
from index_service.checkpoint import CheckpointStore
from index_service.state_folders import QUARANTINE, DocumentError, NewerDocument, StateFolders, decode_document
from storage_tier import open_store


def frame(offset: int, body: bytes, version: int) -> bytes:
    """A WAL frame of `version` (its magic's low byte), with valid CRCs: what a later layout keeps of version 1."""
    magic = (MAGIC & ~0xFF) | (0x20 + version)
    pre = struct.pack(">IIqI", magic, len(body), offset, _crc(body))
    return pre + struct.pack(">I", _crc(pre)) + body


# -- WAL frames -----------------------------------------------------------------------------------------------
def test_wal_frame_version_lives_in_the_magic() -> None:
    assert frame_version(MAGIC) == FRAME_VERSION == 1
    assert frame_version(0x87654322) == 2 and frame_version(0) is None and frame_version(0x87654300) is None
    assert frame(0, b"x", 1)[:HEADER_SIZE] == struct.pack(">IIqII", MAGIC, 1, 0, _crc(b"x"),
                                                          _crc(frame(0, b"x", 1)[:20]))


def test_a_local_wal_of_today_reads_and_a_newer_frame_is_refused_untouched(tmp_path: Path) -> None:
    d = tmp_path / "wal"
    wal = Wal.open(d)
    bodies = [b"one", b"two", b"three"]
    for b in bodies:
        wal.append(b)
    end = wal.next_offset
    wal.close()
    wal = Wal.open(d)  # today's frames (version 1) read back
    assert [r.body for r in wal.recovered] == bodies
    wal.close()

    (_start, seg), = _segments(d)
    with open(seg, "r+b") as f:
        f.truncate(end)
        f.seek(end)
        f.write(frame(end, b"from a newer version", 2))
    before = seg.read_bytes()
    with pytest.raises(WalError, match=rf"WAL segment .*{seg.name}: the frame at offset {end} is of version 2, newer "
                                       r"than this version of mqindex reads \(1\)"):
        Wal.open(d)
    with pytest.raises(WalError, match="version 2"):
        scan(d)
    assert seg.read_bytes() == before  # nothing cut: the acknowledged records of the newer version stay


def test_a_torn_frame_with_a_newer_magic_but_a_bad_header_crc_is_still_a_torn_tail(tmp_path: Path) -> None:
    d = tmp_path / "wal"
    wal = Wal.open(d)
    wal.append(b"kept")
    end = wal.next_offset
    wal.close()
    (_start, seg), = _segments(d)
    torn = bytearray(frame(end, b"torn", 2))
    torn[20] ^= 0xFF  # header CRC broken: a torn write, not a frame of a later version
    with open(seg, "r+b") as f:
        f.truncate(end)
        f.seek(end)
        f.write(bytes(torn))
    records, report = scan(d)
    assert [r.body for r in records] == [b"kept"] and "bad magic" in report.stop_reason


def test_a_shared_wal_of_today_reads_and_a_newer_frame_object_is_refused(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/store")
    wal = ObjectWal.open(store, 7)
    for b in (b"a", b"bb"):
        wal.append(b)
    end = wal.next_offset
    wal.close()
    records, _report, _spans = read_wal(store, 7)
    assert [r.body for r in records] == [b"a", b"bb"]
    key = f"{wal_prefix(7)}{end:020d}"
    store.put(key, frame(end, b"newer", 2))
    with pytest.raises(WalError, match=rf"shared WAL object {key}: the frame at offset {end} is of version 2"):
        read_wal(store, 7)
    assert store.get(key) == frame(end, b"newer", 2)


# -- the local WAL's trim file -------------------------------------------------------------------------------
TRIM_MAGIC = b"MQWT"  # starts every trim file layout after version 1 (broker/streams/wal_trim.py)


def _trimmed_wal(d: Path) -> tuple[int, list[bytes]]:
    """A local WAL trimmed by today's code past its first record; returns the trim point and the records kept."""
    wal = Wal.open(d)
    first = wal.append(b"gone")
    kept = [b"kept one", b"kept two"]
    for b in kept:
        wal.append(b)
    wal.trim(first.next_offset)
    wal.close()
    return first.next_offset, kept


def _wal_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_the_trim_file_of_0_3_0_reads_as_version_1_and_today_writes_that_layout(tmp_path: Path) -> None:
    """Version 1 is the 12-byte layout 0.3.0 wrote (offset, CRC32 of it): read as before, and still what a trim
    writes, so a node can be started again on 0.3.0 over the same directory."""
    d = tmp_path / "wal"
    point, kept = _trimmed_wal(d)
    assert point > 0
    assert (d / "trim").read_bytes() == struct.pack(">q", point) + struct.pack(">I", zlib.crc32(struct.pack(">q",
                                                                                                          point)))
    wal = Wal.open(d)
    assert [r.body for r in wal.recovered] == kept
    wal.close()


def test_a_trim_file_of_a_newer_version_is_refused_untouched(tmp_path: Path) -> None:
    d = tmp_path / "wal"
    _point, _kept = _trimmed_wal(d)
    header = TRIM_MAGIC + struct.pack(">I", 2)
    (d / "trim").write_bytes(header + struct.pack(">I", zlib.crc32(header)) + b"a later layout's own bytes")
    before = _wal_files(d)
    trim = d / "trim"
    with pytest.raises(WalError, match=rf"trim file {trim} is of version 2, newer than this version of mqindex reads "
                                       r"\(1\)"):
        Wal.open(d)
    with pytest.raises(WalError, match="is of version 2"):
        scan(d)
    assert _wal_files(d) == before


@pytest.mark.parametrize("content", [
    pytest.param(lambda good: good[:8] + bytes([good[8] ^ 1]) + good[9:], id="v1-bad-crc"),
    pytest.param(lambda good: good[:5], id="short"),
    pytest.param(lambda good: good + b"x", id="v1-with-a-byte-more"),
    pytest.param(lambda good: TRIM_MAGIC + struct.pack(">I", 2) + b"\0\0\0\0rest", id="newer-magic-bad-header-crc"),
    pytest.param(lambda good: TRIM_MAGIC + struct.pack(">I", 1) + struct.pack(">I", zlib.crc32(TRIM_MAGIC + struct.pack(
        ">I", 1))) + b"rest", id="later-layout-claiming-version-1"),
])
def test_a_damaged_trim_file_is_reported_as_damage_not_as_newer(tmp_path: Path,
                                                                 content: Callable[[bytes], bytes]) -> None:
    d = tmp_path / "wal"
    _trimmed_wal(d)
    trim = d / "trim"
    bad = content(trim.read_bytes())
    trim.write_bytes(bad)
    before = _wal_files(d)
    with pytest.raises(WalError, match=rf"trim file {trim} is corrupt \({len(bad)} bytes\)"):
        Wal.open(d)
    assert _wal_files(d) == before


# -- stream objects (footer) ----------------------------------------------------------------------------------
def test_a_stream_object_of_today_reads_and_a_newer_footer_version_is_refused(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/store")
    w = ObjectWriter(store, "obj/1")
    w.write(StreamRecord(3, 0, 0, 2, b"payload", 1_700_000_000_000))
    w.write(StreamRecord(3, 0, 2, 1, b"untimed"))
    info = w.close()
    data = store.get("obj/1")
    assert data[-FOOTER_SIZE + 12:-FOOTER_SIZE + 14] == b"\0\0"  # version 1 is stored as 0 (AutoMQ's zeros)
    got = ObjectReader(store, "obj/1", size=info.size).read(3, 0, 3)
    assert [(r.payload, r.append_ms) for r in got] == [(b"payload", 1_700_000_000_000), (b"untimed", None)]
    footer = bytearray(data[-FOOTER_SIZE:])
    struct.pack_into(">H", footer, 12, 1)  # an explicit 1 is version 1 too
    assert decode_footer("obj/1", bytes(footer), len(data)).index_length == info.size - FOOTER_SIZE - \
        decode_footer("obj/1", data[-FOOTER_SIZE:], len(data)).index_position
    struct.pack_into(">H", footer, 12, 2)
    store.put("obj/2", data[:-FOOTER_SIZE] + bytes(footer))
    with pytest.raises(ObjectFormatError, match=r"'obj/2': newer format version \(the footer says version 2, newer "
                                                r"than this version of mqindex reads \(1\)"):
        ObjectReader(store, "obj/2", size=len(data))
    struct.pack_into(">H", footer, 12, 0)
    footer[30] = 1  # the other reserved bytes stay checked
    with pytest.raises(ObjectFormatError, match="reserved bytes are not zero"):
        decode_footer("obj/3", bytes(footer), len(data))
    assert encode_record(StreamRecord(1, 0, 0, 1, b"x"))[0] == 0x22  # records keep their own magic


# -- metadata KV values -----------------------------------------------------------------------------------------
def test_kv_values_without_a_version_are_read_and_a_newer_one_is_refused() -> None:
    img = MetadataImage()
    old = {"topics/a": json.dumps({"partitions": 3}), "leaders/a-0": "2", "odd": "{not json \"v\": 9",
           "list": json.dumps([{"v": 5}]), "inner": json.dumps({"doc": {"v": 7}}),
           "v1": json.dumps({"v": 1, "x": 1})}
    for i, (k, v) in enumerate(old.items()):
        img.apply(i + 1, {"type": "kv_put", "key": k, "value": v})
    assert dict(img.kv) == old
    assert [value_version(v) for v in old.values()] == [1] * len(old)
    with pytest.raises(NewerValueVersion, match=r"metadata key 'topics/b' holds a value of version 2, newer than "
                                                r"this version of mqindex reads \(1\)") as exc:
        img.apply(10, {"type": "kv_put", "key": "topics/b", "value": json.dumps({"v": 2, "partitions": 1})})
    assert isinstance(exc.value, MetadataError)
    assert "topics/b" not in img.kv and img.offset == len(old)


def test_a_snapshot_holding_a_newer_kv_value_is_refused_not_taken_for_damage() -> None:
    img = MetadataImage()
    img.apply(1, {"type": "kv_put", "key": "topics/a", "value": json.dumps({"partitions": 3})})
    payload = encode(img)
    assert decode_snapshot(payload, checksum(payload), "snap-1").kv == img.kv
    state = json.loads(zlib.decompress(payload))
    state["kv"].append(["moves/x", json.dumps({"v": 3})])
    newer = zlib.compress(json.dumps(state).encode())
    with pytest.raises(NewerSnapshot, match=r"snap-2: the image holds a KV value of a newer version: metadata key "
                                            r"'moves/x' holds a value of version 3") as exc:
        decode_snapshot(newer, checksum(newer), "snap-2")
    assert not isinstance(exc.value, SnapshotDamaged)  # the client marks damaged snapshots; not this one


# -- index service documents (manifests, checkpoint) ------------------------------------------------------------
def test_a_document_of_a_newer_version_is_refused_and_left_in_place(tmp_path: Path) -> None:
    folders = StateFolders(tmp_path / "idx")
    store = CheckpointStore(folders)
    store.save({("t", 0): 41}, None, 0)
    assert CheckpointStore(folders).load().offsets == {("t", 0): 41}  # today's checkpoint (no "v": version 1)
    path = folders.checkpoint_path
    outer = json.loads(path.read_bytes())
    assert "v" not in outer
    assert decode_document("c", json.dumps(outer | {"v": 1}).encode())["seq"] == outer_seq(outer)
    newer = json.dumps(outer | {"v": 2}).encode()
    path.write_bytes(newer)
    with pytest.raises(NewerDocument, match=rf"{path}: a document of version 2, newer than this version of mqindex "
                                            r"reads \(1\)"):
        CheckpointStore(folders).load()
    assert path.read_bytes() == newer and not any((folders.root / QUARANTINE).iterdir())
    with pytest.raises(DocumentError, match="checksum mismatch"):  # damage is still damage
        decode_document("c", json.dumps(outer | {"crc32c": 1}).encode())


def outer_seq(outer: dict[str, object]) -> int:
    return int(json.loads(str(outer["body"]))["seq"])


# -- through the metadata client, on SQLite and the real PostgreSQL ---------------------------------------------
def test_a_node_refuses_a_newer_value_in_the_log_and_never_writes_one(meta_url_factory: Callable[[], str]) -> None:
    url = meta_url_factory()
    writer, reader = MetadataClient(url, 0), MetadataClient(url, 1)
    writer.kv_put("topics/a", json.dumps({"partitions": 2}))  # today's value, no "v": read by every node
    assert reader.kv_get("topics/a") == json.dumps({"partitions": 2})
    with pytest.raises(NewerValueVersion, match="'topics/b' holds a value of version 2"):
        writer.kv_put("topics/b", json.dumps({"v": 2}))  # refused before it reaches the log
    assert reader.kv_get("topics/b") is None and writer.log.read_since(writer.image.offset) == []
    log = open_log(url)  # a node of a later version writes one
    with log.locked() as txn:
        txn.append(writer.image.offset + 1, [{"type": "kv_put", "key": "moves/m", "value": '{"v": 3, "x": 1}'}])
    log.close()
    with pytest.raises(NewerValueVersion, match=r"'moves/m' holds a value of version 3, newer than this version of "
                                                r"mqindex reads \(1\)"):
        reader.catch_up()
    assert "moves/m" not in reader.image.kv
    for c in (writer, reader):
        c.close()


def test_a_newer_snapshot_stops_the_load_and_is_not_marked_damaged(meta_url_factory: Callable[[], str]) -> None:
    url = meta_url_factory()
    w = MetadataClient(url, 0)
    w.register_node()
    w.kv_put("topics/a", "{}")
    at = w.maybe_snapshot(force=True).log_offset  # type: ignore[union-attr]
    log = open_log(url)
    with log.locked() as txn:
        stored = txn.read_snapshot(at)
        assert stored is not None
        state = json.loads(zlib.decompress(stored[1]))
        state["v"] = 2  # as a later version would write it
        newer = zlib.compress(json.dumps(state).encode())
        ph = "?" if url.startswith("sqlite") else "%s"
        txn.conn.execute(f"UPDATE meta_snapshot SET payload = {ph}, checksum = {ph} "  # type: ignore[attr-defined]
                         f"WHERE log_offset = {ph}", (newer, checksum(newer), at))
        txn.truncate_before(at)
    with pytest.raises(NewerSnapshot, match=rf"log offset {at}: a version 2 image, newer than this version"):
        MetadataClient(url, 9)
    assert [(s.log_offset, s.damaged) for s in log.snapshots()] == [(at, False)]
    log.close()
    w.close()
