"""`mqindex import-rocketmq DIR`: RocketMQ tiered index files served read-only next to native ones.
RocketMQ hits are 32-bit-hash candidates: without a verifier they come back exact=False, with one
the `Aa`/`BB` collision never leaks."""

from __future__ import annotations

import hashlib
from pathlib import Path

from api.cli.main import main as cli_main
from index_file import IndexHit, RocketMQIndexWriter, compact_rocketmq, java_string_hash
from index_service import FileState, IndexService

T0 = 1_700_000_000_000


def _rocketmq_dir(tmp_path: Path) -> tuple[Path, dict[tuple[int, int], list[str]]]:
    """Two RocketMQ files (one unsealed, one compacted) and the 'broker log' of what each record holds."""
    src = tmp_path / "rocketmq"
    src.mkdir()
    records: dict[tuple[int, int], list[str]] = {}
    w = RocketMQIndexWriter.create(src / "unsealed-1", T0, slots=64, max_items=100)
    for off, key in enumerate(["Aa", "BB", "Aa", "other"]):
        w.put(("t", 1, off, 10, T0 + off * 1000, [key]))
        records[(1, off)] = [key]
    w.close()
    w = RocketMQIndexWriter.create(tmp_path / "tmp-unsealed", T0 + 60_000, slots=64, max_items=100)
    for off, key in enumerate(["Aa", "BB", "BB"], start=100):
        w.put(("t", 1, off, 10, T0 + 60_000 + off * 10, [key]))
        records[(1, off)] = [key]
    w.seal()
    w.close()
    compact_rocketmq(tmp_path / "tmp-unsealed", src / "compacted-2", slot_count=64)
    return src, records


def _digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in d.iterdir()}


def test_import_cli_and_inexact_hits(tmp_path: Path) -> None:
    assert java_string_hash("t#Aa") == java_string_hash("t#BB")
    src, records = _rocketmq_dir(tmp_path)
    before = _digest(src)
    data = tmp_path / "data"
    assert cli_main(["import-rocketmq", str(src), "--data-dir", str(data), "--slots", "64"]) == 0
    assert len(list((data / "index" / "imported").glob("*.json"))) == 2
    assert cli_main(["import-rocketmq", str(src), "--data-dir", str(data), "--slots", "64"]) == 0  # idempotent
    assert len(list((data / "index" / "imported").glob("*.json"))) == 2

    svc = IndexService.open(data / "index", maintain_interval_s=0)
    try:
        imported = [f for f in svc.files() if f.state is FileState.IMPORTED]
        assert sorted(f.items for f in imported) == [3, 4] and not any(f.exact for f in imported)
        hits = svc.query("t", "Aa", 100)
        # no verifier: hash candidates, Aa and BB alike, marked inexact for the caller to check
        assert {h.offset for h in hits} == {0, 1, 2, 100, 101, 102}
        assert all(not h.exact for h in hits)
        assert [h.store_time_ms for h in hits] == sorted((h.store_time_ms for h in hits), reverse=True)
    finally:
        svc.close()

    checked: list[IndexHit] = []

    def verifier(hit: IndexHit) -> bool:  # the broker fetches (queue, offset) and checks the record's keys
        checked.append(hit)
        return hit.key in records[(hit.queue_id, hit.offset)]

    svc = IndexService.open(data / "index", maintain_interval_s=0, verifier=verifier)
    try:
        assert [(h.offset, h.exact) for h in svc.query("t", "Aa", 100)] == [(100, True), (2, True), (0, True)]
        assert [h.offset for h in svc.query("t", "BB", 100)] == [102, 101, 1]
        assert [h.offset for h in svc.query("t", "BB", 2)] == [102, 101]  # exactly max_count verified hits
        assert svc.query("t", "Ab", 100) == []
        # native files and RocketMQ files answer together, ordered and counted as one
        svc.put("t", 1, 500, 10, ["Aa"], T0 + 120_000)
        svc.flush()
        got = svc.query("t", "Aa", 3)
        assert [h.offset for h in got] == [500, 100, 2] and all(h.exact for h in got)
        checked.clear()
        assert [h.offset for h in svc.query("t", "Aa", 1)] == [500]
        assert checked == []  # the native hit was certain: the RocketMQ files were not even verified
    finally:
        svc.close()
    assert _digest(src) == before  # read-only: the RocketMQ files are untouched


def test_running_service_picks_up_a_copied_registration(tmp_path: Path) -> None:
    src, _records = _rocketmq_dir(tmp_path)
    svc = IndexService.open(tmp_path / "idx", maintain_interval_s=0)
    try:
        assert svc.query("t", "other", 5) == []
        assert cli_main(["import-rocketmq", str(src), "--index-dir", str(tmp_path / "idx"), "--slots", "64",
                         "--copy"]) == 0
        assert svc.maintain().imported == 2
        for p in src.iterdir():
            p.unlink()  # copied: the registration no longer needs the source directory
        assert [h.offset for h in svc.query("t", "other", 5)] == [3]
    finally:
        svc.close()
    svc = IndexService.open(tmp_path / "idx", maintain_interval_s=0)
    try:
        assert [h.offset for h in svc.query("t", "other", 5)] == [3]
    finally:
        svc.close()
