package io.mqindex.spark;

import java.util.Arrays;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A binary or string column whose values stay where they were read: each row is a slice (array, offset, length)
 * of a fetched block or of a decompressed batch, not a copy in the vector's own buffer as OnHeapColumnVector
 * keeps them. The arrays stay unchanged until the reader's next batch (TaskReader returns a block's buffer to
 * its pool only then), which is as long as Spark may read a batch's values without copying them. Spark's own
 * vectors cannot hold a value by reference, so this one is written here. A row holds the number of its array
 * among the batch's few (a run's buffer, decompressed batches), not a reference to it: a reference stored per
 * row cost G1's write barrier, with its memory fence, on every row (a fifth of the reader's task time).
 */
final class SlicedBinaryVector extends ColumnVector {
    private byte[][] arrays = new byte[4][]; // the arrays the rows point into, each once
    private int arrayCount;
    private int[] which; // a row's array: arrays[which[row]]
    private int[] offsets;
    private int[] lengths; // -1: null
    private int size;
    private int nulls;

    SlicedBinaryVector(DataType type, int capacity) {
        super(type);
        which = new int[capacity];
        offsets = new int[capacity];
        lengths = new int[capacity];
    }

    void append(byte[] array, int at, int length) {
        if (size == lengths.length) {
            grow();
        }
        if (arrayCount == 0 || arrays[arrayCount - 1] != array) {
            if (arrayCount == arrays.length) {
                arrays = Arrays.copyOf(arrays, arrayCount * 2);
            }
            arrays[arrayCount++] = array;
        }
        which[size] = arrayCount - 1;
        offsets[size] = at;
        lengths[size++] = length;
    }

    void appendNull() {
        if (size == lengths.length) {
            grow();
        }
        lengths[size++] = -1;
        nulls++;
    }

    /** Forgets the rows (and the arrays they point into). */
    void reset() {
        Arrays.fill(arrays, 0, arrayCount, null);
        arrayCount = 0;
        size = 0;
        nulls = 0;
    }

    private void grow() {
        int n = lengths.length * 2;
        which = Arrays.copyOf(which, n);
        offsets = Arrays.copyOf(offsets, n);
        lengths = Arrays.copyOf(lengths, n);
    }

    @Override
    public byte[] getBinary(int rowId) {
        int n = lengths[rowId];
        return n < 0 ? null : Arrays.copyOfRange(arrays[which[rowId]], offsets[rowId], offsets[rowId] + n);
    }

    @Override
    public UTF8String getUTF8String(int rowId) {
        int n = lengths[rowId];
        return n < 0 ? null : UTF8String.fromBytes(arrays[which[rowId]], offsets[rowId], n);
    }

    @Override
    public boolean isNullAt(int rowId) {
        return lengths[rowId] < 0;
    }

    @Override
    public boolean hasNull() {
        return nulls > 0;
    }

    @Override
    public int numNulls() {
        return nulls;
    }

    @Override
    public void close() {
        reset();
    }

    private UnsupportedOperationException notThisType() {
        return new UnsupportedOperationException("mqindex: a " + dataType().simpleString() + " column");
    }

    @Override
    public boolean getBoolean(int rowId) {
        throw notThisType();
    }

    @Override
    public byte getByte(int rowId) {
        throw notThisType();
    }

    @Override
    public short getShort(int rowId) {
        throw notThisType();
    }

    @Override
    public int getInt(int rowId) {
        throw notThisType();
    }

    @Override
    public long getLong(int rowId) {
        throw notThisType();
    }

    @Override
    public float getFloat(int rowId) {
        throw notThisType();
    }

    @Override
    public double getDouble(int rowId) {
        throw notThisType();
    }

    @Override
    public ColumnarArray getArray(int rowId) {
        throw notThisType();
    }

    @Override
    public ColumnarMap getMap(int rowId) {
        throw notThisType();
    }

    @Override
    public Decimal getDecimal(int rowId, int precision, int scale) {
        throw notThisType();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
        throw notThisType();
    }
}
