# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The messages of a plain produce body read straight from its bytes, in C: each value and key copied once, from
the body into its bytes object, with no JSON parser's objects in between.

Written here because a JSON parser makes a `str` of every value (orjson validates and copies it), and the
message then encodes it back to UTF-8 (a second copy): about half of the event loop's time for a 256 KiB body,
for bytes that end up as they came. No JSON library hands out a string's UTF-8 bytes. This reads only the shape
produce_json accepts: {"messages": [message, ...]}, each message an object of "value" (a string or null,
required) and optionally "key" (a string or null), "headers" (an object of strings), "partition" (null, or an
integer written without sign, fraction or exponent) and "encoding" ("utf-8"), each field at most once, in any
order, with JSON's whitespace anywhere, and no other field.
Strings are checked as JSON requires (no control character, valid UTF-8 without surrogates, known escapes,
\\u escapes decoded, surrogate pairs joined). Anything else, valid JSON or not, gives None and the caller reads
the body with orjson as before, so this answers the same messages or nothing (the tests compare the two).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint8_t
from libc.string cimport memcmp

from broker.partitions.client_messages import InMessage

_new = tuple.__new__

# which fields a message holds (a bit each): a field met twice sends the body to orjson
cdef enum:
    F_VALUE = 1
    F_KEY = 2
    F_HEADERS = 4
    F_PARTITION = 8
    F_ENCODING = 16


