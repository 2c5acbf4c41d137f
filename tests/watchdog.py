"""A hard bound on a hung test and on a worker's exit, loaded by `-p tests.watchdog` (the Makefile's `make test`).

pytest-timeout (900 s a test) interrupts a test with a signal, which Python only acts on between bytecodes: a test
stuck inside a C call that never returns (a Kafka client's native handle waiting on a stopped server, say) is
never interrupted, and the run hangs until the CI's own limit kills it with nothing to show. The same can happen
after the last test, when the interpreter's exit destroys what was left alive. faulthandler's watchdog is a C
thread that needs no interpreter: past the bound it writes every thread's stack to the worker's stderr and ends
the process, so the run fails, finishes, and names where it hung."""

from __future__ import annotations

import atexit
import faulthandler
import os
from collections.abc import Iterator

import pytest

# past pytest-timeout's own bound, which gets the first chance (and tears the fixtures down)
MARGIN_S = float(os.environ.get("MQINDEX_TEST_WATCHDOG_MARGIN_S", "60"))
# from the end of the session to the end of the process
EXIT_BOUND_S = float(os.environ.get("MQINDEX_TEST_WATCHDOG_EXIT_S", "120"))
# the process's stderr as it was before pytest captures file descriptor 2 around each test (a plugin loaded with
# -p is imported before that): what the watchdog writes must outlive the capture it may cut short
_STDERR = os.fdopen(os.dup(2), "w")


def _timeout_s(item: pytest.Item) -> float:
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    value = item.config.getini("timeout")
    return float(value) if value else 900.0


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    timeout = _timeout_s(item)
    if timeout > 0:
        faulthandler.dump_traceback_later(timeout + MARGIN_S, exit=True, file=_STDERR)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _arm_for_exit() -> None:
    # armed until the process ends: whatever the interpreter's exit has to destroy, it is given EXIT_BOUND_S
    faulthandler.dump_traceback_later(EXIT_BOUND_S, exit=True, file=_STDERR)


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        # an xdist worker lives on after its session, serving the controller until the whole run ends: its bound
        # starts when its interpreter starts to exit (atexit runs before the objects left alive are destroyed)
        atexit.register(_arm_for_exit)
    else:
        _arm_for_exit()
