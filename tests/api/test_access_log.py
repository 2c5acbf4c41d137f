"""`mqindex serve` logs a line per HTTP request only with --access-log (or MQINDEX_ACCESS_LOG=true); without it the
request is still counted in /metrics, and GET /v1/config shows the setting."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from tests.api.server import ServerProcess


def test_request_lines_only_with_the_access_log(tmp_path: Path) -> None:
    for name, extra, env, logged in (("quiet", (), {}, False), ("flag", ("--access-log",), {}, True),
                                     ("env", (), {"MQINDEX_ACCESS_LOG": "true"}, True)):
        s = ServerProcess(tmp_path / name, *extra, env={**os.environ, **env}).start()
        try:
            assert httpx.get(f"{s.url}/v1/topics/nope-{name}").status_code == 404
            assert httpx.get(f"{s.url}/v1/config").json()["server"]["access_log"] is logged
            metrics = httpx.get(f"{s.url}/metrics").text
            assert 'mqindex_http_requests_total{route="/v1/topics/{topic}",status="404"}' in metrics
        finally:
            assert s.stop() == 0
        lines = [ln for ln in s.log.read_text().splitlines() if f"/v1/topics/nope-{name}" in ln]
        assert bool(lines) is logged, lines
        assert all('" 404' in ln for ln in lines)
