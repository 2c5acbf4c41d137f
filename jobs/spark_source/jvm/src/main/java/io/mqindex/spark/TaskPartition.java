package io.mqindex.spark;

import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark task: its splits in order, the timestamp bounds [loMs, hiMs) of the read and where its GETs are cut
 * (multiples of getBytes of an object: BlockRun).
 */
record TaskPartition(List<SplitSpec> splits, long loMs, long hiMs, int getBytes) implements InputPartition {
}
