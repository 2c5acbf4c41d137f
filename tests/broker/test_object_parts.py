"""ObjectWriter multipart parts: the part count depends on the object size only, never a small tail part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.objects.format import StreamRecord
from broker.objects.reader import ObjectReader
from broker.objects.writer import ObjectWriter
from storage_tier import open_store


@pytest.mark.parametrize("streams", [1, 50])
def test_parts_depend_on_size_only(tmp_path: Path, streams: int) -> None:
    store = open_store(f"file://{tmp_path}/objs")
    parts: list[int] = []
    real = store.multipart

    def spy(key: str) -> Any:
        w = real(key)
        orig = w.write_part

        def write_part(data: bytes) -> None:
            parts.append(len(data))
            orig(data)

        w.write_part = write_part  # type: ignore[method-assign]
        return w

    store.multipart = spy  # type: ignore[method-assign]
    part = 64 << 10
    w = ObjectWriter(store, "o", block_size=16 << 10, part_size=part)
    recs = []
    per_stream = 600 // streams
    for sid in range(streams):
        for i in range(per_stream):
            r = StreamRecord(sid, 0, i, 1, bytes([i % 256]) * 1000)
            recs.append(r)
            w.write(r)
    info = w.close()
    assert len(parts) == info.size // part  # no tail part: the last one is between 1 and 2 part sizes
    assert all(p == part for p in parts[:-1]) and part <= parts[-1] < 2 * part
    reader = ObjectReader(store, "o")
    got = [r for _, rs in reader.iter_all() for r in rs]
    assert got == recs
    store.close()
