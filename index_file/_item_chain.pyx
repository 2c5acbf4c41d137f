# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Items appended to a WRITING native index file's mapping in C, without the GIL (native_unsealed.py calls it).

Written here because the vectorised append (a stable sort of the batch by slot to chain items within it, field by
field copies, the check words in ten numpy passes) cost about 0.1 us an item with the GIL held, a fifth of the index
service's write path, while the plain head insertion it vectorises is a few nanoseconds an item in C. Each item is
written whole (its next pointer is the slot's current head, its check word is `item_checks`'s) before its slot is
pointed at it with a release store, so a reader thread walking a chain meanwhile never meets an unwritten item;
the count readers stop at moves after the batch, as before (native_unsealed.py). The tests compare the file with
the one the numpy append writes, byte for byte.
"""

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

cdef extern from *:
    """
    static inline void mq_store_release_u32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    """
    void store_release "mq_store_release_u32"(uint32_t* p, uint32_t v) noexcept nogil

cdef packed struct Item:  # ITEM_DTYPE (native_unsealed.py), little-endian on the machines this runs on
    uint64_t fp
    int64_t offset
    int64_t time
    int32_t queue
    int32_t size
    uint32_t next
    uint32_t check

cdef uint64_t K0 = 0x9E3779B97F4A7C15ULL, K1 = 0xC2B2AE3D27D4EB4FULL, K2 = 0x165667B19E3779F9ULL
cdef uint64_t K3 = 0xD6E8FEB86659FD93ULL, K4 = 0xFF51AFD7ED558CCDULL, K5 = 0xC4CEB9FE1A85EC53ULL
cdef uint64_t SALT = 0x4D5158554E53454CULL


cdef inline uint32_t _check(const Item* it, uint64_t index) noexcept nogil:
    """native_unsealed.item_checks of one item at `index`."""
    cdef uint64_t qs = (<uint64_t>(<uint32_t>it.queue) << 32) | <uint64_t>(<uint32_t>it.size)
    cdef uint64_t nx = (<uint64_t>it.next << 32) | index
    cdef uint64_t h = it.fp ^ SALT
    h = h ^ (<uint64_t>it.offset * K0)
    h = (h * K1) ^ (<uint64_t>it.time * K2)
    h = (h * K3) ^ (qs * K4)
    h = (h * K5) ^ (nx * K0)
    h ^= h >> 33
    h *= K4
    h ^= h >> 33
    h *= K5
    h ^= h >> 33
    return <uint32_t>(h & 0xFFFFFFFFULL)


cdef inline void _append(Item* dest, uint32_t* slots, uint64_t slot_count, uint32_t start, Py_ssize_t i,
                         Item* it) noexcept nogil:
    cdef uint64_t s = it.fp % slot_count
    it.next = slots[s]
    it.check = _check(it, start + i)
    dest[i] = it[0]
    store_release(&slots[s], start + <uint32_t>i + 1)


def append_columns(unsigned char[::1] dest not None, unsigned char[::1] slots not None, uint32_t start,
                   const uint64_t[::1] fps not None, const int64_t[::1] queue not None,
                   const int64_t[::1] offset not None, const int64_t[::1] size not None,
                   const int64_t[::1] time not None):
    """Write one item per entry (fingerprint i with entry i's fields) at item `start` of the items region `dest`,
    each chained to its slot in `slots` (the u4 slot array's bytes). The caller checked that queue and size fit
    32 bits and that the items fit the region. Returns the (lowest, highest) time written."""
    cdef Py_ssize_t n = fps.shape[0], i
    cdef Item it
    cdef Item* out = <Item*>&dest[0]
    cdef uint32_t* heads = <uint32_t*>&slots[0]
    cdef uint64_t slot_count = slots.shape[0] // 4
    cdef int64_t lo = 0, hi = 0
    if n == 0:
        return None
    if queue.shape[0] < n or offset.shape[0] < n or size.shape[0] < n or time.shape[0] < n:
        raise ValueError("a column is shorter than the fingerprints")
    if dest.shape[0] < n * <Py_ssize_t>sizeof(Item):
        raise ValueError("the items region is too small for the batch")
    lo = hi = time[0]
    with nogil:
        for i in range(n):
            it.fp = fps[i]
            it.offset = offset[i]
            it.time = time[i]
            it.queue = <int32_t>queue[i]
            it.size = <int32_t>size[i]
            _append(out, heads, slot_count, start, i, &it)
            if it.time < lo:
                lo = it.time
            elif it.time > hi:
                hi = it.time
    return lo, hi


def append_rows(unsigned char[::1] dest not None, unsigned char[::1] slots not None, uint32_t start,
                const unsigned char[::1] rows not None):
    """`append_columns` for items already made as ITEM_DTYPE rows (their next and check fields are replaced)."""
    cdef Py_ssize_t n = rows.shape[0] // sizeof(Item), i
    cdef Item it
    cdef const Item* src = <const Item*>&rows[0] if n else NULL
    cdef Item* out = <Item*>&dest[0]
    cdef uint32_t* heads = <uint32_t*>&slots[0]
    cdef uint64_t slot_count = slots.shape[0] // 4
    cdef int64_t lo = 0, hi = 0
    if n == 0:
        return None
    if dest.shape[0] < n * <Py_ssize_t>sizeof(Item):
        raise ValueError("the items region is too small for the batch")
    lo = hi = src[0].time
    with nogil:
        for i in range(n):
            it = src[i]
            _append(out, heads, slot_count, start, i, &it)
            if it.time < lo:
                lo = it.time
            elif it.time > hi:
                hi = it.time
    return lo, hi
