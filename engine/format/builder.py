"""Write magic-2 record batches, byte-identical to Apache kafka-clients for uncompressed data.

Layout and header values follow `MemoryRecordsBuilder` / `DefaultRecordBatch.writeHeader` (spec 1.3-1.5):
baseTimestamp = the first record's timestamp (or the delete horizon when that flag is set, KIP-534),
maxTimestamp = the largest record timestamp starting from -1 (CreateTime) or the append time
(LogAppendTime), CRC-32C over [attributes, end). The records of every batch of a call are written in
one pass by the compiled codec (`codec.encode_records`, sizes first, then the bytes, without the GIL).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
import numpy as np
import pyarrow as pa

from engine.format import compression
from engine.format.batch import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
)
from engine.format.compiled import codec as codec_module
from engine.format.records import HEADERS_TYPE

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 header
CONTROL_ABORT, CONTROL_COMMIT = 0, 1

HeaderList = Sequence[tuple[str, bytes | None]]


def _one_array(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it is (combining copies even a single chunk)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def as_binary(values: pa.Array | pa.ChunkedArray | Sequence[bytes | None]) -> pa.Array:
    """Keys or values as an Arrow binary array (accepts Python lists for convenience)."""
    if isinstance(values, pa.ChunkedArray):
        values = _one_array(values)
    if isinstance(values, pa.Array):
        return values if values.type == pa.binary() else values.cast(pa.binary())
    return pa.array(values, pa.binary())


def as_binary_chunks(values: pa.Array | pa.ChunkedArray | Sequence[bytes | None]) -> pa.Array | pa.ChunkedArray:
    """Values as Arrow binary, a chunked column left in its chunks: a compressed batch is encoded from its
    own slice of them (`encode_batches`), so joining the chunks first would copy every value once for
    nothing (issue 30's benchmark: a tenth of an append task's time)."""
    if isinstance(values, pa.ChunkedArray):
        return values if values.type == pa.binary() else values.cast(pa.binary())
    return as_binary(values)


def _contiguous(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return _one_array(values) if isinstance(values, pa.ChunkedArray) else values


def as_headers(headers: pa.Array | Sequence[HeaderList] | None) -> pa.Array | None:
    """Headers as Arrow list<struct<key: string, value: binary>>; None when no record has any."""
    if headers is None:
        return None
    if isinstance(headers, pa.ChunkedArray):
        headers = _one_array(headers)
    if isinstance(headers, pa.Array):
        return headers if headers.type == HEADERS_TYPE else headers.cast(HEADERS_TYPE)
    return pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers], HEADERS_TYPE)


def encode_records(keys: pa.Array, values: pa.Array, timestamp_deltas: np.ndarray, offset_deltas: np.ndarray,
                   headers: pa.Array | None) -> tuple[np.ndarray, pa.Buffer]:
    """Records in v2 wire form (spec 1.5), all at once: (offsets int64 n+1, bytes); record i is
    `bytes[offsets[i]:offsets[i+1]]`. Written by the compiled codec (`codec.encode_records`)."""
    offsets, data, _ = codec_module.encode_records(keys, values, np.ascontiguousarray(timestamp_deltas, np.int64),
                                                   np.ascontiguousarray(offset_deltas, np.int64), headers)
    return offsets, data


def _columns(keys, values, timestamps, headers, join: bool = True,
             ) -> tuple[pa.Array, pa.Array | pa.ChunkedArray, np.ndarray, pa.Array | None]:
    keys, values = as_binary(keys), as_binary(values) if join else as_binary_chunks(values)
    n = len(keys)
    ts = np.asarray(timestamps, dtype=np.int64)
    headers = as_headers(headers)
    if len(values) != n or ts.shape[0] != n or (headers is not None and len(headers) != n):
        raise ValueError(f"columns differ in length: {n} keys, {len(values)} values, {ts.shape[0]} timestamps"
                         + ("" if headers is None else f", {len(headers)} header lists"))
    return keys, values, ts, headers


def batch_attributes(codec: int, timestamp_type: int, transactional: bool, control: bool, delete_horizon: bool) -> int:
    return ((codec & 0x07) | (ATTR_TIMESTAMP_TYPE if timestamp_type == LOG_APPEND_TIME else 0)
            | (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0)
            | (ATTR_DELETE_HORIZON if delete_horizon else 0))


def assemble_batch(records: bytes | memoryview, codec: int, base_offset: int, partition_leader_epoch: int,
              attributes: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int, producer_id: int,
              producer_epoch: int, base_sequence: int, count: int) -> bytes:
    """Header + (compressed) records, CRC-32C over [attributes, end) (spec 1.3)."""
    if codec != compression.NONE and count:
        records = compression.compress(codec, records)
    header = bytearray(_HEADER.pack(base_offset, 49 + len(records), partition_leader_epoch, 2, 0, attributes,
                                    last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                                    base_sequence, count))
    struct.pack_into(">I", header, 17, crc32c.crc32c(records, crc32c.crc32c(header[21:])))
    return b"".join((header, records))


def _max_timestamp(timestamp_type: int, log_append_time: int | None, create_max: np.ndarray | int) -> np.ndarray | int:
    """CreateTime: max of record timestamps, never below -1 (spec 2.2); LogAppendTime: the append time."""
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime batches need log_append_time")
        return np.full_like(create_max, log_append_time) if isinstance(create_max, np.ndarray) else log_append_time
    return np.maximum(create_max, NO_TIMESTAMP)


def encode_batches(keys: pa.Array | Sequence[bytes | None], values: pa.Array | pa.ChunkedArray | Sequence[bytes | None],
                   timestamps: np.ndarray | Sequence[int], headers: pa.Array | Sequence[HeaderList] | None = None,
                   *, batch_lengths: np.ndarray | Sequence[int], base_offset: int = 0,
                   codec: int = compression.NONE, timestamp_type: int = CREATE_TIME, log_append_time: int | None = None,
                   producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   partition_leader_epoch: int = -1, transactional: bool = False) -> list[bytes | memoryview]:
    """Consecutive batches from one column set: batch j holds the next `batch_lengths[j]` records and
    offsets run on from `base_offset`. All records are encoded in one compiled pass; an uncompressed
    batch is then a view of the shared buffer with its header written in place (no copy of its records),
    a compressed one a view of its own buffer, the header written in place in front of the compressed records.
    Compressed batches are encoded from their own slices of chunked `values` (`as_binary_chunks`).
    """
    keys, values, ts, headers = _columns(keys, values, timestamps, headers, join=codec == compression.NONE)
    lengths = np.asarray(batch_lengths, dtype=np.int64)
    if (lengths <= 0).any() or int(lengths.sum()) != len(keys):
        raise ValueError(f"batch lengths must be positive and add up to the {len(keys)} records")
    first = np.cumsum(lengths) - lengths
    batch_of = np.repeat(np.arange(lengths.shape[0]), lengths)
    base_ts = ts[first]
    ts_deltas = ts - base_ts[batch_of]
    offset_deltas = np.arange(len(keys), dtype=np.int64) - first[batch_of]
    max_ts = _max_timestamp(timestamp_type, log_append_time, np.maximum.reduceat(ts, first))
    attributes = batch_attributes(codec, timestamp_type, transactional, False, False)

    def fields(j: int, start: int, count: int) -> tuple:
        sequence = -1 if base_sequence < 0 else (base_sequence + start) % (2**31)
        return (base_offset + start, partition_leader_epoch, attributes, count - 1, int(base_ts[j]), int(max_ts[j]),
                producer_id, producer_epoch, sequence, count)

    jobs = list(zip(range(lengths.shape[0]), first.tolist(), lengths.tolist(), strict=True))
    if codec == compression.NONE:
        gap = V2_HEADER_SIZE
        offsets, data, crcs = codec_module.encode_records(keys, values, ts_deltas, offset_deltas, headers, first, gap)
        view = memoryview(data).cast("B")  # bytes-like views compare equal to the same bytes
        ends = offsets[first + lengths] - np.append(np.full(lengths.shape[0] - 1, gap), 0)
        return [_finish_in_place(view, int(offsets[start]) - gap, int(ends[j]), *fields(j, start, count),
                                 records_crc=int(crcs[j])) for j, start, count in jobs]

    def batch(j: int, start: int, count: int) -> memoryview:
        # each batch is encoded just before it is compressed, so the compressor reads it from the cache
        # (as kafka-clients' stream does), not the whole input's records from memory after they were all written
        stop = start + count
        offsets, data, _ = codec_module.encode_records(
            keys.slice(start, count), _contiguous(values.slice(start, count)), ts_deltas[start:stop],
            offset_deltas[start:stop],
            None if headers is None else headers.slice(start, count))
        packed = compression.compress_behind(codec, memoryview(data).cast("B")[:int(offsets[-1])], V2_HEADER_SIZE)
        return _finish_in_place(packed, 0, len(packed), *fields(j, start, count))

    return compression.map_batches(lambda job: batch(*job), jobs, keys.nbytes + values.nbytes)


def _finish_in_place(view: memoryview, start: int, end: int, base_offset: int, partition_leader_epoch: int,
                     attributes: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int,
                     producer_id: int, producer_epoch: int, base_sequence: int, count: int,
                     records_crc: int | None = None) -> memoryview:
    """A batch whose (compressed) records are already in `view[start + 61:end]`: the header is written
    in front of them and the CRC-32C computed over [attributes, end) (spec 1.3), without copying them;
    with `records_crc` (the records' CRC-32C, taken as they were written) only the header's is computed."""
    _HEADER.pack_into(view, start, base_offset, end - start - 12, partition_leader_epoch, 2, 0, attributes,
                      last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                      count)
    records = start + V2_HEADER_SIZE
    if records_crc is None:
        crc = crc32c.crc32c(view[start + 21:end])
    else:
        crc = codec_module.crc32c_combine(crc32c.crc32c(view[start + 21:records]), records_crc, end - records)
    struct.pack_into(">I", view, start + 17, crc)
    return view[start:end]


def encode_batch(keys: pa.Array | Sequence[bytes | None], values: pa.Array | Sequence[bytes | None],
                 timestamps: np.ndarray | Sequence[int],
                 headers: pa.Array | Sequence[HeaderList] | None = None, *,
                 base_offset: int = 0, offset_deltas: np.ndarray | None = None, codec: int = compression.NONE,
                 timestamp_type: int = CREATE_TIME, log_append_time: int | None = None,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1, transactional: bool = False, control: bool = False,
                 delete_horizon: int | None = None, last_offset_delta: int | None = None,
                 max_timestamp: int | None = None) -> bytes:
    """One v2 batch. Defaults give exactly what a non-idempotent kafka-clients producer writes.

    `offset_deltas` (default 0..n-1), `last_offset_delta`, `max_timestamp` and `delete_horizon` let the
    cleaner rebuild a batch that keeps its original base and last offsets (spec 8.4-8.5), including
    an empty one (n = 0).
    """
    keys, values, ts, headers = _columns(keys, values, timestamps, headers)
    n = len(keys)
    deltas = np.arange(n, dtype=np.int64) if offset_deltas is None else np.asarray(offset_deltas, np.int64)
    if n and (deltas[0] < 0 or (np.diff(deltas) <= 0).any()):
        raise ValueError("offset deltas must start at >= 0 and strictly increase")
    last_delta = int(deltas[-1]) if last_offset_delta is None else last_offset_delta
    if n and last_delta < int(deltas[-1]):
        raise ValueError(f"last_offset_delta {last_delta} is below the last record's delta {int(deltas[-1])}")
    if max_timestamp is None:
        max_timestamp = int(_max_timestamp(timestamp_type, log_append_time, int(ts.max()) if n else NO_TIMESTAMP))
    if delete_horizon is not None:
        base_ts = delete_horizon
    else:
        base_ts = int(ts[0]) if n else NO_TIMESTAMP  # writeEmptyHeader: -1 for a batch without records
    records: bytes | memoryview = b""
    if n:
        offsets, data = encode_records(keys, values, ts - base_ts, deltas, headers)
        records = memoryview(data)[offsets[0]:offsets[-1]]
    attributes = batch_attributes(codec, timestamp_type, transactional, control, delete_horizon is not None)
    return assemble_batch(records, codec, base_offset, partition_leader_epoch, attributes, last_delta, base_ts,
                     max_timestamp, producer_id, producer_epoch, base_sequence, n)
