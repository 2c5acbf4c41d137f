"""Step 1 (driver, no Spark yet): the arguments checked and the controller metadata read into a BuildPlan."""

from __future__ import annotations

import uuid

from broker.partitions.record_entries import parse_kinds
from jobs.spark_build.options import BuildError, BuildOptions, BuildPlan, PartTask, build_name


def _check_options(opts: BuildOptions) -> None:
    if not opts.topic:
        raise BuildError("--topic is required")
    if opts.from_ms is not None and opts.to_ms is not None:
        if opts.from_ms > opts.to_ms:
            raise BuildError(f"--from ({opts.from_ms}) is after --to ({opts.to_ms})")
        if opts.from_ms == opts.to_ms:
            raise BuildError(f"empty window: --from and --to are both {opts.from_ms} (the window is [from, to))")
    if opts.window_ms <= 0 or opts.max_items <= 0 or opts.slots <= 0:
        raise BuildError("window, max items and slots must be positive")
    if opts.partitions is not None:
        if not opts.partitions:
            raise BuildError("--partitions names no partition")
        if len(set(opts.partitions)) != len(opts.partitions):
            raise BuildError(f"--partitions repeats a partition: {opts.partitions}")
    if opts.fault is not None and not opts.fault.startswith("build:"):
        raise BuildError(f"unknown fault {opts.fault!r}")
    try:
        parse_kinds(opts.kinds)
    except ValueError as exc:
        raise BuildError(f"--keys: {exc}") from None


def plan_build(opts: BuildOptions) -> BuildPlan:
    """Everything the driver knows before Spark starts; BuildError for bad arguments or an empty window."""
    from broker.metadata import MetadataClient
    from broker.partitions.object_listing import list_partition_objects
    from broker.partitions.topics import TopicRegistry

    _check_options(opts)
    kinds = parse_kinds(opts.kinds)
    try:
        meta = MetadataClient(opts.metadata_url, node_id=-1, namespace=opts.namespace)
    except Exception as exc:  # noqa: BLE001 - any connection error is an argument error here
        raise BuildError(f"cannot read the controller metadata at {opts.metadata_url}: {exc}") from None
    try:
        reg = TopicRegistry(meta)
        info = reg.get(opts.topic)
        if info is None:
            known = reg.names()
            raise BuildError(f"unknown topic {opts.topic!r} (topics in the metadata: "
                             f"{', '.join(known) if known else 'none'})")
        parts = sorted(opts.partitions) if opts.partitions is not None else list(range(info.partitions))
        bad = [p for p in parts if not 0 <= p < info.partitions]
        if bad:
            raise BuildError(f"topic {info.name!r} has partitions 0..{info.partitions - 1}; no partition {bad}")
        tasks: list[PartTask] = []
        pruned = 0
        objects: set[int] = set()
        uncommitted = 0
        for p in parts:
            listing = list_partition_objects(meta, info, p, opts.from_ms)
            pruned += listing.pruned
            for part in listing.parts:
                if part.end <= part.start:
                    continue
                objects.add(part.object_id)
                tasks.append(PartTask(p, part.stream_id, part.key, part.size, part.start, part.end))
            covered = sum(t.end - t.start for t in tasks if t.partition == p)
            uncommitted += max(0, listing.end_offset - listing.start_offset - covered) if not listing.pruned else 0
        if not tasks:
            window = f"[{opts.from_ms if opts.from_ms is not None else 'beginning'}, " \
                     f"{opts.to_ms if opts.to_ms is not None else 'now'})"
            raise BuildError(f"empty window: no committed object of topic {info.name!r} partitions {parts} can hold "
                             f"records stored in {window}")
        name = build_name(opts.index_dir, info.name, info.topic_id, parts, opts.from_ms, opts.to_ms, kinds,
                          opts.window_ms, opts.max_items)
        return BuildPlan(name=name, attempt=uuid.uuid4().hex[:12], topic=info.name, topic_id=info.topic_id,
                         partitions=parts, from_ms=opts.from_ms if opts.from_ms is not None else 0,
                         to_ms=opts.to_ms if opts.to_ms is not None else 1 << 62, kinds=kinds, tasks=tasks,
                         objects=len(objects), offsets=sum(t.end - t.start for t in tasks), pruned=pruned,
                         uncommitted_note=f"{uncommitted} offsets not in objects" if uncommitted else "")
    finally:
        meta.close()
