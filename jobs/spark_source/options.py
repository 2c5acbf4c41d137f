"""The options of `spark.read.format("mqindex")` / `spark.readStream.format("mqindex")`, parsed and checked.

Names follow Spark's Kafka source where the concept is the same:

- `metadata` (required): the controller metadata URL (`sqlite:///...`, `postgresql://...?schema=s`);
- `store` (required): the broker's object store URL (`s3://bucket/prefix?endpoint=...`, `file:///dir`);
- `topic` / `subscribe` (a comma-separated list) or `subscribePattern` (a Python regular expression matched
  against the whole topic name); exactly one of them;
- `partitions`: comma-separated partition numbers (default: every partition of each topic);
- `startingOffsets` / `endingOffsets`: `earliest`, `latest`, or JSON per topic and partition as in Spark's
  Kafka source, `{"orders": {"0": 23, "1": -2}}`, where -2 means earliest and -1 latest (partitions not
  named take `earliest` for the start and `latest` for the end); a streaming read starts at `latest`
  unless `startingOffsets` or `startingTimestamp` is given;
- `startingTimestamp` / `endingTimestamp`: milliseconds since the epoch; rows with a timestamp in
  [start, end) (see docs/SPARK.md for how this differs from Kafka's offset-by-timestamp lookup);
- `maxSplitBytes` (default 64 MiB): the bytes of objects one Spark task reads at most (a larger object
  part is cut into offset ranges);
- `index`: the HTTP URL of an `mqindex serve` node, used to answer `key = ...` / `key IN (...)` predicates
  through the cluster's key index (without it key predicates are evaluated by Spark over a scan);
- `indexKeys`: comma-separated index keys (UTF-8): only records indexed under one of them are read, i.e.
  whose Kafka key, a space-separated part of a `KEYS` header or a `UNIQ_KEY` header is one of them, looked
  up in the cluster's key index (needs `index`). Spark's Python data sources are only given filters on
  columns, not on the elements of the `headers` array, so header equality is an option, not a predicate;
- `timeSkewMs` (default 300000, 5 min): how far a record's timestamp may be ahead of the clock of the
  broker that committed its object; object parts committed more than this before a lower time bound are
  not read (0 when producers' and brokers' clocks agree and timestamps are the produce time);
- `kafka.bootstrap.servers` (batch reads): the cluster's Kafka listeners; `latest` is then each partition's
  high watermark, and the records past the committed end (still only in a node's WAL or log cache) are read
  through Kafka from the node leading the partition (tail.py); other `kafka.*` options go to that consumer.
  Without it a read ends at the committed end. A stream always reads to the committed end (refused there);
- `namespace` (default `_kafka_mqindex`): the metadata namespace of the broker's Kafka topics;
- `failOnDataLoss` (default true): a requested offset below a partition's retained start is an error
  (false: read from the retained start); in a stream, so are a topic deleted while the query reads it
  (false: go on without it) and a partition whose offsets went back (false: read it from its earliest).

Bad options raise `SourceOptionError` naming the option before any metadata or store access.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1
DEFAULT_SPLIT_BYTES = 64 << 20
DEFAULT_NAMESPACE = "_kafka_mqindex"
DEFAULT_SKEW_MS = 5 * 60 * 1000

#: per topic, per partition: an offset, EARLIEST or LATEST; or one of them for every partition
OffsetSpec = int | dict[str, dict[int, int]]


class SourceOptionError(ValueError):
    """A bad option of the mqindex data source (the message names the option)."""


@dataclass(frozen=True)
class SourceOptions:
    metadata_url: str
    store_url: str
    topics: tuple[str, ...]  # empty when `pattern` is given
    pattern: str | None
    partitions: tuple[int, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    from_ms: int | None
    to_ms: int | None
    max_split_bytes: int = DEFAULT_SPLIT_BYTES
    index_url: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    fail_on_data_loss: bool = True
    skew_ms: int = DEFAULT_SKEW_MS
    index_keys: tuple[bytes, ...] | None = None
    kafka: tuple[tuple[str, str], ...] | None = None  # the kafka.* options without the prefix (tail.py)

    @property
    def kafka_conf(self) -> dict[str, str] | None:
        return None if self.kafka is None else dict(self.kafka)

    def offset_for(self, spec: OffsetSpec, topic: str, partition: int, default: int) -> int:
        """The offset (or EARLIEST / LATEST) `spec` gives one partition; `default` for one it does not name."""
        if isinstance(spec, int):
            return spec
        return spec.get(topic, {}).get(partition, default)


def _get(opts: Mapping[str, str], name: str) -> str | None:
    """Spark passes options case-insensitively (a CaseInsensitiveDict); a plain dict is matched the same way."""
    lower = name.lower()
    for k, v in opts.items():
        if k.lower() == lower:
            return v
    return None


def _offsets(opts: Mapping[str, str], name: str, default: int) -> OffsetSpec:
    raw = _get(opts, name)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip()
    if text == "earliest":
        return EARLIEST
    if text == "latest":
        return LATEST
    try:
        doc = json.loads(text)
    except ValueError:
        raise SourceOptionError(f"{name}: expected earliest, latest or JSON like "
                                f"{{\"topic\": {{\"0\": 23, \"1\": -2}}}}, got {raw!r}") from None
    if not isinstance(doc, dict):
        raise SourceOptionError(f"{name}: JSON must be an object of topics, got {raw!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise SourceOptionError(f"{name}: topic {topic!r} must map partitions to offsets, got {parts!r}")
        out[topic] = {}
        for p, off in parts.items():
            try:
                pi = int(p)
            except ValueError:
                raise SourceOptionError(f"{name}: partition {p!r} of topic {topic!r} is not a number") from None
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST or pi < 0:
                raise SourceOptionError(f"{name}: offset of {topic}/{p} must be an offset >= 0, -2 (earliest) "
                                        f"or -1 (latest), got {off!r}")
            out[topic][pi] = off
    return out


def _ms(opts: Mapping[str, str], name: str) -> int | None:
    raw = _get(opts, name)
    if raw is None or raw.strip() == "":
        return None
    try:
        v = int(raw)
    except ValueError:
        raise SourceOptionError(f"{name}: expected milliseconds since the epoch, got {raw!r}") from None
    if v < 0:
        raise SourceOptionError(f"{name}: must be >= 0, got {v}")
    return v


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(opts, name)
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise SourceOptionError(f"{name}: expected true or false, got {raw!r}")


def parse_options(opts: Mapping[str, str], stream: bool = False) -> SourceOptions:
    """The checked options of a batch read (`stream`: of a streaming read, whose startingOffsets default to latest,
    as Spark's Kafka source's do); SourceOptionError naming the first bad one."""
    meta = _get(opts, "metadata")
    store = _get(opts, "store")
    if not meta:
        raise SourceOptionError("metadata: required (the controller metadata URL, e.g. sqlite:///data/metadata.sqlite)")
    if not store:
        raise SourceOptionError("store: required (the broker's object store URL, e.g. file:///data/objects)")
    named = [n for n in ("topic", "subscribe", "subscribePattern") if _get(opts, n)]
    if len(named) != 1:
        raise SourceOptionError("give exactly one of topic, subscribe (comma-separated topics) or subscribePattern; "
                                f"got {named or 'none'}")
    pattern = _get(opts, "subscribePattern")
    topics: tuple[str, ...] = ()
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError(f"subscribePattern: not a regular expression ({exc}): {pattern!r}") from None
    else:
        raw = _get(opts, named[0]) or ""
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise SourceOptionError(f"{named[0]}: no topic named in {raw!r}")
    partitions: tuple[int, ...] | None = None
    raw_parts = _get(opts, "partitions")
    if raw_parts:
        try:
            partitions = tuple(sorted({int(p) for p in raw_parts.split(",") if p.strip()}))
        except ValueError:
            raise SourceOptionError(f"partitions: expected comma-separated numbers, got {raw_parts!r}") from None
        if any(p < 0 for p in partitions):
            raise SourceOptionError(f"partitions: must be >= 0, got {raw_parts!r}")
    # a stream starts at the latest offsets, unless it starts at a time (startingTimestamp: the rows from then on)
    starting = _offsets(opts, "startingOffsets", LATEST if stream and not _get(opts, "startingTimestamp") else EARLIEST)
    ending = _offsets(opts, "endingOffsets", LATEST)
    from_ms, to_ms = _ms(opts, "startingTimestamp"), _ms(opts, "endingTimestamp")
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise SourceOptionError(f"startingTimestamp ({from_ms}) is after endingTimestamp ({to_ms})")
    split = _get(opts, "maxSplitBytes")
    try:
        max_split = int(split) if split else DEFAULT_SPLIT_BYTES
    except ValueError:
        raise SourceOptionError(f"maxSplitBytes: expected a number of bytes, got {split!r}") from None
    if max_split < 1:
        raise SourceOptionError(f"maxSplitBytes: must be >= 1, got {max_split}")
    skew = _ms(opts, "timeSkewMs")
    index_url = _get(opts, "index") or None
    return SourceOptions(meta, store, topics, pattern, partitions, starting, ending, from_ms, to_ms, max_split,
                         index_url, _get(opts, "namespace") or DEFAULT_NAMESPACE,
                         _bool(opts, "failOnDataLoss", True), DEFAULT_SKEW_MS if skew is None else skew,
                         _index_keys(opts, index_url), _kafka(opts, stream))


def _kafka(opts: Mapping[str, str], stream: bool) -> tuple[tuple[str, str], ...] | None:
    from jobs.spark_source.tail import check_kafka_options

    # librdkafka's property names are lower case; Spark hands the options lower-cased, a dict may not
    given = {k[len("kafka."):].lower(): v for k, v in opts.items() if k.lower().startswith("kafka.")}
    if not given:
        return None
    if stream:
        raise SourceOptionError("kafka.bootstrap.servers: a stream reads what the objects hold (to the committed "
                                "end); leave the kafka.* options out")
    check_kafka_options(given)
    return tuple(sorted(given.items()))


def _index_keys(opts: Mapping[str, str], index_url: str | None) -> tuple[bytes, ...] | None:
    raw = _get(opts, "indexKeys")
    if raw is None:
        return None
    keys = [k.strip() for k in raw.split(",")]
    if not all(keys):
        raise SourceOptionError(f"indexKeys: expected comma-separated non-empty keys, got {raw!r}")
    if not index_url:
        raise SourceOptionError("indexKeys: needs the index option (the HTTP URL of an mqindex serve node)")
    return tuple(dict.fromkeys(k.encode("utf-8") for k in keys))
