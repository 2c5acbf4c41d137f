"""Partition leaders in the controller metadata KV, and the plans that change them.

Key `leaders/<topic_id>/<partition>` -> JSON {"node": leader node id, "epoch": leader epoch}. The leader
epoch rises by one at every change; it orders assignments (the streams' own epochs do the fencing). A
partition with no key is unassigned: a node may claim it when its streams are free, and then records
itself as its leader (topics created before the cluster existed, and single-node use).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from broker.metadata import MetadataClient

PREFIX = "leaders/"


@dataclass(frozen=True)
class Leader:
    node: int
    epoch: int


def leader_key(topic_id: int, partition: int) -> str:
    return f"{PREFIX}{topic_id}/{partition}"


def leaders(meta: MetadataClient, refresh: bool = False) -> dict[tuple[int, int], Leader]:
    out = {}
    for k, v in meta.kv_items(PREFIX, refresh=refresh).items():
        _, tid, p = k.split("/")
        body = json.loads(v)
        out[(int(tid), int(p))] = Leader(int(body["node"]), int(body["epoch"]))
    return out


def next_leaders(meta: MetadataClient, changes: dict[tuple[int, int], int]) -> dict[tuple[int, int], Leader]:
    """`node` as the leader of each (topic id, partition), at its leader epoch raised (0 for a new partition)."""
    current = leaders(meta, refresh=True)
    out = {}
    for (tid, p), node in changes.items():
        old = current.get((tid, p))
        out[(tid, p)] = Leader(node, 0 if old is None else old.epoch + 1)
    return out


def leader_items(leads: dict[tuple[int, int], Leader]) -> dict[str, str]:
    """The metadata KV items that record these leaders (what `leaders` reads back)."""
    return {leader_key(tid, p): json.dumps({"node": lead.node, "epoch": lead.epoch})
            for (tid, p), lead in leads.items()}


def set_leaders(meta: MetadataClient, changes: dict[tuple[int, int], int]) -> dict[tuple[int, int], Leader]:
    """Make `node` the leader of each (topic id, partition), raising its leader epoch; one transaction."""
    out = next_leaders(meta, changes)
    meta.kv_put_many(leader_items(out))
    return out


def spread(partitions: int, nodes: Iterable[int], load: dict[int, int] | None = None) -> list[int]:
    """A leader for each of `partitions` new partitions: the least loaded live node each time."""
    load = dict.fromkeys(sorted(nodes), 0) | {n: c for n, c in (load or {}).items() if n in set(nodes)}
    if not load:
        raise ValueError("no live node to lead the partitions")
    out = []
    for _ in range(partitions):
        node = min(load, key=lambda n: (load[n], n))
        out.append(node)
        load[node] += 1
    return out


@dataclass(frozen=True)
class Move:
    topic_id: int
    partition: int
    source: int | None
    target: int


def plan_rebalance(current: dict[tuple[int, int], int | None], alive: Iterable[int]) -> list[Move]:
    """Moves that give every live node an equal share (within one) of the partitions; partitions led by
    no live node are placed first. Deterministic for a given input."""
    nodes = sorted(set(alive))
    if not nodes:
        return []
    load = {n: [] for n in nodes}  # type: dict[int, list[tuple[int, int]]]
    orphans = []
    for tp, node in sorted(current.items()):
        if node in load:
            load[node].append(tp)
        else:
            orphans.append(tp)
    total = len(current)
    base, extra = divmod(total, len(nodes))
    # the first `extra` nodes by current load (desc) may keep base + 1
    order = sorted(nodes, key=lambda n: (-len(load[n]), n))
    cap = {n: base + (1 if i < extra else 0) for i, n in enumerate(order)}
    moves: list[Move] = []
    surplus: list[tuple[tuple[int, int], int | None]] = [(tp, current[tp]) for tp in orphans]
    for n in order:
        while len(load[n]) > cap[n]:
            surplus.append((load[n].pop(), n))
    for tp, src in surplus:
        target = min(nodes, key=lambda n: (len(load[n]) - cap[n], len(load[n]), n))
        load[target].append(tp)
        moves.append(Move(tp[0], tp[1], src, target))
    return moves
