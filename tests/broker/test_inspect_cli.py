"""`mqindex inspect-object` through the real CLI dispatcher and the installed entry point."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from api.cli.main import main
from broker.objects.format import StreamRecord, object_key
from broker.objects.writer import write_object
from broker.partitions.records import ProducerRecord, build_batch
from storage_tier import open_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stored(tmp_path: Path) -> tuple[str, str, Path, list[bytes]]:
    url = f"file://{tmp_path}/objects"
    store = open_store(url)
    key = object_key(78, "_kafka_cli")
    payload = build_batch([ProducerRecord(b"v%d" % i, b"k%d" % i, timestamp_ms=1712451146370 + i) for i in range(3)],
                          base_offset=50)
    second = build_batch([ProducerRecord(b"x")] * 3, base_offset=53)
    recs = [StreamRecord(3, 0, 4, 2, b"meta-kv"), StreamRecord(4, 1, 50, 3, payload), StreamRecord(4, 1, 53, 3, second)]
    write_object(store, key, recs)
    store.close()
    return url, key, tmp_path / "objects" / key, [payload, second]


def test_inspect_by_store_key(stored, capsys) -> None:  # type: ignore[no-untyped-def]
    url, key, _, payloads = stored
    assert main(["inspect-object", key, "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    block2 = 10 + 2 * 33 + sum(len(p) for p in payloads)
    assert out[1] == f"indexStartPosition={50 + block2} indexBlockLength=72"
    assert out[2] == "streamId=3 startOffset=4 endOffset=6 recordCount=1 startPosition=0 size=50"
    assert out[3] == f"streamId=4 startOffset=50 endOffset=56 recordCount=2 startPosition=50 size={block2}"
    assert len(out) == 4


def test_inspect_local_path_with_records(stored, capsys) -> None:  # type: ignore[no-untyped-def]
    _, _, path, _ = stored
    assert main(["inspect-object", str(path), "--records"]) == 0
    out = capsys.readouterr().out
    assert "StreamRecordBatch{streamId=4, epoch=1, baseOffset=50, count=3," in out
    assert "batch baseOffset=50 lastOffset=52 count=3" in out and "firstTimestamp=1712451146370" in out
    assert "maxTimestamp=1712451146372" in out and "compression=none" in out and "magic=2" in out
    assert "payload: 7 bytes, not a Kafka RecordBatch v2" in out


def test_errors_are_one_line(stored, capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, _, path, _ = stored
    bad = tmp_path / "bad.obj"
    bad.write_bytes(path.read_bytes()[:-5])
    assert main(["inspect-object", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.obj" in err[0] and "footer" in err[0]
    assert main(["inspect-object", str(tmp_path / "missing")]) == 1
    assert "no such object file" in capsys.readouterr().err


def test_installed_entry_point(stored) -> None:  # type: ignore[no-untyped-def]
    url, key, _, _ = stored
    res = subprocess.run([str(ROOT / ".venv/bin/mqindex"), "inspect-object", key, "--store", url, "--records"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert "indexBlockLength=72" in res.stdout and "batch baseOffset=53" in res.stdout
    res = subprocess.run([str(ROOT / ".venv/bin/mqindex"), "inspect-object", "nope/key", "--store", url],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 1 and "no such blob" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_an_index_file_is_named_as_one(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from index_file import IndexEntry, NativeIndexWriter, compact

    w = NativeIndexWriter.create(tmp_path / "n.idx", 1_700_000_000_000, slots=16, max_items=100)
    w.put_batch([IndexEntry("orders", 0, i, 10, 1_700_000_000_000 + i, ("k",)) for i in range(5)])
    w.seal()
    w.close()
    compact(tmp_path / "n.idx", tmp_path / "n.cidx")
    assert main(["inspect-object", str(tmp_path / "n.cidx")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a stream object (it is an index file (native-compacted): read it with " \
                             "mqindex inspect-index)" in err[0]
