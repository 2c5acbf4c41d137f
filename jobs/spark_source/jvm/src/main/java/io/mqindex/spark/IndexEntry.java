package io.mqindex.spark;

/** One data block of an object: where the stream records [startOffset, endOffset) of a stream are. */
record IndexEntry(long streamId, long startOffset, long endOffset, int recordCount, long position, int size) {
}
