"""Exceptions of the index file layer.

Every check a reader makes on bytes it did not write itself (magic, version, sizes, CRC32C,
pointers in range) fails with a FormatError that names the file and the check, so a torn, truncated,
bit-flipped or foreign file is reported and never served as a wrong answer or an IndexError.
"""

from __future__ import annotations


class IndexFileError(Exception):
    """Base of every error raised by index_file."""


class FormatError(IndexFileError, ValueError):
    """The bytes of an index file fail a format check.

    Attributes: `path` (file path or `store:key` of the file), `check` (short name of the failed
    check, e.g. "header crc32c", "magic", "truncated"), `detail` (what was found).
    """

    def __init__(self, path: str, check: str, detail: str = "") -> None:
        self.path = str(path)
        self.check = check
        self.detail = detail
        msg = f"{self.path}: index file check '{check}' failed"
        super().__init__(msg + (f": {detail}" if detail else ""))


class NewerFormat(FormatError):
    """An index file of a version newer than this version of mqindex reads: not damage. Recovery lets it through
    (the service does not open; the file is not quarantined) instead of moving it aside as it does damaged ones."""

    def __init__(self, path: str, version: int, reads: int) -> None:
        super().__init__(path, "version", f"version {version}, newer than this version of mqindex reads ({reads}): "
                                          "written by a newer version? Upgrade this node (docs/OPERATIONS.md, "
                                          "Upgrading a cluster)")
        self.version = version


class IndexStateError(IndexFileError, RuntimeError):
    """An operation the file's state does not allow (writing a sealed or closed file, compacting
    an unsealed one)."""
