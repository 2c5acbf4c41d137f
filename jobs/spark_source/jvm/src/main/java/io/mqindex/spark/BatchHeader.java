package io.mqindex.spark;

import java.nio.ByteBuffer;

/** The 61-byte header of a Kafka RecordBatch v2 at data[at] (broker/partitions/records.py parse_header). */
final class BatchHeader {
    static final int SIZE = 61;
    static final int CRC_START = 21;

    long baseOffset;
    int size; // the whole batch: 12 + its length field
    int crc;
    int attributes;
    long nextOffset;
    long firstTimestamp;
    long maxTimestamp;
    int count;

    /** Parses the header of the batch at `at`, which must fit in [at, stop); an error message or null. */
    String parse(byte[] data, int at, int stop) {
        if (stop - at < SIZE) {
            return "a record batch header cut short (" + (stop - at) + " bytes)";
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        baseOffset = b.getLong(at);
        int length = b.getInt(at + 8);
        byte magic = data[at + 16];
        crc = b.getInt(at + 17);
        attributes = b.getShort(at + 21);
        int lastDelta = b.getInt(at + 23);
        firstTimestamp = b.getLong(at + 27);
        maxTimestamp = b.getLong(at + 35);
        count = b.getInt(at + 57);
        if (magic != 2) {
            return "record batch magic " + magic + ", not 2";
        }
        if (length < SIZE - 12 || (long) length + 12 > stop - at) {
            return "record batch length " + length + " runs past the " + (stop - at) + " bytes given";
        }
        if (count < 0 || lastDelta < 0) {
            return "negative record count or offset delta";
        }
        size = length + 12;
        nextOffset = baseOffset + lastDelta + 1;
        return null;
    }

    boolean isControl() {
        return (attributes & 0x20) != 0;
    }

    boolean logAppendTime() {
        return (attributes & 0x08) != 0;
    }

    int codec() {
        return attributes & 0x07;
    }
}
