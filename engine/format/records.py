"""Decode the records of every batch in a log buffer into columns (numpy + Arrow).

v2 (spec 1.5): the records of all v2 batches are decoded together by the compiled codec
(`engine/format/_codec.pyx`), which frames and checks every record without the GIL and writes the
Arrow buffers of the key, value and header columns directly; compressed batches are decompressed
one by one and read in place. Offsets and timestamps come from the batch headers plus the record
deltas, for all records at once with numpy.

Legacy v0/v1 (spec 1.7): one message per entry, or a compressed wrapper whose value holds inner
messages; these are rare in practice and decoded per message.

Read rules applied: LogAppendTime batches report the batch maxTimestamp for every record (spec 1.4);
v1 inner offsets are relative to the wrapper (KIP-31); magic 0 has no timestamp (-1).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import crc32c
import numpy as np
import pyarrow as pa

from engine.format import compression
from engine.format.batch import (
    ATTR_TIMESTAMP_TYPE,
    NO_TIMESTAMP,
    V2_CRC_START,
    V2_HEADER_SIZE,
    BatchHeaders,
    crc_mismatch,
    crc_problems,
)
from engine.format.compiled import codec
from kernel.errors import CorruptRecordError

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)


@dataclass
class RecordTable:
    """Decoded records in log order. `batch_index` is the row of each record's batch in the headers."""

    batch_index: np.ndarray
    offset: np.ndarray
    timestamp: np.ndarray
    key: pa.Array
    value: pa.Array
    headers: pa.Array

    def __len__(self) -> int:
        return int(self.offset.shape[0])

    def take(self, index: np.ndarray) -> RecordTable:
        taker = pa.array(index)
        return RecordTable(self.batch_index[index], self.offset[index], self.timestamp[index],
                           self.key.take(taker), self.value.take(taker), self.headers.take(taker))

    def per_record(self, *columns: np.ndarray) -> list[np.ndarray]:
        """Per-batch columns (one value per row of the headers), each repeated for every record of its batch."""
        b = self.batch_index
        if b.shape[0] < 2 or bool((b[1:] >= b[:-1]).all()):  # log order: repeat each batch's value
            counts = np.bincount(b, minlength=columns[0].shape[0])
            return [np.repeat(column, counts) for column in columns]
        return [column[b] for column in columns]

    def to_arrow(self, batches: BatchHeaders) -> pa.Table:
        """All record fields plus the batch attributes a reader needs (magic, codec, type, control)."""
        timestamp_type, magic, codec, control, position = self.per_record(
            batches.timestamp_type, batches.magic, batches.codec, batches.is_control, batches.position)
        return pa.table({
            "offset": self.offset,
            "timestamp": self.timestamp,
            "timestamp_type": timestamp_type,
            "key": self.key,
            "value": self.value,
            "headers": self.headers,
            "magic": magic,
            "compression": codec,
            "control": control,
            "batch_position": position,
        })


def decode_records(data: bytes, batches: BatchHeaders, source: str = "<bytes>", verify_crc: bool = False
                   ) -> RecordTable:
    """Decode every record of `batches` (found in `data` by `engine.format.batch.scan_batches`).

    `verify_crc` checks each batch's CRC as the scan does, just before its records are read: the
    batch is then read from memory once, not once by the scan and again by the decoder (~20% of the
    decoding time of uncompressed 1 KB records). A mismatch raises that batch's CRC error before any of
    its records are returned.
    """
    magic = batches.magic
    parts = []
    v2_rows = np.flatnonzero(magic == 2)
    legacy_rows = np.flatnonzero(magic != 2)
    if verify_crc and legacy_rows.size:
        problems = crc_problems(data, batches.take(legacy_rows), source)
        if problems:
            raise problems[0]
    if v2_rows.size:
        parts.append(_decode_v2(data, batches, v2_rows, source, verify_crc))
    if legacy_rows.size:
        parts.append(_decode_legacy(data, batches, legacy_rows, source))
    if not parts:
        return _empty()
    if len(parts) == 1:
        return parts[0]
    merged = _concat(parts)
    return merged.take(np.argsort(merged.batch_index, kind="stable"))


