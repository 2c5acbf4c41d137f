package io.mqindex.spark;

import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.metric.CustomSumMetric;
import org.apache.spark.sql.connector.metric.CustomTaskMetric;

/**
 * What a task asked of the object store: its ranged reads (GETs of an s3:// store, every attempt counted; reads of
 * a file:// one, each read that completed) and the bytes they returned. Shown per scan in the Spark UI's SQL tab and in the executed
 * plan's metrics ({@code storeGets}, {@code storeBytes}), summed over the tasks.
 */
final class StoreMetrics {
    static final String GETS = "storeGets";
    static final String BYTES = "storeBytes";

    final AtomicLong gets = new AtomicLong();
    final AtomicLong bytes = new AtomicLong();

    void read(long n) {
        gets.incrementAndGet();
        bytes.addAndGet(n);
    }

    /** The scan's metrics, as Spark makes them on the driver (by class name: public, with no arguments). */
    static CustomMetric[] supported() {
        return new CustomMetric[] {new Gets(), new Bytes()};
    }

    CustomTaskMetric[] values() {
        long g = gets.get();
        long b = bytes.get();
        return new CustomTaskMetric[] {task(GETS, g), task(BYTES, b)};
    }

    private static CustomTaskMetric task(String name, long value) {
        return new CustomTaskMetric() {
            @Override
            public String name() {
                return name;
            }

            @Override
            public long value() {
                return value;
            }
        };
    }

    /** The GETs (ranged reads) of the store. */
    public static final class Gets extends CustomSumMetric {
        @Override
        public String name() {
            return GETS;
        }

        @Override
        public String description() {
            return "store GETs";
        }
    }

    /** The bytes those reads returned. */
    public static final class Bytes extends CustomSumMetric {
        @Override
        public String name() {
            return BYTES;
        }

        @Override
        public String description() {
            return "bytes read from the store";
        }
    }
}
