"""Pure planning of stream set object compaction: which blocks go to which output, and the cut into plans.

Blocks of the chosen objects are sorted by (stream, offset) and cut into runs of contiguous offsets. A run
becomes its own stream object (SO) when the whole object is being split, when it is bigger than the split
size, or when its stream has an offset gap (several runs); the rest become the streams' ranges in one new
stream set object (SSO), which holds one contiguous range per stream.

Memory: reads, the plan's blocks and the multipart part buffer all count against ONE budget, the cache size
(`memory_budget`). Outputs are written one at a time (every SO, then the SSO), so one writer's part buffer
is reserved; a read batch per read thread is reserved once more for the moment its GET response is copied;
the rest holds the plan's blocks. The work is cut into plans of at most that many bytes, each read (in batches) and
written out before the next; a read batch is released as soon as its last block is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from broker.errors import ObjectFormatError
from broker.objects.format import DEFAULT_BLOCK_SIZE, IndexEntry

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


#: ranged GETs of one plan in flight at once (the store's latency, not its bandwidth, bounds one GET)
READ_THREADS = 4


@dataclass(frozen=True)
class MemoryBudget:
    """How one cache size is shared: `writer` bytes for the open output's part buffer (a part being
    shipped, the next part filling, an open block and the block being re-encoded), `plan` bytes of
    blocks held between read and write (the plan's read batches ARE its buffers) and `READ_THREADS`
    more `read_batch` for the transient copies of the GET responses in flight.
    writer + READ_THREADS * read_batch + plan == cache."""

    cache: int
    writer: int
    read_batch: int
    plan: int


def memory_budget(cache_size: int, part_size: int, read_batch: int,
                  block_size: int = DEFAULT_BLOCK_SIZE) -> MemoryBudget:
    """Share `cache_size` between the writer, the reads in flight and the plan. The writer needs two parts
    and two blocks; the reads in flight get at most a quarter of what is left so the plan keeps most of the
    cache. A cache too small for the writer is refused (the bound could not hold)."""
    writer = 2 * part_size + 2 * block_size
    rest = cache_size - writer
    if rest < 2 * block_size:
        raise ValueError(f"compaction cache_size {cache_size} is too small: the output's part buffer needs "
                         f"{writer} bytes (2 parts of {part_size} + 2 blocks) and the plan at least "
                         f"{2 * block_size} more")
    batch = max(min(read_batch, rest // (4 * READ_THREADS)), 1)
    reads = READ_THREADS * batch
    return MemoryBudget(cache_size, writer, batch, rest - reads)


def output_order(units: list[Unit]) -> list[Unit]:
    """Every stream object first, then the stream set object's ranges: each output object is written
    completely before the next opens, so only one part buffer is ever held."""
    return [u for u in units if u.kind == SO] + [u for u in units if u.kind == SSO]


def cut_plans(units: list[Unit], cache_size: int) -> Iterator[list[tuple[int, SourceBlock]]]:
    """(unit index, block) in output order, cut into plans of at most `cache_size` bytes of blocks (a block
    bigger than the cache is a plan of its own); made one at a time as the writing goes."""
    cur: list[tuple[int, SourceBlock]] = []
    size = 0
    for i, u in enumerate(units):
        for b in u.blocks:
            if cur and size + b.entry.size > cache_size:
                yield cur
                cur, size = [], 0
            cur.append((i, b))
            size += b.entry.size
    if cur:
        yield cur


def read_batches(blocks: list[SourceBlock], batch_size: int) -> list[list[SourceBlock]]:
    """One plan's blocks grouped by object, in position order, cut into batches of adjacent blocks of at
    most `batch_size` bytes: each batch is one ranged GET of exactly its blocks (no gap is read)."""
    by_object: dict[int, list[SourceBlock]] = {}
    for b in blocks:
        by_object.setdefault(b.object_id, []).append(b)
    out: list[list[SourceBlock]] = []
    for oid in sorted(by_object):
        cur: list[SourceBlock] = []
        size = 0
        for b in sorted(by_object[oid], key=lambda b: b.entry.position):
            adjacent = cur and cur[-1].entry.position + cur[-1].entry.size == b.entry.position
            if cur and (size + b.entry.size > batch_size or not adjacent):
                out.append(cur)
                cur, size = [], 0
            cur.append(b)
            size += b.entry.size
        if cur:
            out.append(cur)
    return out
