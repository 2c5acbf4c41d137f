package io.mqindex.spark;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/** Ranged reads of one object: exactly the bytes [start, end), or Damaged naming the object. */
abstract class Ranges {
    static final ExecutorService FETCHERS = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "mqindex-fetch");
        t.setDaemon(true);
        return t;
    });

    final String key;
    private StoreMetrics metrics;

    Ranges(String key) {
        this.key = key;
    }

    /** The bytes [start, end) read into `into` from index `at` (into.length >= at + end - start); `into`. */
    abstract byte[] get(long start, long end, byte[] into, int at);

    /** One request to the store (each attempt of a GET) that returned `n` bytes, counted in the task's metrics. */
    final void counted(long n) {
        if (metrics != null) {
            metrics.read(n);
        }
    }

    /** The bytes [start, end) in a new array. */
    final byte[] get(long start, long end) {
        return get(start, end, new byte[Math.toIntExact(end - start)], 0);
    }

    /** The same read in the background: the next blocks arrive while the current ones are decoded. */
    CompletableFuture<byte[]> fetch(long start, long end, byte[] into, int at) {
        return CompletableFuture.supplyAsync(() -> get(start, end, into, at), FETCHERS);
    }

    /** The object of `split`, its reads counted in `metrics`. */
    static Ranges open(SplitSpec split, StoreMetrics metrics) {
        Ranges r = split.url().startsWith("file:") ? new FileRanges(split.key(), split.url())
                : new HttpRanges(split.key(), split.url());
        r.metrics = metrics;
        return r;
    }
}