def decode_checked(data: bytes, headers: BatchHeaders, rows: np.ndarray, source: str = "<bytes>") -> RecordTable:
    """The records of batches `rows` of `headers` (a scan of `data` that skipped the CRCs,
    `scan_batches(verify_crc=False)`), with EVERY batch's CRC checked as a CRC-checking scan would
    (spec 1.3): the decoded batches' in the decoder's pass, just before their records are read (the
    batch then comes from memory once, as kafka-clients' `ensureValid` then iterator), the others' first.
    Raises what the CRC-checking scan followed by `decode_records` raises: on any problem all CRCs are
    checked again, and the first bad one by position comes before any record's problem."""
    try:
        skipped = np.ones(len(headers), dtype=bool)
        skipped[rows] = False
        problems = crc_problems(data, headers.take(np.flatnonzero(skipped)), source)
        if not problems:
            return decode_records(data, headers.take(rows), source, verify_crc=True)
        first_error: CorruptRecordError = problems[0]
    except CorruptRecordError as exc:
        first_error = exc
    problems = crc_problems(data, headers, source)
    raise problems[0] if problems else first_error


def _empty() -> RecordTable:
    e = np.zeros(0, np.int64)
    return RecordTable(np.zeros(0, np.int32), e, e.copy(), pa.array([], pa.binary()), pa.array([], pa.binary()),
                       pa.array([], HEADERS_TYPE))


def _concat(parts: list[RecordTable]) -> RecordTable:
    return RecordTable(
        np.concatenate([p.batch_index for p in parts]),
        np.concatenate([p.offset for p in parts]),
        np.concatenate([p.timestamp for p in parts]),
        pa.concat_arrays([p.key for p in parts]),
        pa.concat_arrays([p.value for p in parts]),
        pa.concat_arrays([p.headers for p in parts]),
    )


# ---------------------------------------------------------------------------------------------- v2


def _chunks(data: bytes, b: BatchHeaders, rows: np.ndarray, source: str, verify_crc: bool
            ) -> tuple[list[bytes | memoryview], np.ndarray, np.ndarray, np.ndarray]:
    """Where each v2 batch's records are: the log buffer itself for an uncompressed batch, its own
    decompressed buffer otherwise (read in place, never joined into one copy). Batches decompress in
    parallel threads; the first failure, in log order, is the one reported. With `verify_crc` a
    compressed batch's CRC is checked just before it is decompressed (it is then in cache for that)."""
    pos = b.position[rows]
    start = pos + V2_HEADER_SIZE
    end = pos + b.size[rows]
    codecs = b.codec[rows]
    compressed = codecs != compression.NONE
    if not compressed.any():
        return [data] * rows.shape[0], start, end, compressed
    mv = memoryview(data)
    stored = b.crc[rows]

    def inflate(i: int) -> bytes | memoryview:
        if verify_crc:
            computed = _crc32c(mv[int(pos[i]) + V2_CRC_START:int(end[i])])
            if computed != int(stored[i]):
                raise crc_mismatch(source, int(pos[i]), 2, int(stored[i]), computed)
        try:
            return compression.decompress(int(codecs[i]), mv[int(start[i]):int(end[i])], magic=2)
        except compression.CompressionError as exc:
            raise CorruptRecordError(source, int(pos[i]), "records", str(exc)) from exc

    packed = np.flatnonzero(compressed).tolist()
    inflated = compression.map_batches(inflate, packed, int((end - start)[compressed].sum()))
    chunks: list[bytes | memoryview] = [data] * rows.shape[0]
    for i, chunk in zip(packed, inflated, strict=True):
        chunks[i] = chunk
        start[i], end[i] = 0, len(chunk)
    return chunks, start, end, compressed


