"""The metadata log table on SQLite (embedded) or PostgreSQL (shared by several brokers).

One table, `meta_log(log_offset, record)`: every metadata change is a JSON record appended there.
`locked()` opens a transaction holding the log's write lock (SQLite `BEGIN IMMEDIATE`, PostgreSQL
`LOCK TABLE ... IN EXCLUSIVE MODE`), so a writer first catches up with every record, checks its request
against the caught-up image and appends, all in one transaction: two brokers can never both pass a check.
Plain reads (`read_since`) take no lock.

A second table, `meta_snapshot(log_offset, checksum, payload, created_ms, damaged)`, holds snapshots
of the image (see `broker.metadata.snapshot`). Snapshots are written and the log truncated behind them
inside `locked()`, so truncation is serialized with every writer. Truncation keeps the record at the
oldest kept snapshot's offset, so the log is never empty once written and a reader whose image is
behind it sees a gap (the first record returned is not the next offset) and reloads from a snapshot.

The two tables' schema version is recorded as `metadata_log` in `mqindex_schema` (see pg_schema.Family):
opening a log stored at a newer version than this build reads raises `NewerSchema`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from broker.errors import MetadataError
from broker.metadata import pg_schema
from broker.metadata.pg_link import PgLink
from storage_tier.store_url import sqlite_path

Record = dict[str, Any]
LogEntry = tuple[int, Record]
#: read_checked's answer: (the digest of the record at the offset asked, None when there is none; the records after
#: it; the digest of the last of those, None when there are none)
Checked = tuple[str | None, list[LogEntry], str | None]

@dataclass(frozen=True)
class SnapshotInfo:
    log_offset: int
    created_ms: int
    damaged: bool


class LockedLog(Protocol):
    def read_since(self, offset: int) -> list[LogEntry]: ...

    def read_checked(self, at: int) -> Checked: ...

    def in_recovery(self) -> bool: ...

    def last_offset(self) -> int | None: ...

    def append(self, first_offset: int, records: list[Record]) -> str | None: ...

    def snapshots(self) -> list[SnapshotInfo]: ...

    def read_snapshot(self, log_offset: int) -> tuple[str, bytes] | None: ...

    def write_snapshot(self, log_offset: int, checksum: str, payload: bytes, created_ms: int) -> bool: ...

    def delete_snapshots(self, offsets: list[int]) -> None: ...

    def truncate_before(self, log_offset: int) -> int: ...

    def mark_snapshot_damaged(self, log_offset: int) -> None: ...

    def first_offset(self) -> int | None: ...


class LogStore(Protocol):
    url: str

    def read_since(self, offset: int) -> list[LogEntry]: ...

    def read_checked(self, at: int) -> Checked: ...

    def in_recovery(self) -> bool: ...

    def last_offset(self) -> int | None: ...

    def snapshots(self) -> list[SnapshotInfo]: ...

    def read_snapshot(self, log_offset: int) -> tuple[str, bytes] | None: ...

    def mark_snapshot_damaged(self, log_offset: int) -> None: ...

    def first_offset(self) -> int | None: ...

    def locked(self) -> Any: ...  # context manager yielding a LockedLog

    def unavailable(self) -> str | None: ...  # why the database does not answer (reconnecting first), else None

    def close(self) -> None: ...


def _dump(rec: Record) -> str:
    """A record as the log stores it (ASCII: json.dumps escapes the rest)."""
    return json.dumps(rec, separators=(",", ":"), sort_keys=True)


def _text(value: str | bytes) -> str:
    """A text column's value (a SQL_ASCII PostgreSQL, or a SQLite BLOB, gives bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def digest(text: str | bytes) -> str:
    """The SHA-256 (hex) of a stored record's text, as the database computes it in read_checked (PostgreSQL's
    sha256(), SQLite's record_digest registered by SqliteLog; not md5(), which PostgreSQL refuses in FIPS mode):
    what a catch-up compares to find that the log went back, without reading the record."""
    return hashlib.sha256(text if isinstance(text, bytes) else text.encode()).hexdigest()


SCHEMA = pg_schema.Family("metadata_log", ("meta_log", "meta_snapshot"), 1)
_SNAPSHOT_COLUMNS = ("log_offset {big} PRIMARY KEY, checksum TEXT NOT NULL, payload {blob} NOT NULL, "
                     "created_ms {big} NOT NULL, damaged INTEGER NOT NULL DEFAULT 0")


def _ddl(big: str, blob: str) -> list[str]:
    return [f"CREATE TABLE IF NOT EXISTS meta_log (log_offset {big} PRIMARY KEY, record TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS meta_snapshot (" + _SNAPSHOT_COLUMNS.format(big=big, blob=blob) + ")"]


