"""Fault injection for the crash tests: an environment variable names a step of some work (a compaction, a
partition's hand-off) and the process kills itself with SIGKILL right after that step, as a crash there would."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

log = logging.getLogger("mqindex.broker.step_kill")


def kill_at_step(env: str, what: str) -> Callable[[str], None] | None:
    """The on_step hook the variable `env` asks for (`what` names the work in the log line), or None (the normal
    case: the variable is not set)."""
    target = os.environ.get(env)
    if not target:
        return None

    def on_step(name: str) -> None:
        if name == target:
            log.error(f"killing the process at a {what} step", extra={"step": name, "env": env})
            os.kill(os.getpid(), signal.SIGKILL)

    return on_step
