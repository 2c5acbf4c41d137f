package io.mqindex.spark;

import java.util.EnumSet;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A planned read of topics: batch reads only. */
final class ColumnarTable implements SupportsRead {
    private final String plan;

    ColumnarTable(String plan) {
        this.plan = plan;
    }

    @Override
    public String name() {
        return "mqindex";
    }

    @Override
    public StructType schema() {
        return Schema.ROWS;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new ColumnarScanBuilder(plan);
    }
}
