"""The node and index settings of `mqindex serve` (flags, MQINDEX_*, config file) reach a real process and change
what they name; GET /v1/config shows the effective values; the topics CLI creates, alters, describes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from api.config import ConfigError, load_settings
from tests.api.server import ServerProcess, wait_for

TOKENS = "adm=read,produce,admin"
AUTH = {"Authorization": "Bearer adm"}


def test_settings_parse_from_all_sources(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("upload_threshold = 1000\nindex_roll_age_ms = 5000\n")
    s = load_settings(str(cfg), env={"MQINDEX_RETENTION_MS": "86400000", "MQINDEX_UPLOAD_THRESHOLD": "2000"},
                      index_max_items=7)
    assert s.node == {"upload_threshold": 2000, "index_roll_age_ms": 5000, "retention_ms": 86_400_000,
                      "index_max_items": 7}
    for env in ({"MQINDEX_UPLOAD_THRESHOLD": "x"}, {"MQINDEX_INDEX_SLOTS": "0"},
                {"MQINDEX_MAINTENANCE_INTERVAL_S": "-1"}, {"MQINDEX_UPLOAD_THRESHOLD": ""}):
        with pytest.raises(ConfigError):
            load_settings(None, env=env)


def test_serve_settings_change_behaviour(tmp_path: Path) -> None:
    mqindex = str(Path(sys.executable).parent / "mqindex")
    server = ServerProcess(
        tmp_path / "data", "--retention-ms", "1", "--maintenance-interval-s", "0.2", "--upload-interval-s", "0.2",
        "--index-max-items", "5", "--index-slots", "64", "--read-your-writes-s", "7",
        env={"MQINDEX_TOKENS": TOKENS, "MQINDEX_INDEX_QUERY_THREADS": "3", "MQINDEX_BLOCK_CACHE_BYTES": "1048576"})
    server.start()
    try:
        url = server.url
        eff = httpx.get(url + "/v1/config", headers=AUTH).json()
        assert httpx.get(url + "/v1/config", headers={"Authorization": "Bearer nope"}).status_code in (401, 403)
        b, ix = eff["broker"], eff["index"]
        assert (b["retention_ms"], b["maintenance_interval_s"], b["upload_interval_s"], b["read_your_writes_s"],
                b["block_cache_bytes"], b["upload_threshold"]) == (1, 0.2, 0.2, 7.0, 1 << 20, 32 << 20)
        assert (ix["max_items"], ix["slots"], ix["query_threads"], ix["retention_ms"]) == (5, 64, 3, None)
        # topics CLI: a topic that keeps forever (retention.ms -1 overrides the server's 1 ms) and one on the default
        run = [mqindex, "topics"]
        common = ["--url", url, "--token", "adm"]
        out = subprocess.run([*run, "create", "keep", "--retention-ms", "-1", *common], capture_output=True,
                             text=True, check=True).stdout
        assert "retention.ms=-1  (topic)" in out
        subprocess.run([*run, "create", "gone", *common], check=True, capture_output=True)
        for topic in ("keep", "gone"):
            r = httpx.post(f"{url}/v1/topics/{topic}/messages", headers=AUTH,
                           json={"messages": [{"value": f"v{i}", "key": f"k{i}"} for i in range(12)]})
            assert r.status_code == 200, r.text
        # index_max_items=5: 24 keyed records fill several files
        r = httpx.get(url + "/v1/messages", params={"topic": "keep", "key": "k3"}, headers=AUTH)
        assert len(r.json()["messages"]) == 1
        wait_for("index files roll at 5 items", lambda: len([f for f in httpx.get(
            url + "/v1/index/files", headers=AUTH).json()["files"] if f["items"]]) >= 4)
        # retention_ms=1 + upload_interval_s + maintenance_interval_s: the default topic is uploaded and trimmed
        def gone_trimmed() -> bool:
            r = httpx.get(f"{url}/v1/topics/gone/partitions/0/messages", headers=AUTH)
            return r.json()["messages"] == [] and r.json()["next_offset"] == 12
        wait_for("the default-retention topic trimmed", gone_trimmed)
        keep = httpx.get(f"{url}/v1/topics/keep/partitions/0/messages", headers=AUTH).json()
        assert len(keep["messages"]) == 12
        # alter through the CLI; bad input leaves the configs untouched
        bad = subprocess.run([*run, "alter", "keep", "--retention-ms", "0", *common], capture_output=True, text=True)
        assert bad.returncode == 1 and "retention.ms" in bad.stderr
        out = subprocess.run([*run, "alter", "keep", "--delete-config", "retention.ms", *common], capture_output=True,
                             text=True, check=True).stdout
        assert "retention.ms=1  (default)" in out
        wait_for("the altered topic trimmed", lambda: httpx.get(
            f"{url}/v1/topics/keep/partitions/0/messages", headers=AUTH).json()["messages"] == [])
        # a string that is not an integer's digits is refused ("5" is 5, as Kafka's config strings:
        # tests/api/test_topic_config_strings.py)
        r = httpx.patch(f"{url}/v1/topics/keep/configs", headers=AUTH, json={"configs": {"retention.ms": "5ms"}})
        assert r.status_code == 400 and r.json()["field"] == "configs.retention.ms", r.text
    finally:
        assert server.stop() == 0


def test_every_setting_is_documented_with_its_default() -> None:
    from api.node_settings import NODE_SETTINGS

    doc = (Path(__file__).parents[2] / "docs" / "OPERATIONS.md").read_text()
    rows = {line.split("|")[1].strip(" `"): line.split("|")[2].strip() for line in doc.splitlines()
            if line.startswith("| `")}
    for s in NODE_SETTINGS:
        assert s.name in rows, f"{s.name} is not in the settings table of docs/OPERATIONS.md"
        assert rows[s.name] == ("unset" if s.default is None else str(s.default)), s.name


def test_filter_merge_and_failover_history_settings_reach_the_node(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", "--index-filter-cache-bytes", "123456", "--index-merge-tiers", "1",
        "--index-merge-grace-ms", "5000", "--failover-history-per-node", "3",
        env={"MQINDEX_TOKENS": TOKENS, "MQINDEX_INDEX_MERGE_MAX_INPUTS": "4"})
    server.start()
    try:
        eff = httpx.get(server.url + "/v1/config", headers=AUTH).json()
        ix, b = eff["index"], eff["broker"]
        assert (ix["filter_cache_bytes"], ix["merge_tiers_ms"], ix["merge_grace_ms"], ix["merge_max_inputs"]) == \
            (123456, [86_400_000], 5000, 4)
        assert b["failover_history_per_node"] == 3
    finally:
        assert server.stop() == 0
    mqindex = str(Path(sys.executable).parent / "mqindex")
    for flag, value, says in (("--index-merge-tiers", "3", "index_merge_tiers must be <= 2"),
                              ("--index-merge-min-files", "1", "index_merge_min_files must be >= 2")):
        r = subprocess.run([mqindex, "serve", "--data-dir", str(tmp_path / "bad"), flag, value],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and says in r.stderr, r.stderr
        assert not (tmp_path / "bad").exists()
