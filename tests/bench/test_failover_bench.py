"""The rolling upgrade figure of `mqindex bench failover`: the longest time without an acknowledgement, the
window's edges counting as acknowledgements (a partition acknowledged nothing at all shows the whole window)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bench.failover_upgrade import _longest_gap


def test_longest_gap_counts_the_edges_and_ignores_times_outside() -> None:
    assert _longest_gap([1.0, 1.5, 4.0, 4.2], 0.0, 5.0) == 2.5
    assert _longest_gap([], 10.0, 12.0) == 2.0
    assert _longest_gap([0.5, 9.0, 9.5, 20.0], 1.0, 10.0) == 8.0  # 1.0 -> 9.0; 0.5 and 20.0 are outside


@given(st.lists(st.floats(0, 100), max_size=50))
def test_longest_gap_is_the_widest_gap_between_neighbours_in_any_order(times: list[float]) -> None:
    gap = _longest_gap(times, 0.0, 100.0)
    inside = sorted({0.0, 100.0, *(t for t in times if 0 < t < 100)})
    assert gap == max(b - a for a, b in zip(inside, inside[1:], strict=False))
