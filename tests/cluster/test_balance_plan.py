"""The by-load plan (broker/cluster/balance_plan.py), the balancer's and `mqindex rebalance`'s: properties over
random clusters, and the skewed case the balancer meets."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.cluster.balance_plan import node_loads, plan_by_load, weights

TP = tuple[int, int]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[TP, int | None], dict[TP, float], list[int]]:
    alive = sorted(draw(st.sets(st.integers(0, 6), min_size=1, max_size=5)))
    n = draw(st.integers(0, 24))
    owners = st.one_of(st.sampled_from(alive), st.none(), st.integers(7, 9))  # live, unassigned, dead
    current = {(1, i): draw(owners) for i in range(n)}
    scores = {tp: draw(st.floats(0, 1e6, allow_nan=False)) for tp in current}
    return current, scores, alive


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_a_plan_places_every_orphan_moves_each_partition_once_and_never_raises_the_heaviest_node(
        case: tuple[dict[TP, int | None], dict[TP, float], list[int]]) -> None:
    current, scores, alive = case
    plan = plan_by_load(current, scores, alive)
    assert plan == plan_by_load(current, scores, alive)  # deterministic
    moved = [(m.topic_id, m.partition) for m in plan]
    assert len(moved) == len(set(moved))
    after = dict(current)
    for m in plan:
        assert m.source == current[(m.topic_id, m.partition)] and m.target in alive and m.target != m.source
        after[(m.topic_id, m.partition)] = m.target
    assert all(n in alive for n in after.values())  # orphans (no live leader) placed
    w = weights(current, scores)
    placed = {tp: n for tp, n in current.items() if n in alive}
    before = node_loads(placed, w, alive)
    # beyond placing the orphans, the moves lower (or keep) the heaviest node's load
    orphans_weight = sum(w[tp] for tp, n in current.items() if n not in alive)
    assert max(node_loads(after, w, alive).values()) <= max(before.values()) + orphans_weight + 1e-6


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5), st.lists(st.integers(0, 4), max_size=30))
def test_with_equal_loads_the_plan_evens_out_partition_counts(nodes: int, owners: list[int]) -> None:
    alive = list(range(nodes))
    current: dict[TP, int | None] = {(1, i): o % nodes for i, o in enumerate(owners)}
    plan = plan_by_load(current, {}, alive)
    after = dict(current)
    for m in plan:
        after[(m.topic_id, m.partition)] = m.target
    counts = [sum(1 for n in after.values() if n == a) for a in alive]
    assert max(counts) - min(counts) <= 1


def test_a_hot_partition_is_left_alone_on_its_node_and_the_others_move_off_it() -> None:
    current: dict[TP, int | None] = {(1, 0): 0, (1, 1): 0, (1, 2): 1, (1, 3): 1, (1, 4): 2, (1, 5): 2}
    scores = {(1, 0): 10.0, (1, 1): 1.0, (1, 2): 1.0, (1, 3): 1.0, (1, 4): 1.0, (1, 5): 1.0}
    plan = plan_by_load(current, scores, [0, 1, 2])
    assert [(m.topic_id, m.partition, m.source) for m in plan] == [(1, 1, 0)]
    after = dict(current)
    after[(1, 1)] = plan[0].target
    assert plan_by_load(after, scores, [0, 1, 2]) == []  # and then nothing more: no move back
    # frozen (moved lately): not moved; only_from limits the moves to that node
    assert plan_by_load(current, scores, [0, 1, 2], frozen=[(1, 1)]) == []
    assert plan_by_load(current, scores, [0, 1, 2], only_from=1) == []
