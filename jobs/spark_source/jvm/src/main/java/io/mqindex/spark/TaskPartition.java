package io.mqindex.spark;

import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/** One Spark task: its splits in order, and the timestamp bounds [loMs, hiMs) of the read. */
record TaskPartition(List<SplitSpec> splits, long loMs, long hiMs) implements InputPartition {
}
