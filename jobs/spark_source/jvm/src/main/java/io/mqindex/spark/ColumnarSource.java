package io.mqindex.spark;

import java.util.Map;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The JVM reader of mqindex topics: Spark DataSource V2 whose tasks return ColumnarBatch. It takes one option,
 * {@code plan}: the JSON the Python planner made (jobs/spark_source/columnar.py), so users reach it through
 * {@code jobs.spark_source.columnar.read(spark, ...)}, not by name.
 */
public final class ColumnarSource implements TableProvider {
    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return Schema.ROWS;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        String plan = properties.get("plan");
        if (plan == null) {
            throw new IllegalArgumentException("mqindex: the plan option is required "
                    + "(read through jobs.spark_source.columnar.read)");
        }
        return new ColumnarTable(plan);
    }
}
