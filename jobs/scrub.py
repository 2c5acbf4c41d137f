"""Scrub: read every committed broker object (found through the controller metadata) and every uploaded index
file (found through the index directory's manifests) and verify every checksum, reporting the damaged ones.

Broker objects: footer, index block, every data block against its index entry, and the CRC of every Kafka
record batch of a data stream. Index files: header, footer, summary and every block CRC32C, and the size the
manifest recorded. The cluster's merged index files (`index-merged/` in the index store, written by the published
merge, broker/cluster/published_merge.py, and listed in the metadata under `index_merged/<source>`): the same
checks (with no manifest size to compare) and their key filters, which such a file always has. Reads are ranged
and memory-bounded: the footer and index in one tail read, then one data block (about 1 MiB) or one index-file
block at a time; nothing holds a whole object.

A damaged broker object is reported with the streams it holds, as partitions (topic-partition, data or
meta stream) and offset ranges, taken from the metadata (which stays right when the object's own index is
the damaged part). It sits in jobs/ because it spans broker and index_service.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker.cluster.cluster_index import MERGED_LIST_PREFIX
from broker.errors import ObjectFormatError, RecordFormatError
from broker.metadata import MetadataClient
from broker.metadata.image import COMMITTED
from broker.objects.reader import ObjectReader
from broker.partitions.records import parse_batches
from broker.partitions.topics import TopicRegistry
from index_file.errors import FormatError
from index_file.native_compacted import CompactedIndexReader
from index_file.source import BlobSource
from index_service.key_filters import check_filter_object
from index_service.state_folders import MANIFEST_EXT, UPLOADED, DocumentError, decode_document
from storage_tier import BlobStore
from storage_tier.errors import BlobNotFound, InvalidRange

log = logging.getLogger("mqindex.jobs.scrub")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class StreamRange:
    stream: int
    partition: str | None  # topic-partition, None when no topic names the stream
    kind: str  # "data", "meta" or "unknown"
    start: int
    end: int


@dataclass
class Damaged:
    component: str  # "broker" (a stream object) or "index" (an uploaded index file)
    object: str
    check: str
    error: str
    ranges: list[StreamRange] = field(default_factory=list)


@dataclass
class ScrubReport:
    objects_checked: int = 0
    index_files_checked: int = 0
    merged_files_checked: int = 0  # the cluster's merged files (index-merged/), found through index_merged/ lists
    filters_checked: int = 0
    # uploaded index files with no key filter beside them (uploaded before filters existed): not damage, every
    # lookup reads them
    filters_missing: list[str] = field(default_factory=list)
    bytes_read: int = 0
    damaged: list[Damaged] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Counting:
    """The store as ObjectReader sees it, counting the bytes each ranged GET returns."""

    def __init__(self, store: BlobStore, report: ScrubReport) -> None:
        self.store = store
        self.report = report

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        data = self.store.get(key, start, end)
        self.report.bytes_read += len(data)
        return data

    def size(self, key: str) -> int:
        return self.store.size(key)

    @property
    def url(self) -> str:
        return self.store.url


def _stream_names(meta: MetadataClient) -> dict[int, tuple[str, str]]:
    """stream id -> (topic-partition, "data"|"meta")."""
    names: dict[int, tuple[str, str]] = {}
    registry = TopicRegistry(meta)
    for name in registry.names():
        info = registry.get(name, refresh=False)
        if info is None:
            continue
        for i, s in enumerate(info.streams):
            names[s.data_stream] = (f"{name}-{i}", "data")
            names[s.meta_stream] = (f"{name}-{i}", "meta")
    return names


def _object_ranges(meta: MetadataClient) -> dict[int, list[tuple[int, int, int]]]:
    """object id -> [(stream, start, end)] from the metadata image (stream objects and stream set objects)."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    with meta._lock:  # noqa: SLF001 - a consistent read of the replayed image
        img = meta.image
        for s in img.streams.values():
            for so in s.stream_objects:
                out.setdefault(so.object_id, []).append((so.stream_id, so.start, so.end))
        for node in img.nodes.values():
            for oid, sso in node.sso.items():
                for sid, (start, end) in sso.ranges.items():
                    out.setdefault(oid, []).append((sid, start, end))
        sizes = {oid: o.size for oid, o in img.objects.items() if o.state == COMMITTED}
    return {oid: sorted(out.get(oid, [])) for oid in sizes}


def check_object(store: _Counting, key: str, size: int, data_streams: set[int]) -> None:
    """Raise ObjectFormatError naming the failed check; reads one data block at a time."""
    reader = ObjectReader(store, key, size=size or None)
    for entry in reader.index:
        for e, records in reader.read_blocks([entry]):
            if e.stream_id not in data_streams:
                continue
            for r in records:
                try:
                    for _ in parse_batches(r.payload):
                        pass
                except RecordFormatError as exc:
                    check = "record batch crc" if "CRC mismatch" in str(exc) else "record batch"
                    raise ObjectFormatError(key, check, f"stream {r.stream_id} offsets [{r.base_offset}, "
                                                        f"{r.last_offset}): {exc}") from exc


