"""Partition state: the records of a partition's meta stream.

Each record is one JSON snapshot of the whole state (the last record wins), written through the WAL and
uploaded like data, AutoMQ's meta-stream idea in its simplest form:

- `start_offset`: the log start offset (raised by retention; the data stream's start in the metadata is
  trimmed to it);
- `clean_shutdown`: True only in the record `close()` writes last; opening writes False first, so a node
  that finds False crashed and recovers from its WAL;
- `index_checkpoint`: the index's highest durably indexed offset when the record was written (the index
  service's own checkpoint is the one dispatch resumes from; this copy shows it to operators and
  survives a lost index directory);
- `node_id` / `epoch` of the writer, `at_ms` when written.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PartitionState:
    start_offset: int = 0
    clean_shutdown: bool = True
    index_checkpoint: int | None = None
    node_id: int | None = None
    epoch: int = -1
    at_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps({"v": 1, **asdict(self)}, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, payload: bytes) -> PartitionState:
        body = json.loads(payload)
        if isinstance(body, dict) and type(body.get("v")) is int and body["v"] > 1:
            raise ValueError(f"a version {body['v']} partition state record, newer than this version of mqindex "
                             "reads (1): written by a newer version? Upgrade this node")
        if not isinstance(body, dict) or body.get("v") != 1:
            raise ValueError(f"not a partition state record: {payload[:80]!r}")
        ck = body.get("index_checkpoint")
        return cls(int(body.get("start_offset", 0)), bool(body.get("clean_shutdown", False)),
                   None if ck is None else int(ck), body.get("node_id"), int(body.get("epoch", -1)),
                   int(body.get("at_ms", 0)))