def _decode_v2(data: bytes, b: BatchHeaders, rows: np.ndarray, source: str, verify_crc: bool) -> RecordTable:
    chunks, start, end, compressed = _chunks(data, b, rows, source, verify_crc)
    counts = b.records_count[rows].astype(np.int64)
    crc_from = crc_stored = None
    if verify_crc and _CRC_IN_DECODER:  # uncompressed batches: checked by the decoder as it reaches them
        crc_from = np.where(compressed, -1, b.position[rows] + V2_CRC_START).astype(np.int64)
        crc_stored = b.crc[rows].astype(np.uint32)
    elif verify_crc:
        problems = crc_problems(data, b.take(rows[~compressed]), source)
        if problems:
            raise problems[0]
    failure, columns = codec.decode_v2(
        chunks, start.astype(np.int64), end.astype(np.int64), counts, rows.astype(np.int32),
        b.base_offset[rows].astype(np.int64), b.base_timestamp[rows].astype(np.int64),
        b.max_timestamp[rows].astype(np.int64), ((b.attributes[rows] & ATTR_TIMESTAMP_TYPE) != 0).view(np.uint8),
        crc_from, crc_stored)
    if failure is not None:
        raise _corrupt(failure, b, rows, start, end, counts, compressed, source)
    entries = pa.StructArray.from_arrays([_utf8(_binary(*columns["header_key"])), _binary(*columns["header_value"])],
                                         fields=list(HEADER_TYPE))
    headers = pa.ListArray.from_arrays(pa.array(columns["header_list"]), entries)
    return RecordTable(columns["batch"], columns["offset"], columns["timestamp"], _binary(*columns["key"]),
                       _binary(*columns["value"]), headers)


# The decoder's CRC-32C runs on the CPU's instruction where there is one (x86-64 with SSE4.2); elsewhere
# the `crc32c` package (which has its own hardware paths, ARMv8's included) checks the batches first.
_CRC_IN_DECODER = codec.cpu_paths()["crc32c_instruction"]
_crc32c = codec.crc32c if _CRC_IN_DECODER else crc32c.crc32c


def _binary(validity: np.ndarray | None, nulls: int, offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    """An Arrow binary array over the codec's buffers (no copy)."""
    return pa.Array.from_buffers(pa.binary(), offsets.shape[0] - 1,
                                 [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets),
                                  pa.py_buffer(data)], null_count=nulls)


def _corrupt(failure: tuple, b: BatchHeaders, rows: np.ndarray, start: np.ndarray, end: np.ndarray,
             counts: np.ndarray, compressed: np.ndarray, source: str) -> CorruptRecordError:
    """The codec's failure as Kafka's reader would name it: the batch (or the record, by its start in
    the log, or "in the decompressed records") and the field."""
    kind, k, record, position, field, message, value = failure
    batch_pos = int(b.position[rows][k])
    if kind == 2:
        return crc_mismatch(source, batch_pos, 2, int(b.crc[rows][k]), value)
    if kind == 0:
        return CorruptRecordError(source, batch_pos, field,
                                  message.format(count=int(counts[k]), region=int(end[k] - start[k])))
    where = batch_pos if compressed[k] else int(position)
    inside = " (in the decompressed records)" if compressed[k] else ""
    return CorruptRecordError(source, where, field, f"record {record} of batch at byte {batch_pos}{inside}: {message}")


