"""Stream set object compaction of one node (AutoMQ's StreamSetObject compaction).

One run: read the index block of each of this node's SSOs (cached across runs), then
1. drop expired data: blocks of deleted streams and blocks wholly below the stream's start offset; an
   object with no live block is only marked destroyed;
2. force split: SSOs committed longer than `force_split_ms` ago become stream objects (SOs) wholly;
3. merge: the newest `max_objects` other SSOs that share a stream with another of them: runs bigger than
   the split size or with an offset gap become SOs, the rest one new SSO;
4. write within one memory budget (`plan.memory_budget`: plan + read batch + part buffer = `cache_size`):
   outputs one at a time, every SO then the new SSO, each one multipart upload whose parts ship as they
   fill; plans are read in batches of adjacent blocks and written out before the next plan is read;
5. commit everything in ONE metadata transaction (`MetadataClient.commit_compaction`: node epoch checked,
   every live source range covered). Output ids are prepared with an expiry first, so a crash before the
   commit leaks nothing once they expire; sources are deleted from the store after the grace period.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from broker.compaction.config import CompactionConfig
from broker.compaction.plan import (
    READ_THREADS,
    SO,
    SSO,
    SourceBlock,
    Unit,
    cut_plans,
    memory_budget,
    output_order,
    plan_units,
    read_batches,
)
from broker.compaction.report import CompactionReport
from broker.errors import MetadataError
from broker.metadata.client import MetadataClient
from broker.metadata.image import StreamMeta, StreamSetObjectMeta
from broker.metadata.requests import CompactedStreamObject, CompactedStreamSetObject
from broker.objects.format import IndexEntry, decode_block
from broker.objects.reader import ObjectReader
from broker.objects.writer import ObjectWriter
from storage_tier import BlobStore

log = logging.getLogger("mqindex.broker.compaction")

Step = Callable[[str], None]


def _live(m: StreamSetObjectMeta, entries: list[IndexEntry], streams: dict[int, StreamMeta]) -> list[IndexEntry]:
    """Blocks still readable: the stream exists, the block is in the object's committed range and not wholly
    below the stream's start offset."""
    out = []
    for e in entries:
        s = streams.get(e.stream_id)
        r = m.ranges.get(e.stream_id)
        if s is None or r is None or e.end_offset <= s.start_offset:
            continue
        if e.start_offset < r[0] or e.end_offset > r[1]:
            continue
        out.append(e)
    return out


