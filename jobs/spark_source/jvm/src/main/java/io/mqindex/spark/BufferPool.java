package io.mqindex.spark;

import java.lang.ref.SoftReference;
import java.util.concurrent.ConcurrentLinkedDeque;

/**
 * GET buffers shared by the tasks of an executor. A buffer is a GET of BlockRun.STEP bytes and more: a
 * "humongous" object to G1, whose allocation by every task (a gigabyte of them for a 1 GB read) started
 * concurrent marking cycles that cost as much CPU as the decoding. Held softly, so a collection under memory
 * pressure may take them back; at most KEEP are kept, about what the executor's tasks have in use at once
 * (a task: TaskReader.AHEAD GETs under way, the run being decoded, the one before it).
 */
final class BufferPool {
    private static final int KEEP = (TaskReader.AHEAD + 2) * Runtime.getRuntime().availableProcessors();
    private static final ConcurrentLinkedDeque<SoftReference<byte[]>> FREE = new ConcurrentLinkedDeque<>();

    private BufferPool() {
    }

    /** A buffer of at least `length` bytes (of BlockRun.BUFFER_BYTES when a new one is made). */
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
        return new byte[Math.toIntExact(Math.max(length, BlockRun.BUFFER_BYTES))];
    }

    /** A buffer no task reads or writes any more. */
    static void give(byte[] b) {
        if (b != null && FREE.size() < KEEP) {
            FREE.offerFirst(new SoftReference<>(b));
        }
    }
}
