"""Schema versions of mqindex's SQL table families (docs/OPERATIONS.md, "Upgrading a cluster"): the metadata log and
its snapshots, the node leases, the ACL rules and the database object store's tables, each on SQLite and on the
real PostgreSQL. Tables without a recorded version (made by 0.3.0, or before versions were recorded) open as
version 1 and the version is then recorded; tables recorded at a newer version are refused at open with an error
naming the family, its tables, the stored version and this build's, and nothing stored is changed; `mqindex serve`
stops at start with that one line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import MetadataClient, pg_schema
from broker.metadata.acls import AclRule, AclTable
from broker.metadata.leases import LeaseTable
from broker.metadata.log_store import open_log
from storage_tier import open_store
from storage_tier.schema_version import NewerSchema
from tests.api.server import free_port

MQINDEX = str(Path(sys.executable).parent / "mqindex")


class Raw:
    """A plain connection to the database of a URL, on the URL's schema (what an operator's psql sees)."""

    def __init__(self, url: str) -> None:
        self.conn, self.pg, schema = pg_schema.connect(url)
        if self.pg and schema is not None:
            self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            self.conn.execute(f'SET search_path TO "{schema}"')

    def q(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql.replace("?", "%s") if self.pg else sql, args)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []

    def columns(self, table: str) -> list[str]:
        if self.pg:
            return [r[0] for r in self.q("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                         "AND table_schema = current_schema() ORDER BY ordinal_position", (table,))]
        return [r[1] for r in self.q(f"PRAGMA table_info({table})")]

    def set_version(self, component: str, version: int, written_by: str) -> None:
        """Record `component` at `version` in mqindex_schema as a newer build would (the table made if missing)."""
        self.q("CREATE TABLE IF NOT EXISTS mqindex_schema (component TEXT PRIMARY KEY, version INTEGER NOT NULL, "
               "written_by TEXT NOT NULL)")
        self.q("DELETE FROM mqindex_schema WHERE component = ?", (component,))
        self.q("INSERT INTO mqindex_schema (component, version, written_by) VALUES (?, ?, ?)",
               (component, version, written_by))

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Family:
    component: str
    tables: tuple[str, ...]
    open: Callable[[str], Any]  # opens the family's tables (runs its start-up DDL)
    write: Callable[[Any], None]  # stores something through the opened object


def _log_write(log: Any) -> None:
    with log.locked() as t:
        t.append(1, [{"type": "noop", "n": 1}, {"type": "noop", "n": 2}])
        t.write_snapshot(1, "c", b"image", 5)


FAMILIES = [
    Family("metadata_log", ("meta_log", "meta_snapshot"), open_log, _log_write),
    Family("node_leases", ("node_leases",), LeaseTable,
           lambda t: t.register(7, 3, "127.0.0.1:1", None, 60_000, {"version": "x", "reads": []})),
    Family("acl", ("acl_rules", "acl_version"), AclTable,
           lambda t: t.add([AclRule.make("User:alice", "topic", "orders", "read")])),
    Family("object_store", ("mqindex_blobs", "mqindex_blob_chunks", "mqindex_upload_chunks"), open_store,
           lambda s: s.put("k/1", b"value")),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/meta.sqlite"
    return str(request.getfixturevalue("pg_url")())


@pytest.fixture
def raw(db_url: str) -> Iterator[Raw]:
    r = Raw(db_url)
    yield r
    r.close()


def _opened_and_written(family: Family, url: str) -> None:
    obj = family.open(url)
    try:
        family.write(obj)
    finally:
        obj.close()


def _contents(raw: Raw, family: Family) -> dict[str, list[tuple[Any, ...]]]:
    return {t: sorted(raw.q(f"SELECT * FROM {t}"), key=repr) for t in family.tables} | {
        t + " columns": [(c,) for c in raw.columns(t)] for t in family.tables}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.component)
def test_tables_without_a_recorded_version_open_as_version_1_and_record_it(family: Family, db_url: str,
                                                                           raw: Raw) -> None:
    _opened_and_written(family, db_url)
    raw.q("DROP TABLE IF EXISTS mqindex_schema")  # as tables made by 0.3.0 (or before versions were recorded)
    before = _contents(raw, family)
    obj = family.open(db_url)  # absent is version 1: opens
    obj.close()
    assert _contents(raw, family) == before
    rows = raw.q("SELECT component, version, written_by FROM mqindex_schema")
    assert [(c, v) for c, v, _ in rows] == [(family.component, 1)], rows
    assert rows[0][2].startswith("mqindex "), rows
    obj = family.open(db_url)  # and opens again at the recorded version, which stays as it is
    obj.close()
    assert raw.q("SELECT component, version, written_by FROM mqindex_schema") == rows


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.component)
def test_tables_of_a_newer_schema_version_are_refused_untouched(family: Family, db_url: str, raw: Raw) -> None:
    _opened_and_written(family, db_url)
    raw.set_version(family.component, 2, "mqindex 9.1.0")
    before = _contents(raw, family)
    tables = ", ".join(family.tables)
    with pytest.raises(NewerSchema) as err:
        family.open(db_url)
    assert str(err.value) == (
        f"{db_url}: the {family.component} tables ({tables}) are at schema version 2 (recorded in mqindex_schema "
        f"by mqindex 9.1.0), newer than this version of mqindex reads (1); this node does not start on them: "
        f"upgrade it to the version the other nodes run")
    assert (err.value.stored, err.value.reads) == (2, 1)
    assert _contents(raw, family) == before
    assert raw.q("SELECT component, version, written_by FROM mqindex_schema") == [
        (family.component, 2, "mqindex 9.1.0")]


def test_a_newer_lease_table_is_not_altered(db_url: str, raw: Raw) -> None:
    """A lease table as 0.3.0 made it (no `software` column) recorded at a newer version: the column this build
    adds at start is not added."""
    raw.q("CREATE TABLE node_leases (node_id BIGINT PRIMARY KEY, epoch BIGINT NOT NULL, http TEXT, kafka TEXT, "
          "expires_ms BIGINT NOT NULL, state TEXT NOT NULL)")
    raw.q("INSERT INTO node_leases VALUES (1, 4, '127.0.0.1:1', NULL, 5, 'alive')")
    raw.set_version("node_leases", 3, "mqindex 9.2.0")
    with pytest.raises(NewerSchema, match=r"the node_leases tables \(node_leases\) are at schema version 3"):
        LeaseTable(db_url)
    assert raw.columns("node_leases") == ["node_id", "epoch", "http", "kafka", "expires_ms", "state"]
    assert raw.q("SELECT * FROM node_leases") == [(1, 4, "127.0.0.1:1", None, 5, "alive")]
    raw.set_version("node_leases", 1, "mqindex 0.4.0")  # at this build's version it opens and adds its column
    LeaseTable(db_url).close()
    assert "software" in raw.columns("node_leases")


def test_families_keep_their_own_versions_in_one_database(db_url: str, raw: Raw) -> None:
    """Every family opened on one database records its own row; one of them newer refuses that family only."""
    for f in FAMILIES:
        _opened_and_written(f, db_url)
    assert sorted(raw.q("SELECT component, version FROM mqindex_schema")) == sorted(
        (f.component, 1) for f in FAMILIES)
    raw.set_version("acl", 2, "mqindex 9.1.0")
    for f in FAMILIES:
        if f.component == "acl":
            with pytest.raises(NewerSchema, match="the acl tables"):
                f.open(db_url)
        else:
            f.open(db_url).close()


def test_serve_stops_at_start_on_a_newer_metadata_schema(db_url: str, raw: Raw, tmp_path: Path) -> None:
    client = MetadataClient(db_url, 0)  # metadata a node of this build wrote
    client.register_node()
    client.close()
    raw.set_version("metadata_log", 2, "mqindex 9.1.0")
    before = _contents(raw, FAMILIES[0])
    r = subprocess.run([MQINDEX, "serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()),
                        "--metadata", db_url], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    errors = [ln for ln in out.splitlines() if "error" in ln.lower()]
    assert len(errors) == 1 and errors[0].startswith("mqindex serve: error: "), out
    assert ("the metadata_log tables (meta_log, meta_snapshot) are at schema version 2 (recorded in mqindex_schema "
            "by mqindex 9.1.0), newer than this version of mqindex reads (1)") in errors[0], out
    assert "serving" not in out and "Traceback" not in out, out
    assert _contents(raw, FAMILIES[0]) == before
