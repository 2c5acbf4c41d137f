"""The listener's answer writer on its own (a recording stream writer, no sockets): answers go out in request
order and each once, those ready together in one write; an answer that failed or was cancelled ends the
connection after every answer before it was sent; a failed SASL answer is the last one sent; every request's
in-flight share is given back."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from api.kafka.server import Answers, InFlight, KafkaServer, Pending


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
