package io.mqindex.spark;

import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Python data source's table with its batch reads given to the JVM reader. A read that names {@code index}
 * or {@code indexKeys} (keys looked up in the cluster's key index, then only their blocks read), or
 * {@code reader=python}, stays wholly in Python.
 */
final class MqindexTable implements SupportsRead, SupportsWrite {
    private final PythonDataSourceV2 source;
    private final Table python;
    private final Map<String, String> properties;

    MqindexTable(PythonDataSourceV2 source, Table python, Map<String, String> properties) {
        this.source = source;
        this.python = python;
        this.properties = properties;
    }

    @Override
    public String name() {
        return "mqindex";
    }

    @Override
    public StructType schema() {
        return python.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return python.capabilities();
    }

    @Override
    public Map<String, String> properties() {
        return properties;
    }

    static String readerOf(CaseInsensitiveStringMap options) {
        String reader = options.getOrDefault("reader", "jvm").trim().toLowerCase(java.util.Locale.ROOT);
        if (!reader.equals("jvm") && !reader.equals("python")) {
            throw new IllegalArgumentException("mqindex: reader: expected jvm or python, got '"
                    + options.get("reader") + "'");
        }
        boolean indexed = options.containsKey("index") || options.containsKey("indexKeys");
        return indexed ? "python" : reader;
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        // Spark's Python data source keeps the first query's plan (its pushed filters included) for every later
        // query of the same DataFrame: a query after `df.where("offset < 10").count()` read those 10 offsets.
        // Each query is planned afresh here (its filters, if any, pushed to the Python half after this).
        source.setReadInfo(null);
        if (readerOf(options).equals("python")) {
            return ((SupportsRead) python).newScanBuilder(options);
        }
        return new MqindexScanBuilder((SupportsRead) python, options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return ((SupportsWrite) python).newWriteBuilder(info);
    }
}
