"""Start-up DDL on PostgreSQL that nodes started at the same moment can all run.

`CREATE SCHEMA/TABLE IF NOT EXISTS` is not safe against a concurrent session: two sessions both find the name
free, both insert it into the system catalogs and the later one fails with a unique violation
(`pg_namespace_nspname_index`, `pg_type_typname_nsp_index`). Every start-up DDL therefore runs in one
transaction that first takes a transaction-scoped advisory lock on a fixed key: the sessions create the
schema and tables one after another, each later one finding them there.

The same transaction checks and records the table family's schema version in `mqindex_schema`
(storage_tier/schema_version.py): a family stored at a newer version than this build reads stops the start with
`NewerSchema` before any of its DDL runs.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from broker.metadata.pg_link import PgLink
from storage_tier import schema_version
from storage_tier.db_store import PG_DDL_LOCK_KEY  # one key for every start-up DDL, the blob store's too
from storage_tier.store_url import sqlite_path

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_schema_name(url: str, schema: str) -> None:
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(f"{url}: schema {schema!r} must be a plain SQL identifier")


@dataclass(frozen=True)
class Family:
    """A family of tables whose schema version is recorded under `component` in `mqindex_schema`."""

    component: str
    tables: tuple[str, ...]
    version: int  # the schema version this build writes and reads


def prepare(conn: Any, url: str, schema: str | None, family: Family, statements: Sequence[str]) -> None:
    """On an autocommit psycopg connection: create `schema` when given and make it the connection's search
    path, check and record `family`'s schema version, then run `statements`, all under the start-up DDL lock in
    one transaction. `schema_version.NewerSchema` when the family is stored at a newer version (nothing run)."""
    if schema is not None:
        check_schema_name(url, schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_DDL_LOCK_KEY,))
        if schema is not None:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'SET search_path TO "{schema}"')  # not LOCAL: stays after the commit
        schema_version.check_and_record(conn.execute, "%s", url, family.component, family.tables, family.version)
        for s in statements:
            conn.execute(s)


def sqlite_prepare(conn: Any, url: str, family: Family, statements: Sequence[str]) -> None:
    """The same on an autocommit sqlite3 connection, in one `BEGIN IMMEDIATE` transaction."""
    schema_version.sqlite_prepare(conn, url, family.component, family.tables, family.version, statements)


def parse_url(url: str) -> tuple[str, str | None] | None:
    """(dsn, schema) of a `postgresql://...?schema=s` URL; None for `sqlite:///...`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return None
    if scheme in ("postgresql", "postgres"):
        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        schema = params.pop("schema", None)
        if schema is not None:
            check_schema_name(url, schema)
        return urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(params), "")), schema
    raise ValueError(f"unsupported metadata URL {url!r}")


def connect(url: str) -> tuple[Any, bool, str | None]:
    """A connection to the metadata database of `url` (`sqlite:///...` or `postgresql://...?schema=s`), whether it
    is PostgreSQL, and its schema (None: the default one). Nothing is created: `prepare` runs the DDL."""
    pg = parse_url(url)
    if pg is None:
        return sqlite3.connect(sqlite_path(url), isolation_level=None, check_same_thread=False, timeout=30), False, None
    import psycopg

    return psycopg.connect(pg[0], autocommit=True), True, pg[1]


def open_link(url: str) -> tuple[Any, bool, str | None]:
    """As `connect`, with a PgLink on PostgreSQL (a connection that reconnects by itself, pg_link.py) whose `first`
    connection runs `prepare`; a sqlite3 connection on SQLite."""
    pg = parse_url(url)
    if pg is None:
        return connect(url)
    return PgLink(*pg), True, pg[1]
