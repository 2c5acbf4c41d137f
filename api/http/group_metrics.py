"""/metrics of consumer groups, for the groups this node coordinates (across a cluster each group's series come
from one node):

- `mqindex_group_lag{group,topic,partition}`: the messages a group has not consumed (end offset - committed);
- `mqindex_group_lag_seconds{group,topic,partition}`: the age of the oldest message it has not consumed (now -
  the timestamp of the record at the committed offset; 0 when caught up).

Computed at each scrape from memory, without a scan: the committed offsets from the metadata image (parsed once
per change: a cache keyed by the stored text), the end offsets from the partitions (a led partition's
acknowledged end; another node's: the end in the metadata image). The lag in time needs the timestamp of one
record per (partition, committed offset); it is read once, when a committed offset first appears, and kept
(keyed by topic, partition and offset, so groups at the same offset share it). A scrape reads at most
READ_BUDGET_S of such records: a partition whose record is not read yet has no `_seconds` series in that scrape
(the next one adds it), so a scrape after many groups moved at once stays bounded.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.kafka.context import Context
from broker.partitions.kafka_clients import group_offsets
from broker.partitions.kafka_clients.group_admin import oldest_unconsumed_ms

READ_BUDGET_S = 0.02  # record reads (for the lag in time) per scrape; the rest waits for the next scrape


class GroupLagCollector(Collector):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._parsed: dict[str, tuple[str, int]] = {}  # KV key -> (stored text, offset)
        self._times: dict[tuple[str, int, int], int] = {}  # (topic, partition, offset) -> the record's time, ms

    def _bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        parts = self.ctx.node.partitions
        try:
            p = parts.get(topic, partition)
        except LookupError:
            return None
        s = parts.meta.get_stream(p.data_stream, refresh=False)
        return int(s.start_offset), int(p.acked_end) if p.owned else int(s.end_offset)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["group", "topic", "partition"]
        lag = GaugeMetricFamily("mqindex_group_lag", "Messages a consumer group has not consumed: the partition's "
                                "end offset minus the group's committed offset", labels=labels)
        age = GaugeMetricFamily("mqindex_group_lag_seconds", "Age of the oldest message a consumer group has not "
                                "consumed (now minus the timestamp of the record at its committed offset; 0 when "
                                "caught up)", labels=labels)
        meta = self.ctx.node.meta
        items = meta.kv_items(group_offsets.PREFIX, refresh=False)
        coordinator: dict[str, bool] = {}
        bounds: dict[tuple[str, int], tuple[int, int] | None] = {}
        parsed: dict[str, tuple[str, int]] = {}
        times: dict[tuple[str, int, int], int] = {}
        now_ms = time.time() * 1000
        read_until = time.monotonic() + READ_BUDGET_S
        for key, text in items.items():
            group, _, rest = key[len(group_offsets.PREFIX):].rpartition("/")
            group, _, topic = group.rpartition("/")
            if not group or not rest.isdigit():
                continue
            hit = self._parsed.get(key)
            offset = hit[1] if hit is not None and hit[0] == text else int(json.loads(text)["offset"])
            parsed[key] = (text, offset)
            if group not in coordinator:
                coordinator[group] = self.ctx.coordinator_for(group) == self.ctx.node_id
            if not coordinator[group]:
                continue
            tp = (topic, int(rest))
            if tp not in bounds:
                bounds[tp] = self._bounds(*tp)
            b = bounds[tp]
            if b is None:
                continue
            start, end = b
            behind = max(end - max(offset, start), 0)
            lag.add_metric([group, topic, rest], max(end - offset, 0))
            if not behind:
                age.add_metric([group, topic, rest], 0.0)
                continue
            at = (topic, tp[1], max(offset, start))
            ts = times.get(at)
            if ts is None:
                ts = self._times.get(at)
            if ts is None and time.monotonic() < read_until:
                ts = oldest_unconsumed_ms(self.ctx.node.partitions, topic, tp[1], at[2])
            if ts is not None:
                times[at] = ts
                age.add_metric([group, topic, rest], max(now_ms - ts, 0.0) / 1000)
        self._parsed = parsed
        self._times = times
        yield lag
        yield age
