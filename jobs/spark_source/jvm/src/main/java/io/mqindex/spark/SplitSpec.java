package io.mqindex.spark;

import java.io.Serializable;

/**
 * Offsets [start, end) of one partition, read from one object. {@code url} is where the object's bytes are:
 * a presigned http(s) GET URL or a file:// path; {@code key} is the object's key, for messages.
 */
record SplitSpec(String topic, int partition, long streamId, String key, String url, long size, long start,
                 long end) implements Serializable {
}
