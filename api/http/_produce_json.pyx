# cython: language_level=3, boundscheck=False, wraparound=False
"""The messages of a plain produce body's parsed JSON (orjson's objects), in C: what produce_json._message does
per message in Python, with the same answers (the tests compare both on any JSON).

Written here because the Python checks and the message's construction cost about 3.5 us per message, the
largest step of the HTTP produce path after the batch build went to C, and no library validates a list of
JSON objects into tuples without a Python call per field.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Size
from cpython.list cimport PyList_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    void* PyUnicode_DATA(object)

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
        if "value" not in d:
            return None  # required (null for a tombstone): pydantic refuses the message naming it
        value = d["value"]
        present = 1
        key = None
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
            return None  # a field the body does not have: pydantic refuses it, naming the field
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


# -- the answer ------------------------------------------------------------------------------------------------
# {"results":[{"partition":P,"offset":O,"msg_id":"ID","timestamp":T},...]}, byte for byte what orjson.dumps
# gives for the same dicts: a dict per message and orjson's walk of them cost about as much as reading the
# body (a sixth of the event loop's time in a 256-message request)

cdef const char* _PART = b'{"partition":'
cdef const char* _OFF = b',"offset":'
cdef const char* _ID = b',"msg_id":"'
cdef const char* _TS = b'","timestamp":'


cdef inline Py_ssize_t _put(char* buf, Py_ssize_t at, const char* s, Py_ssize_t n) noexcept nogil:
    memcpy(buf + at, s, n)
    return at + n


cdef inline Py_ssize_t _int(char* buf, Py_ssize_t at, long long v) noexcept nogil:
    cdef char tmp[24]
    cdef int n = 0
    cdef unsigned long long u
    if v < 0:
        buf[at] = 45  # '-'
        at += 1
        u = <unsigned long long>(-(v + 1)) + 1
    else:
        u = <unsigned long long>v
    while True:
        tmp[n] = 48 + <char>(u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    while n:
        n -= 1
        buf[at] = tmp[n]
        at += 1
    return at


cdef inline bint _plain_id(object s):
    """An ASCII string without a character JSON escapes: copied as is."""
    cdef Py_ssize_t i, n
    cdef const unsigned char* p
    if type(s) is not str or not PyUnicode_IS_COMPACT_ASCII(s):
        return False
    n = PyUnicode_GET_LENGTH(s)
    p = <const unsigned char*>PyUnicode_DATA(s)
    for i in range(n):
        if p[i] < 32 or p[i] == 34 or p[i] == 92:
            return False
    return True


cdef inline bint _int64(object v, long long* out):
    """v as a C integer when it is an int (not a bool) within 64 bits."""
    if type(v) is not int:
        return False
    try:
        out[0] = v
    except OverflowError:
        return False
    return True


def produced_json(list produced):
    """The produce answer's JSON of `produced` ([(partition, offset, msg_id, timestamp)]), or None when one
    does not fit the compact form (an id needing escapes, an integer outside 64 bits): orjson writes those."""
    cdef Py_ssize_t n = PyList_GET_SIZE(produced), i, at, size = 16, idlen
    cdef long long part, off, ts
    cdef char* buf
    cdef tuple p
    for i in range(n):
        item = produced[i]
        if not isinstance(item, tuple) or len(<tuple>item) != 4 or not _plain_id((<tuple>item)[2]):
            return None
        # the fixed text, three integers of at most 20 characters and the id
        size += 13 + 10 + 11 + 14 + 2 + 3 * 20 + PyUnicode_GET_LENGTH((<tuple>item)[2])
    buf = <char*>malloc(size)
    if buf == NULL:
        raise MemoryError()
    try:
        at = _put(buf, 0, b'{"results":[', 12)
        for i in range(n):
            p = <tuple>produced[i]
            if not (_int64(p[0], &part) and _int64(p[1], &off) and _int64(p[3], &ts)):
                return None
            idlen = PyUnicode_GET_LENGTH(p[2])
            if i:
                buf[at] = 44  # ','
                at += 1
            at = _put(buf, at, _PART, 13)
            at = _int(buf, at, part)
            at = _put(buf, at, _OFF, 10)
            at = _int(buf, at, off)
            at = _put(buf, at, _ID, 11)
            at = _put(buf, at, <const char*>PyUnicode_DATA(p[2]), idlen)
            at = _put(buf, at, _TS, 14)
            at = _int(buf, at, ts)
            buf[at] = 125  # '}'
            at += 1
        at = _put(buf, at, b']}', 2)
        return PyBytes_FromStringAndSize(buf, at)
    finally:
        free(buf)
