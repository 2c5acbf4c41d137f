"""A PostgreSQL connection to the metadata database that reconnects by itself.

A psycopg connection whose server went away (a restart, a failover, `pg_terminate_backend`, a network cut) is
broken for good: every later statement raises. `PgLink` keeps one autocommit connection and, once it is found
broken, opens a new one on the next use (at most one attempt every `RETRY_S`, each bounded by `connect_timeout`),
setting the schema's search path again. While no connection can be had, every use raises `MetadataUnavailable`
naming the metadata database; the change is logged once each way ("does not answer", "answers again"), not per
request.

Rules for callers (`session`):
- a statement known to be idempotent (a read, an UPDATE to a fixed value) may be tried a second time on a new
  connection when the first one was found broken (`retry=True`);
- any other write whose connection was lost is not retried: its outcome is unknown (the commit may have been
  applied), `MetadataUnavailable` says so and the caller reads the database again before deciding anything;
- a transaction is begun on one connection and ends on it: a lost connection aborts it (the server rolls back
  what was not committed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from broker.errors import MetadataDiverged, MetadataUnavailable

log = logging.getLogger("mqindex.broker.metadata")

#: seconds between two attempts to open a new connection while the database does not answer
RETRY_S = 1.0
#: libpq settings bounding how long a connection attempt, or a statement on a cut network, waits (unless the URL
#: sets them): a node notices a dead server within seconds instead of the kernel's TCP timeouts (minutes)
# client_encoding: text comes back as str whatever the database's encoding (a SQL_ASCII one gave bytes)
DEFAULT_OPTIONS = {"connect_timeout": "5", "keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2",
                   "keepalives_count": "3", "tcp_user_timeout": "10000", "client_encoding": "UTF8"}
WHAT = "the metadata database (--metadata)"

T = TypeVar("T")


def _lost(exc: BaseException, conn: Any) -> bool:
    """Whether `exc`, raised by a statement on `conn`, means the connection is gone (not a refused statement)."""
    import psycopg

    if not isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    return conn is None or conn.closed or conn.broken or isinstance(exc, psycopg.InterfaceError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PgLink:
    """`PgLink(dsn, schema)`: connects at once (raising psycopg's error at start, as before); `first` is that
    connection, for the start-up DDL. Thread-safe only under the caller's own lock (each table holds one)."""

    def __init__(self, dsn: str, schema: str | None) -> None:
        self.dsn = dsn
        self.schema = schema
        self.down: str | None = None  # why the database does not answer, while it does not
        self._state_lock = threading.Lock()
        self._next_try = 0.0
        self._closed = False
        self._conn: Any = self._connect(set_path=False)

    @property
    def first(self) -> Any:
        return self._conn

    def _connect(self, set_path: bool = True) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, **{k: v for k, v in DEFAULT_OPTIONS.items()
                                                              if f"{k}=" not in self.dsn})
        if set_path and self.schema is not None:
            try:
                conn.execute(f'SET search_path TO "{self.schema}"')
            except BaseException:
                conn.close()
                raise
        return conn

    def _mark_down(self, cause: BaseException) -> MetadataUnavailable:
        why = _first_line(cause)
        with self._state_lock:
            was = self.down
            self.down = why
        if was is None:
            log.warning("the metadata database does not answer; reconnecting, requests that need it answer 503 "
                        "until it does", extra={"error": why})
        return MetadataUnavailable(f"{WHAT} does not answer: {why}")

    def _mark_up(self) -> None:
        with self._state_lock:
            was = self.down
            self.down = None
        if was is not None:
            log.info("the metadata database answers again", extra={"was": was})

    def connection(self) -> Any:
        """The live connection: a new one when the last was found broken. MetadataUnavailable when none can be
        opened now (tried at most once every RETRY_S)."""
        if self._closed:
            raise MetadataUnavailable(f"{WHAT}: the connection was closed (the node is stopping)")
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self.discard()
        now = time.monotonic()
        if now < self._next_try:  # the last attempt failed less than RETRY_S ago
            raise MetadataUnavailable(f"{WHAT} does not answer: {self.down or 'reconnecting'}")
        try:
            self._conn = self._connect()
        except Exception as exc:  # noqa: BLE001 - any failure to connect is the database not answering
            self._next_try = time.monotonic() + RETRY_S
            raise self._mark_down(exc) from None
        self._mark_up()
        return self._conn

    def discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):
                conn.close()

    def lost(self, exc: BaseException, conn: Any) -> bool:
        """Whether `exc` (raised on `conn`) means the connection is gone; if so it is dropped (the next use opens a
        new one)."""
        if not _lost(exc, conn):
            return False
        if conn is self._conn:
            self.discard()
        return True

    def run(self, fn: Callable[[Any], T], retry: bool) -> T:
        """`fn(conn)` on the live connection; with `retry` (an idempotent `fn`), once more on a new connection when
        the first attempt found the connection lost (a server restart or failover: a node does not notice before
        it uses the connection)."""
        for attempt in (0, 1):
            conn = self.connection()
            try:
                return fn(conn)
            except Exception as exc:
                if not self.lost(exc, conn):
                    raise
                if retry and attempt == 0:
                    log.info("the metadata database connection was lost; trying again on a new one",
                             extra={"error": _first_line(exc)})
                    continue
                raise self._mark_down(exc) from exc
        raise AssertionError("unreachable")

    @contextmanager
    def session(self) -> Iterator[Any]:
        """The live connection for a block of statements (a transaction): a lost connection raises
        MetadataUnavailable; no retry."""
        conn = self.connection()
        try:
            yield conn
        except Exception as exc:
            if not self.lost(exc, conn):
                raise
            raise self._mark_down(exc) from exc

    def probe(self) -> str | None:
        """Why the database does not answer (reconnecting first when it did not), None when it answers."""
        if self.down is None or self._closed:
            return None
        with suppress(MetadataUnavailable):
            self.run(lambda c: c.execute("SELECT 1"), retry=False)
        return None if self.down is None else f"{WHAT} does not answer: {self.down}"

    def close(self) -> None:
        self._closed = True
        self.discard()


def until_answered(ask: Callable[[], T], give_up: Callable[[], None], pause_s: float) -> T:
    """`ask()`, asked again every `pause_s` while the metadata database does not answer (MetadataUnavailable) until
    `give_up()` raises (its error then stands, chained to the outage's). A database that went back
    (MetadataDiverged) is no outage: it is raised at once."""
    while True:
        try:
            return ask()
        except MetadataDiverged:
            raise
        except MetadataUnavailable:
            give_up()
        time.sleep(pause_s)
