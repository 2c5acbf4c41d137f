"""Exactly once through kill -9: a consume-transform-produce loop (confluent-kafka: a read_committed consumer,
a transactional producer that commits the consumer's offsets with its output, send_offsets_to_transaction)
copies 10,000 records while its node (the transaction coordinator, the group coordinator and the leader of
every partition: one node) is killed with kill -9 at random points and started again. The loop does what an
exactly-once application does on an error: it drops its producer and consumer and starts them again (the new
producer's InitProducerId fences the old one and ends its transaction; the consumer starts from the group's
committed offsets). At the end every input record is in the output exactly once (read_committed) and the
group's committed offsets are the input's end offsets."""

from __future__ import annotations

import faulthandler
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.client_guard import abandon_kafka_client
from tests.kafka.conftest import KafkaServerProcess
from tests.kafka.test_transactions import make_topics

RECORDS, IN_PARTS, OUT_PARTS, KILLS = 10_000, 2, 2, 3
GROUP, TID = "ctp-group", "ctp-loop"


def stuck(what: str) -> None:
    """Fail with every thread's stack on stderr (where the loop waits)."""
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    raise AssertionError(what)


class Stalled(KafkaException):
    """send_offsets_to_transaction did not return in time: the loop drops the producer and starts again."""


def send_offsets(p: Producer, offsets: list[TopicPartition], group: object, timeout: float = 15) -> None:
    """p.send_offsets_to_transaction, bounded. librdkafka 2.16 can block in it past its timeout when the group
    coordinator it cached went away and came back (confluentinc/librdkafka#5456, #5511: the TxnOffsetCommit is
    never sent); an application has to bound it itself. The stalled call's thread keeps the producer alive (a
    producer is never destroyed while a call is in it); the new producer fences it."""
    failed: list[BaseException] = []

    def call() -> None:
        try:
            p.send_offsets_to_transaction(offsets, group, timeout)
        except BaseException as exc:  # noqa: BLE001 - raised in the loop's thread below
            failed.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout + 5)
    if t.is_alive():
        raise Stalled("send_offsets_to_transaction stalled (librdkafka#5456)")
    if failed:
        try:
            raise failed[0]
        finally:  # the list would hold the exception, whose traceback holds this frame: a reference cycle keeping
            failed.clear()  # the loop's dropped producer alive (and open) until a garbage collection


