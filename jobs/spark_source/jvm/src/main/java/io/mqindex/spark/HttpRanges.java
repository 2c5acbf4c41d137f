package io.mqindex.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** An object of an S3 store, read with plain ranged GETs of the presigned URL the planner made. */
final class HttpRanges extends Ranges {
    private static final HttpClient CLIENT = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(10)).build();
    private static final int ATTEMPTS = 4;

    private final URI uri;

    HttpRanges(String key, String url) {
        super(key);
        this.uri = URI.create(url);
    }

    @Override
    byte[] get(long start, long end) {
        HttpRequest req = HttpRequest.newBuilder(uri).timeout(Duration.ofSeconds(60))
                .header("Range", "bytes=" + start + "-" + (end - 1)).GET().build();
        IOException last = null;
        for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
            if (attempt > 0) {
                pause(attempt);
            }
            HttpResponse<byte[]> resp;
            try {
                resp = CLIENT.send(req, HttpResponse.BodyHandlers.ofByteArray());
            } catch (IOException e) {
                last = e;
                continue;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("mqindex: interrupted reading " + key, e);
            }
            int status = resp.statusCode();
            if (status == 206 || status == 200) {
                return checked(resp.body(), start, end);
            }
            if (status == 404) {
                throw Damaged.error(key, start, "missing object: no such blob in the store");
            }
            if (status == 416) {
                throw Damaged.error(key, start, "truncated object: range [" + start + ", " + end + ") not satisfiable");
            }
            if (status < 500 && status != 429) {
                throw new IllegalStateException("mqindex: GET " + key + " answered " + status + ": "
                        + new String(resp.body(), java.nio.charset.StandardCharsets.UTF_8));
            }
            last = new IOException("GET " + key + " answered " + status);
        }
        throw new UncheckedIOException("mqindex: GET " + key + " failed " + ATTEMPTS + " times", last);
    }

    private static void pause(int attempt) {
        try {
            Thread.sleep(100L << attempt);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
