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

    Ranges(String key) {
        this.key = key;
    }

    /** The bytes [start, end) read into `into` from index `at` (into.length >= at + end - start); `into`. */
    abstract byte[] get(long start, long end, byte[] into, int at);

    /** The bytes [start, end) in a new array. */
    final byte[] get(long start, long end) {
        return get(start, end, new byte[Math.toIntExact(end - start)], 0);
    }

    /** The same read in the background: the next blocks arrive while the current ones are decoded. */
    CompletableFuture<byte[]> fetch(long start, long end, byte[] into, int at) {
        return CompletableFuture.supplyAsync(() -> get(start, end, into, at), FETCHERS);
    }

    static Ranges open(SplitSpec split) {
        if (split.url().startsWith("file:")) {
            return new FileRanges(split.key(), split.url());
        }
        return new HttpRanges(split.key(), split.url());
    }
}
