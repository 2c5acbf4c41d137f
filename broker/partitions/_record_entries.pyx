# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The index entries of a stored batch's records, read in C from the batch's record bytes.

Written here because the dispatcher otherwise decodes every record into Python objects (aiokafka's reader, a
Record tuple) only to read its key: about 1 us per record, a fifth of the Kafka listener's CPU under produce
load. This walks the records (broker/partitions/record_walk.pxd) and makes the entries exactly as
client_batches._entries does (the tests compare them): a record without headers is indexed under its key, a
record with headers under records.index_keys of its key and headers.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t

from broker.partitions.record_walk cimport RecordView, next_record, record_headers

from broker.partitions.key_text import key_text
from broker.partitions.records import Record, index_keys
from index_file import IndexEntry

_new = tuple.__new__


cdef object _keys_and_size(const uint8_t* p, RecordView* r, int i, int64_t base_offset, Py_ssize_t* size):
    """The record's index keys (None: it has none) and, in `size`, the bytes of its key, value and headers."""
    key = PyBytes_FromStringAndSize(<const char*>p + r.key_at, r.key_len) if r.key_len >= 0 else None
    size[0] = (r.key_len if r.key_len > 0 else 0) + (r.value_len if r.value_len > 0 else 0)
    if not r.header_count:
        return [key_text(key)] if key else None
    headers = record_headers(p, r, i)
    keys = index_keys(_new(Record, (base_offset + r.off_delta, 0, key, None, headers)))
    if not keys:
        return None
    for name, value in headers:
        size[0] += len(name) + (len(value) if value is not None else 0)
    return keys


def record_entries(const uint8_t[::1] records not None, int count, str topic, int partition, int64_t base_offset,
                   int64_t now):
    """[IndexEntry(topic, partition, base_offset + offset delta, size, now, keys)] of the `count` records with
    index keys; size is the bytes of key, value and headers (a header's name counted in characters)."""
    cdef const uint8_t* p = &records[0] if records.shape[0] else NULL
    cdef Py_ssize_t n = records.shape[0], pos = 0, size
    cdef int i
    cdef RecordView r
    out = []
    for i in range(count):
        next_record(p, n, &pos, i, &r)
        keys = _keys_and_size(p, &r, i, base_offset, &size)
        if keys is not None:
            out.append(_new(IndexEntry, (topic, partition, base_offset + r.off_delta, size, now, keys)))
    if pos != n:
        raise ValueError(f"{n - pos} bytes left over after {count} records")
    return out


def catch_up_entries(const uint8_t[::1] records not None, int count, str topic, int partition,
                     int64_t base_offset, int64_t first_timestamp, int64_t max_timestamp, bint log_append_time,
                     int64_t start, int64_t end, int64_t now):
    """`record_entries` of the records with offsets in [start, end), each at its own timestamp but never later
    than `now` (entries read back from the stream, whose append time is not stored)."""
    cdef const uint8_t* p = &records[0] if records.shape[0] else NULL
    cdef Py_ssize_t n = records.shape[0], pos = 0, size
    cdef int i
    cdef int64_t offset, ts
    cdef RecordView r
    out = []
    for i in range(count):
        next_record(p, n, &pos, i, &r)
        keys = _keys_and_size(p, &r, i, base_offset, &size)
        offset = base_offset + r.off_delta
        if keys is not None and start <= offset < end:
            ts = max_timestamp if log_append_time else first_timestamp + r.ts_delta
            out.append(_new(IndexEntry, (topic, partition, offset, size, min(ts, now), keys)))
    if pos != n:
        raise ValueError(f"{n - pos} bytes left over after {count} records")
    return out
