"""The package's compiled modules (everything else is in pyproject.toml), built by `pip install` with Cython and
the system's C compiler: the renderer of whole-record HTTP pages (api/http/_record_json.pyx), the messages of a
plain produce body read from its bytes (api/http/_produce_scan.pyx) or from orjson's objects
(api/http/_produce_json.pyx), the index entries of stored batches
(broker/partitions/_record_entries.pyx), both walking records with broker/partitions/record_walk.pxd; the
record framing a client's batch is checked by (broker/partitions/_batch_framing.pyx); the uncompressed batch
of produced messages (broker/partitions/_record_build.pyx); the partitions and answers of a produce request's
plain messages (broker/partitions/_produce_route.pyx); the columns of a batch of index entries
(index_file/_entry_columns.pyx) and the append of items to a WRITING index file (index_file/_item_chain.pyx); the
Arrow columns of stored batches a Spark read hands Spark (jobs/spark_source/_arrow_columns.pyx).
They are optional: without a compiler the install goes on and their callers (api/http/message_json.py,
api/http/produce_json.py, broker/partitions/batch_check.py, broker/partitions/kafka_clients/client_batches.py,
broker/partitions/records.py, broker/partitions/produce.py, index_file/entry_columns.py,
index_file/native_unsealed.py, jobs/spark_source/read.py) do the same work in Python."""

from Cython.Build import cythonize
from setuptools import Extension, setup

MODULES = {"api.http._record_json": "api/http/_record_json.pyx",
           "api.http._produce_json": "api/http/_produce_json.pyx",
           "api.http._produce_scan": "api/http/_produce_scan.pyx",
           "broker.partitions._record_entries": "broker/partitions/_record_entries.pyx",
           "broker.partitions._batch_framing": "broker/partitions/_batch_framing.pyx",
           "broker.partitions._record_build": "broker/partitions/_record_build.pyx",
           "broker.partitions._produce_route": "broker/partitions/_produce_route.pyx",
           "index_file._entry_columns": "index_file/_entry_columns.pyx",
           "index_file._item_chain": "index_file/_item_chain.pyx",
           "jobs.spark_source._arrow_columns": "jobs/spark_source/_arrow_columns.pyx"}

setup(ext_modules=cythonize([Extension(name, [path], extra_compile_args=["-O2"], optional=True)
                             for name, path in MODULES.items()],
                            include_path=["."], compiler_directives={"language_level": "3"}))
