"""The upload into a local object store sharing the node's filesystem asks whether it fits above the free-space
floor, not only whether the filesystem is under it already: a clean stop with the free space just above the
floor (a produce refused there) leaves the cache in the WAL instead of writing it into the full filesystem, and
the next start, with room again, uploads and serves every acknowledged message. Real tmpfs mount."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.errors import OutOfDisk
from broker.node import BrokerNode
from broker.partitions.client_messages import InMessage
from tests.disk_fs import fill, free, small_tmpfs

FLOOR = 4 << 20


def open_node(data: Path) -> BrokerNode:
    return BrokerNode.open(data, f"file://{data}/objects", f"sqlite:///{data}/metadata.sqlite",
                           upload_threshold=64 << 20, upload_interval_s=3600, min_free_bytes=FLOOR)


def test_a_clean_stop_just_above_the_floor_writes_no_object_into_the_filesystem(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", 40) as mnt:
        data = mnt / "data"
        node = open_node(data)
        try:
            node.create_topic("t", 1)
            acked = []
            for i in range(40):  # 40 x 16 x 4 KiB: about 2.6 MB cached, none uploaded (threshold, interval)
                acked += node.produce("t", [InMessage(b"v" * 4096, key=f"k{i}-{j}".encode()) for j in range(16)])
            assert node.storage.cache.size > 2 << 20
            fill(mnt / "filler", leave=FLOOR + (1 << 20))  # above the floor, but not by the cache's size
            with pytest.raises(OutOfDisk):
                node.storage.flush()
            assert node.storage.disk.episode is not None
            before = free(mnt)
        finally:
            node.close()
        assert free(mnt) >= before - (256 << 10)  # the final upload was refused too: nothing went to objects/
        (mnt / "filler").unlink()
        node = open_node(data)
        try:
            msgs, _next = node.fetch("t", 0, 0, len(acked) + 10)
            assert len(msgs) == len(acked) and {m.offset for m in msgs} == {a.offset for a in acked}
        finally:
            node.close()
