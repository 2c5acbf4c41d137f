package io.mqindex.spark;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * One GET of a split's blocks and the whole blocks it completes (broker/objects/format.py): block header 0x5A
 * 0x02, record count, data length; then stream records, magic 0x22 (33-byte header) or 0x23 (41 bytes, with the
 * append time), each a payload of Kafka record batches. Every block is checked against its index entry.
 *
 * <p>GETs start and end at multiples of `step` bytes of the object (STEP unless the plan says otherwise; but for
 * the first and last GET of a run of adjacent blocks), not at block boundaries: an object is stored in parts of 8
 * MiB (broker/objects/writer.py), and SeaweedFS spent 0.3 ms of CPU per MB more on GETs that start or end inside
 * a part (1.3-1.5 ms/MB against 1.0-1.2, docs/BENCHMARKS.md), and about 2 ms per GET whatever its size: GETs of
 * 1 MiB cost it 3.1-3.3 ms/MB, and in the bench GETs of two parts 1.24-1.29 ms/MB against 1.38-1.41 for one. A
 * block a GET cuts is completed by the next one: the bytes of it the first GET read ("carry", [position,
 * getStart)) are copied in front of the next GET's bytes, which are read into the same buffer after them.
 */
final class BlockRun {
    /** GET boundaries by default: multiples of this many bytes of the object, two of its parts. */
    static final int STEP = 16 << 20;
    private static final byte BLOCK_MAGIC = 0x5A;
    private static final byte BLOCK_FLAG = 0x02;

    final List<IndexEntry> blocks; // the whole blocks in [position, end): possibly none (a block longer than a GET)
    final long position; // the buffer's first byte: the start of the first block not completed before
    final long getStart; // this GET's bytes: [getStart, end)
    final long end;

    private BlockRun(List<IndexEntry> blocks, long position, long getStart, long end) {
        this.blocks = blocks;
        this.position = position;
        this.getStart = getStart;
        this.end = end;
    }

    /** The GETs of these blocks (in object order): one run of adjacent blocks after another. */
    static List<BlockRun> of(List<IndexEntry> entries, int step) {
        List<BlockRun> out = new ArrayList<>();
        int i = 0;
        while (i < entries.size()) {
            int j = i + 1;
            while (j < entries.size() && entries.get(j).position() == endOf(entries.get(j - 1))) {
                j++;
            }
            adjacent(entries.subList(i, j), step, out);
            i = j;
        }
        return out;
    }

    /**
     * GETs cut at multiples of `step`; the first is made longer rather than shorter than step / 4, and so is the
     * last.
     */
    private static void adjacent(List<IndexEntry> blocks, long step, List<BlockRun> out) {
        long last = endOf(blocks.get(blocks.size() - 1));
        long get = blocks.get(0).position();
        long position = get;
        int next = 0;
        while (get < last) {
            long cut = (get / step + 1) * step;
            if (cut - get < step / 4) {
                cut += step;
            }
            if (last - cut < step / 4) { // also when the cut is past the last block
                cut = last;
            }
            List<IndexEntry> done = new ArrayList<>();
            while (next < blocks.size() && endOf(blocks.get(next)) <= cut) {
                done.add(blocks.get(next++));
            }
            out.add(new BlockRun(done, position, get, cut));
            if (!done.isEmpty()) {
                position = endOf(done.get(done.size() - 1));
            }
            get = cut;
        }
    }

    private static long endOf(IndexEntry e) {
        return e.position() + e.size();
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
