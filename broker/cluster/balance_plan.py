"""The plan of moves that evens out the nodes' load (the balancer's and `mqindex rebalance`'s by-load plan).

Each partition weighs its measured load (cluster/load_report.py: bytes in/out and requests per second) plus
the mean partition load (1 when nothing is measured): with equal loads the plan evens out partition counts,
with one hot partition it leaves that partition alone on its node. Greedy and deterministic: partitions led
by no live node go to the lightest node first; then, while the heaviest node has a partition whose move to
the lightest node leaves the lightest no heavier than the heaviest (`dst + w <= src - w`: a move never swaps
which of the two is heavier, so a plan never moves a partition back and forth), move the heaviest such
partition. Partitions in `frozen` (moved lately) stay where they are.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.cluster.assignment import Move

TP = tuple[int, int]


def weights(current: dict[TP, int | None], scores: dict[TP, float]) -> dict[TP, float]:
    """Each partition's weight: its load score plus the mean partition score (1 when there is none)."""
    total = sum(max(0.0, scores.get(tp, 0.0)) for tp in current)
    base = total / len(current) if current and total > 0 else 1.0
    return {tp: max(0.0, scores.get(tp, 0.0)) + base for tp in current}


def node_loads(current: dict[TP, int | None], w: dict[TP, float], nodes: Iterable[int]) -> dict[int, float]:
    out = dict.fromkeys(sorted(set(nodes)), 0.0)
    for tp, n in current.items():
        if n in out:
            out[n] += w[tp]
    return out


def plan_by_load(current: dict[TP, int | None], scores: dict[TP, float], alive: Iterable[int], *,
                 frozen: Iterable[TP] = (), only_from: int | None = None, max_moves: int | None = None) -> list[Move]:
    """Moves as in the module docstring. only_from: moves off that node only (the balancer's overloaded node)."""
    nodes = sorted(set(alive))
    if not nodes:
        return []
    w = weights(current, scores)
    load = node_loads(current, w, nodes)
    where = dict(current)
    stay = set(frozen)
    moves: list[Move] = []
    for tp in sorted(tp for tp, n in current.items() if n not in load):
        target = min(nodes, key=lambda n: (load[n], n))
        load[target] += w[tp]
        where[tp] = target
        stay.add(tp)
        moves.append(Move(tp[0], tp[1], current[tp], target))
    while max_moves is None or len(moves) < max_moves:
        src = only_from if only_from is not None else max(nodes, key=lambda n: (load[n], -n))
        if src not in load:
            break
        dst = min(nodes, key=lambda n: (load[n], n))
        if dst == src:
            break
        fits = [tp for tp, n in where.items() if n == src and tp not in stay
                and load[dst] + w[tp] <= load[src] - w[tp] + 1e-9 * load[src]]
        if not fits:
            break
        tp = max(fits, key=lambda t: (w[t], (-t[0], -t[1])))
        load[src] -= w[tp]
        load[dst] += w[tp]
        where[tp] = dst
        stay.add(tp)  # one move per partition in a plan
        moves.append(Move(tp[0], tp[1], src, dst))
    return moves
