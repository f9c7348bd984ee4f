"""Write magic-2 record batches, byte-identical to Apache kafka-clients for uncompressed data.

Layout and header values follow `MemoryRecordsBuilder` / `DefaultRecordBatch.writeHeader` (spec 1.3-1.5):
baseTimestamp = the first record's timestamp (or the delete horizon when that flag is set, KIP-534),
maxTimestamp = the largest record timestamp starting from -1 (CreateTime) or the append time
(LogAppendTime), CRC-32C over [attributes, end). Records are encoded for the whole batch at once:
every varint field of every record is sized and written with numpy, and keys, values and header
bytes are scattered into place in one vectorized copy each.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
import numpy as np
import pyarrow as pa

from engine import compression
from engine.batch import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
)
from engine.records import HEADERS_TYPE
from engine.varint import encode_into, encoded_size

_HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 header
CONTROL_ABORT, CONTROL_COMMIT = 0, 1

HeaderList = Sequence[tuple[str, bytes | None]]


def as_binary(values: pa.Array | Sequence[bytes | None]) -> pa.Array:
    """Keys or values as an Arrow binary array (accepts Python lists for convenience)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == pa.binary() else values.cast(pa.binary())
    return pa.array(values, pa.binary())


def as_headers(headers: pa.Array | Sequence[HeaderList] | None, n: int) -> pa.Array:
    """Headers as Arrow list<struct<key: string, value: binary>>."""
    if headers is None:
        return pa.array([[] for _ in range(n)], HEADERS_TYPE)
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks()
    if isinstance(headers, pa.Array):
        return headers if headers.type == HEADERS_TYPE else headers.cast(HEADERS_TYPE)
    return pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers], HEADERS_TYPE)


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lengths with -1 for null, contiguous data bytes, first byte offset) of a binary array."""
    n = len(arr)
    validity, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=arr.offset + n + 1)[arr.offset:]
    lengths = np.diff(offsets).astype(np.int64)
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False))
        lengths = np.where(valid, lengths, -1)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return lengths, data, np.int64(offsets[0]) if n else np.int64(0)


def _scatter(out: np.ndarray, dst: np.ndarray, lengths: np.ndarray, data: np.ndarray, first: int) -> None:
    """Copy consecutive slices of `data` (starting at `first`, sizes `lengths`, -1 = none) to `dst`."""
    sizes = np.maximum(lengths, 0)
    total = int(sizes.sum())
    if total == 0:
        return
    before = np.cumsum(sizes) - sizes
    index = np.repeat(dst - before, sizes) + np.arange(total, dtype=np.int64)
    out[index] = data[first:first + total]


def encode_records(keys: pa.Array, values: pa.Array, timestamp_deltas: np.ndarray, offset_deltas: np.ndarray,
                   headers: pa.Array) -> bytes:
    """The records section of a v2 batch (spec 1.5), all records at once."""
    n = len(keys)
    key_len, key_data, key_first = _binary_parts(keys)
    value_len, value_data, value_first = _binary_parts(values)
    header_count = np.diff(np.frombuffer(headers.buffers()[1], np.int32, count=headers.offset + n + 1)
                           [headers.offset:]).astype(np.int64)
    flat = headers.flatten()
    hkey_len, hkey_data, hkey_first = _binary_parts(flat.field("key").cast(pa.binary()))
    hval_len, hval_data, hval_first = _binary_parts(flat.field("value"))
    hkey_size = encoded_size(hkey_len)
    hval_size = encoded_size(hval_len)
    header_bytes_each = hkey_size + hkey_len + hval_size + np.maximum(hval_len, 0)
    owner = np.repeat(np.arange(n), header_count)
    header_bytes = np.bincount(owner, weights=header_bytes_each, minlength=n).astype(np.int64) if flat else \
        np.zeros(n, np.int64)

    ts_size = encoded_size(timestamp_deltas)
    off_size = encoded_size(offset_deltas)
    key_size = encoded_size(key_len)
    value_size = encoded_size(value_len)
    count_size = encoded_size(header_count)
    body = (1 + ts_size + off_size + key_size + np.maximum(key_len, 0) + value_size + np.maximum(value_len, 0)
            + count_size + header_bytes)
    body_size = encoded_size(body)
    record_size = body_size + body
    start = np.cumsum(record_size) - record_size
    out = np.zeros(int(record_size.sum()), dtype=np.uint8)

    encode_into(out, start, body, body_size)
    p = start + body_size + 1  # attributes byte stays 0
    encode_into(out, p, timestamp_deltas, ts_size)
    p = p + ts_size
    encode_into(out, p, offset_deltas, off_size)
    p = p + off_size
    encode_into(out, p, key_len, key_size)
    p = p + key_size
    _scatter(out, p, key_len, key_data, key_first)
    p = p + np.maximum(key_len, 0)
    encode_into(out, p, value_len, value_size)
    p = p + value_size
    _scatter(out, p, value_len, value_data, value_first)
    p = p + np.maximum(value_len, 0)
    encode_into(out, p, header_count, count_size)
    p = p + count_size
    if len(flat):
        slot_start = np.cumsum(header_bytes_each) - header_bytes_each  # within all headers
        first_of_record = np.repeat(np.cumsum(header_bytes) - header_bytes, header_count)
        hp = p[owner] + slot_start - first_of_record
        encode_into(out, hp, hkey_len, hkey_size)
        hp = hp + hkey_size
        _scatter(out, hp, hkey_len, hkey_data, hkey_first)
        hp = hp + hkey_len
        encode_into(out, hp, hval_len, hval_size)
        _scatter(out, hp + hval_size, hval_len, hval_data, hval_first)
    return out.tobytes()


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
    keys = as_binary(keys)
    values = as_binary(values)
    n = len(keys)
    if len(values) != n:
        raise ValueError(f"{n} keys but {len(values)} values")
    ts = np.asarray(timestamps, dtype=np.int64)
    if ts.shape[0] != n:
        raise ValueError(f"{n} records but {ts.shape[0]} timestamps")
    headers = as_headers(headers, n)
    deltas = np.arange(n, dtype=np.int64) if offset_deltas is None else np.asarray(offset_deltas, np.int64)
    if n and (deltas[0] < 0 or (np.diff(deltas) <= 0).any()):
        raise ValueError("offset deltas must start at >= 0 and strictly increase")
    if delete_horizon is not None:
        base_ts = delete_horizon
    else:
        base_ts = int(ts[0]) if n else (max_timestamp if max_timestamp is not None else NO_TIMESTAMP)
    if timestamp_type == LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LogAppendTime batches need log_append_time")
        max_ts = log_append_time
    elif max_timestamp is not None:
        max_ts = max_timestamp
    else:
        max_ts = max(NO_TIMESTAMP, int(ts.max())) if n else NO_TIMESTAMP
    last_delta = int(deltas[-1]) if last_offset_delta is None else last_offset_delta
    if n and last_delta < int(deltas[-1]):
        raise ValueError(f"last_offset_delta {last_delta} is below the last record's delta {int(deltas[-1])}")
    records = encode_records(keys, values, ts - base_ts, deltas, headers) if n else b""
    if codec != compression.NONE and n:
        records = compression.compress(codec, records)
    attributes = codec & 0x07
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if delete_horizon is not None:
        attributes |= ATTR_DELETE_HORIZON
    header = bytearray(_HEADER.pack(base_offset, 49 + len(records), partition_leader_epoch, 2, 0, attributes,
                                    last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, n))
    crc = crc32c.crc32c(records, crc32c.crc32c(bytes(header[21:])))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + records


def control_record(kind: int, coordinator_epoch: int = 0) -> tuple[bytes, bytes]:
    """Key and value of a transaction marker (spec 1.6): key = (version 0, type), value = (0, epoch)."""
    return struct.pack(">hh", 0, kind), struct.pack(">hi", 0, coordinator_epoch)
