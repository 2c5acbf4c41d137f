"""The garbage collector as `mqindex serve` sets it: requests' short-lived containers cause no collection,
cyclic garbage is still collected without anyone asking."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from api.cli.serve import YOUNG_COLLECTION_AFTER, settle_collector


@pytest.fixture
def served_collector() -> Iterator[list[int]]:
    """settle_collector() in this process, undone after; yields the generations collected meanwhile."""
    saved = gc.get_threshold()
    collected: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collected.append(info["generation"])

    gc.collect()
    settle_collector()
    gc.callbacks.append(note)
    try:
        yield collected
    finally:
        gc.callbacks.remove(note)
        gc.unfreeze()
        gc.set_threshold(*saved)


def test_request_sized_churn_causes_no_collection(served_collector: list[int]) -> None:
    # four requests of 256 messages in flight, a dict and a tuple per message, over and over
    for _ in range(2000):
        live = [[({"value": "x", "partition": i % 4}, (i, None)) for i in range(256)] for _ in range(4)]
        del live
    assert served_collector == []


def test_cyclic_garbage_is_still_collected(served_collector: list[int]) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self  # a cycle: only the collector frees it

    for _ in range(YOUNG_COLLECTION_AFTER * 2):
        Node()
    assert 0 in served_collector
    assert gc.get_count()[0] < YOUNG_COLLECTION_AFTER


def test_a_slow_collection_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    from api.cli.serve import report_slow_collections

    timed = report_slow_collections(slow_s=0.0)  # every collection counts as slow here
    try:
        with caplog.at_level("WARNING", logger="mqindex.serve"):
            gc.collect(2)
    finally:
        gc.callbacks.remove(timed)
    paused = [r for r in caplog.records if r.getMessage() == "garbage collection paused every thread"]
    assert paused and paused[-1].generation == 2 and paused[-1].seconds >= 0  # type: ignore[attr-defined]


def test_a_quick_collection_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    from api.cli.serve import report_slow_collections

    timed = report_slow_collections(slow_s=60.0)
    try:
        with caplog.at_level("WARNING", logger="mqindex.serve"):
            gc.collect(0)
    finally:
        gc.callbacks.remove(timed)
    assert not [r for r in caplog.records if r.getMessage() == "garbage collection paused every thread"]
