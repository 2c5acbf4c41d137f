"""Start-up DDL on PostgreSQL that nodes started at the same moment can all run.

`CREATE SCHEMA/TABLE IF NOT EXISTS` is not safe against a concurrent session: two sessions both find the name
free, both insert it into the system catalogs and the later one fails with a unique violation
(`pg_namespace_nspname_index`, `pg_type_typname_nsp_index`). Every start-up DDL therefore runs in one
transaction that first takes a transaction-scoped advisory lock on a fixed key: the sessions create the
schema and tables one after another, each later one finding them there.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from storage_tier.db_store import PG_DDL_LOCK_KEY  # one key for every start-up DDL, the blob store's too
from storage_tier.store_url import sqlite_path

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def check_schema_name(url: str, schema: str) -> None:
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(f"{url}: schema {schema!r} must be a plain SQL identifier")


def prepare(conn: Any, url: str, schema: str | None, statements: list[str]) -> None:
    """On an autocommit psycopg connection: create `schema` when given and make it the connection's search
    path, then run `statements`, all under the start-up DDL lock in one transaction."""
    if schema is not None:
        check_schema_name(url, schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (PG_DDL_LOCK_KEY,))
        if schema is not None:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'SET search_path TO "{schema}"')  # not LOCAL: stays after the commit
        for s in statements:
            conn.execute(s)


def connect(url: str) -> tuple[Any, bool, str | None]:
    """A connection to the metadata database of `url` (`sqlite:///...` or `postgresql://...?schema=s`), whether it
    is PostgreSQL, and its schema (None: the default one). Nothing is created: `prepare` runs the DDL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        return sqlite3.connect(sqlite_path(url), isolation_level=None, check_same_thread=False, timeout=30), False, None
    if scheme in ("postgresql", "postgres"):
        import psycopg

        params = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        schema = params.pop("schema", None)
        if schema is not None:
            check_schema_name(url, schema)
        dsn = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(params), ""))
        return psycopg.connect(dsn, autocommit=True), True, schema
    raise ValueError(f"unsupported metadata URL {url!r}")
