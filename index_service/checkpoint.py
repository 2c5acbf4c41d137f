"""Checkpoint: per (topic, queue_id) the highest offset durably indexed, so a broker can re-dispatch
from there after a crash, and the dedup state that keeps re-dispatched records from being indexed
twice.

The writer saves a checkpoint at most every `checkpoint_interval_ms` while it writes, and at once on
flush, roll, forget and close (the WRITING file's items are synced first): the offsets, the name of the
WRITING file and its item count at that moment. After a crash the WRITING file may hold items beyond
that count (written, not yet checkpointed). Recovery keeps
their (fingerprint, queue_id, offset) as the "tail": a re-dispatched record whose keys are all in
the tail is dropped, one whose keys are partly there is stored with the missing keys only. Records at
or below the checkpoint are dropped by offset (offsets of one (topic, queue) arrive in order).

The broker re-dispatches one partition after the other, so a roll (or a checkpoint counting the whole WRITING
file) can come while the tail still holds records of partitions not re-dispatched yet. Every checkpoint saved
while the tail is not empty therefore carries what is left of it (`tail`, and `tail_files`: the files holding
those items, whose offset ranges a re-dispatched record found there widens), and recovery adds it to the tail it
reads from the files: a second crash in the middle of the re-dispatch forgets none of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from index_service.ranges import Ranges
from index_service.ranges import from_body as ranges_from_body
from index_service.ranges import to_body as ranges_body
from index_service.state_folders import DocumentError, StateFolders

log = logging.getLogger("mqindex.index_service.checkpoint")

QueueKey = tuple[str, int]
TailKey = tuple[int, int, int]  # fingerprint of topic#key, queue_id, offset


@dataclass
class Checkpoint:
    offsets: dict[QueueKey, int] = field(default_factory=dict)
    writing: str | None = None  # stem of the WRITING file when it was saved
    items: int = 0  # that file's item count when it was saved
    seq: int = 0
    ranges: Ranges = field(default_factory=dict)  # the WRITING file's offset ranges (see ranges.py)
    tail: set[TailKey] = field(default_factory=set)  # the re-dispatch dedup set left when it was saved
    tail_files: list[str] = field(default_factory=list)  # stems of the files holding those items

    def to_body(self) -> dict[str, object]:
        body: dict[str, object] = {"version": 1, "seq": self.seq, "writing": self.writing, "items": self.items,
                                   "offsets": [[t, q, o] for (t, q), o in self.offsets.items()],
                                   "ranges": ranges_body(self.ranges)}
        if self.tail:
            body["tail"] = [list(k) for k in sorted(self.tail)]
            body["tail_files"] = list(self.tail_files)
        return body

    @classmethod
    def from_body(cls, body: dict[str, object]) -> Checkpoint:
        offsets = {(str(t), int(q)): int(o) for t, q, o in body.get("offsets", [])}  # type: ignore[union-attr]
        writing = body.get("writing")
        tail = {(int(f), int(q), int(o)) for f, q, o in body.get("tail", [])}  # type: ignore[union-attr]
        if any(not 0 <= f < 1 << 64 for f, _q, _o in tail):
            raise ValueError("checkpoint tail: fingerprint out of the u64 range")
        return cls(offsets, str(writing) if writing is not None else None, int(body.get("items", 0)),  # type: ignore[arg-type]
                   int(body.get("seq", 0)), ranges_from_body("checkpoint", body.get("ranges", [])),  # type: ignore[arg-type]
                   tail, [str(s) for s in body.get("tail_files", [])])  # type: ignore[union-attr]


class CheckpointStore:
    def __init__(self, folders: StateFolders) -> None:
        self.folders = folders
        self.current = Checkpoint()

    def load(self) -> Checkpoint:
        path = self.folders.checkpoint_path
        if not path.exists():
            self.current = Checkpoint()
            return self.current
        try:
            self.current = Checkpoint.from_body(self.folders.read_document(path))
        except (DocumentError, ValueError, TypeError) as exc:
            # the checkpoint is replaced atomically, so this means outside damage: start from zero
            # (the broker re-dispatches everything it still has; the tail dedup covers the WRITING file)
            self.folders.quarantine(path, f"checkpoint unreadable: {exc}", "checkpoint")
            self.current = Checkpoint()
        return self.current

    def save(self, offsets: dict[QueueKey, int], writing: str | None, items: int,
             ranges: Ranges | None = None, tail: set[TailKey] | None = None,
             tail_files: list[str] | None = None) -> Checkpoint:
        """Replace the checkpoint atomically; `tail`/`tail_files`: the dedup set left (see the module doc)."""
        ck = Checkpoint(dict(offsets), writing, items, self.current.seq + 1, dict(ranges or {}),
                        set(tail or ()), list(tail_files or []) if tail else [])
        self.folders.write_document(self.folders.checkpoint_path, ck.to_body())
        self.current = ck
        return ck
