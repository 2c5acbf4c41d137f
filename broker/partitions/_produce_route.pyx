# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The per-message steps of a produce request of plain messages in C: the partition of each (Kafka's murmur2 of a
key, an explicit partition, round robin), and the Produced answer of each. What broker/partitions/produce.py
does per message in Python, with the same answers (tests/broker/test_produce_route.py compares both).

Written here because those Python loops cost about 1.5 us a message, half of the produce call's own CPU for a
256-message HTTP request, and no library routes Python objects without a Python call per message. A message is
plain when it is an InMessage with no headers and no timestamp, its key and value bytes or None and its
partition None or an int; anything else goes the Python way, which names the field at fault.
"""

from cpython.list cimport PyList_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint32_t

cdef extern from "Python.h":
    object PyUnicode_FromStringAndSize(const char*, Py_ssize_t)

from broker.partitions.client_messages import InMessage, Produced

_new = tuple.__new__

cdef uint32_t _M = 0x5BD1E995
cdef uint32_t _SEED = 0x9747B28C


cdef inline uint32_t _murmur2(const unsigned char* data, Py_ssize_t length) noexcept nogil:
    cdef uint32_t h = _SEED ^ <uint32_t>length
    cdef uint32_t k
    cdef Py_ssize_t i, n4 = length // 4, rest = length % 4
    for i in range(n4):
        k = (<uint32_t>data[4 * i] | (<uint32_t>data[4 * i + 1] << 8) | (<uint32_t>data[4 * i + 2] << 16)
             | (<uint32_t>data[4 * i + 3] << 24))
        k *= _M
        k ^= k >> 24
        k *= _M
        h *= _M
        h ^= k
    data += 4 * n4
    if rest == 3:
        h ^= <uint32_t>data[2] << 16
    if rest >= 2:
        h ^= <uint32_t>data[1] << 8
    if rest >= 1:
        h ^= <uint32_t>data[0]
        h *= _M
    h ^= h >> 13
    h *= _M
    h ^= h >> 15
    return h


def murmur2(bytes data):
    """Kafka's murmur2 of `data` as a signed 32-bit int (partitioner.murmur2's answer)."""
    cdef uint32_t h = _murmur2(<const unsigned char*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data))
    return <int>h


def plain_counts(list messages, Py_ssize_t partitions):
    """(messages going round robin (no key, no partition), messages with a non-empty key), or None when one
    is not plain or names a partition outside [0, partitions) (the Python way refuses it, naming the field)."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(messages), count = 0, keyed = 0
    cdef tuple t
    for i in range(n):
        m = messages[i]
        if type(m) is not InMessage:
            return None
        t = <tuple>m
        value, key, headers, partition, timestamp = t[0], t[1], t[2], t[3], t[4]
        if headers or timestamp is not None:
            return None
        if not (value is None or type(value) is bytes) or not (key is None or type(key) is bytes):
            return None
        if key is not None and PyBytes_GET_SIZE(key):
            keyed += 1
        if partition is None:
            if key is None:
                count += 1
        elif type(partition) is not int or not 0 <= partition < partitions:
            return None
    return count, keyed


def groups(list messages, Py_ssize_t partitions, Py_ssize_t round_robin_from):
    """partition -> indexes of its messages, in message order, for messages plain_counts() passed (so every
    explicit partition is in range); the round-robin ones take counters round_robin_from, +1, ..."""
    cdef Py_ssize_t i, n = PyList_GET_SIZE(messages), p
    cdef uint32_t h
    cdef dict out = {}
    cdef int64_t next_rr = round_robin_from
    cdef tuple t
    for i in range(n):
        t = <tuple>messages[i]
        key, partition = t[1], t[3]
        if partition is not None:
            p = partition
        elif key is not None:
            h = _murmur2(<const unsigned char*>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
            p = (h & 0x7FFFFFFF) % partitions
        else:
            p = next_rr % partitions
            next_rr += 1
        idxs = out.get(p)
        if idxs is None:
            out[p] = [i]
        else:
            (<list>idxs).append(i)
    return out


def fill_produced(list results, list idxs, Py_ssize_t partition, int64_t base, str prefix, list messages,
                  int64_t now):
    """results[i] = Produced(partition, base + j, prefix + 16 hex digits of base + j, timestamp) for the j-th
    index i of idxs; the timestamp is the message's own, else `now`."""
    cdef Py_ssize_t j, i, d, n = PyList_GET_SIZE(idxs)
    cdef int64_t off
    cdef unsigned long long v
    cdef char digits[16]
    for j in range(n):
        i = idxs[j]
        off = base + j
        v = <unsigned long long>off
        for d in range(15, -1, -1):
            digits[d] = b"0123456789abcdef"[v & 15]
            v >>= 4
        ts = (<tuple>messages[i])[4]
        results[i] = _new(Produced, (partition, off, prefix + PyUnicode_FromStringAndSize(digits, 16),
                                     now if ts is None else ts))
