"""The project's own packages as one zip, shipped to executors whose Python has no mqindex installed.

Spark puts a zip given to `SparkContext.addPyFile` on every Python worker's path. The zip holds the
packages the executor functions import (jobs and the layers below it), read from wherever this process
imports them (an installed wheel or a source checkout). Written with the standard library's zipfile:
no packaging tool builds an importable zip of selected packages; entries are sorted and timestamped
alike so the same code gives the same bytes and the same content-addressed name (Spark refuses to
register one file name twice with different paths in one SparkContext).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("jobs", "broker", "index_service", "index_file", "storage_tier")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # zip's earliest time: fixed, so the bytes depend on the code only


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not importable here; cannot ship it to the executors")
    return Path(next(iter(spec.submodule_search_locations)))


def code_zip_bytes(packages: tuple[str, ...] = PACKAGES) -> bytes:
    """A zip of every .py file of the packages, at their import paths (`jobs/spark_build.py`, ...)."""
    files: list[tuple[str, Path]] = []
    for name in packages:
        root = package_dir(name)
        for path in root.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            files.append((f"{name}/{path.relative_to(root).as_posix()}", path))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, path in sorted(files):
            info = zipfile.ZipInfo(arcname, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, path.read_bytes())
    return buf.getvalue()


def write_code_zip(directory: Path | None = None, packages: tuple[str, ...] = PACKAGES) -> Path:
    """Write the zip as `mqindex-code-<sha256 prefix>.zip` (kept: a running SparkContext serves it to
    executors that join later) and return its path."""
    data = code_zip_bytes(packages)
    directory = directory or Path(tempfile.gettempdir()) / f"mqindex-spark-code-{os.getuid()}"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"mqindex-code-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if not path.exists() or path.read_bytes() != data:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return path


def ship_code(sc: object, path: Path) -> None:
    """Add the zip to the SparkContext's Python files. The driver keeps importing its own installation:
    the entry addPyFile puts on this process's sys.path is taken out again."""
    import sys

    sc.addPyFile(str(path))  # type: ignore[attr-defined]
    sys.path[:] = [p for p in sys.path if os.path.basename(p) != path.name]
