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


cdef struct Target:
    Item* out
    uint32_t* heads
    uint64_t slot_count
    uint32_t start
    int64_t lo
    int64_t hi


cdef Target _target(unsigned char[::1] dest, unsigned char[::1] slots, uint32_t start, Py_ssize_t n) except *:
    """Where n items go: the items region (checked to hold them) and the slots; times not seen yet."""
    cdef Target t
    if dest.shape[0] < n * <Py_ssize_t>sizeof(Item):
        raise ValueError("the items region is too small for the batch")
    t.out = <Item*>&dest[0]
    t.heads = <uint32_t*>&slots[0]
    t.slot_count = slots.shape[0] // 4
    t.start = start
    t.lo = 0x7FFFFFFFFFFFFFFF
    t.hi = -0x7FFFFFFFFFFFFFFF - 1
    return t


cdef inline void _append(Target* t, Py_ssize_t i, Item* it) noexcept nogil:
    """Item i written whole (next: its slot's head; its check word), then its slot pointed at it."""
    cdef uint64_t s = it.fp % t.slot_count
    it.next = t.heads[s]
    it.check = _check(it, t.start + i)
    t.out[i] = it[0]
    store_release(&t.heads[s], t.start + <uint32_t>i + 1)
    if it.time < t.lo:
        t.lo = it.time
    if it.time > t.hi:
        t.hi = it.time


def append_columns(unsigned char[::1] dest not None, unsigned char[::1] slots not None, uint32_t start,
                   const uint64_t[::1] fps not None, const int64_t[::1] queue not None,
                   const int64_t[::1] offset not None, const int64_t[::1] size not None,
                   const int64_t[::1] time not None):
    """Write one item per entry (fingerprint i with entry i's fields) at item `start` of the items region `dest`,
    each chained to its slot in `slots` (the u4 slot array's bytes). The caller checked that queue and size fit
    32 bits. Returns the (lowest, highest) time written, None for no entries."""
    cdef Py_ssize_t n = fps.shape[0], i
    cdef Item it
    if n == 0:
        return None
    if queue.shape[0] < n or offset.shape[0] < n or size.shape[0] < n or time.shape[0] < n:
        raise ValueError("a column is shorter than the fingerprints")
    cdef Target t = _target(dest, slots, start, n)
    with nogil:
        for i in range(n):
            it.fp = fps[i]
            it.offset = offset[i]
            it.time = time[i]
            it.queue = <int32_t>queue[i]
            it.size = <int32_t>size[i]
            _append(&t, i, &it)
    return t.lo, t.hi


def append_rows(unsigned char[::1] dest not None, unsigned char[::1] slots not None, uint32_t start,
                const unsigned char[::1] rows not None):
    """`append_columns` for items already made as ITEM_DTYPE rows (their next and check fields are replaced)."""
    cdef Py_ssize_t n = rows.shape[0] // sizeof(Item), i
    cdef Item it
    if n == 0:
        return None
    cdef const Item* src = <const Item*>&rows[0]
    cdef Target t = _target(dest, slots, start, n)
    with nogil:
        for i in range(n):
            it = src[i]
            _append(&t, i, &it)
    return t.lo, t.hi
