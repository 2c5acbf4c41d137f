"""Every setting of a broker node and its index that `serve` exposes (flag, config file key, MQINDEX_*).

One row per setting: name (config key; flag --name-with-dashes; env MQINDEX_NAME), type, default, help,
and where it goes (a BrokerNode.open argument, "index." + a ServiceConfig field, "compaction." + a
CompactionConfig field, or "metadata." + a MetadataClient snapshot argument). docs/OPERATIONS.md
lists the same table. Optional settings (default None) take "none" or an empty value to mean unset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIB = 1 << 20


@dataclass(frozen=True)
class NodeSetting:
    name: str
    kind: type  # int or float
    default: int | float | None
    help: str
    target: str  # BrokerNode.open argument, "index.<ServiceConfig field>", "compaction.<...>" or "metadata.<...>"
    minimum: float = 0
    maximum: float | None = None


NODE_SETTINGS: tuple[NodeSetting, ...] = (
    NodeSetting("retention_ms", int, None, "server default retention for topics without retention.ms "
                "(unset: keep forever)", "retention_ms", 1),
    NodeSetting("retention_bytes", int, None, "server default bytes kept per partition for topics without "
                "retention.bytes (unset: no limit)", "retention_bytes", 1),
    NodeSetting("message_max_bytes", int, 1_048_588, "largest record batch (bytes as Kafka counts them) a Kafka "
                "producer may send to a topic without max.message.bytes, else MESSAGE_TOO_LARGE; HTTP holds each value "
                "to it (Kafka's message.max.bytes)", "message_max_bytes", 0, (1 << 31) - 1),
    NodeSetting("maintenance_interval_s", float, 30.0, "seconds between retention and object cleanup passes",
                "maintenance_interval_s", 0.01),
    NodeSetting("upload_threshold", int, 32 * MIB, "cached bytes that trigger an upload to the object store",
                "upload_threshold", 1),
    NodeSetting("upload_interval_s", float, 2.0, "seconds after which cached records are uploaded anyway",
                "upload_interval_s", 0.01),
    NodeSetting("so_threshold", int, 8 * MIB, "a stream with at least this many bytes in an upload gets its "
                "own stream object (smaller ones share the stream set object)", "so_threshold", 1),
    NodeSetting("block_cache_bytes", int, 64 * MIB, "bytes of object data blocks cached for reads",
                "block_cache_bytes", 0),
    NodeSetting("max_cache_bytes", int, None, "log cache bytes before produce waits for uploads "
                "(unset: max(4 x upload_threshold, 256 MiB))", "max_cache_bytes", 1),
    NodeSetting("failover_history_per_node", int, 20, "failover reports kept per node id (GET /v1/cluster/failovers)",
                "failover_history_per_node", 1),
    NodeSetting("read_your_writes_s", float, 5.0, "seconds a key lookup waits for earlier records to be indexed",
                "read_your_writes_s", 0),
    NodeSetting("index_slots", int, 262_144, "hash slots of each index file", "index.slots", 1),
    NodeSetting("index_max_items", int, 1_000_000, "index entries a file holds before it rolls",
                "index.max_items", 1),
    NodeSetting("index_roll_age_ms", int, 3_600_000, "an index file rolls once this old (ms)",
                "index.roll_age_ms", 1),
    NodeSetting("index_retention_ms", int, None, "index-only retention (ms): index files older than this are "
                "deleted even while their records are stored, which are then no longer found by key "
                "(unset: an index file lives exactly as long as its records)", "index.retention_ms", 1),
    NodeSetting("index_maintain_interval_s", float, 1.0, "seconds between index compaction/upload/expiry cycles",
                "index.maintain_interval_s", 0.01),
    NodeSetting("index_query_threads", int, 4, "threads answering index queries", "index.query_threads", 1),
    NodeSetting("index_filter_cache_bytes", int, 64 * MIB, "bytes of index key filters held in memory (least "
                "recently used dropped first; a filter not held is read from local disk or the store)",
                "index.filter_cache_bytes", 0),
    # index_service/merging.py: uploaded index files merged in tiers as they age
    NodeSetting("index_merge_tiers", int, 2, "tiers uploaded index files are merged into as they age: 0 none, "
                "1 a closed UTC day into one file, 2 also a closed week into one", "index.merge_tier_count", 0, 2),
    NodeSetting("index_merge_settle_ms", int, 3_600_000, "a closed window is merged once it ended this long ago",
                "index.merge_settle_ms", 0),
    NodeSetting("index_merge_min_files", int, 2, "a closed window is merged once it holds this many files",
                "index.merge_min_files", 2),
    NodeSetting("index_merge_max_inputs", int, 32, "index files merged in one step at most",
                "index.merge_max_inputs", 2),
    NodeSetting("index_merge_max_items", int, 16_000_000, "entries of one merged index file at most",
                "index.merge_max_items", 1),
    NodeSetting("index_merge_window_bytes", int, 8 * MIB, "read buffers of one merge, split between its inputs",
                "index.merge_window_bytes", 1),
    NodeSetting("index_merge_grace_ms", int, 600_000, "a merge's inputs are deleted from the store this long after "
                "the merged file replaced them", "index.merge_grace_ms", 0),
    # broker/cluster/published_merge.py: the failover leader's merges of departed nodes' and rescued index files
    NodeSetting("cluster_merge_tiers", int, 2, "tiers the published index files of departed nodes and failover "
                "rescues are merged into: 0 none, 1 a closed UTC day into one file, 2 also a closed week into one",
                "index.cluster_merge_tier_count", 0, 2),
    NodeSetting("cluster_merge_interval_s", float, 30.0, "seconds between the failover leader's passes over those "
                "published files (their expiry, then their merges)", "index.cluster_merge_interval_s", 0.01),
    NodeSetting("cluster_merge_settle_ms", int, 3_600_000, "a closed window of published files is merged once it "
                "ended this long ago", "index.cluster_merge_settle_ms", 0),
    NodeSetting("cluster_merge_departed_ms", int, 86_400_000, "a node not alive this long has its published index "
                "files merged", "index.cluster_merge_departed_ms", 0),
    NodeSetting("cluster_merge_grace_ms", int, 600_000, "the inputs of a merge of published files are deleted from "
                "the store this long after the merged file replaced them", "index.cluster_merge_grace_ms", 0),
    NodeSetting("cluster_merge_max_inputs", int, 32, "published index files merged in one step at most",
                "index.cluster_merge_max_inputs", 2),
    NodeSetting("cluster_merge_max_items", int, 16_000_000, "entries of one merged published file at most",
                "index.cluster_merge_max_items", 1),
    # broker/compaction (CompactionConfig): stream set object and stream object compaction
    NodeSetting("compaction_interval_s", float, 300.0, "seconds between compaction cycles (0: none but on request)",
                "compaction.interval_s", 0),
    NodeSetting("compaction_force_split_ms", int, 7_200_000, "stream set objects older than this are split "
                "wholly into stream objects", "compaction.force_split_ms", 0),
    NodeSetting("compaction_max_objects", int, 500, "stream set objects merged per cycle, newest first",
                "compaction.max_objects", 1),
    NodeSetting("compaction_split_size", int, 8 * MIB, "a stream's run bigger than this leaves a stream set object "
                "as its own stream object", "compaction.split_size", 1),
    NodeSetting("compaction_cache_size", int, 200 * MIB, "memory of a compaction run: plan, read batch, part buffer",
                "compaction.cache_size", 1),
    NodeSetting("compaction_read_batch", int, 16 * MIB, "bytes of blocks one compaction read batch fetches",
                "compaction.read_batch", 1),
    NodeSetting("compaction_so_max_size", int, 10 << 30, "stream object compaction merges up to this many bytes",
                "compaction.so_max_size", 1),
    NodeSetting("compaction_copy_min", int, 5 * MIB, "pieces this big move by server-side copy (UploadPartCopy)",
                "compaction.copy_min", 1),
    NodeSetting("compaction_part_size", int, 5 * MIB, "multipart part size of the objects compaction writes",
                "compaction.part_size", 1),
    NodeSetting("compaction_grace_ms", int, 60_000, "compacted objects are deleted this long after the commit",
                "compaction.grace_ms", 0),
    NodeSetting("compaction_prepared_ttl_ms", int, 1_800_000, "prepared output objects of a crashed cycle expire "
                "after this", "compaction.prepared_ttl_ms", 1),
    # broker/cluster/balancer.py (BalanceConfig): the self-balancer, moving partitions by measured load
    NodeSetting("auto_balance", int, 1, "1: with several nodes, move partitions off a node whose load stays above "
                "the mean (the lowest live node id decides); 0: off (load is still reported)", "balance.enabled",
                0, 1),
    NodeSetting("auto_balance_threshold", float, 0.3, "a node is overloaded when its load (bytes in/out and requests "
                "per second of the partitions it leads) is this fraction above the mean", "balance.threshold", 0.01),
    NodeSetting("auto_balance_sustain_s", float, 120.0, "seconds a node stays overloaded before a move",
                "balance.sustain_s", 0),
    NodeSetting("auto_balance_cooldown_s", float, 600.0, "a partition moved (by anyone) within this many seconds "
                "is not moved by the balancer", "balance.cooldown_s", 0),
    NodeSetting("auto_balance_report_s", float, 10.0, "seconds between load reports and balancer decisions",
                "balance.report_s", 0.1),
    # broker/metadata (MetadataClient): snapshots of the metadata image, and the log truncated behind them
    NodeSetting("metadata_snapshot_every_records", int, 10_000, "metadata log records since the newest snapshot "
                "that make the maintenance pass write a snapshot", "metadata.snapshot_every_records", 1),
    NodeSetting("metadata_snapshot_interval_s", float, 3600.0, "seconds after which the maintenance pass writes a "
                "metadata snapshot even if fewer records came", "metadata.snapshot_interval_s", 0.01),
    NodeSetting("metadata_snapshots_kept", int, 2, "metadata snapshots kept; the log is truncated below the "
                "oldest kept one", "metadata.snapshots_kept", 1),
    # the Kafka listener (api/kafka/): read by the listener, not by the node
    NodeSetting("auto_create_topics", int, 1, "1: a Kafka client's Metadata request that names a topic which does not "
                "exist and allows auto-creation (producers do by default) creates it with default_partitions, as "
                "Kafka's auto.create.topics.enable; 0: it is answered UNKNOWN_TOPIC_OR_PARTITION",
                "kafka.auto_create_topics", 0, 1),
    NodeSetting("default_partitions", int, 1, "partitions of a topic created without a count: automatically, by "
                "CreateTopics, POST /v1/topics or `mqindex topics create` (Kafka's num.partitions)",
                "kafka.default_partitions", 1, 10_000),
    # value searches of the HTTP API (api/http/search_jobs.py): read by the app, not by the node
    NodeSetting("search_max_concurrent", int, 1, "value searches (POST /v1/searches) running at a time; more "
                "are refused with 429 (0: searches off)", "search.max_concurrent", 0),
    NodeSetting("search_max_rows", int, 1000, "matches kept per value search: it stops there",
                "search.max_rows", 1, 100_000),
)
BY_NAME = {s.name: s for s in NODE_SETTINGS}


def value(given: dict[str, Any], name: str) -> Any:
    """The setting `name` from the values given (Settings.node), else its default."""
    return given.get(name, BY_NAME[name].default)


def coerce(s: NodeSetting, value: Any) -> int | float | None:
    """A setting's value from TOML, an environment string or a flag; a clear error otherwise."""
    from api.config import ConfigError

    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        if s.default is None:
            return None
        raise ConfigError(f"{s.name} needs a value (default {s.default})")
    if isinstance(value, bool):
        raise ConfigError(f"{s.name} must be a number, got {value!r}")
    try:
        v = s.kind(value) if not isinstance(value, str) or s.kind is float else int(value.replace("_", ""))
    except (TypeError, ValueError):
        raise ConfigError(f"{s.name} must be {'an integer' if s.kind is int else 'a number'}, got {value!r}") from None
    if isinstance(value, float) and s.kind is int and value != int(value):
        raise ConfigError(f"{s.name} must be an integer, got {value!r}")
    if v < s.minimum:
        raise ConfigError(f"{s.name} must be >= {s.minimum}, got {v}")
    if s.maximum is not None and v > s.maximum:
        raise ConfigError(f"{s.name} must be <= {s.maximum}, got {v}")
    return v


