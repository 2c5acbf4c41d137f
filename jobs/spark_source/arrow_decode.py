"""Stored Kafka record batches decoded a column at a time into the Spark source's Arrow record batches.

`ArrowChunk` collects batches (each CRC-checked and decompressed with the codecs the broker's readers use,
`broker/partitions/records.records_section`), and `ArrowChunk.record_batch` hands their records' columns,
read in C by `_arrow_columns.columns` (no Python object per record), to pyarrow as buffers: the rows are
exactly those of the per-record decode in read.py (aiokafka's reader), which stays the reference and the
path taken when the compiled module is missing (a build without a C compiler).

Damage raises RecordFormatError naming the object and the batch, as the per-record decode does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from broker.partitions.records import BatchHeader, RecordFormatError, records_section, verify_crc

try:
    from jobs.spark_source import _arrow_columns
except ImportError:  # built without a C compiler: read.py decodes record by record
    _arrow_columns = None  # type: ignore[assignment]

AVAILABLE = _arrow_columns is not None
MS_TO_US = 1000


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap of 0/1 bytes (None when every value is valid)."""
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _binary(offsets: np.ndarray, valid: np.ndarray | None, data: np.ndarray, kind: pa.DataType) -> pa.Array:
    bitmap = None if valid is None else _bitmap(valid)
    return pa.Array.from_buffers(kind, len(offsets) - 1, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])


class ArrowChunk:
    """Record batches of one topic gathered for one Arrow record batch (`rows` records at most, about)."""

    def __init__(self, topic: str, schema: pa.Schema) -> None:
        self.topic = topic
        self.schema = schema
        self.sections: list[Any] = []
        self.meta: list[tuple[int, ...]] = []
        self.bytes = 0
        self.records = 0
        self.where: list[str] = []  # per batch: the object and byte position, for errors

    def add(self, raw: bytes, h: BatchHeader, pos: int, partition: int, lo: int, hi: int, where: str) -> None:
        """One batch (`raw`, header `h`, at byte `pos` of its stream record) of `partition`; its records with
        offsets in [lo, hi) become rows."""
        try:
            verify_crc(raw, h, pos)
            section = records_section(raw, h, pos)
        except RecordFormatError as exc:
            raise RecordFormatError(f"{where}: {exc}") from None
        at = self.bytes
        self.bytes += len(section)
        self.sections.append(section)
        self.meta.append((at, self.bytes, h.records_count, h.base_offset, h.first_timestamp, h.max_timestamp,
                          1 if h.attributes & 0x08 else 0, partition, lo, hi))
        self.records += h.records_count
        self.where.append(f"{where}: record batch at byte {pos} (base offset {h.base_offset})")

    def record_batch(self, lo_ms: int | None, hi_ms: int | None) -> pa.RecordBatch:
        """The rows of the batches added (timestamps in [lo_ms, hi_ms)), in the order added; the chunk is
        emptied."""
        data = b"".join(self.sections)
        meta = np.array(self.meta, dtype=np.int64).reshape(len(self.meta), len(_arrow_columns.META))
        where = self.where
        self.sections, self.meta, self.where, self.bytes, self.records = [], [], [], 0, 0
        try:
            c = _arrow_columns.columns(data, meta, -(1 << 63) if lo_ms is None else lo_ms,
                                       (1 << 63) - 1 if hi_ms is None else hi_ms)
        except ValueError as exc:
            raise RecordFormatError(f"{where[0] if len(where) == 1 else where[0] + ' ...'}: cannot decode "
                                    f"records ({exc})") from None
        return self._arrays(c, where)

    def _arrays(self, c: dict[str, np.ndarray], where: list[str]) -> pa.RecordBatch:
        n = len(c["offset"])
        headers_type = self.schema.field("headers").type
        hk = _binary(c["header_key_offsets"], None, c["header_key_data"], pa.string())
        try:
            hk.validate(full=True)
        except pa.ArrowInvalid:
            raise RecordFormatError(f"{where[0]}: a header name that is not UTF-8") from None
        hv = _binary(c["header_value_offsets"], c["header_value_valid"], c["header_value_data"], pa.binary())
        element = headers_type.value_type
        structs = pa.StructArray.from_arrays([hk, hv], fields=list(element))
        headers = pa.ListArray.from_arrays(pa.array(c["headers_offsets"]), structs, type=headers_type)
        ts = pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n,
                                   [None, pa.py_buffer(c["timestamp"] * MS_TO_US)])
        arrays = [_binary(c["key_offsets"], c["key_valid"], c["key_data"], pa.binary()),
                  _binary(c["value_offsets"], c["value_valid"], c["value_data"], pa.binary()),
                  pa.repeat(pa.scalar(self.topic, pa.string()), n),
                  pa.array(c["partition"], pa.int32()), pa.array(c["offset"], pa.int64()), ts,
                  pa.array(c["timestamp_type"], pa.int32()), headers]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
