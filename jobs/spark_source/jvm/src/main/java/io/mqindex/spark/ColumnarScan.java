package io.mqindex.spark;

import java.util.List;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/** The planned tasks (one InputPartition each) and the columns they fill. */
final class ColumnarScan implements Scan, Batch {
    private final String plan;
    private final StructType required;

    ColumnarScan(String plan, StructType required) {
        this.plan = plan;
        this.required = required;
    }

    @Override
    public StructType readSchema() {
        return required;
    }

    @Override
    public String description() {
        return "mqindex columnar " + required.simpleString();
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        List<TaskPartition> tasks = ReadPlan.parse(plan);
        return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ColumnarReaderFactory(required);
    }
}
