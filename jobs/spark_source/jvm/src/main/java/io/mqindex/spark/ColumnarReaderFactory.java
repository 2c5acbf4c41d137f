package io.mqindex.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Columnar readers only: every task returns ColumnarBatch. */
final class ColumnarReaderFactory implements PartitionReaderFactory {
    private final StructType required;

    ColumnarReaderFactory(StructType required) {
        this.required = required;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        throw new UnsupportedOperationException("mqindex: columnar reads only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new TaskReader((TaskPartition) partition, required);
    }
}
