"""Whether a store or a metadata database answers: a bounded check before a server starts, and a watch
while it serves.

The check of a store lists a prefix no key has (one request that needs the endpoint, the bucket and the
credentials); a fault the store's retry policy counts as transient (a refused connection, a timeout, a 5xx) is
tried again until the wait is over, any other fault (no such bucket, access denied) ends the check at once.
The check of a database connects and runs `SELECT 1` (PostgreSQL) or opens the file (SQLite); a refused or timed
out connection is tried again, a refusal by the server that waiting does not heal (no such database or role, a
wrong password) ends the check at once. A fault that ends it at once says what to do (`advice`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from storage_tier.blob_store import BlobStore
from storage_tier.errors import StorageUnavailable
from storage_tier.retry import RetryPolicy
from storage_tier.store_url import open_store, sqlite_path

log = logging.getLogger("mqindex.storage.reachability")

#: a prefix no key has: listing it is the cheapest request that proves the store answers
PROBE_PREFIX = ".mqindex-probe/"
#: seconds between two attempts of a check that got a transient fault
ATTEMPT_PAUSE_S = 0.5


class Unreachable(Exception):
    """The store or database did not answer; the message is the cause, on one line."""


def describe(exc: BaseException) -> str:
    """`Type: message` of what a probe failed with (the transient fault behind a StorageUnavailable), one line."""
    cause = exc.__cause__ if isinstance(exc, StorageUnavailable) and exc.__cause__ is not None else exc
    text = " ".join(str(cause).split())
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


#: what PostgreSQL says when it answered and refused the connection for a reason waiting does not heal (the
#: database or the role missing, the password wrong, pg_hba refusing): the check ends at once. Anything else of
#: a failed connection (refused, timed out, "the database system is starting up", too many clients) is retried.
PERMANENT_PG = ("does not exist", "no pg_hba.conf entry", "authentication failed", "permission denied")


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, StorageUnavailable):
        return True
    with contextlib.suppress(ImportError):
        import psycopg

        return isinstance(exc, psycopg.OperationalError) and not any(p in str(exc) for p in PERMANENT_PG)
    return False


def advice(exc: BaseException) -> str:
    """What to do about a fault that waiting does not heal ("" when there is nothing more to say than the fault)."""
    text = str(exc)
    code = ""
    if hasattr(exc, "response"):  # a botocore ClientError (imported only then: the start-up loads no botocore)
        from storage_tier.s3_store import _code

        code = _code(exc)  # type: ignore[arg-type]
    if code == "NoSuchBucket":
        return ("create the bucket, or add create_bucket=1 to the URL's parameters (s3://BUCKET/PREFIX?endpoint=..."
                "&create_bucket=1) for mqindex to create it")
    found = re.search(r'database "([^"]+)" does not exist', text)
    if found:
        return (f"create it (createdb {found[1]}, or CREATE DATABASE \"{found[1]}\" in psql), or name an existing "
                f"database in the URL")
    found = re.search(r'role "([^"]+)" does not exist', text)
    if found:
        return (f"name an existing user in the URL (postgresql://USER@HOST:PORT/DB), or create the role (CREATE ROLE "
                f"\"{found[1]}\" LOGIN in psql)")
    if "authentication failed" in text:
        return "check the user and password in the URL"
    if "no pg_hba.conf entry" in text:
        return "allow this host and user in the server's pg_hba.conf, or connect as a user it allows"
    return ""


def _bounded(attempt: Callable[[float], None], wait_s: float) -> None:
    """Run attempt(seconds left) until it returns, a non-transient fault, or `wait_s` has passed (also when an
    attempt hangs: it runs on a daemon thread). Raises Unreachable naming the last fault."""
    deadline = time.monotonic() + wait_s
    last: list[BaseException] = []
    done = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        while True:
            try:
                attempt(max(deadline - time.monotonic(), 0.5))
                outcome.append(None)
                break
            except BaseException as exc:  # noqa: BLE001 - classified just below
                last.append(exc)
                if not _transient(exc) or time.monotonic() + ATTEMPT_PAUSE_S > deadline:
                    outcome.append(exc)
                    break
            time.sleep(ATTEMPT_PAUSE_S)
        done.set()

    threading.Thread(target=run, name="reachability-check", daemon=True).start()
    if not done.wait(max(wait_s, 0.0) + 1.0):
        waited = f"no answer within {wait_s:g}s"
        raise Unreachable(f"{waited} (last: {describe(last[-1])})" if last else waited)
    if outcome and outcome[0] is not None:
        exc = outcome[0]
        if _transient(exc):
            raise Unreachable(f"{describe(exc)} (still failing after {wait_s:g}s)") from None
        todo = advice(exc)
        raise Unreachable(f"{describe(exc)}: {todo}" if todo else describe(exc)) from None


def open_probe_store(url: str) -> BlobStore:
    """A store of its own on `url` whose requests are never retried (a probe must not wait out retries)."""
    store = open_store(url)
    store.retry = RetryPolicy(deadline_s=0.0, max_attempts=1)
    return store


def probe(store: BlobStore) -> None:
    """One request; raises what it failed with."""
    store.list(PROBE_PREFIX)


def check_store(url: str, wait_s: float) -> None:
    """Raise Unreachable unless the store at `url` answers within `wait_s` seconds."""
    if urlsplit(url).scheme.lower() in ("postgresql", "postgres", "sqlite"):
        check_database(url, wait_s)  # the connection first: the store's own would retry for its retry bound
    opened: list[BlobStore] = []

    def attempt(_left: float) -> None:
        if not opened:
            opened.append(open_probe_store(url))
        probe(opened[0])

    try:
        _bounded(attempt, wait_s)
    finally:
        for store in opened:
            with contextlib.suppress(Exception):
                store.close()


def check_database(url: str, wait_s: float) -> None:
    """Raise Unreachable unless the database of a `sqlite:///` or `postgresql://` URL answers within `wait_s`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        path = Path(sqlite_path(url))
        if not path.exists():  # nothing created here: whoever opens the database creates it
            if not path.parent.is_dir():
                raise Unreachable(f"the folder {path.parent} does not exist")
            if not os.access(path.parent, os.W_OK | os.X_OK):
                raise Unreachable(f"no permission to create {path.name} in {path.parent}")
            return

        def open_file(_left: float) -> None:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=1)
            try:
                conn.execute("SELECT 1")
            finally:
                conn.close()

        _bounded(open_file, wait_s)
        return
    if scheme not in ("postgresql", "postgres"):
        raise Unreachable("unsupported database URL (use sqlite:///PATH or postgresql://USER@HOST:PORT/DB)")
    params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    for name in ("schema", "chunk_size", "retry_seconds"):
        params.pop(name, None)
    dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(params), ""))

    def connect(left: float) -> None:
        import psycopg

        with psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(left))) as conn:
            conn.execute("SELECT 1")

    _bounded(connect, wait_s)


