package io.mqindex.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.zip.CRC32C;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * One task's rows as ColumnarBatch (jobs/spark_source/read.py is the Python twin). At the start, every object's
 * footer and index is read (in parallel, once per object); then the blocks overlapping each split's offsets are
 * read, adjacent blocks in one GET, the GETs of the whole task in one pipeline: AHEAD of them under way while a
 * run is decoded, the next split's first ones while the current split ends. A batch's CRC is checked and its
 * compression undone; control batches give no row. Key and value rows point into the fetched runs
 * (SlicedBinaryVector), so a run's buffer goes back to the pool (BufferPool) only once the batch that used it is
 * done with, at the next batch.
 */
final class TaskReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;
    static final long BYTES = 4 << 20;
    static final int AHEAD = 2; // GETs under way while a run is decoded
    static final int INDEX_READS = 4; // objects' indexes read at once at a task's start

    /** One GET of a split's blocks. */
    private record Step(SplitSpec split, Ranges src, BlockRun run) {
    }

    private final TaskPartition task;
    private final Columns cols;
    private final RecordWalker walker = new RecordWalker();
    private final BatchHeader h = new BatchHeader();
    private final CRC32C crc = new CRC32C();
    private final StoreMetrics metrics = new StoreMetrics();
    private List<Step> steps;
    private int stepIndex; // the next step to decode
    private final ArrayDeque<CompletableFuture<byte[]>> pending = new ArrayDeque<>(); // the steps after it
    private SplitSpec split;
    private BlockRun run;
    private byte[] data;
    private final List<byte[]> retired = new ArrayList<>(); // runs done with but used by the last batch
    private int rowsFromData; // rows of the batch being built that point into `data`
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
        retired.forEach(BufferPool::give);
        retired.clear();
        if (steps == null) {
            steps = plan();
            fill();
        }
        int rows = 0;
        long bytes = 0;
        rowsFromData = 0;
        // a batch ends where its rows would point into a third buffer: a batch holds at most two (GETs of a few
        // kilobytes, many small splits, would otherwise each keep a buffer until the batch is done with)
        while (rows < ROWS && (bytes < BYTES || rows == 0)) {
            if (!atBatch(rows == 0 || retired.isEmpty())) {
                break;
            }
            bytes += h.size;
            int n = decode();
            rows += n;
            rowsFromData += n;
        }
        cols.batch(rows);
        return rows > 0;
    }

    @Override
    public ColumnarBatch get() {
        return cols.batch;
    }

    @Override
    public CustomTaskMetric[] currentMetricsValues() {
        return metrics.values();
    }

    @Override
    public void close() {
        pending.forEach(f -> f.cancel(true)); // their buffers are not given back: a GET may still write them
        cols.close();
        retired.forEach(BufferPool::give);
        retired.clear();
        BufferPool.give(data);
        data = null;
    }

    /** The task's GETs in order: every object's index read first, INDEX_READS at once. */
    private List<Step> plan() {
        Map<String, Ranges> sources = new HashMap<>();
        Map<String, CompletableFuture<ObjectIndex>> indexes = new HashMap<>();
        Semaphore reads = new Semaphore(INDEX_READS);
        for (SplitSpec s : task.splits()) {
            Ranges src = sources.computeIfAbsent(s.url(), u -> Ranges.open(s, metrics));
            indexes.computeIfAbsent(s.url(), u -> CompletableFuture.supplyAsync(() -> {
                reads.acquireUninterruptibly();
                try {
                    return new ObjectIndex(src, s.size());
                } finally {
                    reads.release();
                }
            }, Ranges.FETCHERS));
        }
        List<Step> out = new ArrayList<>();
        for (SplitSpec s : task.splits()) {
            ObjectIndex index = await(indexes.get(s.url()), s);
            for (BlockRun r : BlockRun.of(index.entriesFor(s.streamId(), s.start(), s.end()), task.getBytes())) {
                out.add(new Step(s, sources.get(s.url()), r));
            }
        }
        return out;
    }

    /** Keeps AHEAD GETs under way. */
    private void fill() {
        while (pending.size() < AHEAD && stepIndex + pending.size() < steps.size()) {
            pending.add(fetch(steps.get(stepIndex + pending.size())));
        }
    }

    /**
     * Moves to the next batch of a payload (header parsed into h at pos); false when the task is done, or when the
     * next batch is in the next GET and `mayMove` is false.
     */
    private boolean atBatch(boolean mayMove) {
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
            if (stepIndex >= steps.size() || !mayMove) {
                return false;
            }
            nextStep();
        }
    }

    /** A GET of a run into a pooled buffer, after room for the bytes carried from the GET before. */
    private CompletableFuture<byte[]> fetch(Step s) {
        byte[] into = BufferPool.take(s.run.end - s.run.position);
        return s.src.fetch(s.run.getStart, s.run.end, into, (int) (s.run.getStart - s.run.position));
    }

    private void nextStep() {
        Step s = steps.get(stepIndex++);
        byte[] got = await(pending.remove(), s.split);
        if (s.run.getStart > s.run.position) { // the start of a block the GET before cut: its bytes go first
            System.arraycopy(data, (int) (s.run.position - run.position), got, 0,
                    (int) (s.run.getStart - s.run.position));
        }
        if (rowsFromData > 0) { // no longer read from, though the batch being built points into it
            retired.add(data);
        } else { // nothing points into it: read into it again at once
            BufferPool.give(data);
        }
        data = got;
        rowsFromData = 0;
        fill();
        if (s.split != split) {
            split = s.split;
            walker.topic = split.topic().getBytes(StandardCharsets.UTF_8);
            walker.partition = split.partition();
        }
        run = s.run;
        payloads = run.payloads(split.key(), data, split.streamId(), split.start(), split.end());
        payloadIndex = 0;
        pos = payloads.isEmpty() ? 0 : payloads.get(0).at();
    }

    private static <T> T await(CompletableFuture<T> f, SplitSpec s) {
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("mqindex: interrupted reading " + s.key(), e);
        } catch (ExecutionException e) {
            throw e.getCause() instanceof RuntimeException re ? re : new IllegalStateException(e.getCause());
        }
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
