package io.mqindex.spark;

import java.util.Arrays;
import java.util.Map;
import java.util.stream.Collectors;
import net.razorvine.pickle.PickleException;
import net.razorvine.pickle.Unpickler;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.execution.datasources.v2.python.PythonInputPartition;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * A batch read's tasks: planned by the Python half, which answers the JVM's plan as its one input partition
 * ({@code InputPartition(plan JSON)}, jobs/spark_source/source.py), read as columnar.read's are (ColumnarScan). A
 * streaming read is the Python source's.
 */
final class MqindexScan implements Scan {
    private final Scan python;
    private final StructType required;
    private final Filter[] pushed;

    MqindexScan(Scan python, StructType required, Filter[] pushed) {
        this.python = python;
        this.required = required;
        this.pushed = pushed;
    }

    @Override
    public StructType readSchema() {
        return required;
    }

    @Override
    public String description() {
        return "mqindex (JVM columnar reader) PushedFilters: "
                + Arrays.stream(pushed).map(Filter::toString).collect(Collectors.joining(", ", "[", "]"))
                + ", ReadSchema: " + required.simpleString();
    }

    @Override
    public Batch toBatch() {
        return new ColumnarScan(() -> planOf(python.toBatch().planInputPartitions()), required);
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
        CustomMetric[] own = StoreMetrics.supported();
        CustomMetric[] theirs = python.supportedCustomMetrics();
        CustomMetric[] all = Arrays.copyOf(own, own.length + theirs.length);
        System.arraycopy(theirs, 0, all, own.length, theirs.length);
        return all;
    }

    @Override
    public CustomTaskMetric[] reportDriverMetrics() {
        return python.reportDriverMetrics();
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return python.toMicroBatchStream(checkpointLocation);
    }

    /** The plan JSON from the Python half's one partition, pickled by Spark's Python worker. */
    static String planOf(InputPartition[] parts) {
        if (parts.length != 1 || !(parts[0] instanceof PythonInputPartition p)) {
            throw new IllegalStateException("mqindex: the Python half answered " + parts.length
                    + " partitions where the JVM reader's plan was asked for");
        }
        Object got;
        try {
            got = new Unpickler().loads(p.pickedPartition());
        } catch (PickleException | java.io.IOException e) {
            throw new IllegalStateException("mqindex: the Python half's plan could not be read: " + e, e);
        }
        Object value = got instanceof Map<?, ?> m ? m.get("value") : null;
        if (!(value instanceof String plan)) {
            throw new IllegalStateException("mqindex: the Python half's plan is not a JSON string: " + got);
        }
        return plan;
    }
}
