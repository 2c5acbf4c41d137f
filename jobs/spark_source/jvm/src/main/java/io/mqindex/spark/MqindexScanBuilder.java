package io.mqindex.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A read by the JVM reader. The Python half takes Spark's filters (jobs/spark_source/pushdown.py) and plans the
 * read with them: offset, partition and timestamp bounds prune objects and rows. Filters on key and value are
 * given back to Spark, which evaluates them: this reader returns every record of the planned ranges.
 */
final class MqindexScanBuilder implements SupportsPushDownFilters, SupportsPushDownRequiredColumns {
    /** The option that asks the Python half for the JVM reader's plan, with Spark's task sizing. */
    static final String PLAN_OPTION = "columnarPlan";

    private final ScanBuilder python;
    private StructType required = Schema.ROWS;
    private Filter[] pushed = new Filter[0];

    MqindexScanBuilder(SupportsRead table, CaseInsensitiveStringMap options) {
        if (options.containsKey(PLAN_OPTION)) {
            throw new IllegalArgumentException("mqindex: " + PLAN_OPTION
                    + ": set by the JVM reader, not by hand; leave it out");
        }
        Map<String, String> opts = new HashMap<>(options.asCaseSensitiveMap());
        opts.put(PLAN_OPTION, sizing());
        this.python = table.newScanBuilder(new CaseInsensitiveStringMap(opts));
    }

    /** What jobs/spark_source/columnar.task_bytes sizes tasks from, as Spark sizes a file source's partitions. */
    private static String sizing() {
        SparkSession session = SparkSession.active();
        SQLConf conf = session.sessionState().conf();
        ObjectNode n = new ObjectMapper().createObjectNode();
        n.put("maxPartitionBytes", conf.filesMaxPartitionBytes());
        n.put("openCostInBytes", conf.filesOpenCostInBytes());
        n.put("parallelism", session.sparkContext().defaultParallelism());
        return n.toString();
    }

    private static boolean onRecordColumns(Filter f) {
        return Arrays.stream(f.references()).anyMatch(c -> c.equals("key") || c.equals("value"));
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        if (!(python instanceof SupportsPushDownFilters p)) {
            return filters;
        }
        List<Filter> left = new ArrayList<>(Arrays.asList(p.pushFilters(filters)));
        List<Filter> taken = new ArrayList<>();
        for (Filter f : filters) {
            if (left.contains(f)) {
                continue;
            }
            if (onRecordColumns(f)) {
                left.add(f);
            } else {
                taken.add(f);
            }
        }
        pushed = taken.toArray(new Filter[0]);
        return left.toArray(new Filter[0]);
    }

    @Override
    public Filter[] pushedFilters() {
        return pushed;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
        this.required = requiredSchema;
    }

    @Override
    public Scan build() {
        return new MqindexScan(python.build(), required, pushed);
    }
}
