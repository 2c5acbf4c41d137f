# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The record framing of an uncompressed RecordBatch v2, walked in C for broker/partitions/batch_check.py.

Written here because the Kafka produce path checks every client batch's framing before it stores the batch as
sent, and the same walk in Python costs about 0.6 us a record on the listener's thread: a tenth of its CPU with
1 KiB records. `walk` reads only each record's length (a zigzag varint) and steps over the record, exactly as
batch_check._walk_records does; it reports where it stopped, and batch_check raises the error (the same words
either way; tests/broker/test_batch_check.py compares the two on valid and corrupt batches).
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t

OK = 0
BAD_VARINT = 1  # record `n` has a malformed length varint
SHORT = 2  # record `n` has length `length`, under the smallest record


def walk(const uint8_t[::1] data not None, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count):
    """(status, records walked, position reached, the bad length for SHORT) over data[pos:end]; the walk stops
    after count + 1 records, as the Python walk does."""
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t n = 0
    cdef uint64_t v
    cdef int64_t length
    cdef int shift
    cdef uint8_t b
    if end > data.shape[0]:
        raise ValueError(f"walk end {end} past the {data.shape[0]} bytes given")
    # the GIL is kept: released, the listener's loop would wait to take it back (as with the batch's CRC)
    while pos < end:
        b = p[pos]
        pos += 1
        v = b & 0x7F
        shift = 7
        while b & 0x80:
            if pos >= end or shift > 28:
                return BAD_VARINT, n, pos, 0
            b = p[pos]
            pos += 1
            v |= <uint64_t>(b & 0x7F) << shift
            shift += 7
        length = <int64_t>(v >> 1) ^ -(<int64_t>(v & 1))
        if length < 6:
            return SHORT, n, pos, length
        pos += <Py_ssize_t>length
        n += 1
        if n > count:
            break
    return OK, n, pos, 0
