"""Child process of the compaction kill -9 test: registers node 0 again and runs one compaction cycle,
killing itself with SIGKILL at the named step ("uploaded": outputs written, before the commit;
"committed": after the commit, before any delete)."""

from __future__ import annotations

import os
import signal
import sys

from broker.compaction import CompactionConfig, Compactor
from broker.metadata.client import MetadataClient
from storage_tier import open_store


def main(argv: list[str]) -> int:
    store_url, meta_url, step = argv
    meta = MetadataClient(meta_url, 0)
    meta.register_node()

    def on_step(name: str) -> None:
        print("STEP", name, flush=True)
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    store = open_store(store_url)
    Compactor(store, meta, CompactionConfig(interval_s=0, grace_ms=0), on_step=on_step).run_once()
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
