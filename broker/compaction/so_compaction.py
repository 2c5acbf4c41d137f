"""Stream object compaction of the streams this node owns (AutoMQ's StreamObject compaction).

Per stream: stream objects wholly below the start offset are marked destroyed; runs of contiguous stream
objects are merged into one object of at most `so_max_size` bytes. The data blocks move without decoding:
pieces of `copy_min` bytes or more by server-side UploadPartCopy (`MultipartWriter.copy_part`), smaller
ones read and re-uploaded; expired leading blocks are skipped; the index block is rebuilt with the new
positions. Each stream's result is one metadata transaction with the stream epoch checked.
"""

from __future__ import annotations

import logging

from broker.compaction.config import CompactionConfig
from broker.compaction.report import CompactionReport
from broker.errors import Fenced, ObjectFormatError
from broker.metadata.client import CompactedStreamObject, MetadataClient
from broker.metadata.image import OPENED, StreamMeta, StreamObjectMeta
from broker.objects.format import FOOTER_SIZE, Footer, IndexEntry
from broker.objects.reader import ObjectReader
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.compaction")


def merge_groups(sos: list[StreamObjectMeta], start_offset: int, max_size: int) -> list[list[StreamObjectMeta]]:
    """Runs of contiguous live stream objects, each at most `max_size` bytes; only runs of two or more."""
    groups: list[list[StreamObjectMeta]] = []
    cur: list[StreamObjectMeta] = []
    size = 0
    for o in sos:
        if o.end <= start_offset:
            continue
        if cur and (o.start != cur[-1].end or size + o.size > max_size):
            groups.append(cur)
            cur, size = [], 0
        cur.append(o)
        size += o.size
    if cur:
        groups.append(cur)
    return [g for g in groups if len(g) > 1]


class SoCompaction:
    def __init__(self, store: BlobStore, meta: MetadataClient, config: CompactionConfig) -> None:
        self.store = store
        self.meta = meta
        self.config = config

    def run(self) -> CompactionReport:
        report = CompactionReport()
        self.meta.catch_up()
        streams = [s for s in list(self.meta.image.streams.values())
                   if s.state == OPENED and s.owner == self.meta.node_id and s.stream_objects]
        for s in streams:
            try:
                report.add(self.compact_stream(s))
            except Fenced:
                raise
            except Exception as exc:  # noqa: BLE001 - one stream's failure does not stop the others
                log.warning("stream object compaction failed", extra={
                    "stream_id": s.stream_id, "error": f"{type(exc).__name__}: {exc}"})
                report.errors.append(f"stream {s.stream_id}: {type(exc).__name__}: {exc}")
        return report

    def compact_stream(self, s: StreamMeta) -> CompactionReport:
        report = CompactionReport()
        sid, epoch, start = s.stream_id, s.epoch, s.start_offset
        sos = list(s.stream_objects)
        below = [o.object_id for o in sos if o.end <= start]
        groups = merge_groups(sos, start, self.config.so_max_size)
        if not below and not groups:
            return report
        outputs: list[CompactedStreamObject] = []
        for g in groups:
            outputs.append(self._merge(sid, start, g, report))
        destroyed = below + [o.object_id for g in groups for o in g]
        try:
            self.meta.commit_compaction(destroyed, stream_objects=outputs, stream_epochs={sid: epoch},
                                         grace_ms=self.config.grace_ms)
        except BaseException:
            self.store.delete([self.meta.object_key(o.object_id) for o in outputs])
            raise
        report.objects_in += len(destroyed)
        report.objects_out += len(outputs)
        report.streams_compacted += 1
        log.info("stream objects compacted", extra={
            "stream_id": sid, "epoch": epoch, "sources": destroyed, "outputs": [o.object_id for o in outputs],
            "bytes_copied": report.bytes_copied, "bytes_written": report.bytes_written})
        return report

    def _merge(self, sid: int, start: int, group: list[StreamObjectMeta],
               report: CompactionReport) -> CompactedStreamObject:
        oid = self.meta.prepare_objects(1, ttl_ms=self.config.prepared_ttl_ms)
        key = self.meta.object_key(oid)
        mpu = self.store.multipart(key)
        try:
            pos = 0
            index: list[IndexEntry] = []
            for o in group:
                src = self.meta.object_key(o.object_id)
                reader = ObjectReader(self.store, src, size=o.size)
                live = [e for e in reader.index if e.end_offset > start]
                if any(e.stream_id != sid for e in reader.index):
                    raise ObjectFormatError(src, "not a stream object", f"it holds blocks of streams other than {sid}")
                if not live:
                    continue
                lo, hi = live[0].position, live[-1].position + live[-1].size
                if hi - lo >= self.config.copy_min:
                    mpu.copy_part(src, lo, hi)
                    report.bytes_copied += hi - lo
                else:
                    data = self.store.get(src, lo, hi)
                    if len(data) != hi - lo:
                        raise ObjectFormatError(src, "truncated object", f"blocks [{lo}, {hi}) gave {len(data)} bytes")
                    mpu.write_part(data)
                    report.bytes_read += hi - lo
                    report.bytes_written += hi - lo
                index += [IndexEntry(e.stream_id, e.start_offset, e.end_offset, e.record_count,
                                     e.position - lo + pos, e.size) for e in live]
                pos += hi - lo
            raw = b"".join(e.encode() for e in index)
            tail = raw + Footer(pos, len(raw)).encode()
            mpu.write_part(tail)
            mpu.complete()
        except BaseException:
            mpu.abort()
            raise
        size = pos + len(raw) + FOOTER_SIZE
        report.bytes_written += len(tail)
        return CompactedStreamObject(oid, sid, index[0].start_offset, index[-1].end_offset, size)
