"""What the HTTP layer needs from the node it fronts (broker + index in one process).

The routes depend on this protocol only; `broker.node.BrokerNode` implements it. Errors raised through
it map to HTTP statuses in api/http/errors.py.
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.partitions.client_messages import InMessage, OutMessage, Produced
from broker.partitions.reads import Rendered, Renderer

__all__ = ["Backend", "InMessage", "OutMessage", "Produced"]


class Backend(Protocol):
    def create_topic(self, name: str, partitions: int, configs: dict[str, int] | None = None) -> dict[str, Any]: ...

    def delete_topic(self, name: str) -> dict[str, Any]:
        """Delete the topic, its data and index entries (TopicNotFound when unknown); the deleted topic."""
        ...

    def describe_topic(self, name: str) -> dict[str, Any]:
        """The topic with its configs: {"retention.ms": {"value", "source"}, ...}."""
        ...

    def alter_topic_configs(self, name: str, change: dict[str, int | None]) -> dict[str, Any]: ...

    def add_partitions(self, name: str, count: int) -> dict[str, Any]:
        """Grow the topic to `count` partitions (InvalidField unless more than now); the topic as described after."""
        ...

    def effective_config(self) -> dict[str, Any]: ...

    def list_topics(self) -> list[dict[str, Any]]: ...

    def produce(self, topic: str, messages: list[InMessage]) -> list[Produced]:
        """Returns once every message is in the WAL on disk."""
        ...

    def fetch(self, topic: str, partition: int, offset: int, max_count: int) -> tuple[list[OutMessage], int]: ...

    def fetch_rendered(self, topic: str, partition: int, offset: int, max_count: int, renderer: Renderer
                       ) -> tuple[list[Rendered], int]:
        """`fetch` with each stored batch's messages rendered by `renderer` (whole-record HTTP pages)."""
        ...

    def find_by_key(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                    cursor: str | None) -> tuple[list[OutMessage], str | None]:
        """Newest first; the cursor continues after the last message of the previous page."""
        ...

    def key_hits(self, topic: str, key: str, begin_ms: int, end_ms: int | None, max_count: int,
                 cursor: str | None) -> tuple[list[tuple[int, int]], str | None, list[Any]]:
        """(partition, offset) of the cluster-wide index's candidates for `key`, in find_by_key's order and with
        its cursor, not checked against their records; and the damaged index files skipped (Unreadable)."""
        ...

    def get_by_id(self, msg_id: str) -> OutMessage | None: ...

    def index_files(self) -> list[dict[str, Any]]: ...

    def local_index_query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int | None
                          ) -> list[Any]:
        """This node's own index (IndexHit tuples): what another node asks for a cluster-wide lookup."""
        ...

    def cluster_nodes(self) -> list[dict[str, Any]]: ...

    def failovers(self) -> list[dict[str, Any]]: ...

    def reassign(self, topic: str, partition: int, target: int) -> dict[str, Any]: ...

    def rebalance(self, execute: bool, by: str = "load") -> dict[str, Any]: ...

    def moves(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...
