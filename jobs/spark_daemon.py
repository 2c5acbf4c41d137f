"""The PySpark daemon of the builder's executors: PySpark's own daemon, with the executor code imported first.

PySpark starts one daemon per executor and forks a Python worker from it for each concurrent task slot.
With the stock daemon every forked worker imports the build's code itself (numpy, boto3 and its service
models, the broker's record codecs, the index writer): about a second of CPU per worker, paid again by
every slot, and on a two-core machine that is CPU taken from the other slot. Here the daemon imports it
once before it forks, so each worker starts with it loaded (pages shared copy-on-write), and freezes the
heap so that PySpark's gc.collect() after each task skips those objects (see spark_build.settle_worker_heap).

Used through `spark.python.daemon.module=jobs.spark_daemon` (jobs/spark_session.py sets it for local
masters, whose executors run this interpreter). Everything else is PySpark's `pyspark.daemon.manager`.
"""

from __future__ import annotations

import gc

from pyspark import daemon, worker  # noqa: F401  (the worker module each forked worker runs)

import jobs.spark_build  # noqa: F401  (the executor functions and all they import)

if __name__ == "__main__":
    gc.collect()
    gc.freeze()
    daemon.manager()
