"""Broker object compaction (AutoMQ's two levels): stream set object compaction per node and stream object
compaction per stream, memory-bounded and committed in one metadata transaction each."""

from broker.compaction.compactor import Compactor
from broker.compaction.config import CompactionConfig
from broker.compaction.report import CompactionReport

__all__ = ["CompactionConfig", "CompactionReport", "Compactor"]
