# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The JSON of whole-record HTTP reads, rendered in C straight from a Kafka RecordBatch's record bytes.

Written here because no library turns Kafka records into this API's JSON: decoding each record into Python
objects and serialising them again (aiokafka's reader, a dict per message, orjson) cost about 4 us per message,
most of a page's time. This walks the records of one batch (already CRC-checked and, if compressed,
decompressed by the caller; broker/partitions/record_walk.pxd) and writes each message's object exactly as `message_json.message_dict` + orjson
would (the tests compare them byte for byte): UTF-8 values and keys as JSON text, anything else base64 (the
message says which in `encoding` and `key_encoding`), orjson's escapes. Headers: a record whose header values are
all UTF-8, none null, no name twice (most of them) has its `headers` object written here; any other has it
built as message_dict does (values decoded with U+FFFD for bad bytes, null as "", a repeated name's last value)
and is followed by `header_list`, every header in order with its value as text, base64 or null, written here.
A record that does not parse, or has a header name that is not UTF-8, raises ValueError naming the record; nothing
is returned for the batch then.
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy

import orjson

from broker.partitions.record_walk cimport RecordView, field, next_record, record_headers

cdef const char* _HEX = b"0123456789abcdef"
cdef const char* _B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


# orjson's escapes: the named ones, \u00xx for the other control characters, and the quote and the backslash
_ESCAPES = [b"\\u%04x" % c for c in range(93)]
for _c, _e in zip(b'\b\t\n\f\r"\\', [b"\\b", b"\\t", b"\\n", b"\\f", b"\\r", b'\\"', b"\\\\"]):
    _ESCAPES[_c] = _e


cdef struct Buf:
    char* data
    Py_ssize_t size
    Py_ssize_t cap


cdef int _grow(Buf* b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = b.cap * 2
    cdef char* data
    if cap < b.size + extra:
        cap = b.size + extra + 4096
    data = <char*>realloc(b.data, cap)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.cap = cap
    return 0


cdef inline int _put(Buf* b, const char* s, Py_ssize_t n) except -1:
    if b.size + n > b.cap:
        _grow(b, n)
    memcpy(b.data + b.size, s, n)
    b.size += n
    return 0


cdef inline int _lit(Buf* b, bytes s) except -1:
    return _put(b, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))


cdef inline int _int(Buf* b, int64_t v) except -1:
    cdef char tmp[24]
    cdef int i = 24
    cdef uint64_t u
    cdef bint neg = v < 0
    u = <uint64_t>(-(v + 1)) + 1 if neg else <uint64_t>v
    while True:
        i -= 1
        tmp[i] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if neg:
        i -= 1
        tmp[i] = 45  # '-'
    return _put(b, tmp + i, 24 - i)


cdef inline int _hex16(Buf* b, uint64_t v) except -1:
    cdef int i
    if b.size + 16 > b.cap:
        _grow(b, 16)
    for i in range(16):
        b.data[b.size + 15 - i] = _HEX[v & 15]
        v >>= 4
    b.size += 16
    return 0


cdef bint _utf8(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    """Whether s[0:n] is UTF-8 as CPython's strict decoder takes it (no overlongs, surrogates or > U+10FFFF)."""
    cdef Py_ssize_t i = 0, j, k
    cdef uint8_t c, c1
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c >= 0xF5:
            return False
        k = 1 if c < 0xE0 else (2 if c < 0xF0 else 3)  # continuation bytes
        if i + k >= n:
            return False
        for j in range(1, k + 1):
            if (s[i + j] & 0xC0) != 0x80:
                return False
        c1 = s[i + 1]
        if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0) or (c == 0xF0 and c1 < 0x90) \
                or (c == 0xF4 and c1 >= 0x90):
            return False  # overlong, a surrogate, past U+10FFFF
        i += k + 1
    return True


cdef int _text(Buf* b, const uint8_t* s, Py_ssize_t n) except -1:
    """A JSON string of UTF-8 bytes, escaped as orjson does (\\b \\t \\n \\f \\r, other controls \\u00xx)."""
    cdef Py_ssize_t i, run = 0
    cdef uint8_t c
    if b.size + n + 2 > b.cap:
        _grow(b, n + 2)
    b.data[b.size] = 34
    b.size += 1
    for i in range(n):
        c = s[i]
        if c >= 0x20 and c != 34 and c != 92:
            continue
        _put(b, <const char*>s + run, i - run)
        run = i + 1
        _lit(b, _ESCAPES[c])
    _put(b, <const char*>s + run, n - run)
    return _lit(b, b'"')


cdef int _base64(Buf* b, const uint8_t* s, Py_ssize_t n) except -1:
    cdef Py_ssize_t i = 0, need = (n + 2) // 3 * 4 + 2
    cdef char* o
    cdef unsigned int v
    if b.size + need > b.cap:
        _grow(b, need)
    o = b.data + b.size
    o[0] = 34
    o += 1
    while i + 3 <= n:
        v = (s[i] << 16) | (s[i + 1] << 8) | s[i + 2]
        o[0] = _B64[(v >> 18) & 63]
        o[1] = _B64[(v >> 12) & 63]
        o[2] = _B64[(v >> 6) & 63]
        o[3] = _B64[v & 63]
        o += 4
        i += 3
    if n - i:  # one or two bytes left: "=" pads the missing ones
        v = s[i] << 16
        if n - i == 2:
            v |= s[i + 1] << 8
        o[0] = _B64[(v >> 18) & 63]
        o[1] = _B64[(v >> 12) & 63]
        o[2] = _B64[(v >> 6) & 63] if n - i == 2 else 61
        o[3] = 61
        o += 4
    o[0] = 34
    b.size += need
    return 0


cdef enum:
    # a record with at most this many headers is checked for a name given twice here (each name against the ones
    # before it); one with more is looked at in Python (a set of its names), never quadratically
    _COMPARED = 32


cdef bint _plain_headers(const uint8_t* p, RecordView* r, int i) except -1:
    """Whether the record's headers are written here as the `headers` object alone: at most _COMPARED of them,
    every value UTF-8 (none null), no name twice. A name that is not UTF-8 raises ValueError, as decoding it does."""
    cdef Py_ssize_t pos = r.headers_at, hk_len, hv_len, j
    cdef Py_ssize_t name_at[_COMPARED]
    cdef Py_ssize_t name_len[_COMPARED]
    cdef int64_t h
    cdef bint plain = r.header_count <= _COMPARED
    for h in range(r.header_count):
        hk_len = field(p, r.end, &pos, i, "header key")
        if not _utf8(p + pos, hk_len):
            raise ValueError(f"record {i}: header {h}'s name is not UTF-8")
        if plain:
            for j in range(h):
                if name_len[j] == hk_len and memcmp(p + name_at[j], p + pos, hk_len) == 0:
                    plain = False
                    break
            name_at[h] = pos
            name_len[h] = hk_len
        pos += hk_len
        hv_len = field(p, r.end, &pos, i, "header value")
        if hv_len < 0:
            plain = False
        else:
            if plain and not _utf8(p + pos, hv_len):
                plain = False
            pos += hv_len
    return plain


cdef int _headers_object(Buf* b, const uint8_t* p, RecordView* r, int i) except -1:
    """The `headers` object of a record `_plain_headers` accepted: {"name":"value",...} in record order."""
    cdef Py_ssize_t pos = r.headers_at, hk_len, hv_len
    cdef int64_t h
    _lit(b, b"{")
    for h in range(r.header_count):
        if h:
            _lit(b, b",")
        hk_len = field(p, r.end, &pos, i, "header key")
        _text(b, p + pos, hk_len)
        pos += hk_len
        _lit(b, b":")
        hv_len = field(p, r.end, &pos, i, "header value")
        _text(b, p + pos, hv_len)
        pos += hv_len
    return _lit(b, b"}")


cdef int _header_list(Buf* b, const uint8_t* p, RecordView* r, int i) except -1:
    """`,"header_list":[...]`: each header as {"name","value","encoding"}, the value as text, base64 or null."""
    cdef Py_ssize_t pos = r.headers_at, hk_len, hv_len
    cdef int64_t h
    _lit(b, b',"header_list":[')
    for h in range(r.header_count):
        _lit(b, b'{"name":' if h == 0 else b',{"name":')
        hk_len = field(p, r.end, &pos, i, "header key")
        _text(b, p + pos, hk_len)
        pos += hk_len
        _lit(b, b',"value":')
        hv_len = field(p, r.end, &pos, i, "header value")
        if hv_len < 0:
            _lit(b, b'null,"encoding":"utf-8"}')
            continue
        if _utf8(p + pos, hv_len):
            _text(b, p + pos, hv_len)
            _lit(b, b',"encoding":"utf-8"}')
        else:
            _base64(b, p + pos, hv_len)
            _lit(b, b',"encoding":"base64"}')
        pos += hv_len
    return _lit(b, b"]")


def render(const uint8_t[::1] records not None, int count, bytearray out not None, bint comma,
           int64_t base_offset, int64_t first_timestamp, int64_t max_timestamp, bint log_append_time, int64_t start,
           int64_t end, bytes head not None, bytes id_prefix not None):
    """Append to `out` the JSON of the messages with offsets in [start, end), comma-separated (with a comma
    first when `comma` and there is a message); returns (how many, the last one's offset or -1). On an error
    `out` is left as it was.

    `records`: the `count` records of a batch whose base offset is `base_offset`; `head`: what every message
    object starts with up to its offset (`{"topic":...,"partition":...,"offset":`); `id_prefix`: the first
    16 hex digits of the message ids (topic id and partition)."""
    cdef const uint8_t* p = &records[0] if records.shape[0] else NULL
    cdef Py_ssize_t n = records.shape[0], pos = 0, at
    cdef int64_t offset, last = -1
    cdef int i, emitted = 0
    cdef bint plain, exact
    cdef RecordView r
    cdef Buf b
    cdef const char* head_p = PyBytes_AS_STRING(head)
    cdef Py_ssize_t head_n = len(head)
    if len(id_prefix) != 16:
        raise ValueError("id_prefix must be 16 hex digits")
    b.data = <char*>malloc(n + n // 2 + 4096)
    if b.data == NULL:
        raise MemoryError()
    b.size = 0
    b.cap = n + n // 2 + 4096
    try:
        for i in range(count):
            next_record(p, n, &pos, i, &r)
            plain = r.header_count == 0 or _plain_headers(p, &r, i)  # every record's header names checked
            offset = base_offset + r.off_delta
            if offset < start or offset >= end:
                continue
            if offset < 0:
                raise ValueError(f"record {i}: offset {offset} is negative")
            if emitted or comma:
                _lit(&b, b",")
            _put(&b, head_p, head_n)
            _int(&b, offset)
            _lit(&b, b',"msg_id":"')
            _put(&b, PyBytes_AS_STRING(id_prefix), 16)
            _hex16(&b, <uint64_t>offset)
            _lit(&b, b'","key":')
            if r.key_len < 0:
                _lit(&b, b'null,"key_encoding":"utf-8"')
            elif _utf8(p + r.key_at, r.key_len):
                _text(&b, p + r.key_at, r.key_len)
                _lit(&b, b',"key_encoding":"utf-8"')
            else:
                _base64(&b, p + r.key_at, r.key_len)
                _lit(&b, b',"key_encoding":"base64"')
            _lit(&b, b',"headers":')
            if r.header_count == 0:
                _lit(&b, b"{}")
            elif plain:
                _headers_object(&b, p, &r, i)
            else:  # {name: value as text}, as message_json.header_fields makes it, and the list when it is not exact
                pairs = record_headers(p, &r, i)
                shown = {k: (v or b"").decode("utf-8", "replace") for k, v in pairs}
                hj = orjson.dumps(shown)
                _put(&b, PyBytes_AS_STRING(hj), len(hj))
                exact = len(shown) == len(pairs)
                for _, v in pairs:
                    if v is None or not _utf8(<const uint8_t*>PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v)):
                        exact = False
                        break
                if not exact:
                    _header_list(&b, p, &r, i)
            _lit(&b, b',"value":')
            if r.value_len < 0:
                _lit(&b, b'null,"encoding":"utf-8"')
            elif _utf8(p + r.value_at, r.value_len):
                _text(&b, p + r.value_at, r.value_len)
                _lit(&b, b',"encoding":"utf-8"')
            else:
                _base64(&b, p + r.value_at, r.value_len)
                _lit(&b, b',"encoding":"base64"')
            _lit(&b, b',"timestamp":')
            _int(&b, max_timestamp if log_append_time else first_timestamp + r.ts_delta)
            _lit(&b, b"}")
            emitted += 1
            last = offset
        if pos != n:
            raise ValueError(f"{n - pos} bytes left over after {count} records")
        at = PyByteArray_GET_SIZE(out)
        PyByteArray_Resize(out, at + b.size)
        memcpy(PyByteArray_AS_STRING(out) + at, b.data, b.size)
        return emitted, last
    finally:
        free(b.data)
