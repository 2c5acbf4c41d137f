package io.mqindex.spark;

/** The Kafka record batches of one stream record: bytes [at, at + length) of a run's data. */
record Payload(int at, int length, long baseOffset, long lastOffset) {
}
