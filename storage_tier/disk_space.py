"""Disk-space facts of local paths: which OSErrors mean "out of disk", and the free bytes under a path.

ENOSPC (no space), EDQUOT (quota exceeded) and EIO (the device failed a write, which on a full thin-provisioned
or network disk is how "full" shows) all make a write fail without the process being at fault: the callers
treat them as an episode that ends when space returns, not as a crash.
"""

from __future__ import annotations

import errno
import os

from storage_tier.errors import OutOfSpace

OUT_OF_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def is_out_of_space(exc: BaseException) -> bool:
    """True for an OSError (or a chain holding one) whose errno means the disk refused the write."""
    seen = 0
    cur: BaseException | None = exc
    while cur is not None and seen < 8:
        if isinstance(cur, OSError) and cur.errno in OUT_OF_SPACE_ERRNOS:
            return True
        if isinstance(cur, OutOfSpace):
            return True
        cur = cur.__cause__ or cur.__context__
        seen += 1
    return False


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def total_bytes(path: str | os.PathLike[str]) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize
