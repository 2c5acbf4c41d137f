"""Stream object compaction of the streams this node owns (AutoMQ's StreamObject compaction).

Per stream: stream objects wholly below the start offset are marked destroyed; runs of contiguous stream
objects are merged into one object of at most `so_max_size` bytes, size-tiered (`merge_groups`): an
object bigger than what would be appended to it is left alone, so big objects are not re-copied.
The data blocks move without decoding: pieces of `copy_min` bytes or more by server-side UploadPartCopy
(`MultipartWriter.copy_part`), smaller ones read and re-uploaded; expired leading blocks are skipped;
the index block is rebuilt with the new positions. Each stream's result is one metadata transaction
with the stream epoch checked.
"""

from __future__ import annotations

import logging

from broker.compaction.config import CompactionConfig
from broker.compaction.report import CompactionReport
from broker.errors import Fenced, MetadataError, ObjectFormatError
from broker.metadata.client import MetadataClient
from broker.metadata.image import OPENED, StreamMeta, StreamObjectMeta
from broker.metadata.requests import CompactedStreamObject
from broker.objects.format import FOOTER_SIZE, Footer, IndexEntry
from broker.objects.reader import ObjectReader
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.compaction")


def merge_groups(sos: list[StreamObjectMeta], start_offset: int, max_size: int) -> list[list[StreamObjectMeta]]:
    """Groups of contiguous live stream objects to merge, each at most `max_size` bytes and of two or more.

    Size-tiered, so a big object is not copied again every cycle: a group's first object is left alone
    when it is bigger than the rest of the group together (appending a few small objects to it would copy
    it whole for little gain). So an object above half the maximum is never copied again, a
    run that would not change (one object) is left alone, and each byte is copied at most about
    log2(max_size / smallest object) times over the life of the stream."""
    runs: list[list[StreamObjectMeta]] = []
    for o in sos:
        if o.end <= start_offset:
            continue
        if runs and o.start == runs[-1][-1].end:
            runs[-1].append(o)
        else:
            runs.append([o])
    groups: list[list[StreamObjectMeta]] = []
    for run in runs:
        i = 0
        while i < len(run):
            j, size = i + 1, run[i].size
            while j < len(run) and size + run[j].size <= max_size:
                size += run[j].size
                j += 1
            if j - i > 1 and run[i].size <= size - run[i].size:
                groups.append(run[i:j])
                i = j
            else:
                i += 1
    return groups


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
        except MetadataError:  # refused, nothing applied: the outputs are nobody's
            self.store.delete([self.meta.object_key(o.object_id) for o in outputs])
            raise
        # any other error leaves the outputs: the commit may have been applied (a connection lost at COMMIT),
        # and then they are the stream's objects; if it was not, their PREPARED ids expire and cleanup deletes them
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