def _utf8(keys: pa.Array) -> pa.Array:
    """Header keys are UTF-8 strings; invalid bytes are replaced as Java's decoder does."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([k.decode("utf-8", errors="replace") for k in keys.to_pylist()], pa.string())


# ------------------------------------------------------------------------------------------ legacy

_LEGACY_PREFIX = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes


def _legacy_message(data: bytes, pos: int, end: int, source: str, context: str
                    ) -> tuple[int, int, int, int, bytes | None, bytes | None, int]:
    """Parse one message-set entry at `pos`: (offset, magic, attributes, timestamp, key, value, next)."""
    if end - pos < 26:
        raise CorruptRecordError(source, pos, "message", f"{context}truncated message-set entry")
    offset, size, crc, magic, attributes = _LEGACY_PREFIX.unpack_from(data, pos)
    stop = pos + 12 + size
    if stop > end or magic not in (0, 1) or size < (14 if magic == 0 else 22):
        raise CorruptRecordError(source, pos, "size", f"{context}message of magic {magic} declares size {size}")
    if zlib.crc32(memoryview(data)[pos + 16:stop]) != crc:
        raise CorruptRecordError(source, pos, "crc", f"{context}message CRC mismatch")
    p = pos + 18
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", data, p)
        p += 8
    key, p = _legacy_bytes(data, p, stop, source, pos, context, "key")
    value, p = _legacy_bytes(data, p, stop, source, pos, context, "value")
    if p != stop:
        raise CorruptRecordError(source, pos, "size", f"{context}message size does not match its fields")
    return offset, magic, attributes, timestamp, key, value, stop


def _legacy_bytes(data: bytes, p: int, stop: int, source: str, pos: int, context: str, name: str
                  ) -> tuple[bytes | None, int]:
    if p + 4 > stop:
        raise CorruptRecordError(source, pos, name, f"{context}{name} length runs past the message")
    (n,) = struct.unpack_from(">i", data, p)
    p += 4
    if n == -1:
        return None, p
    if n < 0 or p + n > stop:
        raise CorruptRecordError(source, pos, name, f"{context}{name} length {n} is invalid")
    return data[p:p + n], p + n


def _decode_legacy(data: bytes, b: BatchHeaders, rows: np.ndarray, source: str) -> RecordTable:
    batch_index, offsets, timestamps, keys, values = [], [], [], [], []
    for row in rows.tolist():
        pos = int(b.position[row])
        offset, magic, attributes, ts, key, value, _ = _legacy_message(data, pos, pos + int(b.size[row]), source, "")
        codec = attributes & 0x07
        if codec == compression.NONE:
            batch_index.append(row)
            offsets.append(offset)
            timestamps.append(ts)
            keys.append(key)
            values.append(value)
            continue
        if value is None:
            raise CorruptRecordError(source, pos, "value", "compressed wrapper message has a null value")
        try:
            inner = compression.decompress(codec, value, magic=magic)
        except compression.CompressionError as exc:
            raise CorruptRecordError(source, pos, "value", f"wrapper message: {exc}") from exc
        messages = _inner_messages(inner, magic, source, pos)
        log_append = magic == 1 and attributes & ATTR_TIMESTAMP_TYPE
        last_relative = messages[-1][0]
        for inner_offset, inner_ts, inner_key, inner_value in messages:
            if magic == 0 or offset == 0:  # v0: absolute; some librdkafka versions write wrapper 0 = base 0
                absolute = inner_offset
            else:  # KIP-31: relative inner offsets, wrapper carries the last absolute offset
                absolute = offset - last_relative + inner_offset
            batch_index.append(row)
            offsets.append(absolute)
            timestamps.append(ts if log_append else inner_ts)
            keys.append(inner_key)
            values.append(inner_value)
    return RecordTable(
        np.asarray(batch_index, np.int32), np.asarray(offsets, np.int64), np.asarray(timestamps, np.int64),
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array([[] for _ in keys], HEADERS_TYPE))


def _inner_messages(inner: bytes, wrapper_magic: int, source: str, wrapper_pos: int
                    ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    context = f"inner message of the wrapper at byte {wrapper_pos}: "
    out = []
    p = 0
    while p < len(inner):
        try:
            offset, magic, attributes, ts, key, value, p = _legacy_message(inner, p, len(inner), source, context)
        except CorruptRecordError as exc:
            raise CorruptRecordError(source, wrapper_pos, exc.field, exc.message) from exc
        if magic != wrapper_magic or attributes & 0x07:
            raise CorruptRecordError(source, wrapper_pos, "magic",
                                     f"{context}inner messages must be uncompressed with the wrapper's magic")
        out.append((offset, ts, key, value))
    if not out:
        raise CorruptRecordError(source, wrapper_pos, "value", "compressed wrapper holds no messages")
    return out

