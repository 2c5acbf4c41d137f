"""Periodic: a task run `from_start` is due an interval after its last run began, so a slow run does not stretch
its period (a lease renewal waiting for the database); otherwise the interval counts from the end of a run."""

from __future__ import annotations

import statistics
import threading
import time

from broker.periodic import Periodic

RUN_S = 0.3  # each run takes longer than the interval
INTERVAL_S = 0.2


def _gaps(from_start: bool) -> list[float]:
    began: list[float] = []
    enough = threading.Event()

    def slow() -> None:
        began.append(time.monotonic())
        if len(began) >= 4:
            enough.set()
        time.sleep(RUN_S)

    task = Periodic("test-periodic", INTERVAL_S, slow, from_start=from_start)
    task.start()
    try:
        assert enough.wait(30), "the task did not run four times"
    finally:
        task.stop()
    return [b - a for a, b in zip(began, began[1:], strict=False)]


def test_from_start_runs_are_due_an_interval_after_the_last_began() -> None:
    # each run took RUN_S > INTERVAL_S: the next one starts as soon as it ends
    assert statistics.median(_gaps(True)) < RUN_S + INTERVAL_S / 2


def test_otherwise_the_interval_counts_from_the_end_of_a_run() -> None:
    assert min(_gaps(False)) >= RUN_S + INTERVAL_S
