package io.mqindex.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/** The rows of the source: Spark's Kafka source schema, headers included (jobs/spark_source/schema.py). */
final class Schema {
    static final StructType HEADER = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.StringType, false),
        DataTypes.createStructField("value", DataTypes.BinaryType, true)});

    static final StructType ROWS = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.BinaryType, true),
        DataTypes.createStructField("value", DataTypes.BinaryType, true),
        DataTypes.createStructField("topic", DataTypes.StringType, false),
        DataTypes.createStructField("partition", DataTypes.IntegerType, false),
        DataTypes.createStructField("offset", DataTypes.LongType, false),
        DataTypes.createStructField("timestamp", DataTypes.TimestampType, false),
        DataTypes.createStructField("timestampType", DataTypes.IntegerType, false),
        DataTypes.createStructField("headers", ArrayType.apply(HEADER, true), true)});

    private Schema() {
    }
}
