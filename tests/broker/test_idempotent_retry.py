"""An idempotent producer's retry is acknowledged only for what is durable.

A retry that arrives while its original is still in the WAL's group commit is answered once the original is
fsynced, not at once; if the original's append fails, the retry fails with it. A batch whose append failed is
forgotten by the producer state (its offsets went back to the acknowledged end), so its retry is stored as a
new batch, never answered with the offsets of a batch that was not stored.

The node, its WAL and its stream storage are real; the fault is injected at the WAL writer's fdatasync (held
until released, or failed once with ENOSPC, as a full disk answers), the one call where a group commit becomes
durable or not."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator

import pytest

from broker.errors import OutOfDisk
from broker.node import BrokerNode
from broker.partitions.records import ProducerRecord, build_batch
from broker.streams import wal as wal_module
from tests.broker.test_client_batches_in_line import idempotent

PRODUCER = 42


class WalFsyncGate:
    """Wraps the WAL writer's fdatasync: `hold()` stops the next group commit before it is durable (until
    `release()`); `fail_next()` makes the next one fail with ENOSPC. Other threads' fdatasyncs pass through."""

    def __init__(self) -> None:
        self._real = os.fdatasync
        self._open = threading.Event()
        self._open.set()
        self.waiting = threading.Event()
        self._fail = False

    def hold(self) -> None:
        self.waiting.clear()
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def fail_next(self) -> None:
        self._fail = True

    def __call__(self, fd: int) -> None:
        if threading.current_thread().name.startswith("wal-writer"):
            if not self._open.is_set():
                self.waiting.set()
                assert self._open.wait(30), "the test never released the held group commit"
            if self._fail:
                self._fail = False
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._real(fd)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[WalFsyncGate]:
    g = WalFsyncGate()
    monkeypatch.setattr(wal_module.os, "fdatasync", g)
    yield g
    g.release()


@pytest.fixture
def node(local_node: BrokerNode, gate: WalFsyncGate) -> Iterator[BrokerNode]:
    local_node.create_topic("t", 1)
    yield local_node
    gate.release()  # before the node closes


def batch(sequence: int, *values: bytes) -> bytes:
    return idempotent(build_batch([ProducerRecord(v, b"k", [], 1) for v in values]), PRODUCER, 0, sequence)


def stored(node: BrokerNode) -> list[bytes | None]:
    messages, _ = node.fetch("t", 0, 0, 1000)
    assert [m.offset for m in messages] == list(range(len(messages)))
    return [m.value for m in messages]


def wait_until(cond: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def writes_again(node: BrokerNode) -> None:
    wait_until(lambda: node.storage.disk.episode is None, "the out-of-disk episode ended")


def test_a_retry_of_a_batch_in_flight_is_answered_once_the_original_is_durable(node: BrokerNode,
                                                                               gate: WalFsyncGate) -> None:
    cb, parts = node.client_batches, node.partitions
    part = parts.partition(parts.topic("t"), 0)
    first = batch(0, b"a0", b"a1", b"a2")
    gate.hold()
    results, queued = cb.append(part, first)
    assert gate.waiting.wait(30), "the group commit never reached its fdatasync"
    retried, retry_queued = cb.append(part, first)
    assert retried[0].duplicate and retried[0].base_offset == results[0].base_offset == 0
    assert retry_queued.futures, "the retry is answered before its original is durable"
    assert retry_queued.failure() == "the append is not durable yet"
    gate.release()
    retry_queued.wait()
    queued.wait()
    assert retry_queued.failure() is None
    assert stored(node) == [b"a0", b"a1", b"a2"]


def test_a_retry_of_a_failed_append_is_stored_not_answered_with_rolled_back_offsets(node: BrokerNode,
                                                                                   gate: WalFsyncGate) -> None:
    cb, parts = node.client_batches, node.partitions
    part = parts.partition(parts.topic("t"), 0)
    cb.append(part, batch(0, b"a0", b"a1"))[1].wait()
    second = batch(2, b"b0", b"b1", b"b2")
    gate.fail_next()
    _, queued = cb.append(part, second)
    with pytest.raises(OutOfDisk):
        queued.wait()
    writes_again(node)
    results, queued = cb.append(part, second)  # the producer retries the batch it was refused
    assert not results[0].duplicate and results[0].base_offset == 2
    queued.wait()
    results, queued = cb.append(part, batch(5, b"c0"))
    queued.wait()
    assert results[0].base_offset == 5
    assert stored(node) == [b"a0", b"a1", b"b0", b"b1", b"b2", b"c0"]


def test_a_retry_waiting_on_its_original_fails_with_it_and_the_next_retry_is_stored(node: BrokerNode,
                                                                                   gate: WalFsyncGate) -> None:
    cb, parts = node.client_batches, node.partitions
    part = parts.partition(parts.topic("t"), 0)
    cb.append(part, batch(0, b"a0"))[1].wait()
    second = batch(1, b"b0", b"b1")
    gate.hold()
    gate.fail_next()
    _, queued = cb.append(part, second)
    assert gate.waiting.wait(30), "the group commit never reached its fdatasync"
    retried, retry_queued = cb.append(part, second)
    assert retried[0].duplicate
    gate.release()
    for q in (queued, retry_queued):
        with pytest.raises(OutOfDisk):
            q.wait()
    assert retry_queued.failure() is not None  # the Kafka answer: KAFKA_STORAGE_ERROR, the client retries
    writes_again(node)
    # a new batch after the failed one is out of sequence: the producer must send the failed one first
    with pytest.raises(Exception, match="OUT_OF_ORDER|expected 1"):
        cb.append(part, batch(3, b"c0"))
    results, queued = cb.append(part, second)
    assert not results[0].duplicate and results[0].base_offset == 1
    queued.wait()
    assert stored(node) == [b"a0", b"b0", b"b1"]
