"""KafkaServer: the asyncio server loop of the Kafka listener, on its own thread and event loop.

Written by hand (the schema library has no server). Each connection is pipelined: a reader takes the
requests in arrival order and a writer sends the responses strictly in that order (Kafka's contract). The
reader handles one request after the other, as a Kafka broker does, except the wait for durability of a
Produce: its batches are appended in arrival order (an idempotent producer's sequence stays in order), then
the reader goes on to the next request while the fsync is awaited, so the requests a client keeps in flight
share the WAL's group commits. At most MAX_IN_FLIGHT requests (and MAX_IN_FLIGHT_BYTES of request frames, at
least one request) of a connection are in flight; the reader waits for the writer beyond that. SASL and
ApiVersions are handled by the reader in order, so the session's state is the one its requests saw.
What it cannot serve:
- an unknown API key, an unsupported version (other than ApiVersions), an undecodable header or body, a frame
  over `max_request_bytes`: the connection is closed (Kafka does the same);
- ApiVersions at a version we do not know: UNSUPPORTED_VERSION with our ranges in a v0 body (so the client
  retries with one we know);
- a handler that meets the metadata database not answering (`MetadataUnavailable`): the request is answered
  with a code clients retry, every item of it (`errors.unavailable_code`: COORDINATOR_NOT_AVAILABLE for a group
  or transaction coordinator's API, KAFKA_STORAGE_ERROR for the others) and the connection stays open;
- a request while the node is closing (a clean stop: `mqindex serve` closes the node before the listener, as
  Kafka's controlled shutdown moves leadership before the broker stops listening): every request but Metadata,
  ApiVersions and SASL's is answered NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR for a coordinator's API, so clients
  refresh the metadata and go to the node that takes over;
- a handler that fails otherwise: the responses before it are sent, then the connection is closed and the failure
  logged; the server goes on. A closed connection cancels the requests still in flight.
Handlers run the broker's blocking calls on worker threads (Context.run).

With `tls` the listener speaks TLS (Kafka's SSL, or SASL_SSL), checking client certificates when the
configuration has a CA. With an `authenticator` it requires SASL (sasl.py) before any request but ApiVersions,
and each request is checked against the caller's scopes and, with `access`, against the access control rules
for each resource it names (authorization.py; the ACL APIs themselves are acls.py's). Until a connection has
authenticated, its frames are limited to MAX_UNAUTHENTICATED_FRAME bytes (Kafka's sasl.server.max.receive.size)
and a frame of any other API closes it before its body is decoded: an anonymous peer cannot make the listener
read or decode more than that.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import uvloop

from api.kafka import (
    acls,
    configs,
    errors,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    producer_id,
    topics_admin,
    transactions,
)
from api.kafka.authorization import (
    Caller,
    audit_admin,
    audit_topic_created,
    error_answer,
    filter_response,
    may_create_topic,
    merge,
    refusal,
    refused_topics,
    split,
)
from api.kafka.context import Context
from api.kafka.framing import DEFAULT_MAX_REQUEST, FrameError, frame, parse_header, peek_api, read_frame
from api.kafka.group_coordinator import GroupCoordinator
from api.kafka.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE, Session
from api.kafka.schemas import APIS, build
from api.security.access import OPEN, AccessControl
from api.security.authenticator import Authenticator
from api.security.scram import SaslError
from api.security.tls import TlsConfig
from broker.errors import MetadataUnavailable, NodeClosed

log = logging.getLogger("mqindex.kafka")

Handler = Callable[[Context, Any, int], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    0: produce.produce, 1: fetch.fetch, 2: offsets.list_offsets, 3: metadata.metadata, 8: offsets.offset_commit,
    9: offsets.offset_fetch, 10: metadata.find_coordinator, 11: groups.join_group, 12: groups.heartbeat,
    13: groups.leave_group, 14: groups.sync_group, 18: metadata.api_versions, 19: topics_admin.create_topics,
    20: topics_admin.delete_topics, 22: producer_id.init_producer_id, 32: configs.describe_configs,
    33: configs.alter_configs, 44: configs.incremental_alter_configs, 15: groups.describe_groups,
    16: groups.list_groups, 42: groups.delete_groups, 47: groups.offset_delete, 24: transactions.add_partitions,
    25: transactions.add_offsets, 26: transactions.end_txn, 28: transactions.txn_offset_commit,
    37: topics_admin.create_partitions,
}
API_VERSIONS = 18
MAX_UNAUTHENTICATED_FRAME = 512 << 10  # Kafka's sasl.server.max.receive.size default
_BEFORE_AUTHENTICATION = {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE}
PRODUCE, FETCH, METADATA = 0, 1, 3
MAX_IN_FLIGHT = 256  # requests of one connection (librdkafka keeps up to max.in.flight, 1000000 without
# idempotence, 5 with, in flight): the more a connection's requests are queued, the larger the WAL's group commit.
# At 32, 16 KiB batches filled group commits of about 230 KiB and produced 56 MB/s; at 128-512, 450-570 KiB and
# 62-70 MB/s (docs/BENCHMARKS.md, tenth pass). MAX_IN_FLIGHT_BYTES bounds the memory either way.
MAX_IN_FLIGHT_BYTES = 64 << 20  # request frames of one connection being handled or awaiting their answer
HANDLER_THREADS = 64  # handlers' blocking calls (produce only when queueing could wait: api/kafka/produce.py)


@dataclass
class Pending:
    """One request of a connection, in arrival order: its answer (encoded, or a task giving the response
    object, None when there is none to send) and the size of its frame."""
    correlation_id: int
    answer: bytes | memoryview | asyncio.Task[Any] | produce.ProduceAnswer | None
    size: int
    close_after: bool = False  # a failed SASL authentication: the connection closes once this is sent
    api: int = -1  # the request's API key (-1: a frame answered without being decoded)
    started: float = 0.0  # time.perf_counter() when its frame was read (the request's time ends at its answer)


class InFlight:
    """The requests and bytes of one connection between reading and answering; the reader waits for room.
    Counters and an Event rather than an asyncio.Condition: only the connection's reader ever waits, and taking
    a lock twice per request was a visible share of the listener's loop under small produce requests."""

    def __init__(self, max_requests: int = MAX_IN_FLIGHT, max_bytes: int = MAX_IN_FLIGHT_BYTES) -> None:
        self.max_requests, self.max_bytes = max_requests, max_bytes
        self.requests = 0
        self.bytes = 0
        self._released = asyncio.Event()

    def _fits(self, size: int) -> bool:
        return self.requests == 0 or (self.requests < self.max_requests and self.bytes + size <= self.max_bytes)

    async def acquire(self, size: int) -> None:
        while not self._fits(size):
            self._released.clear()
            await self._released.wait()
        self.requests += 1
        self.bytes += size

    def release(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        self._released.set()


class Answers:
    """A connection's answers in request order, from its reader to its writer (None: the reader's end). A deque
    and an Event instead of an asyncio.Queue, so the writer can see which answers are ready behind the one it
    sends and send them in the same write."""

    def __init__(self) -> None:
        self.items: deque[Pending | None] = deque()
        self._added = asyncio.Event()

    def put(self, item: Pending | None) -> None:
        self.items.append(item)
        self._added.set()

    async def get(self) -> Pending | None:
        while not self.items:
            self._added.clear()
            await self._added.wait()
        return self.items.popleft()

    def ready(self) -> Pending | None:
        """The next answer if it can be sent now, taken off: not the end, not an answer still being made, and
        not one whose making failed or was cancelled (that one comes next from `get`, after what is at hand is
        sent)."""
        if not self.items:
            return None
        item = self.items[0]
        if item is None:
            return None
        task = item.answer
        if isinstance(task, asyncio.Task) and (not task.done() or task.cancelled() or task.exception() is not None):
            return None
        if isinstance(task, produce.ProduceAnswer) and not task.done():
            return None
        return self.items.popleft()


def framed(resp: Any) -> bytes | memoryview:
    """The frame of a response whose header is set: a fetch answer comes encoded and framed already."""
    return resp.framed if isinstance(resp, fetch.EncodedResponse) else frame(resp.encode(header=True))


async def settled(answer: Any) -> Any:
    """A pending request's answer once it is made: a task's result, a produce answer once durable."""
    if isinstance(answer, produce.ProduceAnswer):
        return answer.result() if answer.done() else await answer.wait()
    if isinstance(answer, asyncio.Task):
        return await answer
    return answer


def _add_frame(frames: list[bytes | memoryview], item: Pending, answer: Any) -> bool:
    """Add a pending request's answer to `frames`: its bytes, or its response object framed (None: nothing; False
    then)."""
    if answer is None:
        return False
    if isinstance(answer, (bytes, memoryview)):
        frames.append(answer)
        return True
    answer.with_header(correlation_id=item.correlation_id)
    frames.append(framed(answer))
    return True


def decode_request(data: bytes) -> tuple[Any, Any, int] | bytes:
    """(api, request, correlation id) of a frame, or the bytes of an immediate answer (ApiVersions at an
    unknown version). FrameError when the connection must be closed."""
    api_key, version, correlation_id = peek_api(data)
    api = APIS.get(api_key)
    if api is None:
        raise FrameError(f"unknown API key {api_key}")
    if not api.min_version <= version <= api.max_version:
        if api_key == API_VERSIONS:
            resp = build(api.response, 0, **metadata.api_versions_body(0, errors.UNSUPPORTED_VERSION))
            resp.with_header(correlation_id=correlation_id)
            return frame(resp.encode(header=True))
        raise FrameError(f"{api.name} version {version} is not supported ({api.min_version}-{api.max_version})")
    header = parse_header(data, api.flexible(version))
    try:
        req = api.request.decode(memoryview(data)[header.body_offset:], version=version)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed request
        raise FrameError(f"{api.name} v{version}: cannot decode the body ({type(exc).__name__}: {exc})") from None
    req.with_header(correlation_id=correlation_id, client_id=header.client_id or "")
    return api, req, correlation_id


class KafkaServer:
    def __init__(self, node: Any, host: str, port: int, advertised: str | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST, tls: TlsConfig | None = None,
                 authenticator: Authenticator | None = None, access: AccessControl | None = None,
                 auto_create_topics: bool = True, default_partitions: int = 1) -> None:
        self.node = node
        self.auto_create_topics, self.default_partitions = auto_create_topics, default_partitions
        self.access = access or OPEN
        self.tls = tls
        self.authenticator = authenticator
        self.host = host
        self.port = port
        self.advertised = advertised
        self.max_request_bytes = max_request_bytes
        self.ctx: Context | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._conns: set[asyncio.Task[None]] = set()
        #: (API key, seconds from reading a request to writing its answer), called for every answered request
        #: on the listener's loop: mqindex_kafka_request_seconds (api/http/metrics.py)
        self.observe: Callable[[int, float], None] | None = None

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, timeout: float = 10.0) -> None:
        self._thread = threading.Thread(target=self._main, name="kafka-listener", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("the Kafka listener did not start in time")
        if self._error is not None:
            raise RuntimeError(f"the Kafka listener cannot listen on {self.host}:{self.port}: {self._error}")

    def _main(self) -> None:
        try:
            # uvloop (libuv, in C) runs the listener's loop: the produce path's per-request loop work (reading
            # frames, futures, callbacks, writes) took about a sixth less server CPU per MiB than asyncio's
            # own loop at 16 KiB batches (docs/BENCHMARKS.md)
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                runner.run(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.set_default_executor(ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="kafka-handler"))
        self._stop = asyncio.Event()
        ssl_context = self.tls.server_context() if self.tls is not None else None
        server = await asyncio.start_server(self._connection, self.host, self.port, ssl=ssl_context)
        self.port = server.sockets[0].getsockname()[1]
        host, port = (self.advertised.rsplit(":", 1) if self.advertised else (self.host, str(self.port)))
        coordinator = GroupCoordinator()
        coordinator.start()
        self.ctx = Context(self.node, host, int(port), coordinator, self.auto_create_topics, self.default_partitions)
        expiry = asyncio.get_running_loop().create_task(transactions.expiry_loop(self.ctx))
        protocol = ("SASL_" if self.authenticator is not None else "") + ("SSL" if self.tls else "PLAINTEXT")
        log.info("kafka listener serving", extra={"node_id": self.node.node_id, "host": self.host,
                                                  "port": self.port, "advertised": f"{host}:{port}",
                                                  "security_protocol": protocol,
                                                  "client_certificates": bool(self.tls and self.tls.client_ca)})
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            for t in list(self._conns):
                t.cancel()
            await asyncio.gather(*self._conns, return_exceptions=True)
        coordinator.stop()
        expiry.cancel()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    # -- one connection ---------------------------------------------------------------------------
    async def _answer(self, session: Session, api_key: int, req: Any, version: int) -> Any | None:
        """The response object (None for none), or for a Produce its ProduceAnswer once its batches are
        appended (the wait for their fsync is left to the connection's writer)."""
        assert self.ctx is not None
        if api_key == SASL_HANDSHAKE:
            return session.handshake(req, version)
        if api_key == SASL_AUTHENTICATE:  # PBKDF2 of up to 1M iterations: on a worker thread, not the loop
            return await self.ctx.run(session.authenticate, req, version)
        if api_key == API_VERSIONS:
            return await HANDLERS[api_key](self.ctx, req, version)
        # (before SASL authentication, any other API was refused by _read_requests without being decoded)
        closing = bool(getattr(self.node, "closing", False))
        if closing:  # a clean stop hands the partitions over: the client goes to the node that takes over
            answer = error_answer(api_key, req, version, errors.unavailable_code(api_key, None, closing=True))
            if answer is not None:  # (Metadata is still answered: the nodes and leaders as this node sees them)
                return None if api_key == PRODUCE and req.acks == 0 else answer
        try:
            return await self._served(session, api_key, req, version)
        except Exception as exc:
            # a fault that heals (the metadata database not answering), or the node began closing meanwhile: a code
            # the client retries, the connection stays open
            closing = closing or bool(getattr(self.node, "closing", False))
            if not (closing or isinstance(exc, MetadataUnavailable | NodeClosed)):
                raise
            answer = error_answer(api_key, req, version, errors.unavailable_code(api_key, exc, closing))
            if answer is None:
                raise
            if closing and not isinstance(exc, MetadataUnavailable | NodeClosed):
                log.debug("kafka request met the node closing", extra={"api": APIS[api_key].name, "error": str(exc)})
            return None if api_key == PRODUCE and req.acks == 0 else answer

    async def _served(self, session: Session, api_key: int, req: Any, version: int) -> Any | None:
        """`_answer` for an authenticated session's request other than SASL's and ApiVersions."""
        assert self.ctx is not None
        caller = session.caller
        if caller is None or caller.principal is not session.principal:
            caller = session.caller = Caller(session.principal, session.host, self.access)
        denied = refusal(api_key, req, version, session.principal, caller)
        if denied is not None:
            log.info("kafka request refused", extra={"peer": session.peer, "principal": session.principal.name,
                                                     "api": APIS[api_key].name})
            return None if api_key == PRODUCE and req.acks == 0 else denied
        if api_key == PRODUCE:
            return await produce.append(self.ctx, req, version, refused_topics(req, caller))
        if api_key == FETCH:
            return await fetch.fetch(self.ctx, req, version, refused_topics(req, caller, FETCH))
        if api_key == METADATA:  # a topic it names may be created (auto_create_topics), if the rules allow it
            resp = await metadata.metadata(self.ctx, req, version, lambda name: may_create_topic(caller, name),
                                           lambda name, code: audit_topic_created(caller, name, code))
            return filter_response(api_key, req, resp, caller)
        if api_key in acls.HANDLERS:
            return await acls.HANDLERS[api_key](self.ctx, caller, req, version)
        allowed, refused = split(api_key, req, caller)  # the topics, groups, configs the rules refuse: answered apart
        resp = await HANDLERS[api_key](self.ctx, allowed, version)
        audit_admin(api_key, resp, caller)
        return filter_response(api_key, req, merge(api_key, req, version, resp, refused), caller)

    async def _read_requests(self, reader: asyncio.StreamReader, session: Session, in_flight: InFlight,
                             answers: Answers) -> None:
        """Read and handle the connection's requests in order, queueing their answers for the writer."""
        while True:
            authenticated = session.principal is not None
            limit = self.max_request_bytes if authenticated else min(self.max_request_bytes, MAX_UNAUTHENTICATED_FRAME)
            data = await read_frame(reader, limit)
            if data is None:
                return
            started = time.perf_counter()
            if not authenticated and not session.raw:
                key = peek_api(data)[0]
                if key not in _BEFORE_AUTHENTICATION:  # refused before its body is decoded
                    name = APIS[key].name if key in APIS else f"API key {key}"
                    raise FrameError(f"{name} before SASL authentication on a SASL listener")
            size = len(data)
            await in_flight.acquire(size)
            if session.raw:  # after SaslHandshake v0: a raw SASL token, answered raw (verified on a worker thread)
                answers.put(Pending(-1, frame(await self.ctx.run(session.raw_token, data)), size, session.failed))
                if session.failed:
                    return
                continue
            decoded = decode_request(data)
            if isinstance(decoded, bytes):
                answers.put(Pending(-1, decoded, size))
                continue
            api, req, correlation_id = decoded
            resp = await self._answer(session, api.key, req, req.API_VERSION)
            if isinstance(resp, produce.ProduceAnswer):
                answers.put(Pending(correlation_id, resp, size, api=api.key, started=started))
                continue
            if isinstance(resp, Awaitable):
                answers.put(Pending(correlation_id, asyncio.ensure_future(resp), size, api=api.key, started=started))
                continue
            if resp is not None:
                resp.with_header(correlation_id=correlation_id)
            answers.put(Pending(correlation_id, None if resp is None else framed(resp), size, session.failed,
                                api=api.key, started=started))
            if session.failed:
                return

    async def _write_responses(self, writer: asyncio.StreamWriter, in_flight: InFlight, answers: Answers) -> None:
        """Send the answers in request order, each once it is ready, until the reader's end (None). The answers
        ready behind the first go out in the same write: a group commit acknowledges several requests at once,
        and one write (one send) for all of them saves a system call per answer."""
        while True:
            item = await answers.get()
            if item is None:
                return
            sent = [item]
            frames: list[bytes | memoryview] = []
            answered: list[Pending] = []  # those whose answer is among `frames` (acks=0 produces have none)
            try:
                try:
                    if _add_frame(frames, item, await settled(item.answer)):
                        answered.append(item)
                    while not item.close_after and (nxt := answers.ready()) is not None:
                        item = nxt
                        sent.append(item)
                        ready = item.answer
                        made = isinstance(ready, asyncio.Task | produce.ProduceAnswer)
                        if _add_frame(frames, item, ready.result() if made else ready):
                            answered.append(item)
                finally:  # what was gathered is sent, also when an answer failed (then the connection closes)
                    if frames:
                        writer.writelines(frames)
                        self._observe(answered)
                if frames:
                    await writer.drain()
            finally:
                for done in sent:
                    in_flight.release(done.size)
            if item.close_after:
                return

    def _observe(self, sent: list[Pending]) -> None:
        """Each answered request's time, from reading it to writing its answer (handed to the socket). Requests
        with no answer (acks=0 produces) and frames answered undecoded (raw SASL tokens, an ApiVersions of an
        unknown version) are not counted."""
        observe = self.observe
        if observe is None:
            return
        now = time.perf_counter()
        for item in sent:
            if item.api >= 0:
                observe(item.api, now - item.started)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None and self.ctx is not None
        self._conns.add(task)
        peer = writer.get_extra_info("peername")
        session = Session(self.authenticator, str(peer))
        groups.CLIENT_HOST.set(groups.client_host(peer))  # a group member's host (DescribeGroups)
        in_flight = InFlight()
        answers = Answers()
        reading = asyncio.ensure_future(self._read_requests(reader, session, in_flight, answers))
        writing = asyncio.ensure_future(self._write_responses(writer, in_flight, answers))
        try:
            try:
                await asyncio.wait({reading, writing}, return_when=asyncio.FIRST_COMPLETED)
                if reading.done() and reading.exception() is None:  # end of requests: answer what was read
                    answers.put(None)
                    await writing
                else:  # a malformed request, or the writer stopped: answer what came before, then close
                    if reading.done():
                        answers.put(None)
                        await writing
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)
                    writing.result()
                    reading.result()
            finally:
                for t in (reading, writing):
                    t.cancel()
                for item in answers.items:
                    if item is not None and isinstance(item.answer, asyncio.Task):
                        item.answer.cancel()
                await asyncio.gather(reading, writing, return_exceptions=True)
        except SaslError as exc:
            log.warning("kafka connection closed: SASL authentication failed",
                        extra={"peer": str(peer), "error": str(exc)})
        except FrameError as exc:
            log.warning("kafka connection closed: malformed request", extra={"peer": str(peer), "error": str(exc)})
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except MetadataUnavailable as exc:  # the client reconnects and retries; the metadata link logs the outage once
            log.debug("kafka request failed; connection closed", extra={"peer": str(peer), "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one connection fails, never the listener
            log.exception("kafka request failed; connection closed", extra={"peer": str(peer), "error": str(exc)})
        finally:
            self._conns.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, asyncio.CancelledError):
                pass
