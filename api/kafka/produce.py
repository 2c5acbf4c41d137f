"""Produce: each partition's batches stored as the client sent them, acknowledged after the WAL fsync.

Two steps, so that a connection's pipelined requests share the WAL's group commits: `append` queues the
batches on the partitions' streams (the listener runs it for one request after the other, in arrival order,
which keeps an idempotent producer's batches in sequence), and the `ProduceAnswer` it returns gives the response
once the WAL has fsynced them (the listener lets several of those wait at once). A ProduceAnswer is no task: the
listener's writer awaits only the answer at the head of the connection's line, and the answers behind it that
the same group commit made durable are taken at once, without a task, a coroutine and a loop wake-up apiece.

No thread per request: queueing only checks, copies and hands the batches to the WAL writer, so it runs on the
event loop unless it could wait (topic metadata not cached, log-cache back-pressure, a producer-state rebuild:
then on a worker thread); the wait for the fsync awaits the WAL's futures on the loop. A thread hop costs a
wake-up and a turn at the GIL (up to the 5 ms switch interval when another thread runs Python), per request.

Before it acknowledges, an answer waits for a catch-up of the metadata begun after its batches were queued
(broker/partitions/kafka_clients/fresh_answers.py, one catch-up shared by every answer waiting then) and answers
UNKNOWN_TOPIC_OR_PARTITION for a topic deleted before that, on another node too: a deletion committed before the
request arrived drops those records, so they are never acknowledged and then dropped. The catch-up runs while the
WAL writes and fsyncs the batches, not after: a deletion committed after the request arrived is concurrent with
it, and acknowledging then is the order "produced, then deleted" (the records go with the topic, as any record
acknowledged before a deletion does). Begun once the batches were durable, the catch-up added its whole time,
about 1.3 ms at p50, to every answer."""

from __future__ import annotations

import asyncio
import logging
import struct
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import Any

from api.kafka import errors
from api.kafka.context import Context
from api.kafka.fetch import EncodedResponse
from api.kafka.framing import frame
from api.kafka.schemas import APIS, build
from broker.errors import LeaseLapsed, RecordFormatError
from broker.partitions.kafka_clients.client_batches import BatchTooLarge, Queued, SequenceError
from broker.partitions.kafka_clients.fresh_answers import FreshAnswers

log = logging.getLogger("mqindex.kafka.produce")


Outcomes = dict[tuple[str, int], tuple[int, int, str | None]]  # (topic, partition) -> (code, base, message)


Waits = list[tuple[tuple[str, int], Queued]]


_UNDECIDED = "undecided"  # a ProduceAnswer's verdict before its appends completed


