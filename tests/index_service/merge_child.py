"""Child process of the merge kill test: opens the index over a written history and merges it, blocking at a
named crash point until the parent kills it with SIGKILL.

    python -m tests.index_service.merge_child DATA_DIR STORE_URL NOW_MS CRASH_POINT

Prints `AT <point>` (flushed) when the merge reaches CRASH_POINT. It runs one maintenance cycle at NOW_MS (the
merges), then one past the grace (the merged inputs' deletion), so every step of a merge can be reached.
"""

from __future__ import annotations

import sys
import threading

from index_service import IndexService


def main(argv: list[str]) -> int:
    data_dir, store_url, now, point = argv[0], argv[1], int(argv[2]), argv[3]
    clock = [now]

    def hook(name: str) -> None:
        if name == point:
            sys.stdout.write(f"AT {name}\n")
            sys.stdout.flush()
            threading.Event().wait()  # held here until SIGKILL

    svc = IndexService.open(data_dir, store=store_url, slots=64, max_items=10_000, roll_age_ms=1 << 50,
                            maintain_interval_s=0, clock=lambda: clock[0], crash_hook=hook)
    svc.maintain()
    clock[0] += svc.config.merge_grace_ms + 1
    svc.maintain()
    sys.stdout.write("DONE\n")
    sys.stdout.flush()
    svc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
