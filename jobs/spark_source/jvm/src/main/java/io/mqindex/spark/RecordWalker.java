package io.mqindex.spark;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * The records of one Kafka RecordBatch v2 (its bytes after the header, decompressed) appended as rows, with the
 * checks of broker/partitions/record_walk.pxd: zigzag varints, any negative key/value length is null, a
 * record's length covers exactly its fields, header names are UTF-8. A row is kept when its offset is in
 * [lo, hi) and its timestamp in [loMs, hiMs); a LogAppendTime batch's records carry its max timestamp.
 */
final class RecordWalker {
    private byte[] p;
    private int pos;
    private int end;
    private int record;

    /** What the batch gives every record; set before walk(). */
    long baseOffset;
    long firstTimestamp;
    long maxTimestamp;
    boolean logAppendTime;
    byte[] topic;
    int partition;

    /** Rows appended; IllegalArgumentException naming the record when one does not parse. */
    int walk(Columns c, byte[] data, int at, int length, int count, long lo, long hi, long loMs, long hiMs) {
        p = data;
        pos = at;
        int stop = at + length;
        int rows = 0;
        for (record = 0; record < count; record++) {
            long len = varint(stop);
            if (len < 0 || len > stop - pos) {
                throw bad("length " + len + " runs past the batch");
            }
            end = pos + (int) len;
            varint(end); // attributes
            long tsDelta = varint(end);
            long offset = baseOffset + varint(end);
            int keyLen = field("key");
            int keyAt = pos;
            pos += Math.max(keyLen, 0);
            int valueLen = field("value");
            int valueAt = pos;
            pos += Math.max(valueLen, 0);
            long headers = varint(end);
            if (headers < 0 || headers > end - pos) {
                throw bad(headers + " headers do not fit the record");
            }
            long ts = logAppendTime ? maxTimestamp : firstTimestamp + tsDelta;
            boolean keep = offset >= lo && offset < hi && ts >= loMs && ts < hiMs;
            if (keep) {
                append(c, keyLen, keyAt, valueLen, valueAt, offset, ts, (int) headers);
                rows++;
            } else {
                skipHeaders((int) headers);
            }
            if (pos != end) {
                throw bad((end - pos) + " bytes left over after its fields");
            }
        }
        if (pos != stop) {
            throw new IllegalArgumentException((stop - pos) + " bytes left over after " + count + " records");
        }
        // the same for every row of the batch: appended once for all of them
        if (c.partition != null) {
            c.partition.appendInts(rows, partition);
        }
        if (c.timestampType != null) {
            c.timestampType.appendInts(rows, logAppendTime ? 1 : 0);
        }
        return rows;
    }

    private void append(Columns c, int keyLen, int keyAt, int valueLen, int valueAt, long offset, long ts,
                        int headers) {
        slice(c.key, keyLen, keyAt);
        slice(c.value, valueLen, valueAt);
        if (c.topic != null) {
            c.topic.append(topic, 0, topic.length);
        }
        if (c.offset != null) {
            c.offset.appendLong(offset);
        }
        if (c.timestamp != null) {
            c.timestamp.appendLong(ts * 1000);
        }
        if (c.headers == null) {
            skipHeaders(headers);
            return;
        }
        c.headers.appendArray(headers);
        for (int h = 0; h < headers; h++) {
            int nameLen = field("header key");
            if (nameLen < 0) {
                throw bad("a null header key");
            }
            checkUtf8(pos, nameLen);
            c.headerStruct.appendStruct(false);
            if (c.headerKey != null) {
                c.headerKey.appendByteArray(p, pos, nameLen);
            }
            pos += nameLen;
            int vLen = field("header value");
            bytes(c.headerValue, vLen, pos);
            pos += Math.max(vLen, 0);
        }
    }

    private void slice(SlicedBinaryVector v, int len, int at) {
        if (v == null) {
            return;
        }
        if (len < 0) {
            v.appendNull();
        } else {
            v.append(p, at, len);
        }
    }

    private void bytes(org.apache.spark.sql.execution.vectorized.WritableColumnVector v, int len, int at) {
        if (v == null) {
            return;
        }
        if (len < 0) {
            v.appendNull();
        } else {
            v.appendByteArray(p, at, len);
        }
    }

    private void skipHeaders(int headers) {
        for (int h = 0; h < headers; h++) {
            int nameLen = field("header key");
            if (nameLen < 0) {
                throw bad("a null header key");
            }
            pos += nameLen;
            int vLen = field("header value"); // before `pos +=`, which would read pos first
            pos += Math.max(vLen, 0);
        }
    }

    private void checkUtf8(int at, int len) {
        for (int i = at; i < at + len; i++) {
            if (p[i] < 0) {
                try {
                    StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                            .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(p, at, len));
                } catch (CharacterCodingException e) {
                    throw bad("a header name that is not UTF-8");
                }
                return;
            }
        }
    }

    private int field(String what) {
        long n = varint(end);
        if (n < 0) {
            return -1;
        }
        if (n > end - pos) {
            throw bad(what + " length " + n + " does not fit the record");
        }
        return (int) n;
    }

    private long varint(int limit) {
        long v = 0;
        int shift = 0;
        while (true) {
            if (pos >= limit) {
                throw bad("a varint runs past the record");
            }
            byte b = p[pos++];
            v |= (long) (b & 0x7F) << shift;
            if (b >= 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw bad("a varint longer than 10 bytes");
            }
        }
        return (v >>> 1) ^ -(v & 1);
    }

    private IllegalArgumentException bad(String detail) {
        return new IllegalArgumentException("record " + record + ": " + detail);
    }
}
