"""When the Kafka listener may queue a client's batches on its event loop: `ClientBatches.may_block` is True
only while an append could wait (log-cache back-pressure, the first idempotent append at an ownership epoch,
which rebuilds the producer state from the log) or run long (a compressed batch to decompress), and the
queued appends resolve once fsynced."""

from __future__ import annotations

import struct

import crc32c
import pytest

from broker.node import BrokerNode
from broker.partitions.records import ProducerRecord, build_batch


def idempotent(batch: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    b = bytearray(batch)
    struct.pack_into(">qhi", b, 43, producer_id, epoch, sequence)
    struct.pack_into(">I", b, 17, crc32c.crc32c(bytes(b[21:])))
    return bytes(b)


@pytest.fixture
def node(local_node: BrokerNode) -> BrokerNode:
    local_node.create_topic("t", 1)
    return local_node


def test_may_block_only_while_an_append_could_wait(node: BrokerNode) -> None:
    batches, parts = node.client_batches, node.partitions
    part = parts.partition(parts.topic("t"), 0)
    plain = build_batch([ProducerRecord(b"v", b"k", [], 1)])
    assert not batches.may_block(part, plain)
    ours = idempotent(plain, 7, 0, 0)
    assert batches.may_block(part, plain + ours)  # any batch with a producer id, not only the first
    assert batches.may_block(part, ours)
    results, queued = batches.append(part, ours)  # rebuilds the producer state at this epoch
    queued.wait()
    assert all(f.done() for f in queued.futures) and results[0].base_offset == 0
    assert not batches.may_block(part, idempotent(plain, 7, 0, 1))
    assert batches.may_block(part, build_batch([ProducerRecord(b"v" * 100, b"k", [], 1)], compression="gzip"))
    storage = parts.storage
    limit, storage.max_cache_bytes = storage.max_cache_bytes, -1
    try:
        assert batches.may_block(part, plain)
    finally:
        storage.max_cache_bytes = limit