def scrub_objects(store: BlobStore, meta: MetadataClient, report: ScrubReport, progress: Progress) -> None:
    meta.catch_up()
    names = _stream_names(meta)
    data_streams = {sid for sid, (_, kind) in names.items() if kind == "data"}
    sizes = {oid: o.size for oid, o in meta.image.objects.items() if o.state == COMMITTED}
    ranges = _object_ranges(meta)
    counting = _Counting(store, report)
    for n, oid in enumerate(sorted(sizes), 1):
        key = meta.object_key(oid)
        progress(f"object {n}/{len(sizes)} {key}")
        try:
            check_object(counting, key, sizes[oid], data_streams)
        except ObjectFormatError as exc:
            report.damaged.append(Damaged("broker", key, exc.check, str(exc), [
                StreamRange(sid, *names.get(sid, (None, "unknown")), start, end) for sid, start, end in ranges[oid]]))
            log.error("damaged object", extra={"object": key, "check": exc.check, "error": str(exc)})
        report.objects_checked += 1


def check_index_file(store: _Counting, body: dict[str, Any], named_by: str = "the manifest") -> None:
    """Raise FormatError naming the failed check: size (when `body` has one), header, footer, summary and every
    block CRC32C."""
    key = str(body["key"])
    try:
        actual = store.size(key)
    except BlobNotFound:
        raise FormatError(key, "missing object", f"{named_by} names it, the store has no such key") from None
    if "size" in body and actual != int(body["size"]):
        raise FormatError(key, "file size", f"{actual} bytes in the store, the manifest says {body['size']}")
    try:
        CompactedIndexReader(BlobSource(store, key), verify_blocks=True).close()
    except InvalidRange as exc:
        raise FormatError(key, "truncated", str(exc)) from None


def scrub_index_files(store: BlobStore, index_dir: Path, report: ScrubReport, progress: Progress) -> None:
    manifests = sorted((index_dir / UPLOADED).glob(f"*{MANIFEST_EXT}"))
    counting = _Counting(store, report)
    for n, path in enumerate(manifests, 1):
        progress(f"index file {n}/{len(manifests)} {path.name}")
        try:
            body = decode_document(str(path), path.read_bytes())
            key = str(body["key"])
        except (DocumentError, KeyError) as exc:
            report.damaged.append(Damaged("index", str(path), "manifest", str(exc)))
            continue
        try:
            check_index_file(counting, body)
        except FormatError as exc:
            report.damaged.append(Damaged("index", key, exc.check, str(exc)))
            log.error("damaged index file", extra={"object": key, "check": exc.check, "error": str(exc)})
        report.index_files_checked += 1
        _check_filter(counting, key, report, missing_is_damage=False)


def _check_filter(store: _Counting, key: str, report: ScrubReport, missing_is_damage: bool) -> None:
    problem = check_filter_object(store, key)
    if problem == "missing" and not missing_is_damage:
        report.filters_missing.append(key)
    elif problem is not None:
        check = "missing key filter" if problem == "missing" else problem
        report.damaged.append(Damaged("index", f"{key}.filter", check, f"key filter of {key}: {check}"))
        log.error("damaged key filter", extra={"object": f"{key}.filter", "check": check})
    else:
        report.filters_checked += 1


def merged_file_keys(meta: MetadataClient) -> list[tuple[str, str]]:
    """(list, store key) of every file of the cluster's merged lists (`index_merged/<source>`), as published."""
    out = []
    for list_key, body in sorted(meta.kv_items(MERGED_LIST_PREFIX).items()):
        try:
            rows = json.loads(body)
        except ValueError:
            log.error("unreadable merged list", extra={"object": list_key})
            continue
        out += [(list_key, str(row[0])) for row in rows]
    return out


def scrub_merged_files(store: BlobStore, meta: MetadataClient, report: ScrubReport, progress: Progress) -> None:
    """Every merged index file the cluster's lists name, and its key filter: each a merge wrote, so a missing
    filter is damage here."""
    counting = _Counting(store, report)
    files = merged_file_keys(meta)
    for n, (list_key, key) in enumerate(files, 1):
        progress(f"merged index file {n}/{len(files)} {key}")
        try:
            check_index_file(counting, {"key": key}, named_by=f"the merged list {list_key}")
        except FormatError as exc:
            report.damaged.append(Damaged("index", key, exc.check, str(exc)))
            log.error("damaged merged index file", extra={"object": key, "list": list_key, "check": exc.check,
                                                           "error": str(exc)})
        report.merged_files_checked += 1
        _check_filter(counting, key, report, missing_is_damage=True)


def scrub(store: BlobStore | None, meta: MetadataClient | None, index_store: BlobStore | None = None,
          index_dir: Path | None = None, progress: Progress | None = None) -> ScrubReport:
    """Check what is given: broker objects (store + meta), the cluster's merged index files (meta + index_store,
    else store) and uploaded index files (index_store + index_dir)."""
    report = ScrubReport()
    say = progress or (lambda _msg: None)
    if store is not None and meta is not None:
        scrub_objects(store, meta, report, say)
    if meta is not None and (index_store or store) is not None:
        scrub_merged_files(index_store or store, meta, report, say)  # type: ignore[arg-type]
    if index_dir is not None:
        scrub_index_files(index_store or store, index_dir, report, say)  # type: ignore[arg-type]
    return report


def scrub_node(node: Any) -> ScrubReport:
    """The scrub of a running broker node (POST /v1/admin/scrub): its store, metadata and index."""
    index_store = getattr(node.index, "store", None)
    return scrub(node.store, node.meta, index_store if isinstance(index_store, BlobStore) else node.store,
                 Path(node.data_dir) / "index")
