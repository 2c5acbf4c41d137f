"""Committed group offsets in the metadata KV, on SQLite and on the real PostgreSQL: a group's offsets are its
own, also when another group's id continues it with a "/" (group `a` and group `a/b` share the key prefix
`group_offsets/a/`)."""

from __future__ import annotations

from collections.abc import Callable

from broker.metadata import MetadataClient
from broker.partitions.kafka_clients import group_offsets


def test_fetch_returns_only_the_groups_own_offsets(meta_url_factory: Callable[[], str]) -> None:
    meta = MetadataClient(meta_url_factory(), 0)
    try:
        group_offsets.commit(meta, "a", {("orders", 0): (5, "mine"), ("orders", 1): (6, None)})
        group_offsets.commit(meta, "a/b", {("orders", 0): (50, "b's"), ("payments", 3): (7, None)})
        group_offsets.commit(meta, "a/b/c", {("orders", 2): (70, None)})
        group_offsets.commit(meta, "ab", {("orders", 0): (9, None)})
        assert group_offsets.fetch(meta, "a") == {("orders", 0): (5, "mine"), ("orders", 1): (6, "")}
        assert group_offsets.fetch(meta, "a/b") == {("orders", 0): (50, "b's"), ("payments", 3): (7, "")}
        assert group_offsets.fetch(meta, "a/b/c") == {("orders", 2): (70, "")}
        assert group_offsets.fetch(meta, "a/") == {}
    finally:
        meta.close()
