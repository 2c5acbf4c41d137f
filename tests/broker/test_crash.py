"""SIGKILL of a producing broker process, repeated: every acknowledged record survives at its offset and is
found by its key, offsets stay dense, and the index holds each record exactly once."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from broker.node import BrokerNode

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 10


def _run_until_acks(cmd: list[str], want: int, timeout: float = 60.0) -> list[tuple[int, int, str]]:
    """Start the child, read its ACK lines until `want` acks (or more), SIGKILL it, return every ack read."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    acks: list[tuple[int, int, str]] = []
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while len(acks) < want:
            left = deadline - time.monotonic()
            assert left > 0, f"child produced only {len(acks)} acks in {timeout}s"
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                assert proc.poll() is None, f"child exited with {proc.returncode}"
                continue
            chunk = os.read(fd, 65536)
            assert chunk, f"child closed stdout (exit {proc.poll()})"
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.startswith(b"ACK "):
                    _, p, o, k = line.decode().split(" ")
                    acks.append((int(p), int(o), k))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        # acks printed before the kill landed still count: drain the pipe
        rest = buf + proc.stdout.read()
        for line in rest.split(b"\n"):
            if line.startswith(b"ACK ") and line.count(b" ") == 3:
                _, p, o, k = line.decode().split(" ")
                acks.append((int(p), int(o), k))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return acks


def test_sigkill_during_produce_loses_no_acknowledged_record(seaweedfs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store = seaweedfs.store_url("mqindex", f"crash-{uuid.uuid4().hex[:8]}")
    meta = f"sqlite:///{tmp_path}/meta.sqlite"
    data = str(tmp_path / "node")
    rng = random.Random(5)
    acked: dict[tuple[int, int], str] = {}
    for rnd in range(ROUNDS):
        cmd = [sys.executable, str(ROOT / "tests/broker/produce_child.py"), data, store, meta, f"r{rnd}"]
        for p, o, k in _run_until_acks(cmd, rng.randint(5, 400)):
            assert (p, o) not in acked, f"offset {p}@{o} acknowledged twice"
            acked[(p, o)] = k
        node = BrokerNode.open(data, store, meta, upload_interval_s=60.0)
        try:
            assert node.recovered_records > 0 or node.unclean_partitions
            node.sync_index(60)
            total = 0
            for part in range(3):
                msgs, nxt = node.fetch("crash", part, 0, 100_000)
                assert [m.offset for m in msgs] == list(range(nxt)), "offsets have a gap or a duplicate"
                total += nxt
                for m in msgs:
                    k = acked.get((part, m.offset))
                    if k is not None:
                        assert m.key == k.encode(), f"{part}@{m.offset} holds {m.key!r}, acknowledged as {k}"
            missing = [(p, o) for (p, o) in acked if o >= node.partition_info("crash", p)["end_offset"]]
            assert not missing, f"acknowledged records lost: {missing[:5]}"
            # a sample of keys each round (all of them in the last one): found once, at the acked place
            sample = list(acked.items()) if rnd == ROUNDS - 1 else rng.sample(list(acked.items()), min(50, len(acked)))
            for (p, o), k in sample:
                page, cursor = node.find_by_key("crash", k, 0, None, 10, None)
                assert [(m.partition, m.offset) for m in page] == [(p, o)] and cursor is None, k
            # every stored record has two keys (its own and "common"): indexed exactly once each
            assert sum(f["items"] for f in node.index_files()) == 2 * total
            page, _ = node.find_by_key("crash", "common", 0, None, 100_000, None)
            assert len(page) == total
        finally:
            node.close()
