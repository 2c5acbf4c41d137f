"""What every handler gets: the node, this listener's advertised address, the group coordinator, and a way to
run the broker's blocking calls off the event loop."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"Kafka address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


@dataclass
class Context:
    node: Any  # broker.node.BrokerNode
    host: str
    port: int
    coordinator: Any = None  # api.kafka.group_coordinator.GroupCoordinator
    auto_create_topics: bool = True  # node setting auto_create_topics (api/node_settings.py)
    default_partitions: int = 1  # node setting default_partitions

    @property
    def node_id(self) -> int:
        return int(self.node.node_id)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.to_thread(fn, *args)

    def brokers(self) -> dict[int, tuple[str, int]]:
        """Every live node with a Kafka listener (this one always): node id -> (host, port)."""
        out = {self.node_id: (self.host, self.port)}
        for n in self.node.cluster.membership.alive().values():
            if n.kafka and n.node_id != self.node_id:
                try:
                    out[n.node_id] = split_address(n.kafka)
                except ValueError:
                    continue
        return out

    def coordinator_for(self, group: str) -> int:
        """The node coordinating `group`: the same answer on every node that sees the same live nodes."""
        ids = sorted(self.brokers())
        return ids[zlib.crc32(group.encode("utf-8")) % len(ids)]

    async def not_coordinator(self, group: str) -> bool:
        """Whether another node coordinates `group`: every group API (JoinGroup, SyncGroup, Heartbeat,
        LeaveGroup, OffsetCommit, OffsetFetch) then answers NOT_COORDINATOR, so the client looks the
        coordinator up again (FindCoordinator) instead of two nodes each running a group of that name. The
        live nodes are read off the event loop (the membership view may be refreshed from the metadata)."""
        return await self.run(self.coordinated_elsewhere, group)

    def coordinated_elsewhere(self, key: str) -> bool:
        """not_coordinator's test, on the caller's thread (a worker thread already: the transaction APIs)."""
        return self.coordinator_for(key) != self.node_id
