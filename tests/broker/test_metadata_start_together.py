"""Brokers opening the metadata on a fresh PostgreSQL schema at the same moment: every one of them opens it.

`CREATE SCHEMA/TABLE IF NOT EXISTS` alone is not safe against a concurrent session (the loser of the race gets a
unique violation on the system catalogs); every start-up DDL is serialized, so all of them succeed."""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker.metadata import MetadataClient
from broker.metadata.leases import LeaseTable
from storage_tier import open_store
from storage_tier.blob_store import BlobStore

THREADS = 6
ROUNDS = 5


def _all_at_once(open_one: Callable[[int], object]) -> list[BaseException]:
    """Run `open_one(i)` in THREADS threads released together; returns the errors raised."""
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            open_one(i)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "an opening thread hung"
    return errors


def test_metadata_and_leases_opened_at_once_on_a_fresh_schema(pg_url: Callable[[], str]) -> None:
    for _ in range(ROUNDS):
        url = pg_url()
        opened: list[MetadataClient | LeaseTable] = []

        def open_one(i: int, url: str = url, opened: list[MetadataClient | LeaseTable] = opened) -> None:
            # half the threads open the metadata log first, half the lease table first, as nodes starting do
            made: list[MetadataClient | LeaseTable] = []
            if i % 2:
                made.append(LeaseTable(url))
                made.append(MetadataClient(url, i))
            else:
                made.append(MetadataClient(url, i))
                made.append(LeaseTable(url))
            opened.extend(made)  # list.extend is atomic

        try:
            errors = _all_at_once(open_one)
            assert errors == [], f"opening the metadata at once failed: {errors!r}"
            # and every one of them works on the same tables
            clients = [c for c in opened if isinstance(c, MetadataClient)]
            leases = [c for c in opened if isinstance(c, LeaseTable)]
            for i, c in enumerate(clients):
                c.register_node()
                leases[i].register(i, c.node_epoch or 0, None, None, 60_000)
            assert sorted(leases[0].alive()) == list(range(THREADS))
        finally:
            for c in opened:
                c.close()


def test_postgresql_blob_store_opened_at_once_on_a_fresh_schema(pg_url: Callable[[], str]) -> None:
    for _ in range(ROUNDS):
        url = pg_url()
        stores: list[BlobStore] = []

        def open_one(i: int, url: str = url, stores: list[BlobStore] = stores) -> None:
            s = open_store(url)
            stores.append(s)
            s.put(f"k{i}", b"v")

        try:
            errors = _all_at_once(open_one)
            assert errors == [], f"opening the blob store at once failed: {errors!r}"
            first = stores[0]
            assert sorted(first.list("")) == [f"k{i}" for i in range(THREADS)]
        finally:
            for s in stores:
                s.close()
