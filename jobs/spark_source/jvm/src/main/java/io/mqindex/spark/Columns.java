package io.mqindex.spark;

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** The vectors of the columns a query reads (null: not read), reused batch after batch. */
final class Columns {
    final WritableColumnVector key;
    final WritableColumnVector value;
    final WritableColumnVector topic;
    final WritableColumnVector partition;
    final WritableColumnVector offset;
    final WritableColumnVector timestamp;
    final WritableColumnVector timestampType;
    final WritableColumnVector headers;
    final WritableColumnVector headerStruct;
    final WritableColumnVector headerKey;
    final WritableColumnVector headerValue;
    private final OnHeapColumnVector[] vectors;
    final ColumnarBatch batch;

    Columns(StructType schema, int capacity) {
        vectors = OnHeapColumnVector.allocateColumns(capacity, schema);
        batch = new ColumnarBatch(vectors.clone());
        key = find(schema, "key");
        value = find(schema, "value");
        topic = find(schema, "topic");
        partition = find(schema, "partition");
        offset = find(schema, "offset");
        timestamp = find(schema, "timestamp");
        timestampType = find(schema, "timestampType");
        headers = find(schema, "headers");
        if (headers != null) {
            StructType element = (StructType) ((org.apache.spark.sql.types.ArrayType)
                    schema.apply("headers").dataType()).elementType();
            headerStruct = headers.arrayData();
            headerKey = child(element, "key");
            headerValue = child(element, "value");
        } else {
            headerStruct = headerKey = headerValue = null;
        }
    }

    private WritableColumnVector find(StructType schema, String name) {
        String[] names = schema.fieldNames();
        for (int i = 0; i < names.length; i++) {
            if (names[i].equals(name)) {
                return vectors[i];
            }
        }
        return null;
    }

    private WritableColumnVector child(StructType element, String name) {
        String[] names = element.fieldNames();
        for (int i = 0; i < names.length; i++) {
            if (names[i].equals(name)) {
                return (WritableColumnVector) headerStruct.getChild(i);
            }
        }
        return null;
    }

    void reset() {
        for (WritableColumnVector v : vectors) {
            v.reset();
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
