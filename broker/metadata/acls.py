"""Access control rules (Kafka's ACLs) kept in the metadata database, so every node enforces the same set.

One row per rule in `acl_rules` beside the metadata log (same database), and one counter in `acl_version` that
every change bumps in the same transaction: a node polls the counter (one tiny query) and reloads the rules only
when it moved, so a change is seen by every node within one poll interval.

A rule is Kafka's ACL binding: principal (`User:alice`, `User:*`), host (`*` or an address), resource type
(topic, group, cluster, transactional_id), pattern (literal, with `*` for every name, or prefixed), resource
name, operation and permission (allow or deny). The decision over a set of rules is api/security/authorizer.py's.

The two tables' schema version is recorded as `acl` in `mqindex_schema` (see pg_schema.Family): tables stored
at a newer version than this build reads raise `NewerSchema` at open.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from broker.metadata import pg_schema

T = TypeVar("T")

RESOURCE_TYPES = ("topic", "group", "cluster", "transactional_id")
PATTERN_TYPES = ("literal", "prefixed")
OPERATIONS = ("all", "read", "write", "create", "delete", "alter", "describe", "cluster_action",
              "describe_configs", "alter_configs", "idempotent_write")
PERMISSIONS = ("allow", "deny")
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name, as Kafka names it
WILDCARD = "*"

_COLUMNS = "principal, host, resource_type, pattern_type, resource_name, operation, permission"
_CREATE_PG = ["CREATE TABLE IF NOT EXISTS acl_rules (principal TEXT NOT NULL, host TEXT NOT NULL, "
              "resource_type TEXT NOT NULL, pattern_type TEXT NOT NULL, resource_name TEXT NOT NULL, "
              "operation TEXT NOT NULL, permission TEXT NOT NULL, PRIMARY KEY (" + _COLUMNS + "))",
              "CREATE TABLE IF NOT EXISTS acl_version (id INT PRIMARY KEY, version BIGINT NOT NULL)",
              "INSERT INTO acl_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING"]
_CREATE_SQLITE = [s.replace("INT PRIMARY KEY", "INTEGER PRIMARY KEY").replace("ON CONFLICT (id) DO NOTHING",
                                                                                "ON CONFLICT DO NOTHING")
                  for s in _CREATE_PG]
SCHEMA = pg_schema.Family("acl", ("acl_rules", "acl_version"), 1)


class AclError(ValueError):
    """A rule or filter that is not well formed; the message names the field."""


def _pick(value: str, allowed: tuple[str, ...], field: str) -> str:
    v = str(value).strip().lower().replace("-", "_")
    if v not in allowed:
        raise AclError(f"{field} {value!r} is not one of {', '.join(allowed)}")
    return v


@dataclass(frozen=True, order=True)
class AclRule:
    principal: str  # "User:alice", "User:*"
    host: str  # "*" or an address
    resource_type: str  # RESOURCE_TYPES
    pattern_type: str  # PATTERN_TYPES
    resource_name: str
    operation: str  # OPERATIONS
    permission: str  # PERMISSIONS

    @classmethod
    def make(cls, principal: str, resource_type: str, resource_name: str, operation: str,
             permission: str = "allow", pattern_type: str = "literal", host: str = WILDCARD) -> AclRule:
        """A checked rule; AclError names the first bad field."""
        if ":" not in principal or not principal.partition(":")[2]:
            raise AclError(f"principal {principal!r} is TYPE:NAME, e.g. User:alice or User:*")
        if not resource_name:
            raise AclError("resource_name must not be empty")
        rtype = _pick(resource_type, RESOURCE_TYPES, "resource_type")
        pattern = _pick(pattern_type, PATTERN_TYPES, "pattern_type")
        if pattern == "prefixed" and resource_name == WILDCARD:
            raise AclError("a prefixed rule's name cannot be '*' (use a literal '*' for every name)")
        return cls(principal, host or WILDCARD, rtype, pattern, resource_name,
                   _pick(operation, OPERATIONS, "operation"), _pick(permission, PERMISSIONS, "permission"))

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class AclFilter:
    """Matches rules field by field; None matches any value (Kafka's ANY). `pattern_type` "match" matches the
    rules that apply to the literal name `resource_name` (literal, `*` and prefixes of it), as Kafka's MATCH."""

    principal: str | None = None
    host: str | None = None
    resource_type: str | None = None
    pattern_type: str | None = None  # literal, prefixed, match, None = any
    resource_name: str | None = None
    operation: str | None = None
    permission: str | None = None

    def matches(self, r: AclRule) -> bool:
        if self.pattern_type == "match":
            if self.resource_name is not None and not (
                    r.resource_name == self.resource_name
                    or (r.pattern_type == "literal" and r.resource_name == WILDCARD)
                    or (r.pattern_type == "prefixed" and self.resource_name.startswith(r.resource_name))):
                return False
        else:
            if self.pattern_type is not None and r.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and r.resource_name != self.resource_name:
                return False
        return all(want is None or want == got for want, got in (
            (self.principal, r.principal), (self.host, r.host), (self.resource_type, r.resource_type),
            (self.operation, r.operation), (self.permission, r.permission)))


class AclTable:
    """The rules of one metadata database (`sqlite:///...` or `postgresql://...?schema=s`)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._db, self._pg, schema = pg_schema.open_link(url)  # sqlite3 connection, or a PgLink that reconnects
        try:
            if self._pg:
                pg_schema.prepare(self._db.first, url, schema, SCHEMA, _CREATE_PG)
            else:
                pg_schema.sqlite_prepare(self._db, url, SCHEMA, _CREATE_SQLITE)
        except BaseException:
            self._db.close()
            raise
        self._p = "%s" if self._pg else "?"

    @contextmanager
    def _txn(self) -> Iterator[Any]:
        """A connection in a transaction. On PostgreSQL a lost connection raises MetadataUnavailable (the next call
        opens a new one, PgLink); a write is not retried, its outcome unknown."""
        if not self._pg:
            with _SqliteTxn(self._db):
                yield self._db
            return
        with self._db.session() as conn, conn.transaction():
            yield conn

    def _read(self, fn: Callable[[Any], T], txn: bool = True) -> T:
        """`fn(conn)` (in a transaction with `txn`); on PostgreSQL tried once more on a new connection when the first
        was lost."""
        if not self._pg:
            if not txn:
                return fn(self._db)
            with _SqliteTxn(self._db):
                return fn(self._db)

        def in_txn(conn: Any) -> T:
            if not txn:
                return fn(conn)
            with conn.transaction():
                return fn(conn)

        return self._db.run(in_txn, retry=True)  # type: ignore[no-any-return]

    def version(self) -> int:
        """The change counter: bumped by every add or remove that changed something."""
        with self._lock:
            row = self._read(lambda c: c.execute("SELECT version FROM acl_version WHERE id = 1").fetchone(), txn=False)
        return int(row[0]) if row else 0

    def rules(self) -> tuple[int, list[AclRule]]:
        """The version and the rules as of that version (one consistent read)."""
        def read(conn: Any) -> tuple[Any, list[Any]]:
            return (conn.execute("SELECT version FROM acl_version WHERE id = 1").fetchone(),
                    conn.execute(f"SELECT {_COLUMNS} FROM acl_rules").fetchall())

        with self._lock:
            row, rows = self._read(read)
        return (int(row[0]) if row else 0), sorted(AclRule(*map(str, r)) for r in rows)

    def add(self, rules: Iterable[AclRule]) -> int:
        """Store `rules` (one already there is kept once); returns how many were new."""
        added = 0
        p = self._p
        with self._lock, self._txn() as conn:
            for r in rules:
                cur = conn.execute(
                    f"INSERT INTO acl_rules ({_COLUMNS}) VALUES ({', '.join([p] * 7)}) ON CONFLICT DO NOTHING",
                    (r.principal, r.host, r.resource_type, r.pattern_type, r.resource_name, r.operation,
                     r.permission))
                added += max(cur.rowcount, 0)
            if added:
                conn.execute("UPDATE acl_version SET version = version + 1 WHERE id = 1")
        return added

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclRule]]:
        """Delete the rules each filter matches; returns, per filter, the rules it removed."""
        p = self._p
        out: list[list[AclRule]] = []
        with self._lock, self._txn() as conn:
            rows = [AclRule(*map(str, r)) for r in conn.execute(f"SELECT {_COLUMNS} FROM acl_rules")]
            gone: set[AclRule] = set()
            for f in filters:
                hit = sorted(r for r in rows if f.matches(r))
                out.append(hit)
                gone.update(hit)
            for r in gone:
                conn.execute(
                    f"DELETE FROM acl_rules WHERE principal = {p} AND host = {p} AND resource_type = {p} AND "
                    f"pattern_type = {p} AND resource_name = {p} AND operation = {p} AND permission = {p}",
                    (r.principal, r.host, r.resource_type, r.pattern_type, r.resource_name, r.operation,
                     r.permission))
            if gone:
                conn.execute("UPDATE acl_version SET version = version + 1 WHERE id = 1")
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _SqliteTxn:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self._conn.execute("ROLLBACK" if exc_type is not None else "COMMIT")
