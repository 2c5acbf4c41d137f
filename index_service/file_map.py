"""FileMap: every index file in a time-ordered map (sortedcontainers.SortedDict) keyed by begin time.

Structural changes (add, remove) take a short mutex; readers take a snapshot list and then work on
the files without holding it. `candidates` selects the files whose [oldest, newest] store time
overlaps a query's [begin_ms, end_ms] (not merely whose begin time falls inside it), newest first.
"""

from __future__ import annotations

import threading

from sortedcontainers import SortedDict

from index_service.managed_file import ManagedFile
from index_service.model import FileState


class FileMap:
    def __init__(self) -> None:
        self._map: SortedDict = SortedDict()
        self._mutex = threading.Lock()

    def add(self, mf: ManagedFile) -> None:
        with self._mutex:
            if mf.map_key in self._map:
                raise ValueError(f"two index files begin at {mf.begin_ms} ({mf.stem}, {self._map[mf.map_key].stem})")
            self._map[mf.map_key] = mf

    def add_many(self, mfs: list[ManagedFile]) -> None:
        """Add several files in one step: a query's snapshot holds all of them or none."""
        with self._mutex:
            keys = [mf.map_key for mf in mfs]
            if len(set(keys)) != len(keys) or any(k in self._map for k in keys):
                raise ValueError(f"index files collide in the map: {[mf.stem for mf in mfs]}")
            for mf in mfs:
                self._map[mf.map_key] = mf

    def replace(self, old: list[ManagedFile], new: ManagedFile) -> None:
        """Swap `old` files for `new` in one step: a query's snapshot holds either all of `old` or `new`."""
        with self._mutex:
            if new.map_key in self._map:
                raise ValueError(f"index files collide in the map: {new.stem}, {self._map[new.map_key].stem}")
            missing = [mf.stem for mf in old if self._map.get(mf.map_key) is not mf]
            if missing:
                raise ValueError(f"index files to replace are no longer in the map: {missing}")
            for mf in old:
                del self._map[mf.map_key]
            self._map[new.map_key] = new

    def swap(self, old: list[ManagedFile], new: list[ManagedFile]) -> None:
        """Remove `old` and add `new` in one step: a query's snapshot holds all of `old` or all of `new`."""
        with self._mutex:
            missing = [mf.stem for mf in old if self._map.get(mf.map_key) is not mf]
            if missing:
                raise ValueError(f"index files to replace are no longer in the map: {missing}")
            gone = {mf.map_key for mf in old}
            keys = [mf.map_key for mf in new]
            if len(set(keys)) != len(keys) or any(k in self._map and k not in gone for k in keys):
                raise ValueError(f"index files collide in the map: {[mf.stem for mf in new]}")
            for mf in old:
                del self._map[mf.map_key]
            for mf in new:
                self._map[mf.map_key] = mf

    def remove(self, mf: ManagedFile) -> None:
        with self._mutex:
            if self._map.get(mf.map_key) is mf:
                del self._map[mf.map_key]

    def files(self) -> list[ManagedFile]:
        """All files, oldest begin first."""
        with self._mutex:
            return list(self._map.values())

    def by_state(self, *states: FileState) -> list[ManagedFile]:
        return [f for f in self.files() if f.state in states]

    def last_native_begin(self) -> int | None:
        with self._mutex:
            for key in reversed(self._map):
                if not key[1]:
                    return int(key[0])
        return None

    def __len__(self) -> int:
        return len(self._map)

    def candidates(self, lo: int, hi: int) -> list[tuple[int, ManagedFile]]:
        """(newest store time, file) of every non-empty file overlapping [lo, hi], newest first."""
        out: list[tuple[int, int, ManagedFile]] = []
        for mf in self.files():
            bounds = mf.time_bounds()
            if bounds is None:
                continue
            oldest, newest = bounds
            if oldest <= hi and newest >= lo:
                out.append((newest, mf.begin_ms, mf))
        out.sort(key=lambda t: (t[0], t[1]), reverse=True)
        return [(newest, mf) for newest, _b, mf in out]
