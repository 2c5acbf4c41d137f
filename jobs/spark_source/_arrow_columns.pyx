# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The columns of the Spark source's Arrow record batches, read in C from the record bytes of stored batches.

Written here because decoding every record into Python objects (aiokafka's reader, then one list per column)
costs more CPU per MB than the rest of a Spark read together. `columns` walks the records of many batches at
once with the walk the broker's C readers share (broker/partitions/record_walk.pxd: the same varints, the same
checks as aiokafka's reader) and writes the buffers of Arrow arrays directly: 32-bit offsets and data bytes of
the keys, values, header names and header values, validity bytes of the nullable ones, and one int64 per row
of offset and timestamp. Nothing is made per record but the bytes copied. jobs/spark_source/arrow_decode.py
turns the buffers into a pyarrow RecordBatch (tests/jobs/test_spark_arrow_decode.py compares it with the
per-record decode on random batches).

A row is kept when its offset is in the batch's [lo, hi) and its timestamp in [lo_ms, hi_ms); a LogAppendTime
batch's records carry its max timestamp, as a Kafka consumer reads them.
"""

import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

from broker.partitions.record_walk cimport RecordView, field, next_record

# the columns of `meta`, one row per batch
cdef enum:
    M_AT = 0  # where the batch's record bytes start in `data`
    M_END = 1  # where they end
    M_COUNT = 2  # records in the batch
    M_BASE = 3  # base offset
    M_FIRST_TS = 4  # first timestamp
    M_MAX_TS = 5  # max timestamp
    M_APPEND = 6  # 1: LogAppendTime
    M_PARTITION = 7
    M_LO = 8  # rows with offsets in [lo, hi) are kept
    M_HI = 9
    M_COLUMNS = 10

#: the columns of `meta`, in order
META = ("at", "end", "count", "base_offset", "first_timestamp", "max_timestamp", "log_append_time", "partition",
        "lo", "hi")

cdef int64_t MAX_OFFSET = 2147483647  # an Arrow binary array's 32-bit offsets


cdef inline bint _keep(int64_t offset, int64_t ts, const int64_t[:, ::1] meta, Py_ssize_t b, int64_t lo_ms,
                       int64_t hi_ms):
    return meta[b, M_LO] <= offset < meta[b, M_HI] and lo_ms <= ts < hi_ms


cdef inline int64_t _ts(const int64_t[:, ::1] meta, Py_ssize_t b, RecordView* r):
    return meta[b, M_MAX_TS] if meta[b, M_APPEND] else meta[b, M_FIRST_TS] + r.ts_delta


cdef inline Py_ssize_t _put(uint8_t* dst, Py_ssize_t at, const uint8_t* src, Py_ssize_t n):
    if n > 0:
        memcpy(dst + at, src, n)
        return at + n
    return at


def columns(const uint8_t[::1] data not None, const int64_t[:, ::1] meta not None, int64_t lo_ms, int64_t hi_ms):
    """The kept rows' columns, a dict of numpy arrays: offset, timestamp (ms), timestamp_type, partition;
    key/value (_offsets int32, _valid uint8, _data uint8), headers_offsets (int32, into the header arrays),
    header_key_offsets/_data, header_value_offsets/_valid/_data. ValueError names a record that does not
    parse or a batch whose records do not match its count and bytes."""
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t nb = meta.shape[0], b, pos, end, hpos, hk, hv
    cdef int64_t i, count, offset, ts, h
    cdef RecordView r
    cdef Py_ssize_t rows = 0, headers = 0, key_bytes = 0, value_bytes = 0, hk_bytes = 0, hv_bytes = 0
    if meta.shape[1] != M_COLUMNS:
        raise ValueError(f"meta has {meta.shape[1]} columns, not {len(META)}")
    # pass 1: sizes of the kept rows
    for b in range(nb):
        pos, end, count = meta[b, M_AT], meta[b, M_END], meta[b, M_COUNT]
        if pos < 0 or end > data.shape[0] or pos > end:
            raise ValueError(f"batch {b}: record bytes [{pos}, {end}) outside the {data.shape[0]} bytes given")
        for i in range(count):
            next_record(p, end, &pos, <int>i, &r)
            if not _keep(meta[b, M_BASE] + r.off_delta, _ts(meta, b, &r), meta, b, lo_ms, hi_ms):
                continue
            rows += 1
            key_bytes += r.key_len if r.key_len > 0 else 0
            value_bytes += r.value_len if r.value_len > 0 else 0
            headers += r.header_count
            hpos = r.headers_at
            for h in range(r.header_count):
                hk = field(p, r.end, &hpos, <int>i, "header key")
                hpos += hk
                hk_bytes += hk
                hv = field(p, r.end, &hpos, <int>i, "header value")
                if hv > 0:
                    hpos += hv
                    hv_bytes += hv
        if pos != end:
            raise ValueError(f"batch {b} (base offset {meta[b, M_BASE]}): {end - pos} bytes left over after "
                             f"{count} records")
    if max(key_bytes, value_bytes, hk_bytes, hv_bytes, headers) > MAX_OFFSET:
        raise ValueError("more than 2 GiB of one column in one call: give fewer batches")

    out_offset = np.empty(rows, dtype=np.int64)
    out_ts = np.empty(rows, dtype=np.int64)
    out_ts_type = np.empty(rows, dtype=np.int32)
    out_partition = np.empty(rows, dtype=np.int32)
    key_off = np.empty(rows + 1, dtype=np.int32)
    key_valid = np.empty(rows, dtype=np.uint8)
    key_data = np.empty(key_bytes, dtype=np.uint8)
    value_off = np.empty(rows + 1, dtype=np.int32)
    value_valid = np.empty(rows, dtype=np.uint8)
    value_data = np.empty(value_bytes, dtype=np.uint8)
    hdr_off = np.empty(rows + 1, dtype=np.int32)
    hk_off = np.empty(headers + 1, dtype=np.int32)
    hk_data = np.empty(hk_bytes, dtype=np.uint8)
    hv_off = np.empty(headers + 1, dtype=np.int32)
    hv_valid = np.empty(headers, dtype=np.uint8)
    hv_data = np.empty(hv_bytes, dtype=np.uint8)

    cdef int64_t[::1] o_offset = out_offset, o_ts = out_ts
    cdef int32_t[::1] o_ts_type = out_ts_type, o_partition = out_partition
    cdef int32_t[::1] o_key_off = key_off, o_value_off = value_off, o_hdr_off = hdr_off
    cdef int32_t[::1] o_hk_off = hk_off, o_hv_off = hv_off
    cdef uint8_t[::1] o_key_valid = key_valid, o_value_valid = value_valid, o_hv_valid = hv_valid
    cdef uint8_t[::1] m_key = key_data, m_value = value_data, m_hk = hk_data, m_hv = hv_data
    cdef uint8_t* d_key
    cdef uint8_t* d_value
    cdef uint8_t* d_hk
    cdef uint8_t* d_hv
    d_key = &m_key[0] if key_bytes else NULL
    d_value = &m_value[0] if value_bytes else NULL
    d_hk = &m_hk[0] if hk_bytes else NULL
    d_hv = &m_hv[0] if hv_bytes else NULL
    cdef Py_ssize_t row = 0, hrow = 0, at_key = 0, at_value = 0, at_hk = 0, at_hv = 0
    o_key_off[0] = 0
    o_value_off[0] = 0
    o_hdr_off[0] = 0
    o_hk_off[0] = 0
    o_hv_off[0] = 0
    # pass 2: the kept rows' fields, copied into the columns
    for b in range(nb):
        pos, end, count = meta[b, M_AT], meta[b, M_END], meta[b, M_COUNT]
        for i in range(count):
            next_record(p, end, &pos, <int>i, &r)
            offset = meta[b, M_BASE] + r.off_delta
            ts = _ts(meta, b, &r)
            if not _keep(offset, ts, meta, b, lo_ms, hi_ms):
                continue
            o_offset[row] = offset
            o_ts[row] = ts
            o_ts_type[row] = <int32_t>meta[b, M_APPEND]
            o_partition[row] = <int32_t>meta[b, M_PARTITION]
            o_key_valid[row] = r.key_len >= 0
            at_key = _put(d_key, at_key, p + r.key_at, r.key_len)
            o_key_off[row + 1] = <int32_t>at_key
            o_value_valid[row] = r.value_len >= 0
            at_value = _put(d_value, at_value, p + r.value_at, r.value_len)
            o_value_off[row + 1] = <int32_t>at_value
            hpos = r.headers_at
            for h in range(r.header_count):
                hk = field(p, r.end, &hpos, <int>i, "header key")
                at_hk = _put(d_hk, at_hk, p + hpos, hk)
                hpos += hk
                o_hk_off[hrow + 1] = <int32_t>at_hk
                hv = field(p, r.end, &hpos, <int>i, "header value")
                o_hv_valid[hrow] = hv >= 0
                if hv > 0:
                    at_hv = _put(d_hv, at_hv, p + hpos, hv)
                    hpos += hv
                o_hv_off[hrow + 1] = <int32_t>at_hv
                hrow += 1
            o_hdr_off[row + 1] = <int32_t>hrow
            row += 1
    return {"offset": out_offset, "timestamp": out_ts, "timestamp_type": out_ts_type, "partition": out_partition,
            "key_offsets": key_off, "key_valid": key_valid, "key_data": key_data,
            "value_offsets": value_off, "value_valid": value_valid, "value_data": value_data,
            "headers_offsets": hdr_off, "header_key_offsets": hk_off, "header_key_data": hk_data,
            "header_value_offsets": hv_off, "header_value_valid": hv_valid, "header_value_data": hv_data}
