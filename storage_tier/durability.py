"""Local-disk durability primitives shared by every layer that writes files (objects, WAL, index folders)."""

from __future__ import annotations

import os


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make a directory's entries (created, renamed, removed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
