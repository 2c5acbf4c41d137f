"""BorrowedRange: offsets of a stream opened here that its previous owner acknowledged and only its shared WAL
holds (a partition moved without uploading first, see broker/cluster/handoff.py).

The new owner appends after the range at once; the range's records are read from the previous owner's WAL
objects in the background and put in the log cache in front of the new appends. Until then a read of the
range waits (`wait`) and the stream is not uploaded, since a commit must continue the stream's committed end.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.errors import WalError
from broker.objects.format import StreamRecord
from storage_tier import StorageUnavailable

#: how long a read of a moved range waits for its records
BORROW_WAIT_S = 60.0


@dataclass
class BorrowedRange:
    stream_id: int
    start: int  # the stream's committed end when it was opened here
    end: int  # the previous owner's acknowledged end
    done: threading.Event = field(default_factory=threading.Event)
    error: str = ""  # the last failed read, for the error a waiting reader gets

    def wait(self, timeout: float = BORROW_WAIT_S) -> None:
        if not self.done.wait(timeout):
            raise StorageUnavailable("broker", None, f"stream {self.stream_id}: records [{self.start}, {self.end}) "
                                                     f"moved from the previous owner are not read from its WAL yet"
                                                     + (f" ({self.error})" if self.error else ""))

    def pick(self, records: Iterable[StreamRecord]) -> list[StreamRecord]:
        """The records of this range among `records` (in WAL order); WalError unless they cover it exactly."""
        out = [r for r in records if r.stream_id == self.stream_id and r.last_offset > self.start]
        pos = self.start
        for r in out:
            if r.base_offset != pos or r.last_offset > self.end:
                raise WalError(f"stream {self.stream_id}: the previous owner's WAL has a record at {r.base_offset}-"
                               f"{r.last_offset} where {pos} was expected (moved range [{self.start}, {self.end}))")
            pos = r.last_offset
        if pos != self.end:
            raise WalError(f"stream {self.stream_id}: the previous owner's WAL holds the moved range [{self.start}, "
                           f"{self.end}) only up to {pos}")
        return out
