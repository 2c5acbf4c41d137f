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

    abstract byte[] get(long start, long end);

    /** The same read in the background: the next blocks arrive while the current ones are decoded. */
    CompletableFuture<byte[]> fetch(long start, long end) {
        return CompletableFuture.supplyAsync(() -> get(start, end), FETCHERS);
    }

    static Ranges open(SplitSpec split) {
        if (split.url().startsWith("file:")) {
            return new FileRanges(split.key(), split.url());
        }
        return new HttpRanges(split.key(), split.url());
    }
}
