package io.mqindex.spark;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

/** Ranged reads of one object: exactly the bytes [start, end), or Damaged naming the object. */
abstract class Ranges {
    private static final ExecutorService FETCHERS = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "mqindex-fetch");
        t.setDaemon(true);
        return t;
    });

    final String key;

    Ranges(String key) {
        this.key = key;
    }

    /** The bytes [start, end) at the start of `into` when it is large enough (else of a new array). */
    abstract byte[] get(long start, long end, byte[] into);

    final byte[] get(long start, long end) {
        return get(start, end, null);
    }

    /** The same read in the background: the next blocks arrive while the current ones are decoded. */
    CompletableFuture<byte[]> fetch(long start, long end, byte[] into) {
        return CompletableFuture.supplyAsync(() -> get(start, end, into), FETCHERS);
    }

    /** `into` when it holds `length` bytes, else a new array of that size. */
    static byte[] buffer(byte[] into, long length) {
        int n = Math.toIntExact(length);
        return into != null && into.length >= n ? into : new byte[n];
    }

    static Ranges open(SplitSpec split) {
        if (split.url().startsWith("file:")) {
            return new FileRanges(split.key(), split.url());
        }
        return new HttpRanges(split.key(), split.url());
    }
}