class ProduceAnswer:
    """The answer of a produce request whose batches are queued: `done()` once the WAL has fsynced all of them,
    then `result()` is the response (None for acks=0); `wait()` awaits that on the event loop.

    Whether the node could still acknowledge is decided when the request's last append completes, on the WAL's
    thread (one callback a request), as the HTTP path decides once its wait returns: a batch made durable
    while the node could acknowledge is acknowledged, even when the answer goes out later (behind a
    long-polling fetch on the same connection, or to a slow reader)."""

    __slots__ = ("_outcomes", "_waits", "_acks", "_version", "_correlation_id", "_check", "_verdict", "_fresh",
                 "_topic_ids", "_topic_id_of", "_gone", "_decided", "_lock", "_left", "_durable_verdict", "_lapsed",
                 "_catch_up_error")

    def __init__(self, outcomes: Outcomes, waits: Waits, acks: int, version: int, correlation_id: int,
                 fresh: FreshAnswers | None = None, topic_ids: dict[str, int] | None = None,
                 topic_id_of: Any = None) -> None:
        self._outcomes, self._waits, self._acks = outcomes, waits, acks
        self._version, self._correlation_id = version, correlation_id
        self._check = waits[0][1].check if waits else None  # the node's: every partition's is the same
        self._verdict: str | None = _UNDECIDED  # why the node could not acknowledge then (None: it could)
        # with `fresh`: the verdict also waits for a metadata catch-up begun now, once the batches are queued; it
        # runs while the WAL writes them, and the answer is ready when both are done (`_left` counts them down)
        self._fresh = fresh if waits else None
        self._topic_ids, self._topic_id_of = topic_ids or {}, topic_id_of
        self._gone: set[str] = set()  # topics deleted before that catch-up: their partitions are not acknowledged
        self._decided: Future[None] | None = Future() if self._fresh is not None else None
        self._lock = threading.Lock()
        self._left = 2
        self._durable_verdict: str | None = None
        self._lapsed = False  # the verdict: the lease lapsed while the records were written (stored, not acked)
        self._catch_up_error: BaseException | None = None
        if self._fresh is not None:
            self._fresh.after(self._caught_up)
        # the WAL completes its appends in order: once the last this request queued is done, all of them are, and
        # so are the first appends of its retried batches (queued by earlier requests)
        last = next((q.appended for _, q in reversed(waits) if q.appended is not None), None)
        if last is not None:
            last.add_done_callback(self._decide)
            return
        pending = [f for _, q in waits for f in q.futures]  # only retried batches: their first appends
        if not pending:
            self._decide(None)
            return
        left = [len(pending)]
        lock = threading.Lock()

        def one_done(_f: Future[Any]) -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            self._decide(None)

        for f in pending:
            f.add_done_callback(one_done)

    def _decide(self, _last: Future[Any] | None) -> None:
        try:
            if self._check is not None:
                self._check()
            verdict = None
        except LeaseLapsed as exc:  # written, not acknowledged: kept if this node renews its lease
            verdict, self._lapsed = str(exc.written()), True
        except Exception as exc:  # noqa: BLE001 - the partitions are answered with a storage error
            verdict = str(exc)
        if self._fresh is None:
            self._verdict = verdict
            return
        self._durable_verdict = verdict
        self._one_done()

    def _caught_up(self, error: BaseException | None) -> None:
        """On the catch-up's thread: the catch-up begun once the batches were queued has finished."""
        self._catch_up_error = error
        self._one_done()

    def _one_done(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left:
                return
        self._after_catch_up(self._durable_verdict, self._catch_up_error)

    def _after_catch_up(self, verdict: str | None, error: BaseException | None) -> None:
        """Once the batches are durable and the catch-up finished: the topics deleted before it, then the verdict;
        the answer is ready."""
        try:
            if error is not None:  # the records are stored: an error answer would have them sent twice
                log.warning("metadata not read before a produce's answer: a deletion of its topic on another node "
                            "in the last moments is not seen",
                            extra={"topics": sorted(self._topic_ids), "error": f"{type(error).__name__}: {error}"})
            if self._topic_id_of is not None:
                self._gone = {t for t, tid in self._topic_ids.items() if self._topic_id_of(t) != tid}
            self._verdict = verdict
        finally:
            if self._decided is not None:
                self._decided.set_result(None)

    def done(self) -> bool:
        if self._decided is not None and not self._decided.done():
            return False
        return all(f.done() for _, q in self._waits for f in q.futures)

    async def wait(self) -> Any | None:
        """The response once every batch is fsynced. The waits are shielded: a request cancelled with its
        connection leaves the appends (already queued, maybe fsynced) to finish. The WAL completes its appends
        in order, so awaiting from the last one back is one wake-up per request."""
        for _, q in reversed(self._waits):
            for f in reversed(q.futures):
                if not f.done():
                    try:
                        await asyncio.shield(asyncio.wrap_future(f))
                    except Exception:  # noqa: BLE001, S110 - result() reports that partition's failure
                        pass
        if self._decided is not None and not self._decided.done():
            await asyncio.shield(asyncio.wrap_future(self._decided))
        return self.result()

    def result(self) -> Any | None:
        """The response; every append must be done (`done()`)."""
        done = self._outcomes
        for key, q in self._waits:  # acknowledged once the WAL has fsynced every batch
            why = q.failure()
            if why is None:
                if self._verdict is _UNDECIDED and self._decided is None:  # its callback not run yet: decided now
                    self._decide(None)
                why = self._verdict
                if key[0] in self._gone:
                    log.warning("produce not acknowledged: its topic was deleted meanwhile",
                                extra={"topic": key[0], "partition": key[1]})
                    done[key] = (errors.UNKNOWN_TOPIC_OR_PARTITION, -1, f"topic {key[0]} was deleted")
                    continue
            if why is not None and self._lapsed and why == self._verdict:
                log.warning("produce written, not acknowledged: the lease lapsed while it was written",
                            extra={"topic": key[0], "partition": key[1], "error": why})
            elif why is not None:
                log.error("produce not durable", extra={"topic": key[0], "partition": key[1], "error": why})
            if why is not None:
                done[key] = (errors.KAFKA_STORAGE_ERROR, -1, why)
        self._waits = []  # answered: a second result() gives the same response
        return None if self._acks == 0 else _response(done, self._version, self._correlation_id)


async def produce(ctx: Context, req: Any, version: int) -> Any | None:
    """The whole request: appended, then answered once durable (None for acks=0)."""
    return await (await append(ctx, req, version)).wait()


async def append(ctx: Context, req: Any, version: int, refused: frozenset[str] = frozenset()) -> ProduceAnswer:
    """Queue every partition's batches on the WAL; returns once they are queued (not yet durable), with the
    answer that is ready once they are. The topics in `refused` (by the access control rules) are answered
    TOPIC_AUTHORIZATION_FAILED and nothing of them is stored."""
    parts = ctx.node.partitions
    batches = ctx.node.client_batches

    ids: dict[str, int] = {}

    def queue() -> tuple[Outcomes, Waits]:
        out: Outcomes = {}
        waits: Waits = []
        for t in req.topic_data:
            for pd in t.partition_data:
                key = (t.name, pd.index)
                if t.name in refused:
                    out[key] = (errors.TOPIC_AUTHORIZATION_FAILED, -1, "not authorized")
                    continue
                if req.acks not in (0, 1, -1):
                    out[key] = (errors.INVALID_REQUIRED_ACKS, -1, f"acks {req.acks}")
                    continue
                try:
                    ctx.node._check_usable()
                    info = parts.topic(t.name)
                    p = parts.partition(info, pd.index)
                    results, queued = batches.append(p, bytes(pd.records or b""))
                    ids[t.name] = info.topic_id
                    waits.append((key, queued))
                    out[key] = (errors.NONE, results[0].base_offset, None)
                except SequenceError as exc:
                    out[key] = (errors.BY_NAME[exc.code], -1, str(exc))
                except BatchTooLarge as exc:
                    out[key] = (errors.MESSAGE_TOO_LARGE, -1, str(exc))
                except RecordFormatError as exc:  # bad CRC, sizes, lengths or record count: nothing stored
                    code = errors.code_for(exc) if "transaction" in str(exc) else errors.CORRUPT_MESSAGE
                    out[key] = (code, -1, str(exc))
                except Exception as exc:  # noqa: BLE001 - answered per partition with Kafka's code
                    code = errors.code_for(exc)
                    if code == errors.UNKNOWN_SERVER_ERROR:
                        log.warning("produce refused", extra={"topic": t.name, "partition": pd.index,
                                                              "error": str(exc)})
                    out[key] = (code, -1, str(exc))
        return out, waits

    def in_line() -> bool:
        """Whether queueing cannot wait: every topic known, no partition's append that could block."""
        for t in req.topic_data:
            info = parts.cached_topic(t.name)
            if info is None:
                return False
            for pd in t.partition_data:
                try:
                    p = parts.partition(info, pd.index)
                except Exception:  # noqa: BLE001 - answered by queue(), on a worker thread
                    return False
                if batches.may_block(p, pd.records or b""):
                    return False
        return True

    queued, waits = queue() if in_line() else await ctx.run(queue)
    return ProduceAnswer(queued, waits, req.acks, version, req.header.correlation_id, fresh_answers(ctx), ids,
                         parts.registry.topic_id_of)


def fresh_answers(ctx: Context) -> FreshAnswers:
    """This node's FreshAnswers (one catch-up thread a node, made on the first produce)."""
    node = ctx.node
    fresh = getattr(node, "_fresh_answers", None)
    if fresh is None:
        with _FRESH_LOCK:
            fresh = getattr(node, "_fresh_answers", None)
            if fresh is None:
                fresh = node._fresh_answers = FreshAnswers(node.meta.catch_up)
    return fresh


_FRESH_LOCK = threading.Lock()


class _Templates(threading.local):
    """Per listener thread: built responses by shape (version; topics and partitions in order), reused with
    their codes and offsets set. Building one through the schema classes took 26 us, two thirds of a
    produce answer's cost; the encoding stays kafka-python's. A template is filled and encoded on the
    listener's loop with no await in between, so two answers never share one half-filled.

    `success` holds, by shape, the framed bytes of the answer where every partition succeeded, with the byte
    positions of the correlation id and of each partition's base offset: all its other fields are then the
    same from one answer to the next and of fixed width, so such an answer is that frame with those numbers
    written in (a copy and a few packs instead of kafka-python's encode, about a tenth of the listener's GIL time
    at 16 KiB batches)."""

    def __init__(self) -> None:
        self.by_shape: OrderedDict[tuple[Any, ...], tuple[Any, list[Any]]] = OrderedDict()
        self.success: OrderedDict[tuple[Any, ...], tuple[bytes, tuple[int, ...]] | None] = OrderedDict()


_TEMPLATES = _Templates()
MAX_TEMPLATES = 1024
_CORRELATION_AT = 4  # the response header starts with the correlation id, right after the frame's length
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MARK = 0x6D71_6978_5F00_0000  # base offsets that mark their places in an encoded success answer
_MARK_ID = 0x6D71_6978  # and the correlation id its place


def _success_frame(shape: tuple[Any, ...], version: int, keys: list[tuple[str, int]]
                   ) -> tuple[bytes, tuple[int, ...]] | None:
    """The success answer of this shape and where its base offsets sit (None if they cannot be told apart)."""
    cache = _TEMPLATES.success
    if shape in cache:
        cache.move_to_end(shape)
        return cache[shape]
    marked = _encoded({key: (errors.NONE, _MARK + i, None) for i, key in enumerate(keys)}, version, shape,
                      _MARK_ID)
    data = bytes(marked.framed)
    places: list[int] = []
    for i in range(len(keys)):
        mark = _INT64.pack(_MARK + i)
        at = data.find(mark)
        if at < 0 or data.find(mark, at + 1) >= 0:
            places = []
            break
        places.append(at)
    id_found = data[_CORRELATION_AT:_CORRELATION_AT + 4] == _INT32.pack(_MARK_ID)
    found = (data, tuple(places)) if len(places) == len(keys) and id_found else None
    cache[shape] = found
    if len(cache) > MAX_TEMPLATES:
        cache.popitem(last=False)
    return found


def _response(done: Outcomes, version: int, correlation_id: int) -> EncodedResponse:
    """The framed answer: when every partition succeeded, the shape's success frame with its numbers written
    in; otherwise the template of this shape filled with `done`'s codes, offsets and messages."""
    shape = (version, *done)
    outcomes = done.values()
    if all(code == errors.NONE and message is None for code, _, message in outcomes):
        success = _success_frame(shape, version, list(done))
        if success is not None:
            data, places = success
            buf = bytearray(data)
            _INT32.pack_into(buf, _CORRELATION_AT, correlation_id)
            for at, (_, base, _) in zip(places, outcomes, strict=True):
                _INT64.pack_into(buf, at, base)
            return EncodedResponse(correlation_id, memoryview(buf))
    return _encoded(done, version, shape, correlation_id)


def _encoded(done: Outcomes, version: int, shape: tuple[Any, ...], correlation_id: int) -> EncodedResponse:
    """The answer encoded by kafka-python from the shape's template filled with `done`."""
    cache = _TEMPLATES.by_shape
    hit = cache.get(shape)
    if hit is None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for topic, index in done:
            by_topic.setdefault(topic, []).append(dict(index=index, error_code=0, base_offset=-1,
                                                       log_append_time_ms=-1, log_start_offset=-1,
                                                       record_errors=[], error_message=None))
        resp = build(APIS[0].response, version, throttle_time_ms=0,
                     responses=[dict(name=t, partition_responses=ps) for t, ps in by_topic.items()])
        # the partitions' answers in `done`'s order (grouped by topic above, so looked up by key)
        slots = {(t.name, p.index): p for t in resp.responses for p in t.partition_responses}
        hit = (resp, [slots[key] for key in done])
        cache[shape] = hit
        if len(cache) > MAX_TEMPLATES:
            cache.popitem(last=False)
    else:
        cache.move_to_end(shape)
    resp, parts = hit
    for p, (code, base, message) in zip(parts, done.values(), strict=True):
        p.error_code, p.base_offset, p.error_message = code, base, message
    resp.with_header(correlation_id=correlation_id)
    return EncodedResponse(correlation_id, memoryview(frame(resp.encode(header=True))))
