package io.mqindex.spark;

import java.util.List;
import java.util.function.Supplier;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;

/**
 * The planned tasks (one InputPartition each) and the columns they fill. The plan JSON is asked for when Spark
 * plans the tasks: given at once by columnar.read, made then by the Python half for format("mqindex") (MqindexScan).
 */
final class ColumnarScan implements Scan, Batch {
    private final Supplier<String> plan;
    private final StructType required;

    ColumnarScan(Supplier<String> plan, StructType required) {
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
    public CustomMetric[] supportedCustomMetrics() {
        return StoreMetrics.supported();
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        List<TaskPartition> tasks = ReadPlan.parse(plan.get());
        return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ColumnarReaderFactory(required);
    }
}
