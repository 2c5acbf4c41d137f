"""What one compaction cycle did, and the running totals exported on /metrics."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class CompactionReport:
    objects_in: int = 0  # source objects compacted (marked destroyed)
    objects_out: int = 0  # objects written
    expired_only: int = 0  # sources with no live block: only marked destroyed
    force_split: int = 0  # SSOs split wholly into stream objects
    merged: int = 0  # SSOs merged
    streams_compacted: int = 0  # streams whose stream objects were merged
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_copied: int = 0  # moved by server-side copy (stream object compaction)
    plans: int = 0
    seconds: float = 0.0
    deleted: list[int] = field(default_factory=list)  # objects deleted from the store after the grace period
    errors: list[str] = field(default_factory=list)

    def add(self, other: CompactionReport) -> None:
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, a + b)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class CompactionTotals:
    """Thread-safe totals since the node opened (runs, objects and bytes), for /metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs = 0
        self.failed_runs = 0
        self.total = CompactionReport()
        self.last: CompactionReport | None = None

    def record(self, report: CompactionReport) -> None:
        with self._lock:
            self.runs += 1
            if report.errors:
                self.failed_runs += 1
            summary = CompactionReport(**{f.name: getattr(report, f.name) for f in fields(report)
                                          if f.name not in ("deleted", "errors")})
            summary.deleted = []
            self.total.add(summary)
            self.total.deleted = []
            self.last = report

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out = {"runs": self.runs, "failed_runs": self.failed_runs}
            out.update({k: v for k, v in self.total.as_dict().items() if k not in ("deleted", "errors")})
            return out
