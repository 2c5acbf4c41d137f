"""A metadata database that went back (a failover to a PostgreSQL standby that had not received the last
commits, a restore from a backup): a node that applied the lost records stops reading and writing the metadata
with an error naming the offset, rather than skip the records appended since at the reused offsets or build
on a log that contradicts what it served. The truncation behind a snapshot is not mistaken for it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from broker.errors import MetadataDiverged, MetadataError, MetadataUnavailable
from broker.metadata import MetadataClient


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


class Db:
    """A metadata database of the test's own (PostgreSQL schema or SQLite file) and direct access to its log."""

    def __init__(self, kind: str, pg_dsn: str, pg_url: Callable[[], str], tmp_path: Path) -> None:
        self.kind, self.pg_dsn = kind, pg_dsn
        self.url = pg_url() if kind == "postgresql" else f"sqlite:///{tmp_path / 'meta.db'}"
        self.path = tmp_path / "meta.db"

    def sql(self, statement: str, *args: object) -> list[tuple[object, ...]]:
        if self.kind == "postgresql":
            with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{_schema(self.url)}"')
                cur = conn.execute(statement.replace("?", "%s"), args)
                return list(cur.fetchall()) if cur.description is not None else []
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            return list(conn.execute(statement, args).fetchall())
        finally:
            conn.close()

    def lose_tail(self, after: int) -> None:
        """What a standby that had not received the commits after `after` holds once promoted."""
        self.sql("DELETE FROM meta_log WHERE log_offset > ?", after)

    def rows(self) -> list[tuple[object, ...]]:
        return self.sql("SELECT log_offset, record FROM meta_log ORDER BY log_offset")


@pytest.fixture(params=["postgresql", "sqlite"])
def db(request: pytest.FixtureRequest, pg_dsn: str, pg_url: Callable[[], str], tmp_path: Path) -> Db:
    return Db(request.param, pg_dsn, pg_url, tmp_path)


def test_a_log_that_ends_before_what_a_node_applied_stops_it(db: Db) -> None:
    a, b = MetadataClient(db.url, node_id=1), MetadataClient(db.url, node_id=2)
    try:
        a.kv_put("orders/1", "paid")
        kept = a.image.offset
        a.kv_put("orders/2", "paid")
        a.kv_put("orders/3", "paid")
        assert b.catch_up() == a.image.offset
        db.lose_tail(kept)
        before = db.rows()
        # a write finds it before it appends, a reader at its next catch-up
        with pytest.raises(MetadataDiverged, match=f"ends at offset {kept}, before offset {kept + 2}") as exc:
            a.kv_put("orders/4", "paid")
        assert isinstance(exc.value, MetadataUnavailable)  # answered as a database away (503, retriable codes)
        with pytest.raises(MetadataDiverged, match=f"ends at offset {kept}, before offset {kept + 2}"):
            b.catch_up()
        # stopped for good: every later call is refused, and nothing is appended
        for call in (a.catch_up, b.catch_up, lambda: b.kv_put("orders/5", "paid"),
                     lambda: b.maybe_snapshot(force=True)):
            with pytest.raises(MetadataDiverged, match="went back"):
                call()
        assert db.rows() == before
        assert b.image.kv["orders/3"] == "paid"  # what it served stays as it was: nothing reloaded
    finally:
        a.close()
        b.close()


def test_a_snapshot_is_not_written_over_a_log_that_went_back(db: Db) -> None:
    """A snapshot (and the truncation behind it) is made only of a log that still holds the image's last record:
    otherwise a node started later would load the lost records from it."""
    a = MetadataClient(db.url, node_id=1, snapshots_kept=1)
    try:
        a.kv_put("k/1", "1")
        kept = a.image.offset
        a.kv_put("k/2", "2")
        a.kv_put("k/3", "3")
        db.lose_tail(kept)
        before = db.rows()
        with pytest.raises(MetadataDiverged, match="went back"):
            a.maybe_snapshot(force=True)
        assert db.rows() == before and db.sql("SELECT count(*) FROM meta_snapshot") == [(0,)]
    finally:
        a.close()


