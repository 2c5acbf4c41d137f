"""Spark reads mqindex topics straight from the object store: `spark.read.format("mqindex")`; the same source
writes rows to a topic through the cluster: `df.write.format("mqindex")` (jobs/spark_write.py).

One line registers the source (and turns on Python filter pushdown, which it uses):

    from jobs.spark_source import register; register(spark)

The source has two halves. `mqindex` itself is a Spark data source in the JVM (jobs/spark_source/jvm,
`MqindexProvider`): its batch reads are read by the JVM columnar reader. The Python data source (source.py,
registered as `mqindex_python`) plans every read and does everything else: streaming reads, writes, key lookups
through the index (`index` / `indexKeys`), reads past the committed end (`kafka.bootstrap.servers`), and batch
reads asked with `reader=python`. Without the reader's jar
(not built: `make jobs/spark_source/jvm/mqindex-spark.jar`) the Python source alone is registered as `mqindex`.

See docs/SPARK.md ("Reading topics with Spark", "Writing to a topic with Spark") for the options.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
PYTHON_NAME = "mqindex_python"  # the Python half's name (jvm/.../MqindexProvider.PYTHON_NAME)

log = logging.getLogger("mqindex.jobs.spark_source")

__all__ = ["PYTHON_NAME", "SCHEMA", "MqindexPythonHalf", "MqindexSource", "register"]

# imported when first asked for (PEP 562): they load pyspark, which a server importing the planning modules
# (jobs/value_search.py, for the console's searches) needs only once a search runs, not at each start
_LAZY = {"SCHEMA": "jobs.spark_source.schema", "MqindexSource": "jobs.spark_source.source",
         "MqindexPythonHalf": "jobs.spark_source.source"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: Any) -> None:
    """Register the `mqindex` data source in this session and enable Python data source filter pushdown: the JVM
    half's jar is added to the session (`ADD JAR`, unless `spark.jars` has it) and the Python half registered
    under `mqindex_python`; without the jar, the Python source alone as `mqindex` (logged as a warning)."""
    from jobs.spark_source.columnar import JAR, add_jar
    from jobs.spark_source.source import MqindexPythonHalf, MqindexSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        add_jar(spark)
    except FileNotFoundError:
        log.warning("mqindex: %s is not built: spark.read.format('mqindex') reads through the Python data source "
                    "alone (several times slower on full reads; docs/SPARK.md)", JAR)
        spark.dataSource.register(MqindexSource)
        return
    spark.dataSource.register(MqindexPythonHalf)
