# cython: language_level=3
"""The walk over the records of a Kafka RecordBatch v2 (the bytes after its header, decompressed), shared by
the C modules that read stored batches without decoding them into Python objects (api/http/_record_json.pyx,
broker/partitions/_record_entries.pyx). It takes the bytes as aiokafka's reader does: zigzag varints, any
negative key/value length is null, a record's length must cover exactly its fields. A record that does not
parse raises ValueError naming it.

Record => Length Attributes TimestampDelta OffsetDelta Key Value [HeaderKey HeaderValue], all varints but the
bytes of the key, the value and each header's key (a string) and value.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef struct RecordView:
    int64_t ts_delta
    int64_t off_delta
    Py_ssize_t key_at
    Py_ssize_t key_len  # -1: null
    Py_ssize_t value_at
    Py_ssize_t value_len  # -1: null
    Py_ssize_t headers_at  # where the first header starts
    int64_t header_count
    Py_ssize_t end  # the next record


cdef inline int64_t varint(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, int record) except? -1:
    """A zigzag varint (up to 64 bits) at p[pos[0]]; a truncated or overlong one raises ValueError."""
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t c
    while True:
        if pos[0] >= end:
            raise ValueError(f"record {record}: a varint runs past the record")
        c = p[pos[0]]
        pos[0] += 1
        v |= <uint64_t>(c & 0x7F) << shift
        if not (c & 0x80):
            break
        shift += 7
        if shift > 63:
            raise ValueError(f"record {record}: a varint longer than 10 bytes")
    return <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))


cdef inline Py_ssize_t field(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos, int record, str what) except -2:
    """The length of a length-prefixed field (-1 for null: any negative length), checked to fit; pos moves past
    the length."""
    cdef int64_t n = varint(p, end, pos, record)
    if n < 0:
        return -1
    if n > end - pos[0]:
        raise ValueError(f"record {record}: {what} length {n} does not fit the record")
    return <Py_ssize_t>n


cdef inline int next_record(const uint8_t* p, Py_ssize_t n, Py_ssize_t* pos, int i, RecordView* r) except -1:
    """Parse record `i` at pos[0] into `r` (headers checked, not decoded); pos moves to the next record."""
    cdef int64_t length, h
    cdef Py_ssize_t hk_len, hv_len
    length = varint(p, n, pos, i)
    if length < 0 or length > n - pos[0]:
        raise ValueError(f"record {i}: length {length} runs past the batch")
    r.end = pos[0] + <Py_ssize_t>length
    varint(p, r.end, pos, i)  # attributes, unused in v2 records (read as a varint, as aiokafka's reader does)
    r.ts_delta = varint(p, r.end, pos, i)
    r.off_delta = varint(p, r.end, pos, i)
    r.key_len = field(p, r.end, pos, i, "key")
    r.key_at = pos[0]
    if r.key_len > 0:
        pos[0] += r.key_len
    r.value_len = field(p, r.end, pos, i, "value")
    r.value_at = pos[0]
    if r.value_len > 0:
        pos[0] += r.value_len
    r.header_count = varint(p, r.end, pos, i)
    if r.header_count < 0 or r.header_count > r.end - pos[0]:
        raise ValueError(f"record {i}: {r.header_count} headers do not fit the record")
    r.headers_at = pos[0]
    for h in range(r.header_count):
        hk_len = field(p, r.end, pos, i, "header key")
        if hk_len < 0:
            raise ValueError(f"record {i}: a null header key")
        pos[0] += hk_len
        hv_len = field(p, r.end, pos, i, "header value")
        if hv_len > 0:
            pos[0] += hv_len
    if pos[0] != r.end:
        raise ValueError(f"record {i}: {r.end - pos[0]} bytes left over after its fields")
    return 0


cdef inline list record_headers(const uint8_t* p, RecordView* r, int i):
    """The record's headers as aiokafka gives them: [(name, value bytes or None)]; a name that is not UTF-8
    raises UnicodeDecodeError (a ValueError)."""
    cdef Py_ssize_t pos = r.headers_at, hk_len, hv_len
    cdef int64_t h
    out = []
    for h in range(r.header_count):
        hk_len = field(p, r.end, &pos, i, "header key")
        name = PyBytes_FromStringAndSize(<const char*>p + pos, hk_len).decode("utf-8")
        pos += hk_len
        hv_len = field(p, r.end, &pos, i, "header value")
        if hv_len >= 0:
            out.append((name, PyBytes_FromStringAndSize(<const char*>p + pos, hv_len)))
            pos += hv_len
        else:
            out.append((name, None))
    return out
