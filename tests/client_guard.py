"""Kafka clients left open by tests: tracked from creation, a leak fails its test (its hooks and fixture are
imported by tests/conftest.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import confluent_kafka.admin
import kafka
import pytest

# --- Kafka clients left open -------------------------------------------------------------------------------------
# A Kafka client a test leaves open keeps its threads reconnecting to a server the test has already stopped (endless
# librdkafka "Connect to ... failed: Connection refused" lines) until something destroys it: the cycle collector at
# some later moment, or the interpreter's exit, where destroying a librdkafka handle whose brokers are gone can hang
# the worker. So every client of confluent-kafka, kafka-python and aiokafka made in the tests is tracked from its
# creation. Its owner is the test being run, or the module/class/session-scoped fixture being set up when it was
# made. When the owner is done (the end of the test's teardown, the finalization of the fixture) every client it owns
# that is still alive and was not closed is a leak: the guard closes it (bounded: it may wait on a server that is
# gone) and fails that test, naming the client, its bootstrap servers and where it was made. A client alive only
# through a reference cycle (a `pytest.raises(...) as excinfo` block keeps the test's frame with its locals, as does a
# failed test's traceback) counts: it would reconnect until the next full collection and be destroyed unclosed.
# Cost: a lookup per test; `gc.collect()` only to explain a leak found.
# confluent-kafka's Producer and Consumer are C types, which cannot be patched: they are replaced, in the
# `confluent_kafka` module, by subclasses (so `from confluent_kafka import Producer` gets the tracked class, and
# isinstance checks against either class hold for its instances); the Python classes are patched in place.

#: how long the guard waits for a leaked client's close before it reports it as hanging and moves on
CLIENT_CLOSE_BOUND_S = 15.0
_TESTS_DIR = str(Path(__file__).resolve().parent) + os.sep
_THIS_FILE = str(Path(__file__).resolve())
_GUARD_ATTR = "_mqindex_client_guard"


@dataclass(eq=False)
class _TrackedClient:
    ref: weakref.ref[Any]
    kind: str
    bootstrap: str
    where: str
    closed: Callable[[Any], bool]
    close: Callable[[Any], None]
    marked_closed: bool = False

    def is_open(self) -> bool:
        obj = self.ref()
        return obj is not None and not self.marked_closed and not self.closed(obj)

    def describe(self) -> str:
        return f"{self.kind} (bootstrap {self.bootstrap}) created at {self.where}"


@dataclass
class _ClientGuard:
    owned: dict[Any, list[_TrackedClient]] = field(default_factory=dict)
    item: pytest.Item | None = None
    fixtures: list[Any] = field(default_factory=list)  # the higher-scoped fixtures being set up, innermost last
    pending: list[str] = field(default_factory=list)  # leaks of finalized fixtures, reported by the test tearing down
    lock: threading.Lock = field(default_factory=threading.Lock)

    def owner(self) -> Any:
        return self.fixtures[-1] if self.fixtures else self.item

    def track(self, obj: Any, kind: str, bootstrap: str, closed: Callable[[Any], bool],
              close: Callable[[Any], None]) -> None:
        if getattr(obj, _GUARD_ATTR, None) is not None:
            return  # a tracked subclass's __init__ calling its tracked parent's
        record = _TrackedClient(weakref.ref(obj), kind, bootstrap, _creation_site(), closed, close)
        setattr(obj, _GUARD_ATTR, record)
        with self.lock:
            self.owned.setdefault(self.owner(), []).append(record)

    def leaks_of(self, owner: Any) -> list[str]:
        """The clients `owner` left open, each closed now (bounded), described; [] when none (the usual case)."""
        with self.lock:
            records = self.owned.pop(owner, None)
        if not records:
            return []
        open_ = [r for r in records if r.is_open()]
        if not open_:
            return []
        outcomes = [_close_bounded(r) for r in open_]
        gc.collect()  # only to say what kept each alive
        return [r.describe() + (": still referenced" if r.ref() is not None else
                                ": held only by a reference cycle (a pytest.raises excinfo, a failed test's "
                                "traceback)") + outcome for r, outcome in zip(open_, outcomes, strict=True)]

    def leftovers(self) -> list[str]:
        with self.lock:
            owners = list(self.owned)
        return [leak for owner in owners for leak in self.leaks_of(owner)]


_CLIENT_GUARD = _ClientGuard()


def _creation_site() -> str:
    """Where a client was made: the innermost frame in tests/ (this file aside), then each frame in a test file
    (test_*.py) out to the test function's own."""
    sites: list[str] = []
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        in_test_file = os.path.basename(name).startswith("test_")
        if name != _THIS_FILE and (in_test_file or (not sites and name.startswith(_TESTS_DIR))):
            rel = name[len(_TESTS_DIR) - len("tests/"):] if name.startswith(_TESTS_DIR) else name
            sites.append(f"{rel}:{frame.f_lineno} in {code.co_name}")
            if in_test_file and code.co_name.startswith("test"):
                break
        frame = frame.f_back
    return ", called from ".join(sites) or "(outside tests/)"