class _Sql:
    """The statements both databases share; `ph` is the driver's placeholder."""

    ph = "?"
    digest_sql = "record_digest(record)"  # registered on SQLite's connection (SqliteLog)

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def _q(self, sql: str) -> str:
        return sql.replace("?", self.ph)

    def read_since(self, offset: int) -> list[LogEntry]:
        rows = self.conn.execute(self._q("SELECT log_offset, record FROM meta_log WHERE log_offset > ? "
                                         "ORDER BY log_offset"), (offset,)).fetchall()
        return [(int(o), json.loads(r)) for o, r in rows]

    def read_checked(self, at: int) -> Checked:
        """The digest of the record at `at` (the database hashes it: no record text comes back) and the records
        after it, in one query."""
        rows = self.conn.execute(self._q(f"SELECT log_offset, CASE WHEN log_offset = ? THEN {self.digest_sql} ELSE "
                                         "record END FROM meta_log WHERE log_offset >= ? ORDER BY log_offset"),
                                 (at, at)).fetchall()
        found = None
        if rows and int(rows[0][0]) == at:
            found, rows = _text(rows[0][1]), rows[1:]
        return found, [(int(o), json.loads(r)) for o, r in rows], digest(rows[-1][1]) if rows else None

    def in_recovery(self) -> bool:
        """Whether this database is a standby replaying a primary's log (read-only, possibly behind)."""
        return False

    def last_offset(self) -> int | None:
        row = self.conn.execute("SELECT MAX(log_offset) FROM meta_log").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def first_offset(self) -> int | None:
        row = self.conn.execute("SELECT MIN(log_offset) FROM meta_log").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def snapshots(self) -> list[SnapshotInfo]:
        """Every stored snapshot, newest first."""
        rows = self.conn.execute("SELECT log_offset, created_ms, damaged FROM meta_snapshot "
                                 "ORDER BY log_offset DESC").fetchall()
        return [SnapshotInfo(int(o), int(c), bool(d)) for o, c, d in rows]

    def read_snapshot(self, log_offset: int) -> tuple[str, bytes] | None:
        row = self.conn.execute(self._q("SELECT checksum, payload FROM meta_snapshot WHERE log_offset = ?"),
                                (log_offset,)).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def mark_snapshot_damaged(self, log_offset: int) -> None:
        self.conn.execute(self._q("UPDATE meta_snapshot SET damaged = 1 WHERE log_offset = ?"), (log_offset,))

    def write_snapshot(self, log_offset: int, checksum: str, payload: bytes, created_ms: int) -> bool:
        """Store a snapshot at `log_offset` unless one is there already; True when written."""
        cur = self.conn.execute(self._q("INSERT INTO meta_snapshot (log_offset, checksum, payload, created_ms) "
                                        "VALUES (?, ?, ?, ?) ON CONFLICT (log_offset) DO NOTHING"),
                                (log_offset, checksum, payload, created_ms))
        return bool(cur.rowcount == 1)

    def delete_snapshots(self, offsets: list[int]) -> None:
        for o in offsets:
            self.conn.execute(self._q("DELETE FROM meta_snapshot WHERE log_offset = ?"), (o,))

    def append(self, first_offset: int, records: list[Record]) -> str | None:
        """Insert the records; the digest of the last one's stored text (None for no records)."""
        rows = [(first_offset + i, _dump(r)) for i, r in enumerate(records)]
        if not rows:
            return None
        self._insert(rows)
        return digest(rows[-1][1])

    def _insert(self, rows: list[tuple[int, str]]) -> None:
        raise NotImplementedError  # the driver's executemany: _SqliteTxn, _PostgresTxn

    def truncate_before(self, log_offset: int) -> int:
        """Delete the log records below `log_offset` (the record at it stays); returns how many."""
        cur = self.conn.execute(self._q("DELETE FROM meta_log WHERE log_offset < ?"), (log_offset,))
        return int(cur.rowcount)


class _SqliteTxn(_Sql):
    def _insert(self, rows: list[tuple[int, str]]) -> None:
        self.conn.executemany("INSERT INTO meta_log (log_offset, record) VALUES (?, ?)", rows)


