"""Child process of the SIGKILL test: writes keys through an IndexService until it is killed.

    python -m tests.index_service.crash_child DATA_DIR STORE_URL T0 [CRASH_POINT]

Protocol on stdout (one line each, flushed): `START <first offset>` after opening (it re-dispatches
a few records below the checkpoint, as a broker does after a crash), `FLUSHED <n>` once offsets
< n are flushed, and `AT <point>` when the background or writer thread reaches CRASH_POINT (never before
START), where that thread then blocks so the parent's SIGKILL lands exactly there.

    python -m tests.index_service.crash_child DATA_DIR STORE_URL T0 --batch STEP...

A deterministic round: no checkpoint but the ones a flush or a roll saves. Each STEP is `Q:FIRST:LAST` (put
offsets FIRST..LAST of queue Q as ONE batch, as the broker's dispatcher re-dispatches a partition's range) or
`flush`; once the last key put is queryable (written, not checkpointed) the child prints `WRITTEN <queue 0's
checkpoint when it opened>` and waits for SIGKILL. Queue 0's keys are `k<offset>`, queue q's `k<offset>q<q>`.
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


def key(queue: int, offset: int) -> str:
    return f"k{offset}" if queue == 0 else f"k{offset}q{queue}"


def batch_round(data_dir: str, store_url: str, t0: int, steps: list[str]) -> int:
    svc = IndexService.open(data_dir, store=store_url, slots=16, max_items=30, flush_interval_ms=2,
                            checkpoint_interval_ms=3_600_000, maintain_interval_s=0)
    ck = svc.checkpoint(TOPIC, 0)
    last_key = None
    for step in steps:
        if step == "flush":
            svc.flush()
            continue
        q, first, last = (int(x) for x in step.split(":"))
        svc.put_batch([(TOPIC, q, i, 100, t0 + i, [key(q, i)]) for i in range(first, last + 1)])
        last_key = (q, key(q, last))
    deadline = time.monotonic() + 30
    while last_key is not None and not svc.query(TOPIC, last_key[1], 1):
        if time.monotonic() > deadline:
            _say("NOT WRITTEN")
            return 1
        time.sleep(0.005)
    _say(f"WRITTEN {ck}")
    threading.Event().wait()  # until SIGKILL: nothing after the last step is saved
    return 0


def main(argv: list[str]) -> int:
    data_dir, store_url, t0 = argv[0], argv[1], int(argv[2])
    if len(argv) > 3 and argv[3] == "--batch":
        return batch_round(data_dir, store_url, t0, argv[4:])
    point = argv[3] if len(argv) > 3 else None
    out_lock = threading.Lock()

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    started = threading.Event()

    def hook(name: str) -> None:
        if name == point:
            # the background thread resumes an earlier round's compaction or upload as the service opens, and
            # may reach the point before START is printed: the parent reads START first
            started.wait()
            say(f"AT {name}")
            threading.Event().wait()  # hold this thread here until SIGKILL

    svc = IndexService.open(data_dir, store=store_url, slots=16, max_items=30, flush_interval_ms=2,
                            write_batch=8, maintain_interval_s=0.005, retry_initial_s=0.01, crash_hook=hook)
    ck = svc.checkpoint(TOPIC, 0)
    start = max(0, (ck + 1 if ck is not None else 0) - 3)
    say(f"START {start}")
    started.set()
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
