# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""An uncompressed Kafka RecordBatch v2 built in C from produced messages, the bytes records._encode_uncompressed
makes in Python (the tests compare both, and with kafka-python's builder).

Written here because the Python loop costs about 1.2 us per record in varint lookups and list appends (the
HTTP produce path's largest single step) and no library builds a batch from Python objects without a Python
call per field. Two passes: the first checks every record and sums the sizes, the second writes the header and
the records into one bytes object; the CRC (crc32c over attributes .. the last record) is taken by the crc32c
package.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

import crc32c

from broker.errors import RecordFormatError

cdef enum:
    HEADER = 61  # the RecordBatch v2 header
    CRC_AT = 17  # the CRC field; it covers attributes (byte 21) to the end


cdef inline Py_ssize_t _vlen(int64_t n) noexcept:
    cdef uint64_t v = (<uint64_t>n << 1) ^ <uint64_t>(n >> 63)
    cdef Py_ssize_t k = 1
    while v >= 0x80:
        v >>= 7
        k += 1
    return k


cdef inline uint8_t* _var(uint8_t* p, int64_t n) noexcept:
    cdef uint64_t v = (<uint64_t>n << 1) ^ <uint64_t>(n >> 63)
    while v >= 0x80:
        p[0] = <uint8_t>((v & 0x7F) | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1


cdef inline uint8_t* _be(uint8_t* p, uint64_t v, int n) noexcept:
    cdef int i
    for i in range(n):
        p[i] = <uint8_t>(v >> (8 * (n - 1 - i)))
    return p + n


cdef inline uint8_t* _bytes(uint8_t* p, object b) noexcept:
    """The varint length and the bytes of `b` (bytes), or the null length -1 for None."""
    cdef Py_ssize_t n
    if b is None:
        return _var(p, -1)
    n = PyBytes_GET_SIZE(b)
    p = _var(p, n)
    memcpy(p, PyBytes_AS_STRING(b), n)
    return p + n


cdef Py_ssize_t _headers_size(object headers, int i) except -1:
    """The bytes of a record's headers after their count; checks each (str name, bytes or None value)."""
    cdef Py_ssize_t total = 0, n
    for name, hv in headers:
        if not isinstance(name, str) or not (hv is None or isinstance(hv, bytes)):
            raise RecordFormatError(f"record {i}: header names must be str, header values bytes or None")
        PyUnicode_AsUTF8AndSize(name, &n)
        total += _vlen(n) + n
        if hv is None:
            total += 1
        else:
            n = PyBytes_GET_SIZE(hv)
            total += _vlen(n) + n
    return total


def encode(list records, int64_t now, str ts_field):
    """RecordBatch v2 bytes (base offset 0, no producer id) of `records`: objects with `key`, `value` (bytes or
    None), `headers` ((str, bytes or None) pairs) and a timestamp in attribute `ts_field` (None: `now`)."""
    cdef Py_ssize_t count = len(records), i, body = 0, size, n
    cdef int64_t first = 0, max_ts = 0, ts
    cdef Py_ssize_t* sizes
    cdef int64_t* stamps
    cdef bytes out
    cdef uint8_t* p
    cdef uint8_t* start
    if count == 0:
        raise RecordFormatError("a record batch needs at least one record")
    keys, values, headers = [None] * count, [None] * count, [None] * count
    sized = bytearray(count * (sizeof(Py_ssize_t) + sizeof(int64_t)))
    sizes = <Py_ssize_t*>(<char*>sized)
    stamps = <int64_t*>(<char*>sized + count * sizeof(Py_ssize_t))
    for i in range(count):
        r = records[i]
        t = getattr(r, ts_field)
        if t is None:
            ts = now
        elif isinstance(t, int):
            if not -(1 << 63) <= t < (1 << 63):
                raise RecordFormatError(f"record {i}: timestamp {t} out of range")
            ts = t
        else:
            raise RecordFormatError(f"record {i}: timestamp must be an int")
        if i == 0:
            first = max_ts = ts
        elif ts > max_ts:
            max_ts = ts
        key, value = r.key, r.value
        if not (key is None or isinstance(key, bytes)) or not (value is None or isinstance(value, bytes)):
            raise RecordFormatError(f"record {i}: key and value must be bytes or None")
        keys[i], values[i] = key, value
        size = 1 + _vlen(ts - first) + _vlen(i)
        size += 1 if key is None else _vlen(PyBytes_GET_SIZE(key)) + PyBytes_GET_SIZE(key)
        size += 1 if value is None else _vlen(PyBytes_GET_SIZE(value)) + PyBytes_GET_SIZE(value)
        h = r.headers
        if h:
            h = list(h)
            headers[i] = h
            size += _vlen(len(h)) + _headers_size(h, i)
        else:
            size += 1
        sizes[i] = size
        stamps[i] = ts
        body += _vlen(size) + size
    out = PyBytes_FromStringAndSize(NULL, HEADER + body)
    start = <uint8_t*>PyBytes_AS_STRING(out)
    p = _be(start, 0, 8)  # base offset
    p = _be(p, <uint64_t>(HEADER + body - 12), 4)  # batch length: after base offset and itself
    p = _be(p, 0, 4)  # partition leader epoch
    p[0] = 2  # magic
    p = _be(p + 1, 0, 4)  # CRC, filled below
    p = _be(p, 0, 2)  # attributes
    p = _be(p, <uint64_t>(count - 1), 4)  # last offset delta
    p = _be(p, <uint64_t>first, 8)
    p = _be(p, <uint64_t>max_ts, 8)
    p = _be(p, <uint64_t>-1, 8)  # producer id
    p = _be(p, <uint64_t>-1, 2)  # producer epoch
    p = _be(p, <uint64_t>-1, 4)  # base sequence
    p = _be(p, <uint64_t>count, 4)
    for i in range(count):
        p = _var(p, sizes[i])
        p[0] = 0  # record attributes
        p = _var(p + 1, stamps[i] - first)
        p = _var(p, i)
        p = _bytes(p, keys[i])
        p = _bytes(p, values[i])
        h = headers[i]
        if h is None:
            p[0] = 0
            p += 1
        else:
            p = _var(p, len(h))
            for name, hv in h:
                s = PyUnicode_AsUTF8AndSize(name, &n)
                p = _var(p, n)
                memcpy(p, s, n)
                p = _bytes(p + n, hv)
    _be(start + CRC_AT, <uint64_t>crc32c.crc32c(memoryview(out)[21:]), 4)
    return out
