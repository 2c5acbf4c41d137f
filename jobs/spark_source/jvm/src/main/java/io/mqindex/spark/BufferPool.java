package io.mqindex.spark;

import java.lang.ref.SoftReference;
import java.util.concurrent.ConcurrentLinkedDeque;
import org.apache.spark.SparkEnv;

/**
 * GET buffers shared by the tasks of an executor. A buffer holds a GET of up to 1.5 BlockRun.STEP bytes: a
 * "humongous" object to G1, whose allocation by every task (a gigabyte of them for a 1 GB read) started
 * concurrent marking cycles that cost as much CPU as the decoding. Held softly, so a collection under memory
 * pressure may take them back; at most KEEP are kept, about what the executor's tasks have in use at once
 * (a task: TaskReader.AHEAD GETs under way, the run being decoded, the one before it).
 */
final class BufferPool {
    private static final long ROUND = 2 << 20;
    private static final long SIZE = BlockRun.STEP + ROUND;
    private static final int KEEP = (TaskReader.AHEAD + 3) * cores();
    private static final ConcurrentLinkedDeque<SoftReference<byte[]>> FREE = new ConcurrentLinkedDeque<>();

    private BufferPool() {
    }

    /** The executor's task slots: spark.executor.cores (the machine's cores when not set, as in local mode). */
    private static int cores() {
        SparkEnv env = SparkEnv.get();
        int machine = Runtime.getRuntime().availableProcessors();
        return env == null ? machine : env.conf().getInt("spark.executor.cores", machine);
    }

    /**
     * A buffer of at least `length` bytes: a pooled one, else a new one of at least SIZE (a GET of two parts and
     * a carried block), of `length` rounded up to ROUND when longer (a run's first or last GET made longer: up to
     * 26 MiB). One size for most, so that a pooled buffer serves the next GET: buffers sized to each GET would leave
     * the pool with ones too small for it, each a new humongous allocation.
     */
    static byte[] take(long length) {
        for (int i = 0; i < KEEP; i++) {
            SoftReference<byte[]> ref = FREE.pollFirst();
            if (ref == null) {
                break;
            }
            byte[] b = ref.get();
            if (b != null && b.length >= length) {
                return b;
            }
            if (b != null) {
                FREE.offerLast(ref);
            }
        }
        return new byte[Math.toIntExact(Math.max(SIZE, (length + ROUND - 1) / ROUND * ROUND))];
    }

    /** A buffer no task reads or writes any more. */
    static void give(byte[] b) {
        if (b != null && FREE.size() < KEEP) {
            FREE.offerFirst(new SoftReference<>(b));
        }
    }
}
