"""Spark reads mqindex topics straight from the object store: `spark.read.format("mqindex")`; the same source
writes rows to a topic through the cluster: `df.write.format("mqindex")` (jobs/spark_write.py).

One line registers the source (and turns on Python filter pushdown, which it uses):

    from jobs.spark_source import register; register(spark)

See docs/SPARK.md ("Reading topics with Spark", "Writing to a topic with Spark") for the options.
"""

from __future__ import annotations

from typing import Any

from jobs.spark_source.source import SCHEMA, MqindexSource

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

__all__ = ["SCHEMA", "MqindexSource", "register"]


def register(spark: Any) -> None:
    """Register the `mqindex` data source in this session and enable Python data source filter pushdown."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(MqindexSource)
