package io.mqindex.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * The plan the Python side made (jobs/spark_source/columnar.py): {"lo_ms", "hi_ms", "tasks": [[split, ...],
 * ...]}, each split {"topic", "partition", "stream", "key", "url", "size", "start", "end"}.
 */
final class ReadPlan {
    private ReadPlan() {
    }

    static List<TaskPartition> parse(String json) {
        JsonNode root;
        try {
            root = new ObjectMapper().readTree(json);
        } catch (IOException e) {
            throw new IllegalArgumentException("mqindex: the plan option is not JSON: " + e.getMessage(), e);
        }
        long lo = root.path("lo_ms").isNumber() ? root.get("lo_ms").asLong() : Long.MIN_VALUE;
        long hi = root.path("hi_ms").isNumber() ? root.get("hi_ms").asLong() : Long.MAX_VALUE;
        JsonNode given = root.path("get_bytes");
        if (!given.isMissingNode() && !given.isNull() && (!given.isInt() || given.asInt() < 1)) {
            throw new IllegalArgumentException("mqindex: get_bytes must be a whole number of bytes from 1 to "
                    + Integer.MAX_VALUE + ", got " + given);
        }
        int step = given.isInt() ? given.asInt() : BlockRun.STEP;
        List<TaskPartition> out = new ArrayList<>();
        for (JsonNode task : root.path("tasks")) {
            List<SplitSpec> splits = new ArrayList<>();
            for (JsonNode s : task) {
                splits.add(new SplitSpec(s.get("topic").asText(), s.get("partition").asInt(),
                        s.get("stream").asLong(), s.get("key").asText(), s.get("url").asText(),
                        s.get("size").asLong(), s.get("start").asLong(), s.get("end").asLong()));
            }
            out.add(new TaskPartition(splits, lo, hi, step));
        }
        return out;
    }
}
