"""Nodes stopping cleanly, announced in the metadata as the stop begins:

    leaving/<node id>   the epoch of the incarnation that is stopping

A node stopping cleanly hands its partitions to the other live nodes and waits (bounded) until they have
committed what they read from its shared WAL (Cluster.drain). Nodes stopped together (`kill $NODE0 $NODE1`) would
hand their partitions to each other and each wait for the other to commit, which a stopping node never does:
both waited out the whole bound. With the announcement, a stopping node hands nothing to a node that is stopping
too, and stops waiting once the nodes it handed partitions to have stopped or are stopping. Partitions left
led by a stopped node are served again when it starts (from its WAL, as after any stop) or failed over.

The key is the incarnation's: a node started again registers a newer epoch, so an old announcement means
nothing and is overwritten by the next stop.
"""

from __future__ import annotations

from broker.metadata import MetadataClient
from broker.metadata.leases import NodeLease

PREFIX = "leaving/"


def announce(meta: MetadataClient, node_id: int, epoch: int) -> None:
    meta.kv_put(f"{PREFIX}{node_id}", str(epoch))


def staying(meta: MetadataClient, alive: dict[int, NodeLease]) -> set[int]:
    """The live nodes whose incarnation has not announced that it is stopping."""
    flags = meta.kv_items(PREFIX)
    return {n for n, lease in alive.items() if flags.get(f"{PREFIX}{n}") != str(lease.epoch)}
