"""Child process of tests/cluster/test_published_merge.py: runs the published-file merger once and is killed with
SIGKILL at the step named in argv (before the commit), as a failover leader dying mid-merge."""

from __future__ import annotations

import os
import signal
import sys

from broker.cluster.published_merge import PublishedMergeConfig, PublishedMerger
from broker.metadata import MetadataClient
from storage_tier import open_store


def main() -> None:
    meta_url, store_url, now, step = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    meta = MetadataClient(meta_url, 0)
    merger = PublishedMerger(meta, open_store(store_url), lambda: now, PublishedMergeConfig(departed_ms=0))

    def hook(at: str) -> None:
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    merger.hook = hook
    merger.run_once(alive={0})
    sys.exit(3)  # not killed: the step was never reached


if __name__ == "__main__":
    main()
