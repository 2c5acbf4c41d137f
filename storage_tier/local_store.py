"""BlobStore on a local directory: atomic writes (temp file + fsync + rename + directory fsync)."""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Iterable
from pathlib import Path

from storage_tier.blob_store import BlobStore, MultipartWriter, resolve_range
from storage_tier.disk_space import OUT_OF_SPACE_ERRNOS
from storage_tier.durability import fsync_dir
from storage_tier.errors import BlobNotFound, OutOfSpace, StorageError
from storage_tier.retry import RetryPolicy

#: scratch folder inside the root; never listed, never a valid key prefix collision (keys can't start with '.')
_SCRATCH = ".mqindex-tmp"


def _transient(exc: BaseException) -> bool:
    # disk-full and the like are not helped by retrying; an interrupted call is
    return isinstance(exc, InterruptedError) or (isinstance(exc, OSError) and exc.errno == errno.EAGAIN)


class LocalStore(BlobStore):
    name = "local"

    def __init__(self, url: str, root: str | os.PathLike[str], retry: RetryPolicy | None = None) -> None:
        super().__init__(url, retry)
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.scratch = self.root / _SCRATCH
        self.scratch.mkdir(exist_ok=True)

    def _path(self, key: str) -> Path:
        if key.split("/")[0] == _SCRATCH:
            raise StorageError(self.name, key, f"keys under {_SCRATCH}/ are reserved")
        return self.root / key

    def _run(self, op: str, key: str | None, fn):  # type: ignore[no-untyped-def]
        try:
            return self.retry.run(fn, backend=self.name, key=key, op=op, is_transient=_transient,
                                  bound=self.retry_bound)
        except OSError as exc:
            raise self.out_of_space(key, exc) or exc from exc

    def out_of_space(self, key: str | None, exc: OSError) -> OutOfSpace | None:
        """The clear error for a write the filesystem refused for lack of space (None for other errors)."""
        if exc.errno in OUT_OF_SPACE_ERRNOS:
            return OutOfSpace(self.name, key, str(self.root), exc)
        return None

    def publish(self, tmp: Path, key: str) -> None:
        """Atomically move a fully written and fsynced scratch file to `key`."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
        fsync_dir(dest.parent)

    def scratch_file(self) -> Path:
        return self.scratch / uuid.uuid4().hex

    def _put(self, key: str, data: bytes) -> None:
        def write() -> None:
            tmp = self.scratch_file()
            try:
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                self.publish(tmp, key)
            finally:
                tmp.unlink(missing_ok=True)

        self.meter.record("PUT", bytes_in=len(data))
        self._run("put", key, write)

    def _get(self, key: str, start: int, end: int | None) -> bytes:
        path = self._path(key)

        def read() -> bytes:
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    lo, hi = resolve_range(self.name, key, size, start, end)
                    f.seek(lo)
                    return f.read(hi - lo)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                raise BlobNotFound(self.name, key) from None

        self.meter.record("GET")
        data = self._run("get", key, read)
        self.meter.add_bytes(bytes_out=len(data))
        return data

    def _size(self, key: str) -> int:
        self.meter.record("HEAD")
        try:
            st = self._path(key).stat()
        except (FileNotFoundError, NotADirectoryError):
            raise BlobNotFound(self.name, key) from None
        if not stat.S_ISREG(st.st_mode):
            raise BlobNotFound(self.name, key)
        return st.st_size

    def _delete(self, keys: list[str]) -> None:
        self.meter.record("DELETE")
        parents: set[Path] = set()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink()
                parents.add(path.parent)
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
                pass
        for parent in parents:
            fsync_dir(parent)
            # prune empty folders left behind, up to the root
            p = parent
            while p != self.root:
                try:
                    p.rmdir()
                except OSError:
                    break
                p = p.parent

    def _list(self, prefix: str) -> Iterable[str]:
        self.meter.record("LIST")
        # walk only the deepest folder the prefix names
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self.root / base if base else self.root
        if not top.is_dir():
            return []
        out = []
        for dirpath, dirnames, filenames in os.walk(top):
            if Path(dirpath) == self.root and _SCRATCH in dirnames:
                dirnames.remove(_SCRATCH)
            rel = os.path.relpath(dirpath, self.root)
            for fn in filenames:
                key = fn if rel == "." else f"{rel}/{fn}"
                if key.startswith(prefix):
                    out.append(key)
        return out

    def _multipart(self, key: str) -> MultipartWriter:
        return _LocalMultipart(self, key)


class _LocalMultipart(MultipartWriter):
    store: LocalStore

    def __init__(self, store: LocalStore, key: str) -> None:
        super().__init__(store, key)
        self.tmp = store.scratch_file()
        self.file = open(self.tmp, "wb")  # noqa: SIM115 - closed in complete/abort

    def _write_part(self, data: bytes) -> None:
        self.store.meter.record("PUT", bytes_in=len(data))
        self._write(data)

    def _write(self, data: bytes) -> None:
        try:
            self.file.write(data)
        except OSError as exc:
            raise self.store.out_of_space(self.key, exc) or exc from exc

    def _copy_part(self, src_key: str, start: int, end: int | None) -> None:
        # no server-side copy on a plain directory: a read-and-write of the range
        data = self.store.get(src_key, start, end)
        self.store.meter.record("COPY", bytes_in=len(data))
        self._write(data)

    def _complete(self) -> None:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            self.store.meter.record("PUT")
            self.store.publish(self.tmp, self.key)
        except OSError as exc:
            raise self.store.out_of_space(self.key, exc) or exc from exc
        finally:
            self.file.close()
            self.tmp.unlink(missing_ok=True)

    def _abort(self) -> None:
        self.file.close()
        self.tmp.unlink(missing_ok=True)
        self.store.meter.record("DELETE")