cdef inline Py_ssize_t _ws(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and (p[i] == 32 or p[i] == 10 or p[i] == 13 or p[i] == 9):
        i += 1
    return i


cdef extern from "Python.h":
    int _PyBytes_Resize(PyObject** string, Py_ssize_t newsize) except -1


cdef extern from *:
    """
    /* The first byte at or after p[i] (before p[n]) that a JSON string's scan must look at: a quote, a backslash, a control
       character or a byte of a multi-byte UTF-8 sequence; n when there is none. 16 bytes a step with SSE2 (every
       x86-64 has it), else 8 bytes a step in a 64-bit word (little-endian), else a byte a step. */
    #include <stdint.h>
    #include <string.h>
    #if defined(__SSE2__)
    #include <emmintrin.h>
    #endif
    static inline Py_ssize_t mqx_plain_run(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) {
    #if defined(__SSE2__)
        const __m128i quote = _mm_set1_epi8(0x22), bslash = _mm_set1_epi8(0x5C), ctl = _mm_set1_epi8(0x1F);
        while (i + 16 <= n) {
            __m128i x = _mm_loadu_si128((const __m128i*)(p + i));
            __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                       _mm_cmpeq_epi8(_mm_max_epu8(x, ctl), ctl));
            int mask = _mm_movemask_epi8(hit) | _mm_movemask_epi8(x);
            if (mask)
                return i + __builtin_ctz((unsigned)mask);
            i += 16;
        }
    #elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        while (i + 8 <= n) {
            uint64_t x, q, b, hit;
            memcpy(&x, p + i, 8);
            q = x ^ 0x2222222222222222ULL;
            b = x ^ 0x5C5C5C5C5C5C5C5CULL;
            hit = (((q - 0x0101010101010101ULL) & ~q) | ((b - 0x0101010101010101ULL) & ~b)
                   | ((x - 0x2020202020202020ULL) & ~x) | x) & 0x8080808080808080ULL;
            if (hit)
                return i + (__builtin_ctzll(hit) >> 3);
            i += 8;
        }
    #endif
        while (i < n && p[i] != 0x22 && p[i] != 0x5C && p[i] >= 0x20 && p[i] < 0x80)
            i++;
        return i;
    }
    """
    Py_ssize_t mqx_plain_run(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) nogil


cdef inline Py_ssize_t _utf8(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """The length of the valid UTF-8 sequence (not ASCII) at p[i], or 0 (overlong, surrogate, past U+10FFFF,
    truncated)."""
    cdef uint8_t c = p[i], lo = 0x80, hi = 0xBF
    cdef Py_ssize_t k, length
    if 0xC2 <= c <= 0xDF:
        length = 2
    elif 0xE0 <= c <= 0xEF:
        length = 3
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
    elif 0xF0 <= c <= 0xF4:
        length = 4
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
    else:
        return 0
    if i + length > n or not lo <= p[i + 1] <= hi:
        return 0
    for k in range(2, length):
        if not 0x80 <= p[i + k] <= 0xBF:
            return 0
    return length


cdef inline Py_ssize_t _string_end(const uint8_t* p, Py_ssize_t i, Py_ssize_t n, bint* escaped) noexcept nogil:
    """From just after a string's opening quote: the position of its closing quote, or -1 when the string is not
    valid JSON text (escaped[0] is set when it holds a backslash; escapes are checked when decoded)."""
    cdef Py_ssize_t k
    cdef uint8_t c
    while True:
        i = mqx_plain_run(p, i, n)
        if i >= n:
            return -1
        c = p[i]
        if c == 34:  # '"'
            return i
        if c == 92:  # '\\': the escaped character is skipped here
            escaped[0] = True
            i += 2
        elif c < 32:
            return -1
        elif c < 128:
            i += 1
        else:
            k = _utf8(p, i, n)
            if k == 0:
                return -1
            i += k


cdef inline int _hex4(const uint8_t* p, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """The 4 hex digits at p[i], or -1."""
    cdef int v = 0, d, k
    cdef uint8_t c
    if i + 4 > n:
        return -1
    for k in range(4):
        c = p[i + k]
        if 48 <= c <= 57:
            d = c - 48
        elif 97 <= c <= 102:
            d = c - 87
        elif 65 <= c <= 70:
            d = c - 55
        else:
            return -1
        v = v * 16 + d
    return v


cdef Py_ssize_t _unescape(const uint8_t* p, Py_ssize_t i, Py_ssize_t end, uint8_t* out) noexcept nogil:
    """The UTF-8 bytes of the string p[i:end] (its text checked by _string_end) with its escapes decoded into
    `out` (at most end - i bytes): their count, or -1 for an unknown escape or a lone surrogate."""
    cdef Py_ssize_t o = 0
    cdef int u, lo
    cdef uint8_t c
    while i < end:
        c = p[i]
        if c != 92:
            out[o] = c
            o += 1
            i += 1
            continue
        c = p[i + 1]
        i += 2
        if c == 34 or c == 92 or c == 47:
            out[o] = c
        elif c == 98:
            out[o] = 8
        elif c == 102:
            out[o] = 12
        elif c == 110:
            out[o] = 10
        elif c == 114:
            out[o] = 13
        elif c == 116:
            out[o] = 9
        elif c == 117:  # \uXXXX, a surrogate pair as two
            u = _hex4(p, i, end)
            if u < 0:
                return -1
            i += 4
            if 0xDC00 <= u <= 0xDFFF:
                return -1
            if 0xD800 <= u <= 0xDBFF:
                if i + 6 > end or p[i] != 92 or p[i + 1] != 117:
                    return -1
                lo = _hex4(p, i + 2, end)
                if not 0xDC00 <= lo <= 0xDFFF:
                    return -1
                i += 6
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
            if u < 0x80:
                out[o] = <uint8_t>u
            elif u < 0x800:
                out[o] = <uint8_t>(0xC0 | (u >> 6))
                out[o + 1] = <uint8_t>(0x80 | (u & 0x3F))
                o += 1
            elif u < 0x10000:
                out[o] = <uint8_t>(0xE0 | (u >> 12))
                out[o + 1] = <uint8_t>(0x80 | ((u >> 6) & 0x3F))
                out[o + 2] = <uint8_t>(0x80 | (u & 0x3F))
                o += 2
            else:
                out[o] = <uint8_t>(0xF0 | (u >> 18))
                out[o + 1] = <uint8_t>(0x80 | ((u >> 12) & 0x3F))
                out[o + 2] = <uint8_t>(0x80 | ((u >> 6) & 0x3F))
                out[o + 3] = <uint8_t>(0x80 | (u & 0x3F))
                o += 3
        else:
            return -1
        o += 1
    return o


cdef class _Scan:
    """One body's bytes and the position read so far; each read gives False (or None) when the body leaves the
    shape, with the position then meaningless."""
    cdef const uint8_t* p
    cdef Py_ssize_t n
    cdef Py_ssize_t i

    cdef inline bint expect(self, uint8_t c):
        """The byte `c`, after whitespace, then whitespace."""
        self.i = _ws(self.p, self.i, self.n)
        if self.i >= self.n or self.p[self.i] != c:
            return False
        self.i = _ws(self.p, self.i + 1, self.n)
        return True

    cdef inline bint null(self):
        if self.i + 4 <= self.n and memcmp(self.p + self.i, b"null", 4) == 0:
            self.i += 4
            return True
        return False

    cdef object string(self):
        """The string at the position (its opening quote) as UTF-8 bytes, or None."""
        cdef bint escaped = False
        cdef Py_ssize_t start, end, k
        cdef object out
        cdef PyObject* o
        if self.i >= self.n or self.p[self.i] != 34:
            return None
        start = self.i + 1
        end = _string_end(self.p, start, self.n, &escaped)
        if end < 0:
            return None
        self.i = end + 1
        if not escaped:
            return PyBytes_FromStringAndSize(<const char*>self.p + start, end - start)
        out = PyBytes_FromStringAndSize(NULL, end - start)
        k = _unescape(self.p, start, end, <uint8_t*>PyBytes_AS_STRING(out))
        if k < 0:
            return None
        if k == end - start:
            return out
        # decoding shortened it: the new bytes shrunk in place (it has no other reference), not copied again
        o = <PyObject*>out
        Py_INCREF(out)
        out = None  # `o` holds the only reference, which _PyBytes_Resize takes (and frees on failure)
        _PyBytes_Resize(&o, k)
        shrunk = <object>o
        Py_DECREF(shrunk)  # the reference `o` held, now `shrunk`'s
        return shrunk

    cdef int field(self):
        """The field name at the position (no escapes), as its bit; 0 for any other name."""
        cdef Py_ssize_t start = self.i + 1, k
        if self.i >= self.n or self.p[self.i] != 34:
            return 0
        k = start
        while k < self.n and self.p[k] != 34 and self.p[k] != 92:
            k += 1
        if k >= self.n or self.p[k] != 34:
            return 0
        self.i = k + 1
        k -= start
        if k == 5 and memcmp(self.p + start, b"value", 5) == 0:
            return F_VALUE
        if k == 3 and memcmp(self.p + start, b"key", 3) == 0:
            return F_KEY
        if k == 7 and memcmp(self.p + start, b"headers", 7) == 0:
            return F_HEADERS
        if k == 9 and memcmp(self.p + start, b"partition", 9) == 0:
            return F_PARTITION
        if k == 8 and memcmp(self.p + start, b"encoding", 8) == 0:
            return F_ENCODING
        return 0

    cdef object headers(self):
        """The headers object at the position as [(name, value bytes)] in order, or None (a name given twice, a
        value that is not a string)."""
        cdef list pairs = []
        cdef set names = set()
        if not self.expect(123):  # '{'
            return None
        if self.i < self.n and self.p[self.i] == 125:  # '}'
            self.i += 1
            return pairs
        while True:
            name = self.string()
            if name is None:
                return None
            try:
                name = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(name), len(<bytes>name), NULL)
            except UnicodeDecodeError:
                return None
            if name in names:
                return None
            names.add(name)
            if not self.expect(58):  # ':'
                return None
            value = self.string()
            if value is None:
                return None
            pairs.append((name, value))
            self.i = _ws(self.p, self.i, self.n)
            if self.i < self.n and self.p[self.i] == 44:  # ','
                self.i = _ws(self.p, self.i + 1, self.n)
                continue
            if self.i < self.n and self.p[self.i] == 125:
                self.i += 1
                return pairs
            return None

    cdef bint partition(self, long long max_partition, long long* out):
        """A partition number (0, or digits without a leading zero, up to max_partition) at the position."""
        cdef long long v = 0
        cdef Py_ssize_t start = self.i
        while self.i < self.n and 48 <= self.p[self.i] <= 57 and self.i - start < 11:
            v = v * 10 + (self.p[self.i] - 48)
            self.i += 1
        if self.i == start or (self.p[start] == 48 and self.i - start > 1) or v > max_partition:
            return False
        out[0] = v
        # not a fraction, an exponent or more digits
        return self.i >= self.n or self.p[self.i] not in b".eE0123456789"

    cdef object message(self, Py_ssize_t max_value_bytes, long long max_partition):
        """The message object at the position as an InMessage, or None."""
        cdef int seen = 0, f
        cdef long long part
        value = key = None
        pairs = []
        partition = None
        if not self.expect(123):  # '{'
            return None
        while True:
            f = self.field()
            if f == 0 or seen & f:  # an unknown field ({} too), or one twice: pydantic names it
                return None
            seen |= f
            if not self.expect(58):  # ':'
                return None
            if f == F_VALUE or f == F_KEY:
                if not self.null():
                    s = self.string()
                    if s is None:
                        return None
                    if f == F_VALUE:
                        if len(<bytes>s) > max_value_bytes:
                            return None
                        value = s
                    else:
                        key = s
            elif f == F_HEADERS:
                pairs = self.headers()
                if pairs is None:
                    return None
            elif f == F_PARTITION:
                if not self.null():
                    if not self.partition(max_partition, &part):
                        return None
                    partition = part
            else:  # encoding: "utf-8" only
                if self.i + 7 > self.n or memcmp(self.p + self.i, b'"utf-8"', 7) != 0:
                    return None
                self.i += 7
            self.i = _ws(self.p, self.i, self.n)
            if self.i < self.n and self.p[self.i] == 44:  # ','
                self.i = _ws(self.p, self.i + 1, self.n)
                continue
            if self.i < self.n and self.p[self.i] == 125:  # '}'
                if not seen & F_VALUE:  # required (null for a tombstone): pydantic names it
                    return None
                self.i += 1
                return _new(InMessage, (value, key, pairs, partition, None))
            return None


def messages(const uint8_t[::1] body not None, Py_ssize_t max_value_bytes, long long max_partition,
             Py_ssize_t max_messages):
    """[InMessage] of a plain produce body (1 to max_messages messages), or None when the body is not in the
    shape this reads (see the module): orjson reads it then."""
    cdef _Scan s = _Scan.__new__(_Scan)
    cdef list out = []
    s.p = &body[0] if body.shape[0] else NULL
    s.n = body.shape[0]
    s.i = 0
    if not s.expect(123):  # '{'
        return None
    if s.i + 10 > s.n or memcmp(s.p + s.i, b'"messages"', 10) != 0:
        return None
    s.i += 10
    if not s.expect(58) or not s.expect(91):  # ':' '['
        return None
    while True:
        m = s.message(max_value_bytes, max_partition)
        if m is None:
            return None
        out.append(m)
        if len(out) > max_messages:
            return None
        s.i = _ws(s.p, s.i, s.n)
        if s.i < s.n and s.p[s.i] == 44:  # ','
            s.i += 1
            continue
        break
    if not s.expect(93) or not s.expect(125) or s.i != s.n:  # ']' '}' and nothing after
        return None
    return out
