package io.mqindex.spark;

import java.lang.ref.SoftReference;
import java.util.ArrayList;
import java.util.List;
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
    private static final List<SoftReference<byte[]>> FREE = new ArrayList<>(); // guarded by itself

    private BufferPool() {
    }

    /** The executor's task slots: spark.executor.cores (the machine's cores when not set, as in local mode). */
    private static int cores() {
        SparkEnv env = SparkEnv.get();
        int machine = Runtime.getRuntime().availableProcessors();
        return env == null ? machine : env.conf().getInt("spark.executor.cores", machine);
    }

    /**
     * A buffer of at least `length` bytes: the smallest pooled one that holds it, else a new one of at least SIZE (a
     * GET of two parts and a carried block), of `length` rounded up to ROUND when longer (a run's first or last GET
     * made longer: up to 26 MiB). One size for most, so that a pooled buffer serves the next GET. The smallest that
     * fits, not the first: a longer buffer taken by an ordinary GET left the next long GET without one, and each
     * read of a 1 GiB topic made two new humongous buffers, and with them G1 concurrent cycles.
     */
    static byte[] take(long length) {
        synchronized (FREE) {
            int best = -1;
            byte[] held = null; // the best one so far, held strongly while the others are looked at
            for (int i = FREE.size() - 1; i >= 0; i--) {
                byte[] b = FREE.get(i).get();
                if (b == null) { // taken back by a collection under memory pressure
                    FREE.remove(i);
                    if (best > i) {
                        best--;
                    }
                } else if (b.length >= length && (held == null || b.length < held.length)) {
                    best = i;
                    held = b;
                }
            }
            if (held != null) {
                FREE.remove(best);
                return held;
            }
        }
        return new byte[Math.toIntExact(Math.max(SIZE, (length + ROUND - 1) / ROUND * ROUND))];
    }

    /**
     * A buffer no task reads or writes any more. When KEEP are pooled already, it takes the place of a smaller one
     * (or of one a collection took back), so that the pool keeps the buffers the longest GETs need.
     */
    static void give(byte[] b) {
        if (b == null) {
            return;
        }
        synchronized (FREE) {
            if (FREE.size() < KEEP) {
                FREE.add(new SoftReference<>(b));
                return;
            }
            int smallest = -1;
            int length = b.length;
            for (int i = 0; i < FREE.size(); i++) {
                byte[] held = FREE.get(i).get();
                int n = held == null ? -1 : held.length;
                if (n < length) {
                    smallest = i;
                    length = n;
                }
            }
            if (smallest >= 0) {
                FREE.set(smallest, new SoftReference<>(b));
            }
        }
    }
}