def test_a_client_that_loaded_the_log_finds_its_last_record_rewritten(db: Db) -> None:
    """A client opened on the log (loaded, not applied record by record) knows the record at its offset too."""
    a = MetadataClient(db.url, node_id=1)
    try:
        a.kv_put("orders/1", "paid")
        kept = a.image.offset
        a.kv_put("orders/2", "paid")
        with MetadataClient(db.url, node_id=2) as b:
            assert b.image.offset == kept + 1
            db.lose_tail(kept)
            a.close()
            a = MetadataClient(db.url, node_id=3)  # started on the log as it is now
            a.kv_put("orders/2", "refunded")
            with pytest.raises(MetadataDiverged, match=f"holds another record at offset {kept + 1}"):
                b.catch_up()
    finally:
        a.close()


def test_a_record_that_cannot_be_applied_is_never_skipped(db: Db) -> None:
    """A record this build cannot apply (a newer version) fails every catch-up and every write, naming it; it is
    neither skipped nor taken for a database that went back, and no write lands on an offset taken."""
    a = MetadataClient(db.url, node_id=1)
    try:
        a.kv_put("orders/1", "paid")
        at = a.image.offset
        db.sql("INSERT INTO meta_log (log_offset, record) VALUES (?, ?)", at + 1,
               json.dumps({"type": "kv_put", "key": "orders/2", "value": "paid", "v": 99}))
        before = db.rows()
        for _ in range(2):
            with pytest.raises(MetadataError, match="version") as exc:
                a.catch_up()
            assert not isinstance(exc.value, MetadataDiverged)
        with pytest.raises(MetadataError, match="version"):
            a.kv_put("orders/3", "paid")
        assert db.rows() == before and a.diverged is None and a.image.offset == at
    finally:
        a.close()


def test_records_appended_at_the_reused_offsets_are_not_skipped(db: Db) -> None:
    """After the database went back, a node started on it appends at the offsets the lost records had: a node
    that applied the lost ones finds another record at its last offset, instead of reading on past them."""
    url = db.url
    a = MetadataClient(url, node_id=1)
    try:
        a.kv_put("orders/1", "paid")
        kept = a.image.offset
        a.kv_put("orders/2", "paid")
        db.lose_tail(kept)
        with MetadataClient(url, node_id=3) as c:  # started after the failover: the log as it is
            assert c.image.offset == kept and "orders/2" not in c.image.kv
            c.kv_put("orders/2", "refunded")
            c.kv_put("orders/9", "new")
            assert c.image.offset == kept + 2
        with pytest.raises(MetadataDiverged, match=f"holds another record at offset {kept + 1}"):
            a.catch_up()
        assert a.image.kv["orders/2"] == "paid" and "orders/9" not in a.image.kv
        with MetadataClient(url, node_id=1) as restarted:  # a restart loads the log as it is now
            assert restarted.image.kv["orders/2"] == "refunded" and restarted.image.kv["orders/9"] == "new"
    finally:
        a.close()


def test_the_same_records_read_again_and_truncation_behind_a_snapshot_go_on(pg_url: Callable[[], str]) -> None:
    """The check reads the last applied record again at every catch-up: it matches, and a log truncated behind
    a snapshot (that record deleted, the ones after it kept) is read on, or reloaded from the snapshot."""
    url = pg_url()
    a = MetadataClient(url, node_id=1, snapshots_kept=1)
    b = MetadataClient(url, node_id=2, snapshots_kept=1)
    lagger = MetadataClient(url, node_id=3, snapshots_kept=1)
    try:
        for i in range(5):
            a.kv_put(f"k/{i}", str(i))
            assert b.catch_up() == a.image.offset
        lagger.catch_up()
        for i in range(5, 10):
            a.kv_put(f"k/{i}", str(i))
        b.catch_up()
        a.kv_put("k/10", "10")  # b's last applied record is now one below the cut
        assert a.maybe_snapshot(force=True) is not None  # truncates the log behind the snapshot at a's offset
        a.kv_put("k/11", "11")
        assert b.catch_up() == a.image.offset == lagger.catch_up()
        assert b.image.kv == a.image.kv == lagger.image.kv
        assert b.diverged is None and lagger.diverged is None and lagger.reloads == 1
    finally:
        a.close()
        b.close()
        lagger.close()
