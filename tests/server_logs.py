"""A failed test's report ends with the tails of the server logs it left in its temporary directory
(`ServerProcess` writes DATA_DIR-server.log beside each data directory), so that a failure seen only in CI,
where the directories are gone afterwards, says what the servers did."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

TAIL_LINES = 60
MAX_LOGS = 6


def _tail(path: Path, lines: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed or call.when == "teardown":
        return
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if not isinstance(tmp, Path) or not tmp.is_dir():
        return
    logs = sorted(tmp.rglob("*-server.log"), key=lambda p: p.stat().st_mtime, reverse=True)[:MAX_LOGS]
    for log in sorted(logs):
        report.sections.append((f"server log {log.relative_to(tmp)} (last {TAIL_LINES} lines)",
                                _tail(log, TAIL_LINES)))
