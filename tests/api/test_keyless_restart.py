"""A partition whose records have no keys is read back for the index once after a crash, not at every open:
the catch-up that finds no keys moves the index's checkpoint to the partition's end."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from tests.api.server import ServerProcess, post, wait_for

LINE = re.compile(r"re-dispatched to the index topic=\"plain\" partition=0 from_offset=(\d+) to_offset=(\d+)")


def redispatches(server: ServerProcess) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in LINE.findall(server.log.read_text())]


def test_keyless_records_are_caught_up_once_after_a_crash(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        post(server.url + "/v1/topics", json={"name": "plain", "partitions": 1}).raise_for_status()
        for _ in range(3):
            r = post(server.url + "/v1/topics/plain/messages",
                     json={"messages": [{"value": f"v{i}", "partition": 0} for i in range(50)]})
            r.raise_for_status()
        server.restart(signal.SIGKILL)  # no clean close: the index never saw these offsets
        wait_for("the catch-up of the crashed partition", lambda: redispatches(server) == [(0, 150)], timeout=60)
        # the catch-up's marker is saved with the index's checkpoint (a flush, as the admin roll does one)
        post(server.url + "/v1/admin/index/roll").raise_for_status()
        server.restart(signal.SIGKILL)
        r = post(server.url + "/v1/topics/plain/messages", json={"messages": [{"value": "after", "partition": 0}]})
        r.raise_for_status()
        assert r.json()["results"][0]["offset"] == 150
        assert redispatches(server) == [(0, 150)]  # the second open found nothing to read again
    finally:
        server.stop()
