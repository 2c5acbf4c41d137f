package io.mqindex.spark;

import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("mqindex")}: the name users give. Batch reads are read by the JVM columnar reader
 * (MqindexScan) from a plan the Python half makes; everything else (streaming reads, writes, key lookups
 * through the index, filter pushdown) is the Python data source's, registered by
 * {@code jobs.spark_source.register(spark)} under {@link #PYTHON_NAME} and reached here through Spark's own
 * Python data source provider.
 */
public final class MqindexProvider implements TableProvider, DataSourceRegister {
    /** Where register(spark) puts the Python half (jobs/spark_source/__init__.py, PYTHON_NAME). */
    static final String PYTHON_NAME = "mqindex_python";

    @Override
    public String shortName() {
        return "mqindex";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return Schema.ROWS;
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true; // a write's table has the written DataFrame's schema, as the Python source's has
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        SparkSession session = SparkSession.active();
        if (!session.sessionState().dataSourceManager().dataSourceExists(PYTHON_NAME)) {
            throw new IllegalStateException("mqindex: the source is not registered in this session: run "
                    + "`from jobs.spark_source import register; register(spark)` first (docs/SPARK.md)");
        }
        return new MqindexTable(schema, partitioning, new HashMap<>(properties));
    }

    /**
     * A table of the Python half of its own. Spark's Python data source keeps state per provider, unlocked: the
     * data source made in Python with its first options, and the plan of the last filters pushed, read when the
     * scan is planned, after every scan of the query had its filters pushed. A table of its own per scan keeps
     * the two scans of {@code df.union(df.where("offset < 10"))}, or two threads' queries of one DataFrame, from
     * reading each other's plan.
     */
    static Table python(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        PythonDataSourceV2 python = new PythonDataSourceV2();
        python.setShortName(PYTHON_NAME);
        return python.getTable(schema, partitioning, properties);
    }
}
