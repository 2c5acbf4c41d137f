package io.mqindex.spark;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The vectors of the columns a query reads (null: not read), reused batch after batch. Key, value and topic
 * point into the read bytes (SlicedBinaryVector); the others are Spark's own vectors.
 */
final class Columns {
    final SlicedBinaryVector key;
    final SlicedBinaryVector value;
    final SlicedBinaryVector topic;
    final WritableColumnVector partition;
    final WritableColumnVector offset;
    final WritableColumnVector timestamp;
    final WritableColumnVector timestampType;
    final WritableColumnVector headers;
    final WritableColumnVector headerStruct;
    final WritableColumnVector headerKey;
    final WritableColumnVector headerValue;
    private final ColumnVector[] vectors;
    final ColumnarBatch batch;

    Columns(StructType schema, int capacity) {
        StructField[] fields = schema.fields();
        vectors = new ColumnVector[fields.length];
        for (int i = 0; i < fields.length; i++) {
            String name = fields[i].name();
            boolean sliced = name.equals("key") || name.equals("value") || name.equals("topic");
            vectors[i] = sliced ? new SlicedBinaryVector(fields[i].dataType(), capacity)
                    : new OnHeapColumnVector(capacity, fields[i].dataType());
        }
        batch = new ColumnarBatch(vectors.clone());
        key = (SlicedBinaryVector) find(vectors, schema, "key");
        value = (SlicedBinaryVector) find(vectors, schema, "value");
        topic = (SlicedBinaryVector) find(vectors, schema, "topic");
        partition = (WritableColumnVector) find(vectors, schema, "partition");
        offset = (WritableColumnVector) find(vectors, schema, "offset");
        timestamp = (WritableColumnVector) find(vectors, schema, "timestamp");
        timestampType = (WritableColumnVector) find(vectors, schema, "timestampType");
        headers = (WritableColumnVector) find(vectors, schema, "headers");
        if (headers != null) {
            StructType element = (StructType) ((ArrayType) schema.apply("headers").dataType()).elementType();
            headerStruct = headers.arrayData();
            ColumnVector[] children = new ColumnVector[element.fields().length];
            for (int i = 0; i < children.length; i++) {
                children[i] = headerStruct.getChild(i);
            }
            headerKey = (WritableColumnVector) find(children, element, "key");
            headerValue = (WritableColumnVector) find(children, element, "value");
        } else {
            headerStruct = headerKey = headerValue = null;
        }
    }

    /** The vector of the field `name` of `schema` (vectors in its order), or null when it is not read. */
    private static ColumnVector find(ColumnVector[] vectors, StructType schema, String name) {
        String[] names = schema.fieldNames();
        for (int i = 0; i < names.length; i++) {
            if (names[i].equals(name)) {
                return vectors[i];
            }
        }
        return null;
    }

    void reset() {
        for (ColumnVector v : vectors) {
            if (v instanceof SlicedBinaryVector s) {
                s.reset();
            } else {
                ((WritableColumnVector) v).reset();
            }
        }
    }

    ColumnarBatch batch(int rows) {
        batch.setNumRows(rows);
        return batch;
    }

    void close() {
        for (ColumnVector v : vectors) {
            v.close();
        }
    }
}
