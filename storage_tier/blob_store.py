"""The BlobStore contract every backend implements, and the shared argument checks.

A backend implements the `_`-prefixed primitives; the public methods here validate keys and ranges
once, so every backend answers bad input and edge ranges the same way.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable

from storage_tier.errors import InvalidKey, InvalidRange
from storage_tier.metering import Meter
from storage_tier.retry import RetryPolicy


def check_key(backend: str, key: str) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidKey(backend, str(key), "key must be a non-empty string")
    if key.startswith("/") or any(part in ("", ".", "..") for part in key.split("/")[:-1]) or \
            key.split("/")[-1] in (".", ".."):
        raise InvalidKey(backend, key, "key must be relative, without empty, '.' or '..' segments")
    if any(ord(c) < 0x20 for c in key) or len(key.encode()) > 1024:
        raise InvalidKey(backend, key, "key must be at most 1024 bytes without control characters")
    return key


def resolve_range(backend: str, key: str, size: int, start: int, end: int | None) -> tuple[int, int]:
    """Clip [start, end) to the blob. start may equal size (empty read); beyond that is an error."""
    if start < 0 or (end is not None and end < start):
        raise InvalidRange(backend, key, f"bad range [{start}, {end})")
    if start > size:
        raise InvalidRange(backend, key, f"range start {start} is beyond the blob's size {size}")
    stop = size if end is None else min(end, size)
    return start, stop


class MultipartWriter(abc.ABC):
    """Builds one blob from parts in order; nothing is visible under the key until complete()."""

    def __init__(self, store: BlobStore, key: str) -> None:
        self.store = store
        self.key = key
        self.closed = False

    def write_part(self, data: bytes) -> None:
        self._check_open()
        self._write_part(bytes(data))

    def copy_part(self, src_key: str, start: int = 0, end: int | None = None) -> None:
        """Append bytes [start, end) of an existing blob (server-side copy where the backend has it)."""
        self._check_open()
        check_key(self.store.name, src_key)
        self._copy_part(src_key, start, end)

    def complete(self) -> None:
        self._check_open()
        self.closed = True
        self._complete()

    def abort(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._abort()

    def __enter__(self) -> MultipartWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            if not self.closed:
                self.complete()
        else:
            self.abort()

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError(f"multipart upload of {self.key!r} is already completed or aborted")

    @abc.abstractmethod
    def _write_part(self, data: bytes) -> None: ...

    @abc.abstractmethod
    def _copy_part(self, src_key: str, start: int, end: int | None) -> None: ...

    @abc.abstractmethod
    def _complete(self) -> None: ...

    @abc.abstractmethod
    def _abort(self) -> None: ...


class BlobStore(abc.ABC):
    """put / ranged get / size / exists / delete / list / multipart, metered and retried."""

    #: short backend name used in errors and logs ("local", "s3", "sqlite", "postgresql")
    name: str = "blobstore"

    def __init__(self, url: str, retry: RetryPolicy | None = None) -> None:
        self.url = url
        self.meter = Meter()
        self.retry = retry or RetryPolicy()

    def retry_bound(self) -> float:
        """The retry bound of this store now: calls retrying when `retry` is replaced by a shorter one stop at it."""
        return self.retry.deadline_s

    # -- public contract -------------------------------------------------------------------------
    def put(self, key: str, data: bytes) -> None:
        self._put(check_key(self.name, key), bytes(data))

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes [start, end) of the blob; end is clipped to the size; start == size gives b""."""
        return self._get(check_key(self.name, key), start, end)

    def size(self, key: str) -> int:
        return self._size(check_key(self.name, key))

    def exists(self, key: str) -> bool:
        return self._exists(check_key(self.name, key))

    def delete(self, keys: str | Iterable[str]) -> None:
        """Delete keys in batches; deleting a missing key is not an error."""
        batch = [keys] if isinstance(keys, str) else list(keys)
        for k in batch:
            check_key(self.name, k)
        if batch:
            self._delete(batch)

    def list(self, prefix: str = "") -> list[str]:
        """Every key starting with `prefix`, sorted."""
        return sorted(self._list(prefix))

    def multipart(self, key: str) -> MultipartWriter:
        return self._multipart(check_key(self.name, key))

    def close(self) -> None:  # noqa: B027 - most backends hold nothing to release
        """Release connections; the store's data is unaffected."""

    def __enter__(self) -> BlobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # -- backend primitives ----------------------------------------------------------------------
    @abc.abstractmethod
    def _put(self, key: str, data: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, key: str, start: int, end: int | None) -> bytes: ...

    @abc.abstractmethod
    def _size(self, key: str) -> int: ...

    def _exists(self, key: str) -> bool:
        from storage_tier.errors import BlobNotFound

        try:
            self._size(key)
            return True
        except BlobNotFound:
            return False

    @abc.abstractmethod
    def _delete(self, keys: list[str]) -> None: ...

    @abc.abstractmethod
    def _list(self, prefix: str) -> Iterable[str]: ...

    @abc.abstractmethod
    def _multipart(self, key: str) -> MultipartWriter: ...