class _PostgresTxn(_Sql):
    ph = "%s"
    digest_sql = "encode(sha256(convert_to(record, 'UTF8')), 'hex')"

    def _insert(self, rows: list[tuple[int, str]]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany("INSERT INTO meta_log (log_offset, record) VALUES (%s, %s)", rows)

    def in_recovery(self) -> bool:
        row = self.conn.execute("SELECT pg_is_in_recovery()").fetchone()
        return bool(row[0])


class LogClosed(MetadataError):
    """The metadata log was closed (the node is stopping): a call made after that, or waiting while it closed."""


class _LogBase:
    """Lock-free reads through one connection guarded by a thread lock (the subclasses open it).

    `close` takes that lock too, and a call after it raises LogClosed: a SQLite connection closed while
    another thread runs a statement on it crashes the process (sqlite3 frees what the statement uses), as a
    node stopping while its threads still read the metadata did."""

    url: str
    _lock: threading.Lock
    _closed: bool = False

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"the metadata log {self.url} is closed")

    def _read(self, fn: Any) -> Any:
        """`fn(view)` under the lock on the connection's view; LogClosed once closed."""
        raise NotImplementedError

    def read_since(self, offset: int) -> list[LogEntry]:
        return self._read(lambda v: v.read_since(offset))  # type: ignore[no-any-return]

    def read_checked(self, at: int) -> Checked:
        return self._read(lambda v: v.read_checked(at))  # type: ignore[no-any-return]

    def in_recovery(self) -> bool:
        return self._read(lambda v: v.in_recovery())  # type: ignore[no-any-return]

    def last_offset(self) -> int | None:
        return self._read(lambda v: v.last_offset())  # type: ignore[no-any-return]

    def first_offset(self) -> int | None:
        return self._read(lambda v: v.first_offset())  # type: ignore[no-any-return]

    def snapshots(self) -> list[SnapshotInfo]:
        return self._read(lambda v: v.snapshots())  # type: ignore[no-any-return]

    def read_snapshot(self, log_offset: int) -> tuple[str, bytes] | None:
        return self._read(lambda v: v.read_snapshot(log_offset))  # type: ignore[no-any-return]

    def mark_snapshot_damaged(self, log_offset: int) -> None:
        self._read(lambda v: v.mark_snapshot_damaged(log_offset))  # idempotent: as safe to repeat as a read

    def unavailable(self) -> str | None:
        """Why the metadata database does not answer (None: it answers, or the log is embedded)."""
        return None

    def close(self) -> None:
        """Close the connection once no call is using it; later calls raise LogClosed. Closing twice is
        harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_connection()

    def _close_connection(self) -> None:
        raise NotImplementedError


class SqliteLog(_LogBase):
    def __init__(self, url: str, path: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.create_function("record_digest", 1, digest, deterministic=True)  # read_checked's
        try:
            pg_schema.sqlite_prepare(self._conn, url, SCHEMA, _ddl(big="INTEGER", blob="BLOB"))
        except BaseException:
            self._conn.close()
            raise
        self._view = _SqliteTxn(self._conn)

    def _read(self, fn: Any) -> Any:
        with self._lock:
            self._check_open()
            return fn(self._view)

    def _close_connection(self) -> None:
        self._conn.close()

    @contextmanager
    def locked(self) -> Iterator[LockedLog]:
        with self._lock:
            self._check_open()
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield _SqliteTxn(self._conn)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")


class PostgresLog(_LogBase):
    """Through a PgLink: a connection lost (a PostgreSQL restart or failover, a network cut) is replaced on the next
    call; while none can be opened, calls raise MetadataUnavailable. Reads are tried a second time on a new
    connection; a transaction is not: one whose connection was lost before its COMMIT answered may or may not be
    applied (the caller's next catch-up reads which)."""

    def __init__(self, url: str, dsn: str, schema: str | None) -> None:
        self.url = url
        self._lock = threading.Lock()
        if schema is not None:
            pg_schema.check_schema_name(url, schema)
        self._link = PgLink(dsn, schema)
        try:
            pg_schema.prepare(self._link.first, url, schema, SCHEMA, _ddl(big="BIGINT", blob="BYTEA"))
        except BaseException:
            self._link.close()
            raise

    def _read(self, fn: Any) -> Any:
        with self._lock:
            self._check_open()
            return self._link.run(lambda conn: fn(_PostgresTxn(conn)), retry=True)

    def unavailable(self) -> str | None:
        if self._link.down is None:  # answering: no wait for the lock a long transaction may hold
            return None
        with self._lock:
            return None if self._closed else self._link.probe()

    def _close_connection(self) -> None:
        self._link.close()

    def _begin(self) -> Any:
        """A connection in a transaction holding the log's write lock. Nothing is written yet, so a connection
        found broken here is replaced and the start tried once more."""
        def begin(conn: Any) -> Any:
            conn.execute("BEGIN")
            try:
                conn.execute("LOCK TABLE meta_log IN EXCLUSIVE MODE")
            except BaseException:
                with suppress(Exception):
                    conn.execute("ROLLBACK")
                raise
            return conn

        return self._link.run(begin, retry=True)

    @contextmanager
    def locked(self) -> Iterator[LockedLog]:
        with self._lock:
            self._check_open()
            conn = self._begin()
            with self._link.session() as same:
                assert same is conn  # the link hands out its one live connection
                try:
                    yield _PostgresTxn(conn)
                except BaseException:
                    with suppress(Exception):
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")  # lost here: the outcome is unknown, MetadataUnavailable says so


def open_log(url: str) -> SqliteLog | PostgresLog:
    """`sqlite:///path/meta.db` or `postgresql://user@host:port/db?schema=name`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return SqliteLog(url, sqlite_path(url))
    if scheme in ("postgresql", "postgres"):
        dsn, schema = pg_schema.parse_url(url)  # type: ignore[misc]
        return PostgresLog(url, dsn, schema)
    raise ValueError(f"unsupported metadata URL {url!r}: use sqlite:///path or postgresql://user@host:port/db?schema=s")
