"""Byte sources the readers run on: a local file through mmap, a BlobStore object through ranged
GETs, or bytes in memory. Readers only ever ask for [start, end) ranges, so the same reader code
serves a local file and an uploaded one, and every remote read is exactly one ranged GET.
"""

from __future__ import annotations

import mmap
import os
from typing import Protocol

from index_file.errors import FormatError


class ByteSource(Protocol):
    name: str

    def read(self, start: int, end: int) -> bytes | memoryview:
        """Exactly the bytes [start, end); a short read raises FormatError('truncated')."""
        ...

    def size(self) -> int: ...

    def close(self) -> None: ...


def _check_len(name: str, got: int, start: int, end: int) -> None:
    if got != end - start:
        raise FormatError(name, "truncated", f"wanted bytes [{start}, {end}), the file ends after {start + got}")


class BytesSource:
    """Bytes held in memory (tests, small files, data fetched whole)."""

    def __init__(self, data: bytes, name: str = "<bytes>") -> None:
        self.data = memoryview(bytes(data))
        self.name = name

    def read(self, start: int, end: int) -> memoryview:
        if start < 0 or end < start:
            raise FormatError(self.name, "range", f"bad range [{start}, {end})")
        view = self.data[start:end]
        _check_len(self.name, len(view), start, end)
        return view

    def size(self) -> int:
        return len(self.data)

    def close(self) -> None:
        pass


class MmapSource:
    """A local file mapped read-only. `buffer` is the mapping itself for zero-copy numpy views."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.name = os.fspath(path)
        with open(self.name, "rb") as f:
            self._size = os.fstat(f.fileno()).st_size
            # mmap cannot map an empty file; such a file is simply too short for every format
            self._mm: mmap.mmap | None = (
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self._size else None
            )
        self.buffer: mmap.mmap | bytes = self._mm if self._mm is not None else b""

    def read(self, start: int, end: int) -> memoryview:
        if start < 0 or end < start:
            raise FormatError(self.name, "range", f"bad range [{start}, {end})")
        view = memoryview(self.buffer)[start:end]
        _check_len(self.name, len(view), start, end)
        return view

    def size(self) -> int:
        return self._size

    def close(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                # a numpy view or memoryview still points into the mapping; it is unmapped when
                # the last of them is garbage-collected
                pass
            self._mm = None
            self.buffer = b""


class BlobSource:
    """An object in a BlobStore; each read() is one ranged GET (counted by store.meter)."""

    def __init__(self, store: object, key: str) -> None:
        self.store = store
        self.key = key
        self.name = f"{getattr(store, 'url', store)}:{key}"
        self._size: int | None = None

    def read(self, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise FormatError(self.name, "range", f"bad range [{start}, {end})")
        if end == start:
            return b""
        from storage_tier.errors import InvalidRange

        try:
            data = self.store.get(self.key, start, end)  # type: ignore[attr-defined]
        except InvalidRange as exc:  # start beyond the object's end
            raise FormatError(self.name, "truncated", str(exc)) from exc
        _check_len(self.name, len(data), start, end)
        return data

    def size(self) -> int:
        if self._size is None:
            self._size = int(self.store.size(self.key))  # type: ignore[attr-defined]
        return self._size

    def close(self) -> None:
        pass


def open_source(path_or_source: str | os.PathLike[str] | ByteSource) -> ByteSource:
    if isinstance(path_or_source, (str, os.PathLike)):
        return MmapSource(path_or_source)
    return path_or_source
