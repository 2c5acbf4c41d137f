package io.mqindex.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * The footer and index block of one object (broker/objects/format.py), read with one ranged GET of its tail
 * (two when the index is larger than the tail), checked as the Python reader checks them.
 */
final class ObjectIndex {
    static final int FOOTER_SIZE = 48;
    static final int ENTRY_SIZE = 36;
    static final int BLOCK_HEADER_SIZE = 10;
    static final long FOOTER_MAGIC = 0x88E241B785F4CFF7L;
    private static final int TAIL_READ = 64 << 10;

    final List<IndexEntry> entries;

    ObjectIndex(Ranges src, long size) {
        String key = src.key;
        if (size < FOOTER_SIZE) {
            throw Damaged.error(key, 0, "truncated footer: object is " + size + " bytes");
        }
        long tailStart = Math.max(0, size - Math.max(TAIL_READ, FOOTER_SIZE));
        byte[] tail = src.get(tailStart, size);
        ByteBuffer f = ByteBuffer.wrap(tail, tail.length - FOOTER_SIZE, FOOTER_SIZE);
        long footerAt = size - FOOTER_SIZE;
        long ipos = f.getLong();
        int ilen = f.getInt();
        int version = f.getShort() & 0xFFFF;
        for (int i = 14; i < 40; i++) {
            if (tail[tail.length - FOOTER_SIZE + i] != 0) {
                throw Damaged.error(key, footerAt, "bad footer: reserved bytes are not zero");
            }
        }
        long magic = ByteBuffer.wrap(tail, tail.length - 8, 8).getLong();
        if (magic != FOOTER_MAGIC) {
            throw Damaged.error(key, footerAt, "bad footer magic 0x" + Long.toHexString(magic));
        }
        if (version > 1) {
            throw Damaged.error(key, footerAt, "newer format version " + version + " (this reader reads 1)");
        }
        if (ilen < 0 || ilen % ENTRY_SIZE != 0 || ipos < 0 || ipos + ilen != footerAt) {
            throw Damaged.error(key, footerAt, "bad index position " + ipos + " length " + ilen);
        }
        byte[] raw = ipos >= tailStart ? tail : src.get(ipos, ipos + ilen);
        int at = ipos >= tailStart ? (int) (ipos - tailStart) : 0;
        this.entries = decode(key, ByteBuffer.wrap(raw, at, ilen), ilen / ENTRY_SIZE, ipos);
    }

    private static List<IndexEntry> decode(String key, ByteBuffer b, int n, long ipos) {
        List<IndexEntry> out = new ArrayList<>(n);
        IndexEntry prev = null;
        for (int i = 0; i < n; i++) {
            long sid = b.getLong();
            long start = b.getLong();
            int delta = b.getInt();
            int count = b.getInt();
            long pos = b.getLong();
            int size = b.getInt();
            IndexEntry e = new IndexEntry(sid, start, start + delta, count, pos, size);
            boolean bad = delta < 0 || count < 0 || size < BLOCK_HEADER_SIZE || pos < 0 || pos + size > ipos;
            if (!bad && prev != null) {
                bad = sid < prev.streamId() || (sid == prev.streamId() && start < prev.startOffset())
                        || pos < prev.position() + prev.size();
            }
            if (bad) {
                throw Damaged.error(key, ipos + (long) i * ENTRY_SIZE, "bad index entry " + i + ": " + e);
            }
            out.add(e);
            prev = e;
        }
        return out;
    }

    /** Entries of `streamId` overlapping [start, end), in offset order. */
    List<IndexEntry> entriesFor(long streamId, long start, long end) {
        List<IndexEntry> out = new ArrayList<>();
        for (IndexEntry e : entries) {
            if (e.streamId() > streamId || (e.streamId() == streamId && e.startOffset() >= end)) {
                break;
            }
            if (e.streamId() == streamId && e.endOffset() > start) {
                out.add(e);
            }
        }
        return out;
    }
}
