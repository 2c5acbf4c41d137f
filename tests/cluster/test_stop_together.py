"""Two nodes on the shared WAL stopped together (SIGTERM to both at once, as `kill $NODE0 $NODE1` in the README)
while their partitions hold records not uploaded yet: each hands its partitions to the other, which stops too
and commits nothing for it. Each node's stop waits for the other only while the other is alive (it waited out
30 s before), and nothing acknowledged is lost: both started again, every record is read back at its offset."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from storage_tier.seaweedfs_server import SeaweedFS
from tests.cluster.harness import TOPIC, Cluster, check_offsets, started_with_topic, wait_until

PARTS = 4
STOP_S = 25.0  # under the 30 s a stopping node gave the nodes it handed partitions to


def _produce(c: Cluster) -> list[dict[str, object]]:
    """Records on every partition, each sent to its leader; the acknowledgements."""
    leaders = {int(p.rsplit("-", 1)[1]): n for n, ps in c.leaders().items() for p in ps}
    acked = []
    with httpx.Client(timeout=60) as http:
        for i in range(10):
            for p in range(PARTS):
                msgs = [{"key": f"k{i % 7}", "value": f"v-{p}-{i}-{j}", "partition": p} for j in range(20)]
                r = http.post(f"{c.url(leaders[p])}/v1/topics/{TOPIC}/messages", json={"messages": msgs})
                assert r.status_code == 200, r.text
                acked += [{**m, **res} for m, res in zip(msgs, r.json()["results"], strict=True)]
    return acked


@pytest.mark.slow(seconds=25)
def test_two_nodes_stopped_together_stop_promptly_and_lose_nothing(tmp_path: Path, seaweedfs: SeaweedFS,
                                                                   pg_url: Callable[[], str]) -> None:
    prefix = f"together-{uuid.uuid4().hex[:8]}"
    c = Cluster(tmp_path, seaweedfs.store_url("mqindex", prefix), pg_url(),
                "--wal", seaweedfs.store_url("mqindex", prefix + "-wal"), "--upload-interval-s", "600",
                "--upload-threshold", str(1 << 30))
    with started_with_topic(c, TOPIC, PARTS, nodes=2):
        wait_until(lambda: sorted(c.leaders()) == [0, 1] and sum(map(len, c.leaders().values())) == PARTS, 30,
                   "both nodes leading partitions")
        acked = _produce(c)
        took: dict[int, float] = {}
        codes: dict[int, int] = {}

        def stop(n: int) -> None:
            t0 = time.monotonic()
            codes[n] = c.nodes[n].stop(signal.SIGTERM, timeout=120)
            took[n] = time.monotonic() - t0

        threads = [threading.Thread(target=stop, args=(n,)) for n in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        assert codes == {0: 0, 1: 0}, codes
        assert max(took.values()) < STOP_S, (took, [c.nodes[n].log.read_text()[-3000:] for n in (0, 1)])
        c.start(0)
        c.start(1)
        wait_until(lambda: sum(map(len, c.leaders().values())) == PARTS, 60, "every partition led again")
        check_offsets(c, acked, PARTS)