def open_kwargs(values: dict[str, Any]) -> dict[str, Any]:
    """BrokerNode.open keyword arguments (index settings in index_config) for the given setting values."""
    from broker.cluster.balancer import BalanceConfig
    from broker.compaction import CompactionConfig

    out: dict[str, Any] = {}
    index: dict[str, Any] = {}
    compaction: dict[str, Any] = {}
    balance: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for s in NODE_SETTINGS:
        v = values.get(s.name, s.default)
        if s.target.startswith(("search.", "kafka.")):
            continue  # the HTTP app's (api/http/search_routes.py), the Kafka listener's (api/kafka/server.py)
        if s.target.startswith("metadata."):
            metadata[s.target.removeprefix("metadata.")] = v
        elif s.target.startswith("compaction."):
            compaction[s.target.removeprefix("compaction.")] = v
        elif s.target.startswith("balance."):
            balance[s.target.removeprefix("balance.")] = bool(v) if s.target == "balance.enabled" else v
        elif s.target == "index.merge_tier_count":
            from index_service.config import DAY_MS, WEEK_MS

            index["merge_tiers_ms"] = (DAY_MS, WEEK_MS)[:int(v)]
        elif s.target == "index.cluster_merge_tier_count":
            from index_service.config import DAY_MS, WEEK_MS

            index["cluster_merge_tiers_ms"] = (DAY_MS, WEEK_MS)[:int(v)]
        elif s.target.startswith("index."):
            if v is not None or s.default is None:
                index[s.target.removeprefix("index.")] = v
        elif v is not None:
            out[s.target] = v
    out["index_config"] = index
    out["compaction"] = CompactionConfig(**compaction)
    out["balance"] = BalanceConfig(**balance)
    out["metadata_options"] = metadata
    return out
