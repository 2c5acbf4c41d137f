"""BlobStore in a relational database (SQLite embedded, PostgreSQL shared).

A blob is a row in `mqindex_blobs` (key, size, chunk size) plus its bytes in fixed-size rows of
`mqindex_blob_chunks`, so a ranged read selects only the chunks it overlaps. Multipart uploads stage
their chunks in `mqindex_upload_chunks` and are moved under the key in one transaction on complete.
Each thread gets its own connection.

The three tables' schema version is recorded as `object_store` in `mqindex_schema` (storage_tier/schema_version.py)
by the start-up DDL's transaction: a store whose tables are of a newer version than this build reads is refused
with `NewerSchema` at open.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from storage_tier import schema_version
from storage_tier.blob_store import BlobStore, MultipartWriter, resolve_range
from storage_tier.errors import BlobNotFound
from storage_tier.retry import RetryPolicy

DEFAULT_CHUNK = 1024 * 1024
SCHEMA_COMPONENT = "object_store"
SCHEMA_TABLES = ("mqindex_blobs", "mqindex_blob_chunks", "mqindex_upload_chunks")
SCHEMA_VERSION = 1  # the version of the tables this build writes and reads


class _Dialect:
    """What differs between SQLite and PostgreSQL: connecting, placeholders, types, transient faults."""

    name: str
    blob_type: str
    key_type: str
    greatest: str  # SQL's two-argument max/min
    least: str

    def connect(self) -> Any: ...

    def is_transient(self, exc: BaseException) -> bool: ...

    def sql(self, text: str) -> str:
        return text


class _SQLite(_Dialect):
    name = "sqlite"
    blob_type = "BLOB"
    key_type = "TEXT"
    greatest = "max"
    least = "min"

    def __init__(self, path: str) -> None:
        self.path = path

    def connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def is_transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


# The advisory lock key every start-up DDL of mqindex takes on PostgreSQL (broker.metadata.pg_schema uses it too).
PG_DDL_LOCK_KEY = 0x6D71696E646578


class _Postgres(_Dialect):
    name = "postgresql"
    blob_type = "BYTEA"
    key_type = 'TEXT COLLATE "C"'
    greatest = "greatest"
    least = "least"

    def __init__(self, dsn: str, schema: str | None) -> None:
        self.dsn = dsn
        self.schema = schema

    def connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        if self.schema:
            with conn.transaction():  # under the start-up DDL lock: sessions creating the schema at once all succeed
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_DDL_LOCK_KEY,))
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            conn.execute(f'SET search_path TO "{self.schema}"')
        return conn

    def is_transient(self, exc: BaseException) -> bool:
        import psycopg

        return isinstance(exc, (psycopg.OperationalError, psycopg.errors.SerializationFailure,
                                psycopg.errors.DeadlockDetected))

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")


class DBStore(BlobStore):
    def __init__(self, url: str, dialect: _Dialect, chunk_size: int = DEFAULT_CHUNK,
                 retry: RetryPolicy | None = None) -> None:
        super().__init__(url, retry)
        self.dialect = dialect
        self.name = dialect.name
        self.chunk_size = chunk_size
        self._local = threading.local()
        self._conns: list[Any] = []
        self._conns_lock = threading.Lock()
        self._schema_lock = threading.Lock()
        try:
            self._create_schema()
        except BaseException:
            self.close()
            raise

    # -- connections and transactions ------------------------------------------------------------
    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self.dialect.connect()
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _drop_conn(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._conns_lock:
                if conn in self._conns:
                    self._conns.remove(conn)
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - the connection is already broken
                pass

    @contextmanager
    def _tx(self) -> Iterator[Callable[..., Any]]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE" if self.name == "sqlite" else "BEGIN")
        try:
            yield lambda q, params=(): conn.execute(self.dialect.sql(q), params)
            conn.execute("COMMIT")
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - a lost connection has nothing to roll back
                self._drop_conn()
            raise

    def _run(self, kind: str, op: str, key: str | None, body: Callable[[Callable[..., Any]], Any],
             bytes_in: int = 0) -> Any:
        def attempt() -> Any:
            self.meter.record(kind, bytes_in=bytes_in)
            try:
                with self._tx() as q:
                    return body(q)
            except Exception as exc:
                if self.dialect.is_transient(exc) and self.name == "postgresql":
                    self._drop_conn()
                raise

        return self.retry.run(attempt, backend=self.name, key=key, op=op, is_transient=self.dialect.is_transient,
                              bound=self.retry_bound)

    def _create_schema(self) -> None:
        kt, bt = self.dialect.key_type, self.dialect.blob_type
        stmts = [
            f"CREATE TABLE IF NOT EXISTS mqindex_blobs (key {kt} PRIMARY KEY, size BIGINT NOT NULL, "
            f"chunk_size INTEGER NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS mqindex_blob_chunks (key {kt} NOT NULL, idx INTEGER NOT NULL, "
            f"data {bt} NOT NULL, PRIMARY KEY (key, idx))",
            f"CREATE TABLE IF NOT EXISTS mqindex_upload_chunks (upload_id {kt} NOT NULL, idx INTEGER NOT NULL, "
            f"data {bt} NOT NULL, PRIMARY KEY (upload_id, idx))",
        ]

        def create(q: Callable[..., Any]) -> None:
            if self.name == "postgresql":
                q("SELECT pg_advisory_xact_lock(?)", (PG_DDL_LOCK_KEY,))
            schema_version.check_and_record(q, "?", self.url, SCHEMA_COMPONENT, SCHEMA_TABLES, SCHEMA_VERSION)
            for s in stmts:
                q(s)

        with self._schema_lock:
            self.retry.run(lambda: self._schema_tx(create), backend=self.name, key=None, op="create schema",
                           is_transient=self.dialect.is_transient)

    def _schema_tx(self, body: Callable[[Callable[..., Any]], None]) -> None:
        try:
            with self._tx() as q:
                body(q)
        except Exception as exc:
            # two processes creating the same tables at once: the loser sees a unique violation
            if "already exists" in str(exc) or "duplicate key" in str(exc):
                return
            raise

    def close(self) -> None:
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass
        self._local = threading.local()

    # -- primitives --------------------------------------------------------------------------------
    def _write_chunks(self, q: Callable[..., Any], table: str, col: str, owner: str, data: bytes,
                      first_idx: int = 0) -> int:
        cs = self.chunk_size
        n = 0
        for i in range(0, len(data), cs):
            q(f"INSERT INTO {table} ({col}, idx, data) VALUES (?, ?, ?)", (owner, first_idx + n, data[i : i + cs]))
            n += 1
        return n

    def _put(self, key: str, data: bytes) -> None:
        def body(q: Callable[..., Any]) -> None:
            q("DELETE FROM mqindex_blob_chunks WHERE key = ?", (key,))
            q("DELETE FROM mqindex_blobs WHERE key = ?", (key,))
            q("INSERT INTO mqindex_blobs (key, size, chunk_size) VALUES (?, ?, ?)", (key, len(data), self.chunk_size))
            self._write_chunks(q, "mqindex_blob_chunks", "key", key, data)

        self._run("PUT", "put", key, body, bytes_in=len(data))

    def _get(self, key: str, start: int, end: int | None) -> bytes:
        if start < 0 or (end is not None and end < start):
            resolve_range(self.name, key, start, start, end)  # raises InvalidRange
        hi = (1 << 62) if end is None else end
        mx, mn = self.dialect.greatest, self.dialect.least
        # One statement, so one snapshot and one round trip: the blob's size and, for each chunk the range
        # overlaps, only the overlapping bytes (sliced by the server, not shipped whole).
        sql = (
            f"WITH b AS (SELECT size, chunk_size FROM mqindex_blobs WHERE key = ?) "
            f"SELECT b.size, c.idx, substr(c.data, CAST({mx}(? - c.idx * b.chunk_size, 0) + 1 AS INTEGER), "
            f"CAST({mx}({mn}({mn}(?, b.size), (c.idx + 1) * b.chunk_size) - {mx}(?, c.idx * b.chunk_size), 0) "
            f"AS INTEGER)) "
            f"FROM b LEFT JOIN mqindex_blob_chunks c ON c.key = ? AND c.idx >= ? / b.chunk_size "
            f"AND c.idx * b.chunk_size < {mn}(?, b.size) ORDER BY c.idx"
        )
        params = (key, start, hi, start, key, start, hi)

        def attempt() -> bytes:
            self.meter.record("GET")
            rows = self._conn().execute(self.dialect.sql(sql), params).fetchall()
            if not rows:
                raise BlobNotFound(self.name, key)
            resolve_range(self.name, key, int(rows[0][0]), start, end)
            return b"".join(bytes(r[2]) for r in rows if r[1] is not None)

        def retry_attempt() -> bytes:
            try:
                return attempt()
            except Exception as exc:
                if self.dialect.is_transient(exc) and self.name == "postgresql":
                    self._drop_conn()
                raise

        data: bytes = self.retry.run(retry_attempt, backend=self.name, key=key, op="get",
                                     is_transient=self.dialect.is_transient, bound=self.retry_bound)
        self.meter.add_bytes(bytes_out=len(data))
        return data

    def _size(self, key: str) -> int:
        def body(q: Callable[..., Any]) -> int:
            row = q("SELECT size FROM mqindex_blobs WHERE key = ?", (key,)).fetchone()
            if row is None:
                raise BlobNotFound(self.name, key)
            return int(row[0])

        return int(self._run("HEAD", "size", key, body))

    def _delete(self, keys: list[str]) -> None:
        def body(q: Callable[..., Any]) -> None:
            for k in keys:
                q("DELETE FROM mqindex_blob_chunks WHERE key = ?", (k,))
                q("DELETE FROM mqindex_blobs WHERE key = ?", (k,))

        self._run("DELETE", "delete", keys[0], body)

    def _list(self, prefix: str) -> Iterable[str]:
        def body(q: Callable[..., Any]) -> list[str]:
            if not prefix:
                rows = q("SELECT key FROM mqindex_blobs").fetchall()
            else:
                # a range scan on the primary key: [prefix, prefix with its last character bumped)
                upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
                rows = q("SELECT key FROM mqindex_blobs WHERE key >= ? AND key < ?", (prefix, upper)).fetchall()
            return [r[0] for r in rows]

        return self._run("LIST", "list", prefix, body)

    def _multipart(self, key: str) -> MultipartWriter:
        return _DBMultipart(self, key)


class _DBMultipart(MultipartWriter):
    store: DBStore

    def __init__(self, store: DBStore, key: str) -> None:
        super().__init__(store, key)
        self.upload_id = uuid.uuid4().hex
        self.buffer = bytearray()
        self.chunks = 0
        self.size = 0

    def _stage(self, final: bool) -> None:
        cs = self.store.chunk_size
        cut = len(self.buffer) if final else (len(self.buffer) // cs) * cs
        if cut == 0:
            return
        data = bytes(self.buffer[:cut])
        del self.buffer[:cut]

        def body(q: Callable[..., Any]) -> None:
            self.chunks += self.store._write_chunks(q, "mqindex_upload_chunks", "upload_id", self.upload_id,
                                                    data, self.chunks)

        self.store._run("PUT", "upload_part", self.key, body, bytes_in=len(data))

    def _write_part(self, data: bytes) -> None:
        self.buffer += data
        self.size += len(data)
        self._stage(final=False)

    def _copy_part(self, src_key: str, start: int, end: int | None) -> None:
        # a read-and-write: the database has no cheaper way to copy a byte range
        self._write_part(self.store.get(src_key, start, end))
        self.store.meter.record("COPY")

    def _complete(self) -> None:
        self._stage(final=True)
        s = self.store

        def body(q: Callable[..., Any]) -> None:
            q("DELETE FROM mqindex_blob_chunks WHERE key = ?", (self.key,))
            q("DELETE FROM mqindex_blobs WHERE key = ?", (self.key,))
            q("INSERT INTO mqindex_blobs (key, size, chunk_size) VALUES (?, ?, ?)", (self.key, self.size, s.chunk_size))
            q("INSERT INTO mqindex_blob_chunks (key, idx, data) SELECT ?, idx, data FROM mqindex_upload_chunks "
              "WHERE upload_id = ?", (self.key, self.upload_id))
            q("DELETE FROM mqindex_upload_chunks WHERE upload_id = ?", (self.upload_id,))

        try:
            s._run("PUT", "complete_multipart_upload", self.key, body)
        except Exception:
            self._abort()
            raise

    def _abort(self) -> None:
        self.store._run("DELETE", "abort_multipart_upload", self.key,
                        lambda q: q("DELETE FROM mqindex_upload_chunks WHERE upload_id = ?", (self.upload_id,)))


def sqlite_store(url: str, path: str, chunk_size: int = DEFAULT_CHUNK, retry: RetryPolicy | None = None) -> DBStore:
    return DBStore(url, _SQLite(path), chunk_size, retry)


def postgres_store(url: str, dsn: str, schema: str | None = None, chunk_size: int = DEFAULT_CHUNK,
                   retry: RetryPolicy | None = None) -> DBStore:
    return DBStore(url, _Postgres(dsn, schema), chunk_size, retry)
