"""A local file put into a store in parts, with its CRC32C, and the CRC32C of a stored object read back: what the
index service's upload, the cluster's merge of published index files and a Spark build's executors share."""

from __future__ import annotations

import os

import crc32c

from storage_tier.blob_store import BlobStore


def put_file(store: BlobStore, path: os.PathLike[str] | str, key: str, part: int) -> tuple[int, int]:
    """Put a local file at `key` (one put up to `part` bytes, a multipart upload of `part`-byte parts above;
    an upload that fails is aborted); its (size, CRC32C)."""
    size = os.stat(path).st_size
    crc = 0
    with open(path, "rb") as f:
        if size <= part:
            data = f.read()
            crc = crc32c.crc32c(data)
            store.put(key, data)
        else:
            w = store.multipart(key)
            try:
                while data := f.read(part):
                    crc = crc32c.crc32c(data, crc)
                    w.write_part(data)
                w.complete()
            except BaseException:
                w.abort()
                raise
    return size, crc


def stored_crc(store: BlobStore, key: str, size: int, part: int) -> int:
    """The CRC32C of the first `size` bytes of the object at `key`, read back in ranges of `part` bytes."""
    got = 0
    for start in range(0, size, part):
        got = crc32c.crc32c(store.get(key, start, min(size, start + part)), got)
    return got
