"""/metrics of consumer groups: mqindex_group_lag{group,topic,partition}, the messages a group has not consumed.

Computed at each scrape from memory, without reading records: the committed offsets from the metadata image
(parsed once per change: a cache keyed by the stored text), the end offsets from the partitions (a led
partition's acknowledged end; another node's: the end in the metadata image). A node exports the groups it
coordinates, so across a cluster each group's series come from one node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.kafka.context import Context
from broker.partitions.kafka_clients import group_offsets


class GroupLagCollector(Collector):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._parsed: dict[str, tuple[str, int]] = {}  # KV key -> (stored text, offset)

    def _end(self, topic: str, partition: int) -> int | None:
        parts = self.ctx.node.partitions
        try:
            p = parts.get(topic, partition)
        except LookupError:
            return None
        if p.owned:
            return int(p.acked_end)
        return int(parts.meta.get_stream(p.data_stream, refresh=False).end_offset)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily("mqindex_group_lag", "Messages a consumer group has not consumed: the partition's "
                                "end offset minus the group's committed offset", labels=["group", "topic", "partition"])
        meta = self.ctx.node.meta
        items = meta.kv_items(group_offsets.PREFIX, refresh=False)
        coordinator: dict[str, bool] = {}
        parsed: dict[str, tuple[str, int]] = {}
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
            end = self._end(topic, int(rest))
            if end is not None:
                lag.add_metric([group, topic, rest], max(end - offset, 0))
        self._parsed = parsed
        yield lag