def _close_bounded(record: _TrackedClient) -> str:
    obj = record.ref()
    if obj is None:
        return ""
    done = threading.Event()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            record.close(obj)
        except BaseException as exc:  # noqa: BLE001
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"close leaked {record.kind}", daemon=True).start()
    if not done.wait(CLIENT_CLOSE_BOUND_S):
        return f"; its close did not finish in {CLIENT_CLOSE_BOUND_S:.0f} s"
    if failed:
        return f"; its close failed: {failed[0]!r}"
    record.marked_closed = True
    return ""


def _confluent_bootstrap(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    conf = dict(args[0]) if args and isinstance(args[0], dict) else {}
    conf.update({k.replace("_", "."): v for k, v in kwargs.items()})
    servers = conf.get("bootstrap.servers") or conf.get("metadata.broker.list") or "?"
    protocol = conf.get("security.protocol")
    return f"{servers}, {protocol}" if protocol else str(servers)


def _mark_closed(obj: Any) -> None:
    record = getattr(obj, _GUARD_ATTR, None)
    if record is not None:
        record.marked_closed = True


def _closing(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` (close, __exit__) marking its client closed once it returned (or found it closed already)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = method(self, *args, **kwargs)
        except RuntimeError as exc:
            if "closed" in str(exc):
                _mark_closed(self)
            raise
        _mark_closed(self)
        return result

    return wrapper


def _close_confluent_producer(p: Any) -> None:
    try:
        p.purge(True, True, False)  # close() waits for every queued message: to a stopped server, for minutes
    except Exception:  # noqa: BLE001
        pass
    for _ in range(100):  # each delivery callback that raises interrupts close(): call again until it is done
        try:
            p.close()
            return
        except RuntimeError as exc:
            if "closed" in str(exc):
                return
        except Exception:  # noqa: BLE001
            pass
    p.close()


def _close_confluent_consumer(c: Any) -> None:
    try:
        c.close()
    except RuntimeError as exc:
        if "closed" not in str(exc):
            raise


def _confluent_closed(probe: Callable[[Any], Any]) -> Callable[[Any], bool]:
    """Whether a confluent-kafka client is closed, for one whose close() was not seen to return (it raised, say):
    `probe`, a call without effect on an open client, raises RuntimeError '... closed' on a closed one."""

    def closed(obj: Any) -> bool:
        try:
            probe(obj)
        except RuntimeError as exc:
            return "closed" in str(exc)
        except Exception:  # noqa: BLE001
            return False
        return False

    return closed


def _tracked_confluent(cls: type, name: str, closed: Callable[[Any], bool], close: Callable[[Any], None]) -> type:
    """`cls` (a C type of confluent_kafka.cimpl) subclassed to be tracked."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)
        try:
            servers = _confluent_bootstrap(args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the guard never breaks a client
            servers = f"? ({exc!r})"
        _CLIENT_GUARD.track(self, f"confluent_kafka.{name}", servers, closed, close)

    namespace = {"__init__": __init__, "close": _closing(cls.close), "__exit__": _closing(cls.__exit__),
                 "__module__": "confluent_kafka", "__qualname__": name, "__doc__": cls.__doc__}
    return type(name, (cls,), namespace)


def _track_in_place(cls: type, kind: str, bootstrap: Callable[[Any, tuple[Any, ...], dict[str, Any]], str],
                    closed: Callable[[Any], bool], close: Callable[[Any], None],
                    closing: tuple[str, ...] = ()) -> None:
    """`cls`, a Python class, patched so that its instances are tracked (and `closing` methods mark them closed)."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        try:
            servers = bootstrap(self, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the guard never breaks a client
            servers = f"? ({exc!r})"
        _CLIENT_GUARD.track(self, kind, servers, closed, close)

    cls.__init__ = __init__  # type: ignore[misc]
    for method in closing:
        setattr(cls, method, _closing(getattr(cls, method)))


def _stop_aiokafka(client: Any) -> None:
    loop = client._loop
    if loop.is_closed() or loop.is_running():
        raise RuntimeError(f"cannot stop it: its event loop is {'closed' if loop.is_closed() else 'running'}")
    loop.run_until_complete(asyncio.wait_for(client.stop(), CLIENT_CLOSE_BOUND_S))


def _install_client_guard() -> None:
    if getattr(confluent_kafka.Producer, "_mqindex_tracked", False):
        return
    for name, probe, close in (("Producer", lambda p: p.purge(False, False, False), _close_confluent_producer),
                               ("Consumer", lambda c: c.assignment(), _close_confluent_consumer)):
        tracked = _tracked_confluent(getattr(confluent_kafka, name), name, _confluent_closed(probe), close)
        tracked._mqindex_tracked = True  # type: ignore[attr-defined]
        setattr(confluent_kafka, name, tracked)
    _track_in_place(confluent_kafka.admin.AdminClient, "confluent_kafka.admin.AdminClient",
                    lambda obj, args, kwargs: _confluent_bootstrap(args, kwargs),
                    _confluent_closed(lambda a: a.poll(0)), lambda obj: obj.__exit__(None, None, None),
                    closing=("__exit__",))

    def kafka_python_bootstrap(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return str(obj.config.get("bootstrap_servers"))

    for cls, close in ((kafka.KafkaProducer, lambda p: p.close(timeout=CLIENT_CLOSE_BOUND_S / 2)),
                       (kafka.KafkaConsumer, lambda c: c.close(autocommit=False, timeout_ms=5000)),
                       (kafka.KafkaAdminClient, lambda a: a.close())):
        _track_in_place(cls, f"kafka.{cls.__name__}", kafka_python_bootstrap,
                        lambda obj: bool(getattr(obj, "_closed", True)), close)
    for cls in (aiokafka.AIOKafkaProducer, aiokafka.AIOKafkaConsumer):
        _track_in_place(cls, f"aiokafka.{cls.__name__}",
                        lambda obj, args, kwargs: str(kwargs.get("bootstrap_servers", "localhost")),
                        lambda obj: obj._closed is not False,  # None: never started, True: stopped
                        _stop_aiokafka)


_install_client_guard()


def abandon_kafka_client(client: Any, why: str) -> None:
    """`client` is left open knowingly (`why`: a call that never returns holds it, so that nothing can close it):
    the guard neither fails its test nor tries to close it. For a known client bug only, named in `why`."""
    record = getattr(client, _GUARD_ATTR, None)
    if record is not None:
        record.marked_closed = True
        record.kind += f" (abandoned: {why})"


_LEAK_HELP = ("close each client in a finally or a fixture (Producer: flush or purge, then close(); Consumer: "
              "close(); AdminClient: a `with` block; kafka-python: close(); aiokafka: await stop())")


def _leak_message(leaks: list[str]) -> str:
    return ("Kafka client(s) left open (the guard in tests/client_guard.py closes them now): " + "; ".join(leaks) + ". "
            + _LEAK_HELP)


@pytest.fixture
def kafka_clients() -> Iterator[contextlib.ExitStack]:
    """Closes at the end of the test the clients entered into it: `admin = kafka_clients.enter_context(AdminClient(c))`
    (an AdminClient has no close(): leaving its `with` block is how it is closed). A Producer's close waits for its
    queued messages: flush (or purge) it first."""
    with contextlib.ExitStack() as stack:
        yield stack


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    _CLIENT_GUARD.item = item
    try:
        return (yield)
    finally:
        _CLIENT_GUARD.item = None


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[object]:
    if fixturedef.scope == "function":
        return (yield)
    _CLIENT_GUARD.fixtures.append(fixturedef)
    try:
        return (yield)
    finally:
        _CLIENT_GUARD.fixtures.pop()


def pytest_fixture_post_finalizer(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    if fixturedef.scope != "function":
        leaks = _CLIENT_GUARD.leaks_of(fixturedef)
        _CLIENT_GUARD.pending += [f"{leak} (by the {fixturedef.scope}-scoped fixture {fixturedef.argname})"
                                  for leak in leaks]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        leaks = _CLIENT_GUARD.leaks_of(item) + _CLIENT_GUARD.pending
        _CLIENT_GUARD.pending = []
        if leaks:
            pytest.fail(_leak_message(leaks), pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Clients made outside any test (at import, in collection) or left by fixtures finalized after the last test:
    closed, so that the process can exit, and reported."""
    leaks = _CLIENT_GUARD.leftovers() + _CLIENT_GUARD.pending
    _CLIENT_GUARD.pending = []
    if leaks:
        sys.stderr.write(_leak_message(leaks) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
