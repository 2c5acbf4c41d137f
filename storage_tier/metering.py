"""Request meter: counts backend requests by kind and bytes moved, read by code and benchmarks."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE", "COPY")


@dataclass(frozen=True)
class MeterSnapshot:
    requests: dict[str, int] = field(default_factory=dict)
    bytes_in: int = 0  # bytes sent to the backend (writes)
    bytes_out: int = 0  # bytes read back from the backend

    def __sub__(self, other: MeterSnapshot) -> MeterSnapshot:
        return MeterSnapshot(
            {k: self.requests.get(k, 0) - other.requests.get(k, 0) for k in KINDS},
            self.bytes_in - other.bytes_in,
            self.bytes_out - other.bytes_out,
        )

    def __getitem__(self, kind: str) -> int:
        return self.requests.get(kind, 0)

    @property
    def total(self) -> int:
        return sum(self.requests.values())


class Meter:
    """Thread-safe counters. Every request a backend issues (including retried attempts) is recorded once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(KINDS, 0)
        self._bytes_in = 0
        self._bytes_out = 0

    def record(self, kind: str, bytes_in: int = 0, bytes_out: int = 0) -> None:
        if kind not in self._counts:
            raise ValueError(f"unknown request kind {kind!r}")
        with self._lock:
            self._counts[kind] += 1
            self._bytes_in += bytes_in
            self._bytes_out += bytes_out

    def add_bytes(self, bytes_in: int = 0, bytes_out: int = 0) -> None:
        with self._lock:
            self._bytes_in += bytes_in
            self._bytes_out += bytes_out

    def snapshot(self) -> MeterSnapshot:
        with self._lock:
            return MeterSnapshot(dict(self._counts), self._bytes_in, self._bytes_out)

    def reset(self) -> None:
        with self._lock:
            self._counts = dict.fromkeys(KINDS, 0)
            self._bytes_in = 0
            self._bytes_out = 0
