"""Registering index files built outside the service (the Spark batch builder) as UPLOADED.

A builder uploads compacted native files to the index's store and then calls

    register_build(index_dir, name, attempt, files)

which writes ONE document, `<index_dir>/builds/<name>.json`, atomically (temp file, fsync, rename,
fsync the folder). Nothing is served until a service adopts the document: on open, and on every
maintenance cycle of a running service (`maintain()`, or the background thread). Adoption:

1. writes each file's manifest into `uploaded/` (the same manifest the service writes after its own
   uploads, plus `sort_tag`, so two builds of the same window, or a build and an online file with the
   same begin time, never collide in the file map);
2. keeps each file's key filter beside its manifest (key_filters.adopt_filter: the builder's, else built from
   the object), then adds every file of the build to the file map in one step (a query sees all of them or none);
3. expires the files of any earlier attempt of the same build `name` (their manifests, then their
   objects), so running the same build twice leaves one set of files; while both sets are briefly in
   the map, queries de-duplicate hits by (queue, offset), so answers do not change;
4. removes the build document.

A build that indexed everything the broker indexes online over a range (its document's `info.covers`: a topic,
a store-time window [from_ms, to_ms) and per partition the [start, end) offset runs it read; jobs/spark_build
writes it when the build took every key kind) supersedes the service's own uploaded files whose every entry lies
in that range (every offset range of the file inside a run of its partition, its oldest and newest store time
inside the window), as a merge replaces its inputs (merging.py): the `replaces` list (with `committed_ms`) is
written into the build's first file's manifest after every other manifest of the build (that write is the
commit; recovery then drops the superseded files), the file map swaps the superseded files for the build's in
one step, their manifests, filters and ranges go, and their objects are deleted `merge_grace_ms` later. So a
`spark-build --merged` backfill over hours the service already indexed leaves each entry in one served file:
a key is read once and answered once. A file only partly inside the range stays served; each file of the build
carries the cover (`covers` in its manifest, read back on open), and a lookup reads such a file only for the part
of its time range outside the build's window, or not at all when the window holds all the lookup asks of it
(build_covers.py); hits are still de-duplicated by (queue, offset).

Every step is idempotent, so a crash anywhere is finished by the next open or cycle. A failed build
never calls `register_build`, so it leaves nothing for the service to find.

Build file stems are `b<begin:016d>-<name>-<attempt>-<seq:04d>`; `name` and `attempt` are lowercase
hex (the builder derives `name` from the build's parameters, `attempt` is random per run).
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from index_service.build_covers import Cover
from index_service.file_map import FileMap
from index_service.key_filters import adopt_filter
from index_service.lifecycle import Lifecycle, uploaded_reader
from index_service.managed_file import ManagedFile
from index_service.merging import unlist_input
from index_service.model import FileState
from index_service.state_folders import (
    MANIFEST_EXT,
    UPLOADED,
    DocumentError,
    StateFolders,
    decode_document,
    encode_document,
    fsync_dir,
)

log = logging.getLogger("mqindex.index_service.builds")

BUILDS = "builds"
#: every object a builder uploads lives under this prefix of the index store (the service's own
#: orphan sweep covers its own remote_prefix only, so a build in progress is never swept by a running service)
BUILD_PREFIX = "index-builds/"
MANIFEST_FIELDS = ("stem", "key", "size", "crc32c", "begin_ms", "min_ms", "max_ms", "items", "format", "head",
                   "tail_offset", "tail")
_HEX = re.compile(r"[0-9a-f]{4,40}")
_STEM = re.compile(r"b(\d{16})-([0-9a-f]{4,40})-([0-9a-f]{4,40})-(\d{4,})")


class BuildRegistrationError(ValueError):
    """A build document or one of its file manifests is malformed."""


def build_stem(begin_ms: int, name: str, attempt: str, seq: int) -> str:
    return f"b{begin_ms:016d}-{name}-{attempt}-{seq:04d}"


def parse_build_stem(stem: str) -> tuple[str, str] | None:
    """(build name, attempt) of a build file's stem; None for the service's own files."""
    m = _STEM.fullmatch(stem)
    return (m.group(2), m.group(3)) if m else None


def build_key(name: str, attempt: str, stem: str) -> str:
    """The store key of one build file."""
    return f"{BUILD_PREFIX}{name}/{attempt}/{stem}.mqxc"


def _check_files(name: str, attempt: str, files: list[dict[str, Any]]) -> None:
    if not _HEX.fullmatch(name) or not _HEX.fullmatch(attempt):
        raise BuildRegistrationError(f"build name {name!r} and attempt {attempt!r} must be 4-40 lowercase hex digits")
    if not files:
        raise BuildRegistrationError(f"build {name}: no files to register")
    stems = set()
    for i, body in enumerate(files):
        missing = [f for f in MANIFEST_FIELDS if f not in body]
        if missing:
            raise BuildRegistrationError(f"build {name}: file {i} lacks {', '.join(missing)}")
        stem = str(body["stem"])
        if parse_build_stem(stem) != (name, attempt):
            raise BuildRegistrationError(f"build {name}: file stem {stem!r} does not belong to attempt {attempt}")
        if body.get("sort_tag") != stem:
            raise BuildRegistrationError(f"build {name}: file {stem} must carry sort_tag == stem")
        if body["format"] != "native-compacted":
            raise BuildRegistrationError(f"build {name}: file {stem} has format {body['format']!r}")
        if stem in stems:
            raise BuildRegistrationError(f"build {name}: stem {stem} repeats")
        stems.add(stem)


def register_build(index_dir: str | os.PathLike[str], name: str, attempt: str,
                   files: list[dict[str, Any]], info: dict[str, Any] | None = None) -> Path:
    """Register the uploaded files of one build attempt in one atomic step (see the module doc).

    Works whether or not a service has the directory open (it takes no lock): a running service
    adopts the build on its next maintenance cycle, a service opened later adopts it on open.
    Returns the path of the build document (gone once adopted)."""
    _check_files(name, attempt, files)
    root = Path(index_dir).resolve()
    if not (root / UPLOADED).is_dir():
        StateFolders(root)  # creates the state folders of a new index directory
    d = root / BUILDS
    d.mkdir(exist_ok=True)
    body = {"name": name, "attempt": attempt, "files": files, "info": info or {}}
    dest = d / f"{name}{MANIFEST_EXT}"
    tmp = d / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "wb") as f:
        f.write(encode_document(body))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    fsync_dir(d)
    log.info("build registered", extra={"build": name, "attempt": attempt, "files": len(files), "doc": str(dest)})
    return dest


def pending_builds(index_dir: str | os.PathLike[str]) -> list[str]:
    """Names of builds registered but not yet adopted by a service."""
    d = Path(index_dir) / BUILDS
    if not d.is_dir():
        return []
    return sorted(p.name[: -len(MANIFEST_EXT)] for p in d.iterdir() if p.name.endswith(MANIFEST_EXT))


def registered_attempts(index_dir: str | os.PathLike[str], name: str) -> set[str]:
    """Attempts of build `name` that a service serves or will serve (manifests in uploaded/ and a
    pending build document). Objects of any other attempt are leftovers of a failed run."""
    root = Path(index_dir)
    out: set[str] = set()
    up = root / UPLOADED
    if up.is_dir():
        for p in up.iterdir():
            parsed = parse_build_stem(p.name[: -len(MANIFEST_EXT)]) if p.name.endswith(MANIFEST_EXT) else None
            if parsed is not None and parsed[0] == name:
                out.add(parsed[1])
    doc = root / BUILDS / f"{name}{MANIFEST_EXT}"
    if doc.is_file():
        try:
            out.add(str(decode_document(str(doc), doc.read_bytes())["attempt"]))
        except (DocumentError, KeyError):
            pass
    return out


@dataclass
class AdoptReport:
    builds: list[str] = field(default_factory=list)
    files_added: int = 0
    files_replaced: int = 0
    files_superseded: int = 0  # the service's own files the build covers, no longer served
    failed: list[str] = field(default_factory=list)


def adopt_builds(folders: StateFolders, files: FileMap, lifecycle: Lifecycle) -> AdoptReport:
    """Serve every registered build (service side; called on open and by each maintenance cycle)."""
    rep = AdoptReport()
    load_covers(folders, files)
    d = folders.root / BUILDS
    if not d.is_dir():
        return rep
    for doc in sorted(p for p in d.iterdir() if p.name.endswith(MANIFEST_EXT)):
        try:
            body = folders.read_document(doc)
            name, attempt, bodies = str(body["name"]), str(body["attempt"]), list(body["files"])
            _check_files(name, attempt, bodies)
        except (DocumentError, KeyError, TypeError, BuildRegistrationError) as exc:
            folders.quarantine(doc, str(exc), "UPLOADED")
            rep.failed.append(doc.name)
            continue
        if lifecycle.store is None:
            log.error("a build is registered but the service has no store; not served",
                      extra={"build": name, "doc": str(doc)})
            rep.failed.append(name)
            continue
        try:
            present = {mf.stem for mf in files.files()}
            new: list[ManagedFile] = []
            covers = (body.get("info") or {}).get("covers")
            cover = [Cover.parse(name, covers)] if covers else []
            for fb in bodies:
                stem = str(fb["stem"])
                manifest = folders.manifest(stem)
                if covers:
                    fb = {**fb, "covers": covers}  # what a lookup no longer reads elsewhere (build_covers.py)
                if not manifest.exists():
                    folders.write_document(manifest, fb)
                if stem in present:
                    continue
                reader = uploaded_reader(lifecycle.store, fb)
                adopt_filter(folders, lifecycle.store, stem, reader, str(fb["key"]))  # before it is served
                mf = ManagedFile(stem, int(fb["begin_ms"]), FileState.UPLOADED, reader, str(fb["key"]), sort_tag=stem)
                mf.remote_key = str(fb["key"])
                mf.size_bytes = int(fb["size"])
                mf.covers = cover
                new.append(mf)
            superseded = covered_files(files, body.get("info") or {})
            if superseded:
                first = str(bodies[0]["stem"])
                committed = lifecycle.config.clock()
                replaces = [(m.stem, m.remote_key or "") for m in superseded]
                manifest = folders.manifest(first)
                fb = folders.read_document(manifest)
                fb.update({"replaces": [list(r) for r in replaces], "committed_ms": committed})
                folders.write_document(manifest, fb)  # the commit: recovery drops the superseded files
                files.swap(superseded, new)
                for mf in files.by_state(FileState.UPLOADED):  # (already served if an earlier adoption stopped)
                    if mf.stem == first:
                        mf.replaces, mf.committed_ms = replaces, committed
                for m in superseded:
                    unlist_input(folders, m.stem)
                    if lifecycle.filters is not None:
                        lifecycle.filters.forget(m.stem)
                rep.files_superseded += len(superseded)
                log.info("build supersedes files it covers", extra={
                    "build": name, "attempt": attempt, "files": [m.stem for m in superseded], "by": first})
            else:
                files.add_many(new)
            rep.files_added += len(new)
            for mf in files.by_state(FileState.UPLOADED):
                parsed = parse_build_stem(mf.stem)
                if parsed is not None and parsed[0] == name and parsed[1] != attempt:
                    lifecycle.expire(mf)  # manifest first, then the object
                    rep.files_replaced += 1
            folders.remove(doc)
            rep.builds.append(name)
            log.info("build adopted", extra={"build": name, "attempt": attempt, "files": len(bodies),
                                             "added": len(new), "state": "UPLOADED"})
        except Exception as exc:  # noqa: BLE001 - left in builds/, retried next cycle
            log.warning("adopting a build failed, retrying later",
                        extra={"build": name, "error": f"{type(exc).__name__}: {exc}"})
            rep.failed.append(name)
    return rep


def load_covers(folders: StateFolders, files: FileMap) -> None:
    """The covers of the builds' files served but not read yet (after an open), from their manifests; a manifest
    that cannot be read gives none (its file's neighbours are then read whole, as before)."""
    for mf in files.by_state(FileState.UPLOADED):
        parsed = parse_build_stem(mf.stem)
        if mf.covers is not None or parsed is None:
            continue
        try:
            covers = folders.read_document(folders.manifest(mf.stem)).get("covers")
            mf.covers = [Cover.parse(parsed[0], covers)] if covers else []
        except (DocumentError, OSError, KeyError, TypeError, ValueError) as exc:
            log.warning("the cover of a build's file is unreadable; files it covers are read whole",
                        extra={"file": mf.stem, "error": f"{type(exc).__name__}: {exc}"})
            mf.covers = []


def covered_files(files: FileMap, info: dict[str, Any]) -> list[ManagedFile]:
    """The service's own uploaded files every entry of which lies in what a build covers (`info["covers"]`)."""
    covers = info.get("covers")
    if not covers:
        return []
    topic, lo_ms, hi_ms = str(covers["topic"]), int(covers["from_ms"]), int(covers["to_ms"])
    runs = {int(p): [(int(a), int(b)) for a, b in rs] for p, rs in covers["offsets"].items()}

    def inside(mf: ManagedFile) -> bool:
        bounds = mf.time_bounds()
        if not mf.ranges or bounds is None or bounds[0] < lo_ms or bounds[1] >= hi_ms:
            return False
        return all(t == topic and any(a <= lo and hi < b for a, b in runs.get(q, ()))
                   for (t, q), (lo, hi) in mf.ranges.items())

    return [mf for mf in files.by_state(FileState.UPLOADED)
            if parse_build_stem(mf.stem) is None and not mf.replaces and mf.exact and inside(mf)]


def uploaded_manifests(index_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """stem -> manifest body of every uploaded file of a directory (for tools and tests)."""
    up = Path(index_dir) / UPLOADED
    out: dict[str, dict[str, Any]] = {}
    if up.is_dir():
        for p in sorted(up.iterdir()):
            if p.name.endswith(MANIFEST_EXT):
                out[p.name[: -len(MANIFEST_EXT)]] = decode_document(str(p), p.read_bytes())
    return out
