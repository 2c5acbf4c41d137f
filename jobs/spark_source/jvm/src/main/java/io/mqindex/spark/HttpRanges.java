package io.mqindex.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.charset.StandardCharsets;

/**
 * An object of an S3 store, read with plain ranged GETs of the presigned URL the planner made. Blocking
 * HttpURLConnection, the body read straight into one array in the calling thread (keep-alive connections are
 * reused by the JDK): java.net.http's client hands a body over between threads 16 KB at a time, which on a
 * loaded machine spent more time waiting for a core than reading.
 */
final class HttpRanges extends Ranges {
    private static final int ATTEMPTS = 4;

    private final URL url;

    HttpRanges(String key, String url) {
        super(key);
        try {
            this.url = java.net.URI.create(url).toURL();
        } catch (IOException e) {
            throw new IllegalArgumentException("mqindex: bad object URL for " + key + ": " + e.getMessage(), e);
        }
    }

    @Override
    byte[] get(long start, long end, byte[] into, int at) {
        IOException last = null;
        for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
            if (attempt > 0) {
                pause(attempt);
            }
            try {
                return once(start, end, into, at);
            } catch (IOException e) { // a connection's failure, or a Transient status
                last = e;
            }
        }
        throw new UncheckedIOException("mqindex: GET " + key + " failed " + ATTEMPTS + " times", last);
    }

    private byte[] once(long start, long end, byte[] out, int at) throws IOException {
        HttpURLConnection c = (HttpURLConnection) url.openConnection();
        c.setConnectTimeout(10_000);
        c.setReadTimeout(60_000);
        c.setRequestProperty("Range", "bytes=" + start + "-" + (end - 1));
        int status;
        try {
            status = c.getResponseCode();
        } catch (IOException e) {
            counted(0);
            throw e;
        }
        if (status == 206 || status == 200) {
            int want = Math.toIntExact(end - start);
            int n = 0;
            try (InputStream in = c.getInputStream()) {
                n = in.readNBytes(out, at, want);
                if (n == want && in.read() != -1) {
                    n++; // more than asked: the range was not honoured
                }
            } finally {
                counted(Math.max(0, n));
            }
            if (n != want) {
                throw Damaged.error(key, start, "truncated object: bytes [" + start + ", " + end + ") returned "
                        + n + " bytes");
            }
            return out;
        }
        counted(0);
        String body = error(c);
        if (status == 404) {
            throw Damaged.error(key, start, "missing object: no such blob in the store");
        }
        if (status == 416) {
            throw Damaged.error(key, start, "truncated object: range [" + start + ", " + end + ") not satisfiable");
        }
        if (status >= 500 || status == 429) {
            throw new Transient("GET " + key + " answered " + status);
        }
        throw new IllegalStateException("mqindex: GET " + key + " answered " + status + ": " + body);
    }

    private static String error(HttpURLConnection c) {
        try (InputStream in = c.getErrorStream()) {
            return in == null ? "" : new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (FileNotFoundException e) {
            return "";
        } catch (IOException e) {
            return e.toString();
        }
    }

    private static void pause(int attempt) {
        try {
            Thread.sleep(100L << attempt);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("mqindex: interrupted", e);
        }
    }

    /** A status worth another attempt (5xx, 429). */
    private static final class Transient extends IOException {
        Transient(String message) {
            super(message);
        }
    }
}
