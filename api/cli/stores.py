"""Stores and databases as the read-only commands open them: what is not there is an error, never created."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from storage_tier import BlobStore


class NotThere(RuntimeError):
    pass


def local_path(url: str) -> Path | None:
    """The directory of a file:// URL or the file of a sqlite:// URL (None for anything remote)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("file", "sqlite"):
        return None
    path = parts.netloc + parts.path if parts.netloc in (".", "..") else parts.path
    if scheme == "sqlite" and path.startswith("//"):
        path = path[1:]
    return Path(path) if path else None


def require_present(url: str, what: str, flag: str) -> None:
    """Refuse a local store directory or database file that does not exist (opening would create it)."""
    path = local_path(url)
    if path is None:
        return
    if urlsplit(url).scheme.lower() == "file" and not path.is_dir():
        raise NotThere(f"no {what} directory at {path} ({flag})")
    if urlsplit(url).scheme.lower() == "sqlite" and not path.is_file():
        raise NotThere(f"no {what} database at {path} ({flag})")


def open_existing(url: str, flag: str) -> BlobStore:
    """open_store(url), refusing a local directory or database that is not there."""
    from storage_tier import open_store

    require_present(url, "store", flag)
    return open_store(url)
