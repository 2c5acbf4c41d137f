"""Pure planning of stream set object compaction: which blocks go to which output, and the cut into plans.

Blocks of the chosen objects are sorted by (stream, offset) and cut into runs of contiguous offsets. A run
becomes its own stream object (SO) when the whole object is being split, when it is bigger than the split
size, or when its stream has an offset gap (several runs); the rest become the streams' ranges in one new
stream set object (SSO), which holds one contiguous range per stream. The work is then cut into plans of
at most `cache_size` bytes of blocks, each read into memory (in batches) and written out before the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.errors import ObjectFormatError
from broker.objects.format import IndexEntry

SO = "SO"
SSO = "SSO"


@dataclass(frozen=True, slots=True)
class SourceBlock:
    object_id: int
    key: str
    entry: IndexEntry


@dataclass
class Unit:
    """One output piece: a whole stream object, or one stream's range inside the new stream set object."""

    kind: str
    stream_id: int
    blocks: list[SourceBlock] = field(default_factory=list)

    @property
    def start(self) -> int:
        return self.blocks[0].entry.start_offset

    @property
    def end(self) -> int:
        return self.blocks[-1].entry.end_offset

    @property
    def size(self) -> int:
        return sum(b.entry.size for b in self.blocks)


def runs_of(blocks: list[SourceBlock]) -> list[list[SourceBlock]]:
    """Cut blocks into runs of one stream with contiguous offsets; overlapping blocks are damage."""
    out: list[list[SourceBlock]] = []
    for b in sorted(blocks, key=lambda b: (b.entry.stream_id, b.entry.start_offset)):
        prev = out[-1][-1] if out else None
        if prev is not None and prev.entry.stream_id == b.entry.stream_id:
            if b.entry.start_offset < prev.entry.end_offset:
                raise ObjectFormatError(b.key, "overlapping stream data",
                                        f"stream {b.entry.stream_id} [{b.entry.start_offset}, {b.entry.end_offset}) "
                                        f"overlaps [{prev.entry.start_offset}, {prev.entry.end_offset}) of "
                                        f"{prev.key}")
            if b.entry.start_offset == prev.entry.end_offset:
                out[-1].append(b)
                continue
        out.append([b])
    return out


def plan_units(blocks: list[SourceBlock], split_size: int, split_all: bool) -> list[Unit]:
    """The outputs of `blocks`, in (stream, offset) order."""
    runs = runs_of(blocks)
    runs_per_stream: dict[int, int] = {}
    for r in runs:
        runs_per_stream[r[0].entry.stream_id] = runs_per_stream.get(r[0].entry.stream_id, 0) + 1
    units = []
    for r in runs:
        sid = r[0].entry.stream_id
        size = sum(b.entry.size for b in r)
        kind = SO if split_all or runs_per_stream[sid] > 1 or size > split_size else SSO
        units.append(Unit(kind, sid, r))
    return units


def cut_plans(units: list[Unit], cache_size: int) -> list[list[tuple[int, SourceBlock]]]:
    """(unit index, block) in output order, cut into plans of at most `cache_size` bytes of blocks (a block
    bigger than the cache is a plan of its own)."""
    plans: list[list[tuple[int, SourceBlock]]] = []
    cur: list[tuple[int, SourceBlock]] = []
    size = 0
    for i, u in enumerate(units):
        for b in u.blocks:
            if cur and size + b.entry.size > cache_size:
                plans.append(cur)
                cur, size = [], 0
            cur.append((i, b))
            size += b.entry.size
    if cur:
        plans.append(cur)
    return plans


def read_batches(blocks: list[SourceBlock], batch_size: int) -> list[list[SourceBlock]]:
    """One plan's blocks grouped by object, in position order, cut into batches of at most `batch_size`
    bytes (adjacent blocks of a batch are read with one ranged GET)."""
    by_object: dict[int, list[SourceBlock]] = {}
    for b in blocks:
        by_object.setdefault(b.object_id, []).append(b)
    out: list[list[SourceBlock]] = []
    for oid in sorted(by_object):
        cur: list[SourceBlock] = []
        size = 0
        for b in sorted(by_object[oid], key=lambda b: b.entry.position):
            if cur and size + b.entry.size > batch_size:
                out.append(cur)
                cur, size = [], 0
            cur.append(b)
            size += b.entry.size
        if cur:
            out.append(cur)
    return out
