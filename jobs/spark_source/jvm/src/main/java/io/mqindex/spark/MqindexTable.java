package io.mqindex.spark;

import java.util.Locale;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Python data source's table with its batch reads given to the JVM reader. A read that names {@code index}
 * or {@code indexKeys} (keys looked up in the cluster's key index, then only their blocks read), a read given
 * {@code kafka.bootstrap.servers} (the records past the committed end read through Kafka), a read of a
 * store the JVM reader does not read (a database store: it reads s3://, oss:// and file://) and a read with
 * {@code reader=python} stay wholly in Python. Every scan and write gets a Python table of its own
 * (MqindexProvider.python).
 */
final class MqindexTable implements SupportsRead, SupportsWrite {
    private final StructType schema;
    private final Transform[] partitioning;
    private final Map<String, String> properties;
    private final Table template;

    MqindexTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        this.schema = schema;
        this.partitioning = partitioning;
        this.properties = properties;
        this.template = MqindexProvider.python(schema, partitioning, properties);
    }

    @Override
    public String name() {
        return "mqindex";
    }

    @Override
    public StructType schema() {
        return template.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
        return template.capabilities();
    }

    @Override
    public Map<String, String> properties() {
        return properties;
    }

    private static boolean given(CaseInsensitiveStringMap options, String name) {
        String v = options.get(name);
        return v != null && !v.isBlank();
    }

    /** Whether the JVM reader reads this store: s3:// and oss:// (presigned GETs) and file://. */
    static boolean jvmStore(String store) {
        int colon = store == null ? -1 : store.indexOf("://");
        String scheme = colon < 0 ? "" : store.substring(0, colon).trim().toLowerCase(Locale.ROOT);
        return scheme.equals("s3") || scheme.equals("oss") || scheme.equals("file");
    }

    static String readerOf(CaseInsensitiveStringMap options) {
        String asked = options.getOrDefault("reader", "").trim().toLowerCase(Locale.ROOT);
        if (!asked.isEmpty() && !asked.equals("jvm") && !asked.equals("python")) {
            throw new IllegalArgumentException("mqindex: reader: expected jvm or python, got '"
                    + options.get("reader") + "'");
        }
        if (given(options, "index") || options.containsKey("indexKeys")) {
            return "python";
        }
        if (given(options, "kafka.bootstrap.servers")) { // a partition's tail is read through Kafka, in Python
            if (asked.equals("jvm")) {
                throw new IllegalArgumentException("mqindex: reader: jvm reads the objects alone; the tail past "
                        + "their committed end that kafka.bootstrap.servers asks for is read by reader=python");
            }
            return "python";
        }
        if (asked.isEmpty()) {
            return jvmStore(options.get("store")) ? "jvm" : "python";
        }
        return asked;
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        if (!schema.equals(Schema.ROWS)) {
            throw new IllegalArgumentException("mqindex: a read has the source's own schema (docs/SPARK.md); "
                    + "leave out .schema(...), got " + schema.simpleString());
        }
        SupportsRead python = (SupportsRead) MqindexProvider.python(schema, partitioning, properties);
        if (readerOf(options).equals("python")) {
            return python.newScanBuilder(options);
        }
        return new MqindexScanBuilder(python, options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return ((SupportsWrite) MqindexProvider.python(schema, partitioning, properties)).newWriteBuilder(info);
    }
}
