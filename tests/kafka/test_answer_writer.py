"""The listener's answer writer on its own (a recording stream writer, no sockets): answers go out in request
order and each once, those ready together in one write; an answer that failed or was cancelled ends the
connection after every answer before it was sent; a failed SASL answer is the last one sent; every request's
in-flight share is given back. Produce answers (no tasks) go out once durable, those made durable by one
group commit in one write, and one not made durable answers its partition with a storage error."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from api.kafka import errors
from api.kafka.produce import ProduceAnswer
from api.kafka.schemas import APIS
from api.kafka.server import Answers, InFlight, KafkaServer, Pending
from broker.partitions.kafka_clients.client_batches import Queued

PRODUCE = APIS[0]
VERSION = 7  # a response header of the correlation id alone


class RecordingWriter:
    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []

    def writelines(self, frames: list[Any]) -> None:
        self.writes.append([bytes(f) for f in frames])

    async def drain(self) -> None:
        return None


async def _failed() -> None:
    raise RuntimeError("handler failed")


async def _none() -> None:
    return None


def _run(items: list[Any], last: Any = None) -> tuple[RecordingWriter, InFlight, BaseException | None]:
    """Queue `items` (bytes, or coroutines made into tasks), the reader's end, and run the writer to its end;
    `last` (a coroutine) is awaited before the end is queued, with the items already queued."""
    async def main() -> tuple[RecordingWriter, InFlight, BaseException | None]:
        writer, in_flight, answers = RecordingWriter(), InFlight(), Answers()
        for i, it in enumerate(items):
            await in_flight.acquire(10)
            answer = asyncio.ensure_future(it) if asyncio.iscoroutine(it) else it
            close = isinstance(it, tuple)
            answers.put(Pending(i, it[0] if close else answer, 10, close_after=close))
        await asyncio.sleep(0)  # the tasks run to their end (none of them waits)
        await asyncio.sleep(0)
        answers.put(None)
        server = KafkaServer(None, "127.0.0.1", 0)
        try:
            await server._write_responses(writer, in_flight, answers)  # type: ignore[arg-type]
            error: BaseException | None = None
        except BaseException as exc:  # noqa: BLE001 - returned for the test to look at
            error = exc
        return writer, in_flight, error

    return asyncio.run(main())


def test_answers_ready_together_go_in_one_write_in_order() -> None:
    writer, in_flight, error = _run([b"a", b"b", _none(), b"c"])
    assert error is None
    assert writer.writes == [[b"a", b"b", b"c"]]  # the acks=0 answer (None) sends nothing
    assert in_flight.requests == 0 and in_flight.bytes == 0


@pytest.mark.parametrize("bad", ["failed", "cancelled"])
def test_a_failed_answer_ends_the_connection_after_those_before_it(bad: str) -> None:
    async def cancelled() -> None:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        await asyncio.sleep(1)

    writer, in_flight, error = _run([b"one", b"two", _failed() if bad == "failed" else cancelled(), b"four"])
    assert writer.writes == [[b"one", b"two"]]
    assert isinstance(error, RuntimeError if bad == "failed" else asyncio.CancelledError)
    assert in_flight.requests == 1  # "four" was never taken: the connection closes with it


def test_a_failed_sasl_answer_is_the_last_sent() -> None:
    writer, in_flight, error = _run([b"one", (b"sasl-refused",), b"never"])
    assert error is None
    assert writer.writes == [[b"one", b"sasl-refused"]]
    assert in_flight.requests == 1


def test_the_reader_waits_for_room_beyond_the_in_flight_limits() -> None:
    """At the request limit, or when a request's bytes would pass the byte limit, acquire waits until enough
    is released; a single request larger than the byte limit still goes through when nothing is in flight."""
    async def main() -> None:
        counted = InFlight(max_requests=3, max_bytes=1 << 30)
        for _ in range(3):
            await counted.acquire(10)
        fourth = asyncio.ensure_future(counted.acquire(10))
        await asyncio.sleep(0)
        assert not fourth.done() and counted.requests == 3
        counted.release(10)
        await asyncio.wait_for(fourth, 5)
        assert counted.requests == 3 and counted.bytes == 30

        sized = InFlight(max_requests=10, max_bytes=100)
        for _ in range(3):
            await sized.acquire(10)
        big = asyncio.ensure_future(sized.acquire(90))  # 30 + 90 bytes: over the byte limit
        await asyncio.sleep(0)
        sized.release(10)  # 20 + 90: still over
        await asyncio.sleep(0)
        assert not big.done()
        sized.release(10)  # 10 + 90: fits
        await asyncio.wait_for(big, 5)
        assert sized.requests == 2 and sized.bytes == 100
        sized.release(10)
        sized.release(90)
        await sized.acquire(500)  # alone, a frame over the byte limit is let through
        assert sized.requests == 1 and sized.bytes == 500

    asyncio.run(main())


def _produce_answer(correlation_id: int, futures: list[Future[Any]], check: Any = None) -> ProduceAnswer:
    key = ("t", correlation_id)
    return ProduceAnswer({key: (errors.NONE, 100 + correlation_id, None)},
                         [(key, Queued(futures, check or (lambda: None), futures[-1] if futures else None))], -1,
                         VERSION, correlation_id)


def test_the_verdict_waits_for_the_requests_own_last_append_not_a_retried_batchs_first() -> None:
    """A request with a new batch for one partition and, after it, a retried batch for another whose first append
    (queued by an earlier request, so earlier in the WAL) is still pending: whether the node may acknowledge is
    decided once the request's own last append is durable, not when the retried batch's first one is."""
    mine: Future[Any] = Future()  # this request's append for partition 0
    earlier: Future[Any] = Future()  # partition 1's retried batch: its first append, still pending
    checked: list[bool] = []
    check = lambda: checked.append(True)  # noqa: E731
    waits = [(("t", 0), Queued([mine], check, mine)), (("t", 1), Queued([earlier], check, None))]
    answer = ProduceAnswer({("t", 0): (errors.NONE, 5, None), ("t", 1): (errors.NONE, 3, None)}, waits, -1,
                           VERSION, 9)
    earlier.set_result(None)
    assert checked == [], "decided when an earlier append completed, before the request's own"
    mine.set_result(None)
    assert checked == [True] and answer.done()


def _partitions(frames: list[bytes]) -> list[tuple[int, int, int]]:
    """(correlation id, error code, base offset) of each framed produce answer."""
    out = []
    for f in frames:
        correlation_id = int.from_bytes(f[4:8], "big", signed=True)
        resp = PRODUCE.response.decode(f[8:], version=VERSION)
        p = resp.responses[0].partition_responses[0]
        out.append((correlation_id, p.error_code, p.base_offset))
    return out


def test_produce_answers_made_durable_by_one_commit_go_in_one_write() -> None:
    """The writer waits on the produce answer at the head of the line; once its fsync completes, the answers
    behind it that are durable too go out in the same write, in request order, with their own offsets."""
    async def main() -> tuple[RecordingWriter, InFlight]:
        writer, in_flight, answers = RecordingWriter(), InFlight(), Answers()
        futures: list[Future[Any]] = [Future() for _ in range(3)]
        for i, f in enumerate(futures):
            await in_flight.acquire(10)
            answers.put(Pending(i, _produce_answer(i, [f]), 10))
        answers.put(None)
        writing = asyncio.ensure_future(KafkaServer(None, "127.0.0.1", 0)._write_responses(
            writer, in_flight, answers))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert writer.writes == [] and not writing.done()  # nothing durable yet: nothing sent
        # one group commit completes them from the WAL's thread (the head of the line last, so the others are
        # done when the writer wakes)
        threading.Thread(target=lambda: [f.set_result(None) for f in reversed(futures)]).start()
        await asyncio.wait_for(writing, 10)
        return writer, in_flight

    writer, in_flight = asyncio.run(main())
    assert [_partitions(w) for w in writer.writes] == [[(0, 0, 100), (1, 0, 101), (2, 0, 102)]]
    assert in_flight.requests == 0 and in_flight.bytes == 0


@pytest.mark.parametrize("failure", ["append", "check"])
def test_a_produce_answer_not_made_durable_is_a_storage_error(failure: str) -> None:
    """An append that failed in the WAL, or a node that may no longer acknowledge, answers that partition with
    KAFKA_STORAGE_ERROR; the answers around it are sent as they are."""
    def refuse() -> None:
        raise RuntimeError("the node may not acknowledge")

    done: Future[Any] = Future()
    done.set_result(None)
    failed: Future[Any] = Future()
    if failure == "append":
        failed.set_exception(OSError("WAL write failed"))
    else:
        failed.set_result(None)
    items = [_produce_answer(0, [done]), _produce_answer(1, [failed], refuse if failure == "check" else None),
             _produce_answer(2, [done])]
    writer, in_flight, error = _run(items)
    assert error is None
    assert [_partitions(w) for w in writer.writes] == [[(0, 0, 100), (1, errors.KAFKA_STORAGE_ERROR, -1),
                                                        (2, 0, 102)]]
    assert in_flight.requests == 0


def test_a_produce_made_durable_while_the_node_could_acknowledge_is_acknowledged_when_answered_later() -> None:
    """Whether a partition may be acknowledged is decided when its append completes: a node that stops
    acknowledging afterwards (an out-of-disk episode, say), while the answer waits behind a slow one on the
    same connection, does not turn a durable write into a storage error (a producer would retry and store it
    twice); a produce completed after that point is refused."""
    usable = threading.Event()
    usable.set()

    def check() -> None:
        if not usable.is_set():
            raise RuntimeError("the node may not acknowledge")

    async def main() -> RecordingWriter:
        writer, in_flight, answers = RecordingWriter(), InFlight(), Answers()
        release = asyncio.Event()

        async def slow() -> bytes:  # a long-polling fetch, say
            await release.wait()
            return b"head"

        durable_before: Future[Any] = Future()
        durable_after: Future[Any] = Future()
        items: list[Any] = [asyncio.ensure_future(slow()), _produce_answer(1, [durable_before], check),
                            _produce_answer(2, [durable_after], check)]
        for i, answer in enumerate(items):
            await in_flight.acquire(10)
            answers.put(Pending(i, answer, 10))
        answers.put(None)
        writing = asyncio.ensure_future(KafkaServer(None, "127.0.0.1", 0)._write_responses(
            writer, in_flight, answers))  # type: ignore[arg-type]
        await asyncio.to_thread(durable_before.set_result, None)  # fsynced while the node could acknowledge
        usable.clear()  # then the node stops acknowledging
        await asyncio.to_thread(durable_after.set_result, None)
        release.set()  # the head of the line is answered only now
        await asyncio.wait_for(writing, 10)
        return writer

    writer = asyncio.run(main())
    frames = [f for w in writer.writes for f in w]
    assert frames[0] == b"head"
    assert _partitions(frames[1:]) == [(1, 0, 101), (2, errors.KAFKA_STORAGE_ERROR, -1)]
