"""Child process of the SIGKILL test: writes keys through an IndexService until it is killed.

    python -m tests.index_service.crash_child DATA_DIR STORE_URL T0 [CRASH_POINT]

Protocol on stdout (one line each, flushed): `START <first offset>` after opening (it re-dispatches
a few records below the checkpoint, as a broker does after a crash), `FLUSHED <n>` once offsets
< n are flushed, and `AT <point>` when the background or writer thread reaches CRASH_POINT, where
that thread then blocks so the parent's SIGKILL lands exactly there.

    python -m tests.index_service.crash_child DATA_DIR STORE_URL T0 --batch FIRST LAST FLUSH_BELOW

A deterministic round: no checkpoint but the ones a flush or a roll saves. Offsets FIRST..FLUSH_BELOW-1 are
put and flushed, then FLUSH_BELOW..LAST are put as ONE batch (one write of the writer thread, as a broker's
re-dispatch of a range is); once the last is queryable (written, not checkpointed) the child prints
`WRITTEN <checkpoint before the batch>` and waits for SIGKILL.
"""

from __future__ import annotations

import sys
import threading
import time

from index_service import IndexService

TOPIC = "crash"


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def batch_round(data_dir: str, store_url: str, t0: int, first: int, last: int, flush_below: int) -> int:
    svc = IndexService.open(data_dir, store=store_url, slots=16, max_items=30, flush_interval_ms=2,
                            checkpoint_interval_ms=3_600_000, maintain_interval_s=0)
    ck = svc.checkpoint(TOPIC, 0)
    if first < flush_below:
        svc.put_batch([(TOPIC, 0, i, 100, t0 + i, [f"k{i}"]) for i in range(first, flush_below)])
        svc.flush()
    svc.put_batch([(TOPIC, 0, i, 100, t0 + i, [f"k{i}"]) for i in range(flush_below, last + 1)])
    deadline = time.monotonic() + 30
    while not svc.query(TOPIC, f"k{last}", 1):
        if time.monotonic() > deadline:
            _say("NOT WRITTEN")
            return 1
        time.sleep(0.005)
    _say(f"WRITTEN {ck}")
    threading.Event().wait()  # until SIGKILL: nothing after the batch is saved
    return 0


def main(argv: list[str]) -> int:
    data_dir, store_url, t0 = argv[0], argv[1], int(argv[2])
    if len(argv) > 3 and argv[3] == "--batch":
        return batch_round(data_dir, store_url, t0, int(argv[4]), int(argv[5]), int(argv[6]))
    point = argv[3] if len(argv) > 3 else None
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def hook(name: str) -> None:
        if name == point:
            say(f"AT {name}")
            threading.Event().wait()  # hold this thread here until SIGKILL

    svc = IndexService.open(data_dir, store=store_url, slots=16, max_items=30, flush_interval_ms=2,
                            write_batch=8, maintain_interval_s=0.005, retry_initial_s=0.01, crash_hook=hook)
    ck = svc.checkpoint(TOPIC, 0)
    start = max(0, (ck + 1 if ck is not None else 0) - 3)
    say(f"START {start}")
    for i in range(start, start + 5000):
        svc.put(TOPIC, 0, i, 100, [f"k{i}"], t0 + i)
        if i % 7 == 6:
            svc.flush()
            say(f"FLUSHED {i + 1}")
    svc.close()
    say("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
