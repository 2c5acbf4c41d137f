"""A metadata database that went back (a failover to a PostgreSQL standby that had not received the last
commits, a restore from a backup): a node that applied the lost records stops reading and writing the metadata
with an error naming the offset, rather than skip the records appended since at the reused offsets or build
on a log that contradicts what it served. The truncation behind a snapshot is not mistaken for it."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from broker.errors import MetadataDiverged, MetadataUnavailable
from broker.metadata import MetadataClient


def _schema(url: str) -> str:
    return url.rsplit("schema=", 1)[1]


def _lose_tail(pg_dsn: str, schema: str, after: int) -> None:
    """What a standby that had not received the commits after `after` holds once promoted."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DELETE FROM "{schema}".meta_log WHERE log_offset > %s', (after,))


def _rows(pg_dsn: str, schema: str) -> list[tuple[int, str]]:
    with psycopg.connect(pg_dsn) as conn:
        return [(int(o), str(r)) for o, r in
                conn.execute(f'SELECT log_offset, record FROM "{schema}".meta_log ORDER BY log_offset').fetchall()]


def test_a_log_that_ends_before_what_a_node_applied_stops_it(pg_dsn: str, pg_url: Callable[[], str]) -> None:
    url = pg_url()
    a, b = MetadataClient(url, node_id=1), MetadataClient(url, node_id=2)
    try:
        a.kv_put("orders/1", "paid")
        kept = a.image.offset
        a.kv_put("orders/2", "paid")
        a.kv_put("orders/3", "paid")
        assert b.catch_up() == a.image.offset
        _lose_tail(pg_dsn, _schema(url), kept)
        before = _rows(pg_dsn, _schema(url))
        for client in (a, b):
            with pytest.raises(MetadataDiverged, match=f"ends at offset {kept}, before offset {kept + 2}"):
                client.catch_up()
        # stopped for good: a write is refused, nothing is appended, and it is answered as a database away
        with pytest.raises(MetadataDiverged, match="went back") as exc:
            a.kv_put("orders/4", "paid")
        assert isinstance(exc.value, MetadataUnavailable)
        with pytest.raises(MetadataDiverged):
            b.catch_up()
        assert _rows(pg_dsn, _schema(url)) == before
        assert b.image.kv["orders/3"] == "paid"  # what it served stays as it was: nothing reloaded
    finally:
        a.close()
        b.close()


def test_records_appended_at_the_reused_offsets_are_not_skipped(pg_dsn: str, pg_url: Callable[[], str]) -> None:
    """After the database went back, a node started on it appends at the offsets the lost records had: a node
    that applied the lost ones finds another record at its last offset, instead of reading on past them."""
    url = pg_url()
    a = MetadataClient(url, node_id=1)
    try:
        a.kv_put("orders/1", "paid")
        kept = a.image.offset
        a.kv_put("orders/2", "paid")
        _lose_tail(pg_dsn, _schema(url), kept)
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
