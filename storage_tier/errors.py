"""Exceptions shared by every BlobStore backend, so callers handle one type per failure kind."""

from __future__ import annotations


class StorageError(Exception):
    """Base of every storage tier error; names the backend, the key and the cause."""

    def __init__(self, backend: str, key: str | None, message: str) -> None:
        self.backend = backend
        self.key = key
        where = f"{backend}" + (f" key {key!r}" if key is not None else "")
        super().__init__(f"{where}: {message}")


class BlobNotFound(StorageError, KeyError):
    """The key does not exist in the store (raised the same way by every backend)."""

    def __init__(self, backend: str, key: str) -> None:
        StorageError.__init__(self, backend, key, "no such blob")

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.args[0]


class InvalidRange(StorageError, ValueError):
    """A ranged read asked for bytes that cannot exist (start beyond the end, end before start)."""


class InvalidKey(StorageError, ValueError):
    """A key that no backend may store (empty, absolute, with '..' or control characters)."""


class StorageUnavailable(StorageError):
    """A transient fault persisted past the retry bound."""


class UnsupportedStoreURL(ValueError):
    """open_store() was given a URL it cannot map to a backend."""


class OutOfSpace(StorageError):
    """The filesystem under a local path refused a write for lack of space (ENOSPC, EDQUOT) or with an I/O
    error (EIO). Nothing partial is left under the key; the write may succeed once space returns."""

    def __init__(self, backend: str, key: str | None, path: str, cause: OSError) -> None:
        self.path = path
        self.errno = cause.errno
        super().__init__(backend, key, f"out of disk on {path}: {cause.strerror or cause}")
