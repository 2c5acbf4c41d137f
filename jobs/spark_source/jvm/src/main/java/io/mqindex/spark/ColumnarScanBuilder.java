package io.mqindex.spark;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.types.StructType;

/** Takes the columns a query needs: a query of `value` alone builds no key, headers or topic column. */
final class ColumnarScanBuilder implements SupportsPushDownRequiredColumns {
    private final String plan;
    private StructType required = Schema.ROWS;

    ColumnarScanBuilder(String plan) {
        this.plan = plan;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        this.required = requiredSchema;
    }

    @Override
    public Scan build() {
        return new ColumnarScan(() -> plan, required);
    }
}
