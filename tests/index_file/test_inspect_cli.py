"""`mqindex inspect-index` on every format, in-process and as the installed console script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from api.cli.main import main
from index_file import (
    IndexEntry,
    NativeIndexWriter,
    RocketMQIndexWriter,
    compact,
    compact_rocketmq,
    fingerprint,
    rocketmq_hash,
)

BEGIN = 1_700_000_000_000
ES = [IndexEntry("orders", i % 3, i, 100 + i, BEGIN + 1000 * i, (f"order-{i % 5}",)) for i in range(40)]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {"native": tmp_path / "n.idx", "compacted": tmp_path / "n.cidx", "rocketmq": tmp_path / "r.idx",
           "rocketmq-compacted": tmp_path / "r.cidx"}
    w = NativeIndexWriter.create(out["native"], BEGIN, slots=16, max_items=100)
    w.put_batch(ES)
    w.seal()
    w.close()
    compact(out["native"], out["compacted"])
    r = RocketMQIndexWriter.create(out["rocketmq"], BEGIN, slots=16, max_items=100)
    r.put_batch(ES)
    r.close()
    compact_rocketmq(out["rocketmq"], out["rocketmq-compacted"], slot_count=16)
    return out


NATIVE_SLOTS = len({fingerprint("orders", f"order-{k}") % 16 for k in range(5)})
RMQ_SLOTS = len({rocketmq_hash("orders", f"order-{k}") % 16 for k in range(5)})


@pytest.mark.parametrize("kind,fmt,slots,items", [
    ("native", "native-unsealed", f"slots used   {NATIVE_SLOTS} / 16", "items        40 / 100"),
    ("compacted", "native-compacted", "1 blocks", "items        40"),
    ("rocketmq", "rocketmq", f"slots used   {RMQ_SLOTS} / 16", "items        40"),
    ("rocketmq-compacted", "rocketmq", f"slots used   {RMQ_SLOTS} / 16", "items        40"),
])
def test_inspect_each_format(files: dict[str, Path], capsys: pytest.CaptureFixture[str], kind: str, fmt: str,
                             slots: str, items: str) -> None:
    argv = ["inspect-index", str(files[kind]), "--topic", "orders", "--key", "order-2", "--max", "3"]
    if kind == "rocketmq":
        argv += ["--slots", "16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"format       {fmt}" in out
    assert slots in out and items in out
    assert f"{BEGIN}" in out
    assert "hits         3 for orders#order-2" in out
    assert "partition 1 offset 37 size 137" in out  # newest of order-2: i = 37


def test_inspect_remote_object(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "blobs"
    store.mkdir()
    (store / "n.cidx").write_bytes(files["compacted"].read_bytes())
    assert main(["inspect-index", "n.cidx", "--store", f"file://{store}", "--topic", "orders", "--key",
                 "order-4"]) == 0
    assert "hits         8 for orders#order-4" in capsys.readouterr().out


def test_key_without_topic_and_bad_files(files: dict[str, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect-index", str(files["native"]), "--key", "x"]) == 2
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello world, not an index")
    assert main(["inspect-index", str(junk)]) == 1
    assert "magic" in capsys.readouterr().err
    cut = tmp_path / "cut"
    cut.write_bytes(files["compacted"].read_bytes()[:-5])
    assert main(["inspect-index", str(cut)]) == 1
    assert str(cut) in capsys.readouterr().err


def test_console_script(files: dict[str, Path]) -> None:
    exe = Path(sys.executable).parent / "mqindex"
    res = subprocess.run([str(exe), "inspect-index", str(files["compacted"]), "--topic", "orders", "--key",
                          "order-0", "--max", "2"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "format       native-compacted" in res.stdout
    assert "hits         2 for orders#order-0" in res.stdout
    assert "partition 2 offset 35" in res.stdout
