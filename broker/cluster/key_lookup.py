"""Key lookups as a node answers them: wait until what was acknowledged here is indexed, then page the
cluster-wide index (ClusterIndex) and read each candidate where it lives (partitions/key_lookup.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from broker.cluster.cluster import Cluster
from broker.partitions import reads
from broker.partitions.client_messages import OutMessage
from broker.partitions.dispatcher import Dispatcher
from broker.partitions.key_lookup import Unreadable, check_key_query, find_by_key, key_hits_page
from broker.partitions.partition_map import PartitionMap
from broker.partitions.records import has_index_key
from index_service import IndexOutOfSpace

log = logging.getLogger("mqindex.broker.lookup")


class NodeLookups:
    def __init__(self, parts: PartitionMap, cluster: Cluster, dispatcher: Dispatcher, index: Any,
                 read_your_writes_s: float) -> None:
        self.parts = parts
        self.cluster = cluster
        self.dispatcher = dispatcher
        self.index = index
        self.read_your_writes_s = read_your_writes_s

    def _indexed(self, topic: str) -> None:
        try:
            self.dispatcher.wait_idle(self.read_your_writes_s)  # what was acknowledged before is findable
        except (TimeoutError, IndexOutOfSpace):
            log.warning("index lags: lookup answers from what is indexed", extra={"topic": topic})

    def _cluster_query(self, topic: str, key: str, begin_ms: int, end_ms: int | None
                       ) -> tuple[Any, Callable[[int, int | None], list[Any]] | None]:
        """The topic and the cluster-wide index query of a lookup (None: no entry can be the topic's)."""
        info = self.parts.topic(topic)
        check_key_query(key, begin_ms, end_ms)
        self._indexed(topic)
        if self.parts.registry.deleted_before(info.name):
            # the index may still hold entries of the deleted topic of this name (same name, same partitions
            # and offsets): only entries stored since this topic was created are its own
            begin_ms = max(begin_ms, info.created_ms)
            if end_ms is not None and end_ms < begin_ms:
                return info, None

        def query(ask: int, end: int | None) -> list[Any]:
            return self.cluster.query(info.name, key, ask, begin_ms, end)

        return info, query

    def find_by_key(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                    cursor: str | None) -> tuple[list[OutMessage], str | None]:
        info, query = self._cluster_query(topic, key, begin_ms, end_ms)
        if query is None:
            return [], None
        return find_by_key(query, lambda part, off: reads.message_at(self.parts, info, part, off),
                           lambda m: has_index_key(m, key), end_ms, max_count, cursor)  # type: ignore[arg-type]

    def key_hits(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                 cursor: str | None) -> tuple[list[tuple[int, int]], str | None, list[Unreadable]]:
        """The cluster-wide index's candidates for `key`, (partition, offset), unchecked: no record is read
        (partitions/key_lookup.key_hits_page)."""
        _info, query = self._cluster_query(topic, key, begin_ms, end_ms)
        if query is None:
            return [], None, []
        return key_hits_page(query, end_ms, max_count, cursor)

    def local_index_query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int | None
                          ) -> list[Any]:
        """This node's own index only (what the other nodes ask for a cluster-wide lookup)."""
        self._indexed(topic)
        return self.index.query(topic, key, max_count, begin_ms, end_ms)
