# cython: language_level=3, boundscheck=False, wraparound=False
"""The messages of a plain produce body's parsed JSON (orjson's objects), in C: what produce_json._message does
per message in Python, with the same answers (the tests compare both on any JSON).

Written here because the Python checks and the message's construction cost about 3.5 us per message, the
largest step of the HTTP produce path after the batch build went to C, and no library validates a list of
JSON objects into tuples without a Python call per field.
"""

from cpython.dict cimport PyDict_Size
from cpython.list cimport PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String

from broker.partitions.client_messages import InMessage

_new = tuple.__new__


def messages(list msgs, Py_ssize_t max_value_bytes, object max_partition):
    """[InMessage] of `msgs`, or None when one of them is not plain (produce_json's rules)."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(msgs), present
    cdef dict d
    cdef list out = [None] * n
    cdef object value, key, headers, partition, encoding, hv
    cdef list pairs
    for i in range(n):
        m = msgs[i]
        if type(m) is not dict:
            return None
        d = <dict>m
        present = 0
        value = key = None
        if "value" in d:
            value = d["value"]
            present += 1
        if "key" in d:
            key = d["key"]
            present += 1
        headers = None
        if "headers" in d:
            headers = d["headers"]
            present += 1
            if type(headers) is not dict:
                return None
        partition = None
        if "partition" in d:
            partition = d["partition"]
            present += 1
        if "encoding" in d:
            present += 1
            encoding = d["encoding"]
            if type(encoding) is not str or encoding != "utf-8":
                return None
        if present != PyDict_Size(d):
            return None  # a field the fast path does not know
        if value is not None:
            if type(value) is not str:
                return None
            value = PyUnicode_AsUTF8String(value)
            if len(<bytes>value) > max_value_bytes:
                return None
        if key is not None:
            if type(key) is not str:
                return None
            key = PyUnicode_AsUTF8String(key)
        pairs = []
        if headers:
            for hk, hv in (<dict>headers).items():
                if type(hv) is not str:
                    return None
                pairs.append((hk, PyUnicode_AsUTF8String(hv)))
        if partition is not None and (type(partition) is not int or not 0 <= partition <= max_partition):
            return None
        out[i] = _new(InMessage, (value, key, pairs, partition, None))
    return out