class SsoCompaction:
    def __init__(self, store: BlobStore, meta: MetadataClient, config: CompactionConfig,
                 on_step: Step | None = None) -> None:
        self.store = store
        self.meta = meta
        self.config = config
        self.on_step = on_step or (lambda step: None)
        self._readers: dict[int, ObjectReader] = {}  # object id -> its reader with the index block loaded

    def _index(self, m: StreamSetObjectMeta, report: CompactionReport) -> list[IndexEntry]:
        reader = self._readers.get(m.object_id)
        if reader is None:  # objects never change: one index read per object
            reader = ObjectReader(self.store, self.meta.object_key(m.object_id), size=m.size)
            report.bytes_read += min(m.size, 64 << 10)
            self._readers[m.object_id] = reader
        return reader.index

    def run(self, now_ms: int) -> CompactionReport:
        report = CompactionReport()
        ssos, streams = self.meta.node_objects()
        alive = {m.object_id for m in ssos}
        for oid in [o for o in self._readers if o not in alive]:
            del self._readers[oid]
        expired: list[int] = []
        split: list[tuple[StreamSetObjectMeta, list[IndexEntry]]] = []
        rest: list[tuple[StreamSetObjectMeta, list[IndexEntry]]] = []
        for m in sorted(ssos, key=lambda m: m.object_id, reverse=True):  # ids grow with time: newest first
            live = _live(m, self._index(m, report), streams)
            om = self.meta.object_meta(m.object_id)
            committed_at = om.committed_at if om is not None and om.committed_at is not None else now_ms
            if not live:
                expired.append(m.object_id)
            elif committed_at <= now_ms - self.config.force_split_ms:
                split.append((m, live))
            else:
                rest.append((m, live))
        rest = rest[:self.config.max_objects]
        seen: dict[int, int] = {}
        for m, _ in rest:
            for sid in m.ranges:
                seen[sid] = seen.get(sid, 0) + 1
        merge = [(m, live) for m, live in rest if any(seen[e.stream_id] > 1 for e in live)]
        if len(merge) < 2:
            merge = []
        if not (expired or split or merge):
            return report

        def blocks(objs: list[tuple[StreamSetObjectMeta, list[IndexEntry]]]) -> list[SourceBlock]:
            out = []
            for m, live in objs:
                key = self.meta.object_key(m.object_id)  # one string per object, shared by its blocks
                out += [SourceBlock(m.object_id, key, e) for e in live]
            return out

        units = plan_units(blocks(split), self.config.split_size, split_all=True)
        units += plan_units(blocks(merge), self.config.split_size, split_all=False)
        units.sort(key=lambda u: (u.stream_id, u.start))
        sources = expired + [m.object_id for m, _ in split] + [m.object_id for m, _ in merge]
        sso, sos = self._write(units, report) if units else (None, [])
        self.on_step("uploaded")
        try:
            self.meta.commit_compaction(sources, sso=sso, stream_objects=sos, grace_ms=self.config.grace_ms)
        except MetadataError:  # refused, nothing applied: delete the outputs now (their ids may be gone already,
            # and then no cleanup would ever find them); any other error may have been applied, see so_compaction
            self.store.delete([self.meta.object_key(o.object_id) for o in [*([sso] if sso else []), *sos]])
            raise
        self.on_step("committed")
        report.objects_in += len(sources)
        report.objects_out += len(sos) + (1 if sso else 0)
        report.expired_only += len(expired)
        report.force_split += len(split)
        report.merged += len(merge)
        log.info("stream set objects compacted", extra={
            "node_id": self.meta.node_id, "sources": sources, "sso": sso.object_id if sso else None,
            "stream_objects": [o.object_id for o in sos], "plans": report.plans,
            "bytes_read": report.bytes_read, "bytes_written": report.bytes_written})
        return report

    def _read_batch(self, batch: list[SourceBlock]) -> bytes:
        """One ranged GET of a batch of adjacent blocks of one object."""
        lo, hi = batch[0].entry.position, batch[-1].entry.position + batch[-1].entry.size
        return self._readers[batch[0].object_id].read_range(lo, hi)

    def _write(self, units: list[Unit], report: CompactionReport
               ) -> tuple[CompactedStreamSetObject | None, list[CompactedStreamObject]]:
        """Write the outputs one at a time (every SO, then the SSO) within the memory budget: a plan's read
        batches are its only buffers (raw blocks, decoded one block at a time while written), a batch is
        dropped as soon as its last block is written, and the open output ships each part as it fills."""
        cfg = self.config
        budget = memory_budget(cfg.cache_size, cfg.part_size, cfg.read_batch)
        units = output_order(units)
        n_so = sum(1 for u in units if u.kind == SO)
        has_sso = n_so < len(units)
        first = self.meta.prepare_objects(n_so + (1 if has_sso else 0), ttl_ms=cfg.prepared_ttl_ms)
        sso_id = first + n_so if has_sso else None  # SO i gets first + i (SO units come first)
        writer: ObjectWriter | None = None
        writer_unit = -1  # the unit index whose output `writer` writes (the SSO: the first SSO unit)
        written: list[str] = []
        sos: list[CompactedStreamObject] = []
        sso: CompactedStreamSetObject | None = None

        def close_writer() -> None:
            nonlocal writer, sso
            if writer is None:
                return
            w, writer = writer, None
            info = w.close()
            written.append(w.key)
            report.bytes_written += info.size
            u = units[writer_unit]
            if u.kind == SO:
                sos.append(CompactedStreamObject(first + writer_unit, u.stream_id, u.start, u.end, info.size))
            else:
                assert sso_id is not None
                sso = CompactedStreamSetObject(sso_id, info.size, {v.stream_id: (v.start, v.end)
                                                                   for v in units if v.kind == SSO})

        def writer_for(i: int) -> ObjectWriter:
            nonlocal writer, writer_unit
            u = units[i]
            same = writer is not None and (writer_unit == i or (u.kind == SSO and units[writer_unit].kind == SSO))
            if not same:
                close_writer()
                oid = first + i if u.kind == SO else sso_id
                assert oid is not None
                writer = ObjectWriter(self.store, self.meta.object_key(oid), part_size=cfg.part_size, eager=True)
                writer_unit = i
            assert writer is not None
            return writer

        pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="compaction-read")
        try:
            for plan in cut_plans(units, budget.plan):
                report.plans += 1
                # raw bytes of each read batch, and how many of its blocks are still to be written
                batches: dict[int, tuple[memoryview, int]] = {}
                left: dict[int, int] = {}
                where: dict[tuple[int, int], int] = {}  # (object id, block position) -> batch number
                todo = read_batches([b for _, b in plan], budget.read_batch)
                for n, (batch, data) in enumerate(zip(todo, pool.map(self._read_batch, todo), strict=True)):
                    report.bytes_read += len(data)
                    batches[n] = (memoryview(data), batch[0].entry.position)
                    del data
                    left[n] = len(batch)
                    for b in batch:
                        where[(b.object_id, b.entry.position)] = n
                del todo
                for i, b in plan:
                    n = where.pop((b.object_id, b.entry.position))
                    mv, lo = batches[n]
                    pos = b.entry.position - lo
                    w = writer_for(i)
                    for r in decode_block(b.key, mv[pos:pos + b.entry.size], b.entry):
                        w.write(r)
                    left[n] -= 1
                    if not left[n]:  # the batch's last block is written: release its bytes now
                        del batches[n], mv
            close_writer()
            pool.shutdown()
            return sso, sos
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            if writer is not None:
                writer.abort()
            try:  # the prepared ids expire anyway; removing the bytes now just frees them sooner
                self.store.delete(written)
            except Exception:  # noqa: BLE001
                log.warning("could not delete the outputs of a failed compaction", extra={"keys": written})
            raise