class StoreWatch:
    """Probes stores every `interval_s` seconds on a thread. `reason()` says which did not answer at the last
    probe (None: all did); a store that stops or starts answering is logged once, when it changes."""

    def __init__(self, stores: dict[str, str], interval_s: float = 5.0) -> None:
        """stores: what to call each one in messages (for example "object store (--store)") -> its URL."""
        self.urls = dict(stores)
        self.interval_s = interval_s
        self._stores: dict[str, BlobStore] = {}
        self._down: dict[str, str] = {}  # name -> cause, of the stores that did not answer the last probe
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-watch", daemon=True)

    def start(self) -> StoreWatch:
        self._thread.start()
        return self

    def reason(self) -> str | None:
        with self._lock:
            down = dict(self._down)
        if not down:
            return None
        return "; ".join(f"the {name} does not answer: {cause}" for name, cause in down.items())

    def check_now(self, timeout: float = 5.0) -> str | None:
        """Probe every store now, waiting at most `timeout` seconds (a store that has not answered by then counts
        as not answering); the reason as reason() gives it."""
        pending = dict.fromkeys(self.urls)

        def run() -> None:
            for name in self.urls:
                self._probe(name)
                pending.pop(name, None)

        thread = threading.Thread(target=run, name="store-check", daemon=True)
        thread.start()
        thread.join(timeout)
        with self._lock:
            for name in list(pending):
                self._down.setdefault(name, f"no answer within {timeout:g}s")
        return self.reason()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)  # a probe that hangs is left to its daemon thread
        for store in self._stores.values():
            with contextlib.suppress(Exception):
                store.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for name in self.urls:
                if self._stop.is_set():
                    return
                self._probe(name)

    def _probe(self, name: str) -> None:
        cause: str | None = None
        try:
            store = self._stores.get(name)
            if store is None:
                store = self._stores[name] = open_probe_store(self.urls[name])
            probe(store)
        except Exception as exc:  # noqa: BLE001 - any failure makes the store not answering
            cause = describe(exc)
        with self._lock:
            before = self._down.get(name)
            if cause is None:
                self._down.pop(name, None)
            else:
                self._down[name] = cause
        if cause is not None and before is None:
            log.warning("the %s does not answer: not ready until it does", name, extra={"cause": cause})
        elif cause is None and before is not None:
            log.info("the %s answers again: ready", name)