class Loop(threading.Thread):
    """The application: copies ctp-in to ctp-out in transactions of up to 500 records with their offsets."""

    def __init__(self, s: KafkaServerProcess, ends: dict[int, int]) -> None:
        super().__init__(daemon=True)
        self.s, self.ends = s, ends
        self.committed_txns = 0
        self.restarts = 0
        self.abandoned: list[Producer] = []  # producers left in a stalled call (see send_offsets)
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.stop = threading.Event()

    def _start(self) -> tuple[Producer, Consumer]:
        p = Producer({"bootstrap.servers": self.s.bootstrap, "transactional.id": TID,
                      "transaction.timeout.ms": 10_000, "message.timeout.ms": 10_000})
        try:
            p.init_transactions(15)  # first: a transaction its predecessor left prepared is completed
        except BaseException:
            p.close()
            raise
        c = Consumer({"bootstrap.servers": self.s.bootstrap, "group.id": GROUP, "isolation.level": "read_committed",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.assign([TopicPartition("ctp-in", i) for i in range(IN_PARTS)])
        return p, c

    def _one(self, p: Producer, c: Consumer) -> bool:
        """One transaction; True once the group's committed offsets are the input's ends."""
        msgs = [m for m in c.consume(500, 0.5) if m.error() is None]
        if not msgs:
            committed = c.committed([TopicPartition("ctp-in", i) for i in range(IN_PARTS)], 15)
            return all(tp.offset == self.ends[tp.partition] for tp in committed)
        p.begin_transaction()
        for m in msgs:
            while True:
                try:
                    p.produce("ctp-out", key=b"out-" + m.key(), value=m.value(), partition=m.partition() % OUT_PARTS)
                    break
                except BufferError:
                    p.poll(0.01)
        send_offsets(p, c.position(c.assignment()), c.consumer_group_metadata())
        p.commit_transaction(15)
        self.committed_txns += 1
        return False

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - a failure while dropping the clients: reported by the test
            self.error = exc

    def _run(self) -> None:
        deadline = time.monotonic() + 240
        while not self.stop.is_set():
            if time.monotonic() > deadline:
                self.error = AssertionError(f"not finished within 240 s ({self.committed_txns} transactions)")
                return
            p = c = None
            try:
                p, c = self._start()
                while not self._one(p, c):
                    pass
                self.done.set()
                return
            except Stalled:
                self.restarts += 1
                self.abandoned.append(p)
                abandon_kafka_client(p, "send_offsets_to_transaction stalled in it, librdkafka#5456")
                p = None
            except KafkaException:  # the node went away: start again, as an exactly-once application does
                self.restarts += 1
                time.sleep(0.2)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                self.error = exc
                return
            finally:
                if c is not None:
                    c.close()
                if p is not None:
                    try:
                        p.flush(0)
                    except KafkaException as exc:  # a fenced producer's every call raises its fatal error (its
                        if not exc.args[0].fatal():  # transaction outlived transaction.timeout.ms while the node
                            raise  # was down, and the coordinator aborted it): dropped all the same, started again


def read_committed(s: KafkaServerProcess, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": s.bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        c.assign([TopicPartition("ctp-out", i, 0) for i in range(OUT_PARTS)])
        keys: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (len(eof) == OUT_PARTS and len(keys) >= expect):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                    continue
                raise KafkaException(m.error())
            eof.discard(m.partition())
            keys.append(m.key())
        return keys
    finally:
        c.close()


@pytest.mark.slow(seconds=35)  # three kills, each waits out the client's timeouts and a restart
def test_consume_transform_produce_is_exactly_once_through_kill_9(tmp_path: Path) -> None:
    rng = random.Random(40)
    s = KafkaServerProcess(tmp_path / "node").start()
    loop: Loop | None = None
    try:
        make_topics(s, {"ctp-in": IN_PARTS, "ctp-out": OUT_PARTS})
        src = Producer({"bootstrap.servers": s.bootstrap, "linger.ms": 20})
        try:
            for i in range(RECORDS):
                src.produce("ctp-in", key=f"{i:05d}".encode(), value=b"x" * 64, partition=i % IN_PARTS)
                if i % 1000 == 0:
                    src.poll(0)
            assert src.flush(60) == 0
        finally:
            src.purge()
            src.close()
        ends = {i: RECORDS // IN_PARTS for i in range(IN_PARTS)}

        loop = Loop(s, ends)
        loop.start()
        landed = 0  # kills delivered while the loop had not finished
        for at in sorted(rng.sample(range(2, 18), KILLS)):  # of the ~20 transactions the copy takes
            deadline = time.monotonic() + 60
            while loop.committed_txns < at and not loop.done.is_set():
                if not (time.monotonic() < deadline and loop.error is None):
                    stuck(f"{loop.committed_txns} transactions, {loop.restarts} restarts: {loop.error!r}")
                time.sleep(rng.uniform(0.005, 0.05))
            if loop.done.is_set():
                break
            s.stop(signal.SIGKILL)
            # the node is dead: a loop not finished now has to get through the kill (the loop may get through it
            # without an error: its clients reconnect to the node started again, and the producer's transaction
            # goes on; `restarts` counts only the kills its clients raised on)
            landed += not loop.done.is_set()
            s.restart()
        if not loop.done.wait(120):
            stuck(f"not done: {loop.committed_txns} transactions, {loop.restarts} restarts: {loop.error!r}")
        assert loop.error is None, loop.error
        assert landed >= 1, "no kill landed while the loop ran"

        out = Counter(read_committed(s, RECORDS))
        assert set(out) == {f"out-{i:05d}".encode() for i in range(RECORDS)}, len(out)
        assert [k for k, n in out.items() if n != 1] == []  # exactly once
        check = Consumer({"bootstrap.servers": s.bootstrap, "group.id": GROUP})
        try:
            got = check.committed([TopicPartition("ctp-in", i) for i in range(IN_PARTS)], 30)
        finally:
            check.close()
        assert {tp.partition: tp.offset for tp in got} == ends
    finally:
        if loop is not None:
            loop.stop.set()
        s.stop(signal.SIGKILL)
