package io.mqindex.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * Adjacent data blocks read in one GET (broker/objects/format.py): block header 0x5A 0x02, record count, data
 * length; then stream records, magic 0x22 (33-byte header) or 0x23 (41 bytes, with the append time), each a
 * payload of Kafka record batches. Every block is checked against its index entry.
 */
final class BlockRun {
    static final int MAX_BYTES = 8 << 20; // a run is cut into GETs of about this many bytes
    static final int FIRST_BYTES = 1 << 20; // the first GET of a split: decoding starts after a short wait
    private static final byte BLOCK_MAGIC = 0x5A;
    private static final byte BLOCK_FLAG = 0x02;

    final List<IndexEntry> blocks;
    final long position;
    final long end;

    BlockRun(List<IndexEntry> blocks) {
        this.blocks = blocks;
        this.position = blocks.get(0).position();
        IndexEntry last = blocks.get(blocks.size() - 1);
        this.end = last.position() + last.size();
    }

    /**
     * Runs of adjacent blocks: the first at most about FIRST_BYTES, each next one up to twice the size of the one
     * before, at most MAX_BYTES (a block larger than that is a run alone).
     */
    static List<BlockRun> of(List<IndexEntry> entries) {
        List<BlockRun> out = new ArrayList<>();
        List<IndexEntry> cur = new ArrayList<>();
        long bytes = 0;
        long cap = FIRST_BYTES;
        for (IndexEntry e : entries) {
            IndexEntry prev = cur.isEmpty() ? null : cur.get(cur.size() - 1);
            if (prev != null && (e.position() != prev.position() + prev.size() || bytes + e.size() > cap)) {
                out.add(new BlockRun(cur));
                cur = new ArrayList<>();
                bytes = 0;
                cap = Math.min(MAX_BYTES, cap * 2);
            }
            cur.add(e);
            bytes += e.size();
        }
        if (!cur.isEmpty()) {
            out.add(new BlockRun(cur));
        }
        return out;
    }

    /** The payloads of `streamId`'s records overlapping [start, end) in `data` (this run's bytes). */
    List<Payload> payloads(String key, byte[] data, long streamId, long start, long end) {
        List<Payload> out = new ArrayList<>();
        for (IndexEntry e : blocks) {
            int at = (int) (e.position() - position);
            ByteBuffer b = ByteBuffer.wrap(data, at, e.size());
            byte magic = b.get();
            byte flag = b.get();
            int count = b.getInt();
            int length = b.getInt();
            if (magic != BLOCK_MAGIC || flag != BLOCK_FLAG) {
                throw Damaged.error(key, e.position(), "bad block magic " + magic + " flag " + flag);
            }
            if (length != e.size() - ObjectIndex.BLOCK_HEADER_SIZE || count != e.recordCount()) {
                throw Damaged.error(key, e.position(), "bad block: " + count + " records, " + length
                        + " bytes; index says " + e.recordCount() + " records, " + e.size() + " bytes");
            }
            records(key, data, e, at, count, streamId, start, end, out);
        }
        return out;
    }

    private void records(String key, byte[] data, IndexEntry e, int at, int count, long streamId, long start,
                         long end, List<Payload> out) {
        ByteBuffer b = ByteBuffer.wrap(data);
        int pos = at + ObjectIndex.BLOCK_HEADER_SIZE;
        int blockEnd = at + e.size();
        long first = -1;
        long last = -1;
        for (int i = 0; i < count; i++) {
            long where = position + pos;
            if (pos + 33 > blockEnd) {
                throw Damaged.error(key, where, "bad record: record " + i + " header runs past the block end");
            }
            byte magic = data[pos];
            long sid = b.getLong(pos + 1);
            long base = b.getLong(pos + 17);
            int n = b.getInt(pos + 25);
            int plen = b.getInt(pos + 29);
            int header = magic == 0x23 ? 41 : 33;
            if (magic != 0x22 && magic != 0x23) {
                throw Damaged.error(key, where, "bad record magic 0x" + Integer.toHexString(magic & 0xFF));
            }
            if (plen < 0 || n <= 0 || (long) pos + header + plen > blockEnd || sid != e.streamId()) {
                throw Damaged.error(key, where, "bad record: record " + i + " count " + n + " payload " + plen
                        + " bytes does not fit the block");
            }
            if (first < 0) {
                first = base;
            }
            last = base + n;
            if (base + n > start && base < end) {
                out.add(new Payload(pos + header, plen, base, base + n));
            }
            pos += header + plen;
        }
        if (pos != blockEnd) {
            throw Damaged.error(key, position + pos, "bad block: " + (blockEnd - pos) + " trailing bytes");
        }
        if (count > 0 && (first != e.startOffset() || last != e.endOffset())) {
            throw Damaged.error(key, e.position(), "block does not match its index entry: records [" + first + ", "
                    + last + ") vs index [" + e.startOffset() + ", " + e.endOffset() + ")");
        }
    }
}
