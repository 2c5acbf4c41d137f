package io.mqindex.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.zip.CRC32C;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One task's rows as ColumnarBatch, split after split (jobs/spark_source/read.py is the Python twin): each
 * object's footer and index once, then only the blocks overlapping the split's offsets, adjacent blocks in one
 * GET and the next GETs under way while a run is decoded. A batch's CRC is checked and its compression undone;
 * control batches give no row. Key and value rows point into the fetched runs (SlicedBinaryVector), so a run's
 * buffer goes back to the task's pool only once the batch that used it is done with, at the next batch.
 */
final class TaskReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;
    static final long BYTES = 4 << 20;
    static final int AHEAD = 2; // GETs under way while a run is decoded

    private final TaskPartition task;
    private final Columns cols;
    private final RecordWalker walker = new RecordWalker();
    private final BatchHeader h = new BatchHeader();
    private final CRC32C crc = new CRC32C();
    private int splitIndex = -1;
    private SplitSpec split;
    private Ranges src;
    private ObjectIndex index;
    private List<BlockRun> runs;
    private int runIndex;
    private final ArrayDeque<CompletableFuture<byte[]>> pending = new ArrayDeque<>();
    private BlockRun run;
    private byte[] data;
    private final ArrayDeque<byte[]> free = new ArrayDeque<>(); // run buffers to read into again
    private final List<byte[]> retired = new ArrayList<>(); // runs done with but used by the last batch
    private List<Payload> payloads;
    private int payloadIndex;
    private int pos;

    TaskReader(TaskPartition task, StructType required) {
        this.task = task;
        this.cols = new Columns(required, ROWS);
    }

    @Override
    public boolean next() throws IOException {
        cols.reset(); // the last batch is done with: the runs it pointed into may be read into again
        free.addAll(retired);
        retired.clear();
        int rows = 0;
        long bytes = 0;
        while (rows < ROWS && (bytes < BYTES || rows == 0)) {
            if (!atBatch()) {
                break;
            }
            bytes += h.size;
            rows += decode();
        }
        cols.batch(rows);
        return rows > 0;
    }

    @Override
    public ColumnarBatch get() {
        return cols.batch;
    }

    @Override
    public void close() {
        pending.forEach(f -> f.cancel(true));
        cols.close();
    }

    /** Moves to the next batch of a payload (header parsed into h at pos); false when the task is done. */
    private boolean atBatch() {
        while (true) {
            if (payloads != null && payloadIndex < payloads.size()) {
                Payload pl = payloads.get(payloadIndex);
                int stop = pl.at() + pl.length();
                if (pos < stop) {
                    String err = h.parse(data, pos, stop);
                    if (err != null) {
                        throw Damaged.error(split.key(), run.position + pos, err);
                    }
                    return true;
                }
                payloadIndex++;
                if (payloadIndex < payloads.size()) {
                    pos = payloads.get(payloadIndex).at();
                }
                continue;
            }
            if (runs != null && runIndex < runs.size()) {
                nextRun();
                continue;
            }
            if (++splitIndex >= task.splits().size()) {
                return false;
            }
            openSplit(task.splits().get(splitIndex));
        }
    }

    private void openSplit(SplitSpec s) {
        if (split == null || !split.url().equals(s.url())) {
            src = Ranges.open(s);
            index = new ObjectIndex(src, s.size());
        }
        split = s;
        retire();
        runs = BlockRun.of(index.entriesFor(s.streamId(), s.start(), s.end()));
        runIndex = 0;
        payloads = null;
        pending.forEach(f -> f.cancel(true));
        pending.clear();
        for (int i = 0; i < Math.min(AHEAD, runs.size()); i++) {
            pending.add(fetch(runs.get(i)));
        }
        walker.topic = s.topic().getBytes(StandardCharsets.UTF_8);
        walker.partition = s.partition();
    }

    /** A GET of a run into a pooled buffer (one large enough, else a new one of at least BlockRun.MAX_BYTES). */
    private CompletableFuture<byte[]> fetch(BlockRun r) {
        long length = r.end - r.position;
        byte[] into = null;
        for (byte[] b : free) {
            if (b.length >= length) {
                into = b;
                break;
            }
        }
        if (into != null) {
            free.remove(into);
        } else {
            into = new byte[Math.toIntExact(Math.max(length, BlockRun.MAX_BYTES))];
        }
        return src.fetch(r.position, r.end, into);
    }

    /** The current run's buffer is no longer read from, though the batch being built may point into it. */
    private void retire() {
        if (data != null) {
            retired.add(data);
            data = null;
        }
    }

    private void nextRun() {
        run = runs.get(runIndex++);
        retire();
        try {
            data = pending.remove().get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("mqindex: interrupted reading " + split.key(), e);
        } catch (ExecutionException e) {
            throw e.getCause() instanceof RuntimeException re ? re : new IllegalStateException(e.getCause());
        }
        if (runIndex + AHEAD - 1 < runs.size()) {
            pending.add(fetch(runs.get(runIndex + AHEAD - 1)));
        }
        payloads = run.payloads(split.key(), data, split.streamId(), split.start(), split.end());
        payloadIndex = 0;
        pos = payloads.isEmpty() ? 0 : payloads.get(0).at();
    }

    /** The rows of the batch at pos (h parsed); pos moves past it. */
    private int decode() {
        int at = pos;
        pos += h.size;
        if (h.isControl() || h.nextOffset <= split.start() || h.baseOffset >= split.end()) {
            return 0;
        }
        long where = run.position + at;
        crc.reset();
        crc.update(data, at + BatchHeader.CRC_START, h.size - BatchHeader.CRC_START);
        if ((int) crc.getValue() != h.crc) {
            throw Damaged.error(split.key(), where, "record batch (base offset " + h.baseOffset + "): CRC mismatch");
        }
        byte[] records = data;
        int from = at + BatchHeader.SIZE;
        int length = h.size - BatchHeader.SIZE;
        if (h.codec() != 0) {
            try {
                records = Codecs.decompress(h.codec(), data, from, length);
            } catch (IOException | RuntimeException e) {
                throw Damaged.error(split.key(), where, "record batch (base offset " + h.baseOffset
                        + "): cannot decompress (" + e + ")", e);
            }
            from = 0;
            length = records.length;
        }
        walker.baseOffset = h.baseOffset;
        walker.firstTimestamp = h.firstTimestamp;
        walker.maxTimestamp = h.maxTimestamp;
        walker.logAppendTime = h.logAppendTime();
        try {
            return walker.walk(cols, records, from, length, h.count, split.start(), split.end(), task.loMs(),
                    task.hiMs());
        } catch (IllegalArgumentException | IndexOutOfBoundsException e) {
            throw Damaged.error(split.key(), where, "record batch (base offset " + h.baseOffset
                    + "): cannot decode records (" + e.getMessage() + ")", e);
        }
    }
}
