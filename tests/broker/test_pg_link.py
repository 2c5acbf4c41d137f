"""The metadata log, lease table and ACL table on PostgreSQL replace a lost connection by themselves
(broker/metadata/pg_link.py), on a real PostgreSQL database of the test's own whose connections the test ends
(`pg_terminate_backend`) or refuses (`ALLOW_CONNECTIONS false`):
- a read after the connection was ended is served on a new connection (tried once more);
- a transaction whose connection is ended under it raises MetadataUnavailable, appends nothing, and the next one
  is served;
- while the database refuses, calls raise MetadataUnavailable naming the metadata database and `unavailable()`
  says why; once it accepts, they are served again;
- a lease renewal (idempotent) after the connection ended is served; the lease row is unchanged otherwise."""

from __future__ import annotations

import pytest

from broker.errors import MetadataUnavailable
from broker.metadata.acls import AclRule, AclTable
from broker.metadata.leases import LeaseTable
from broker.metadata.log_store import PostgresLog, open_log
from tests.api.server import wait_for
from tests.api.test_metadata_reconnect import OwnDatabase, own_db  # noqa: F401 - the fixture


def _log(db: OwnDatabase) -> PostgresLog:
    log = open_log(f"{db.dsn}?schema=m")
    assert isinstance(log, PostgresLog)
    return log


def test_a_read_after_the_connection_ended_is_served_on_a_new_one(own_db: OwnDatabase) -> None:  # noqa: F811
    log = _log(own_db)
    try:
        with log.locked() as txn:
            txn.append(0, [{"type": "kv_put", "key": "a", "value": "1"}])
        assert own_db.terminate() >= 1
        assert [o for o, _ in log.read_since(-1)] == [0]
        assert log.unavailable() is None
    finally:
        log.close()


def test_a_transaction_whose_connection_ends_under_it_appends_nothing(own_db: OwnDatabase) -> None:  # noqa: F811
    log = _log(own_db)
    try:
        with log.locked() as txn:
            txn.append(0, [{"type": "kv_put", "key": "a", "value": "1"}])
        with pytest.raises(MetadataUnavailable) as lost, log.locked() as txn:
            assert own_db.terminate() >= 1  # ended while the transaction holds the log's lock
            txn.append(1, [{"type": "kv_put", "key": "b", "value": "2"}])
        assert "the metadata database (--metadata) does not answer" in str(lost.value)
        assert [o for o, _ in log.read_since(-1)] == [0]  # nothing of it applied
        with log.locked() as txn:  # the next transaction is served, on a new connection
            txn.append(1, [{"type": "kv_put", "key": "c", "value": "3"}])
        assert [r["key"] for _, r in log.read_since(-1)] == ["a", "c"]
    finally:
        log.close()


def test_while_the_database_refuses_calls_say_so_and_are_served_once_it_accepts(
        own_db: OwnDatabase) -> None:  # noqa: F811
    url = f"{own_db.dsn}?schema=m"
    log, leases, acls = _log(own_db), LeaseTable(url), AclTable(url)
    try:
        leases.register(0, 0, None, None, 10_000)
        own_db.refuse()
        for call in (lambda: log.read_since(-1), lambda: leases.nodes(), lambda: acls.rules()):
            with pytest.raises(MetadataUnavailable) as refused:
                call()
            assert str(refused.value).startswith("the metadata database (--metadata) does not answer"), refused.value
        with pytest.raises(MetadataUnavailable), log.locked():
            pass
        assert "does not answer" in (log.unavailable() or "")
        assert "does not answer" in (leases.unavailable() or "")
        own_db.accept()
        wait_for("the log answers again", lambda: log.unavailable() is None, timeout=30)
        wait_for("the lease table answers again", lambda: leases.unavailable() is None, timeout=30)
        assert log.read_since(-1) == []
        assert leases.heartbeat(0, 0, 10_000)  # the renewal of the same incarnation is served
        assert [n.node_id for n in leases.nodes()] == [0]
        rule = AclRule.make("User:alice", "TOPIC", "orders", "READ", "ALLOW")
        wait_for("the ACL table answers again", lambda: _added(acls, rule), timeout=30)
        assert acls.rules()[1] == [rule]
    finally:
        for t in (log, leases, acls):
            t.close()


def _added(acls: AclTable, rule: AclRule) -> bool:
    try:
        acls.add([rule])
    except MetadataUnavailable:
        return False
    return True


def test_a_renewal_after_the_connection_ended_is_served(own_db: OwnDatabase) -> None:  # noqa: F811
    leases = LeaseTable(f"{own_db.dsn}?schema=m")
    try:
        leases.register(0, 3, "http://a", None, 10_000)
        assert own_db.terminate() >= 1
        assert leases.heartbeat(0, 3, 10_000)
        assert not leases.heartbeat(0, 2, 10_000)  # a stale incarnation is still refused
        (row,) = leases.nodes()
        assert (row.node_id, row.epoch, row.http) == (0, 3, "http://a")
    finally:
        leases.close()
