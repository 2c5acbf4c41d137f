"""The version of each family of mqindex's SQL tables, kept in one small table beside them.

`mqindex_schema(component, version, written_by)` holds one row per table family (the metadata log and its
snapshots, the node leases, the ACL rules, the database object store's tables). A node checks its family's row
at start, inside the transaction that runs the family's start-up DDL (on PostgreSQL under the start-up advisory
lock, so nodes started together do not collide; on SQLite under `BEGIN IMMEDIATE`):

- no row: the tables were made by a version that kept no schema version (0.3.0) or not at all yet: version 1,
  and the row is recorded;
- the version this build reads: nothing to do;
- a newer one: `NewerSchema`, naming the database, the family, its tables, the stored version, who wrote it and
  the version this build reads. Nothing is created or altered: the node does not start until it is upgraded.

Older builds never look at `mqindex_schema` (0.3.0 names its own tables only), so they still start beside it.
A later version of a family records itself only once every node reads it (as any newer format, see
docs/OPERATIONS.md "Upgrading a cluster").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

TABLE = "mqindex_schema"
CREATE = (f"CREATE TABLE IF NOT EXISTS {TABLE} (component TEXT PRIMARY KEY, version INTEGER NOT NULL, "
          f"written_by TEXT NOT NULL)")

Execute = Callable[..., Any]  # execute(sql, params=()) -> a cursor, placeholders already the driver's


class NewerSchema(RuntimeError):
    """The stored tables are of a newer schema version than this build reads."""

    def __init__(self, where: str, component: str, tables: Sequence[str], stored: int, written_by: str,
                 reads: int) -> None:
        super().__init__(
            f"{where}: the {component} tables ({', '.join(tables)}) are at schema version {stored} (recorded in "
            f"{TABLE} by {written_by}), newer than this version of mqindex reads ({reads}); this node does not "
            f"start on them: upgrade it to the version the other nodes run")
        self.component = component
        self.stored = stored
        self.reads = reads


@functools.cache
def written_by() -> str:
    """What a recorded row names as its writer: this build's package version. Looked up once per process (it
    scans the installed distributions: ~0.2 s on a loaded machine, spent under the start-up DDL lock)."""
    try:
        from importlib.metadata import version

        return f"mqindex {version('mqindex')}"
    except Exception:  # noqa: BLE001 - not installed as a package
        return "mqindex (version unknown)"


def stored_version(q: Execute, ph: str, component: str) -> tuple[int, str] | None:
    """The recorded (version, written_by) of `component`, None when no row (version 1). Needs `CREATE` run."""
    row = q(f"SELECT version, written_by FROM {TABLE} WHERE component = {ph}", (component,)).fetchone()
    return None if row is None else (int(row[0]), str(row[1]))


def check_and_record(q: Execute, ph: str, where: str, component: str, tables: Sequence[str], version: int) -> None:
    """Inside the family's start-up DDL transaction, before its DDL: refuse a newer stored version, record this
    build's when none is recorded (absent is version 1) or an older one is. `ph` is the driver's placeholder."""
    q(CREATE)
    found = stored_version(q, ph, component)
    stored, by = found if found is not None else (1, "a version that recorded none")
    if stored > version:
        raise NewerSchema(where, component, tables, stored, by, version)
    if found is None or stored < version:
        q(f"INSERT INTO {TABLE} (component, version, written_by) VALUES ({ph}, {ph}, {ph}) "
          f"ON CONFLICT (component) DO UPDATE SET version = excluded.version, written_by = excluded.written_by",
          (component, version, written_by()))


def sqlite_prepare(conn: Any, where: str, component: str, tables: Sequence[str], version: int,
                   statements: Sequence[str]) -> None:
    """On an autocommit sqlite3 connection: check and record the family's version, then run its DDL
    `statements`, in one `BEGIN IMMEDIATE` transaction (two processes opening one file at once take turns)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        check_and_record(conn.execute, "?", where, component, tables, version)
        for s in statements:
            conn.execute(s)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
