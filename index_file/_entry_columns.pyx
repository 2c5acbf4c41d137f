# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The columns of a batch of index entries, read in C (index_file/entry_columns.py calls it).

Written here because the Python path (zip, np.fromiter, a map chain of str.encode and xxh3) costs about 0.6 us per
entry, more than RocksDB's whole WriteBatch put; this reads each entry's six fields once, in place. It takes only
the common shape: a tuple (IndexEntry included) of six fields, a str topic, four exact ints that fit 64 bits, and
(when fingerprints are asked) one str key, bare or in a one-item list or tuple. Anything else makes it return
None and the Python path decides, with its errors, so the result is the same entry for entry (the tests compare).

The fingerprint is xxh3-64 of the UTF-8 of `topic#key`, computed by the pinned xxhash package's own C function
(its exported XXH3_64bits symbol, whose address entry_columns.py hands over once), not by a copy of its code.
"""

from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL
    bint PyTuple_Check(object o)
    bint PyLong_CheckExact(object o)
    bint PyUnicode_CheckExact(object o)
    bint PyList_CheckExact(object o)
    bint PyTuple_CheckExact(object o)

ctypedef uint64_t (*hash_fn)(const void* data, size_t size) noexcept nogil

cdef hash_fn _hash = NULL


def use_hash(size_t address):
    """The address of xxhash's XXH3_64bits (see entry_columns.py); 0 turns fingerprints here off."""
    global _hash
    _hash = <hash_fn>address


def hash_ready():
    return _hash != NULL


cdef inline bint _int_field(object v, int64_t* out):
    cdef int overflow = 0
    if not PyLong_CheckExact(v):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    return overflow == 0


cdef object _one_key(object keys):
    """The entry's single str key, or None."""
    if PyUnicode_CheckExact(keys):
        return keys
    if (PyList_CheckExact(keys) or PyTuple_CheckExact(keys)) and len(keys) == 1:
        k = keys[0]
        if PyUnicode_CheckExact(k):
            return k
    return None


cdef class _Buffer:
    """The bytes of `topic#key`, grown as keys need."""
    cdef char* data
    cdef Py_ssize_t capacity

    def __dealloc__(self):
        free(self.data)

    cdef bint reserve(self, Py_ssize_t size) except False:
        cdef char* grown
        if size <= self.capacity:
            return True
        grown = <char*>realloc(self.data, size * 2)
        if grown == NULL:
            raise MemoryError()
        self.data = grown
        self.capacity = size * 2
        return True


def columns(list entries, int64_t[::1] queue, int64_t[::1] offset, int64_t[::1] size, int64_t[::1] time,
            uint64_t[::1] fps=None):
    """Fill the four int64 columns (and, given `fps`, the keys' fingerprints) of `entries`; returns (topics, keys,
    one_key): the topic and keys objects as lists and whether every entry had one str key (otherwise `fps` is not
    filled). None when an entry is not of the common shape (the Python path then reads the batch)."""
    cdef Py_ssize_t n = len(entries), i, tlen = 0, klen, prefix = 0
    cdef int64_t v
    cdef bint hashing = fps is not None and _hash != NULL
    cdef const char* tp
    cdef const char* kp
    cdef object e, topic, keys, key, last_topic = None
    cdef _Buffer buf = _Buffer()
    cdef int64_t* ints[4]
    cdef int f
    if fps is not None and _hash == NULL:
        return None
    if n == 0:
        return [], [], fps is not None
    if min(queue.shape[0], offset.shape[0], size.shape[0], time.shape[0]) < n or (fps is not None and
                                                                                  fps.shape[0] < n):
        raise ValueError("a column is shorter than the entries")
    ints[0], ints[1], ints[2], ints[3] = &queue[0], &offset[0], &size[0], &time[0]
    topics = PyList_New(n)
    key_list = PyList_New(n)
    # the lists own a reference to each item set so far; the rest stay NULL, which a list frees safely
    for i in range(n):
        e = entries[i]
        if not PyTuple_Check(e) or PyTuple_GET_SIZE(e) != 6:
            return None
        topic = <object>PyTuple_GET_ITEM(e, 0)
        keys = <object>PyTuple_GET_ITEM(e, 5)
        if not PyUnicode_CheckExact(topic):
            return None
        for f in range(4):
            if not _int_field(<object>PyTuple_GET_ITEM(e, f + 1), &v):
                return None
            ints[f][i] = v
        Py_INCREF(topic)
        PyList_SET_ITEM(topics, i, topic)
        Py_INCREF(keys)
        PyList_SET_ITEM(key_list, i, keys)
        if not hashing:
            continue
        key = _one_key(keys)
        if key is None:
            hashing = False
            continue
        try:
            if topic is not last_topic:  # "topic#" encoded once per run of one topic
                tp = PyUnicode_AsUTF8AndSize(topic, &tlen)
                buf.reserve(tlen + 1)
                memcpy(buf.data, tp, tlen)
                buf.data[tlen] = 35  # '#'
                prefix = tlen + 1
                last_topic = topic
            kp = PyUnicode_AsUTF8AndSize(key, &klen)
        except UnicodeError:
            return None  # a lone surrogate: the Python path raises its error
        buf.reserve(prefix + klen)
        memcpy(buf.data + prefix, kp, klen)
        fps[i] = _hash(buf.data, prefix + klen)
    return topics, key_list, fps is not None and hashing
