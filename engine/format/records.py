"""Decode the records of every batch in a log buffer into columns (numpy + Arrow).

v2 (spec 1.5): the records of all v2 batches are decoded together. One Python pass finds each
record's start from its length varint; every field after that (timestamp delta, offset delta, key,
value, headers) is decoded for all records at once with `engine.format.varint.decode_at`. Keys and values
become Arrow binary columns through zero-copy binary views over the buffer, cast to plain binary in
Arrow's C++ code.

Legacy v0/v1 (spec 1.7): one message per entry, or a compressed wrapper whose value holds inner
messages; these are rare in practice and decoded per message.

Read rules applied: LogAppendTime batches report the batch maxTimestamp for every record (spec 1.4);
v1 inner offsets are relative to the wrapper (KIP-31); magic 0 has no timestamp (-1).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.errors import CorruptRecordError
from engine.format import compression
from engine.format.batch import (
    ATTR_TIMESTAMP_TYPE,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    BatchHeaders,
)
from engine.format.varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES, VarintError, decode_at, decode_one

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(HEADER_TYPE)
MIN_RECORD_BODY = 6  # attributes + 5 one-byte varints
_MAX_VIEW_OFFSET = 2**31 - 1


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

    def to_arrow(self, batches: BatchHeaders) -> pa.Table:
        """All record fields plus the batch attributes a reader needs (magic, codec, type, control)."""
        b = self.batch_index
        return pa.table({
            "offset": self.offset,
            "timestamp": self.timestamp,
            "timestamp_type": batches.timestamp_type[b],
            "key": self.key,
            "value": self.value,
            "headers": self.headers,
            "magic": batches.magic[b],
            "compression": batches.codec[b],
            "control": batches.is_control[b],
            "batch_position": batches.position[b],
        })


def decode_records(data: bytes, batches: BatchHeaders, source: str = "<bytes>") -> RecordTable:
    """Decode every record of `batches` (found in `data` by `engine.format.batch.scan_batches`)."""
    magic = batches.magic
    parts = []
    v2_rows = np.flatnonzero(magic == 2)
    legacy_rows = np.flatnonzero(magic != 2)
    if v2_rows.size:
        parts.append(_decode_v2(data, batches, v2_rows, source))
    if legacy_rows.size:
        parts.append(_decode_legacy(data, batches, legacy_rows, source))
    if not parts:
        return _empty()
    if len(parts) == 1:
        return parts[0]
    merged = _concat(parts)
    return merged.take(np.argsort(merged.batch_index, kind="stable"))


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


@dataclass
class _Arena:
    """The bytes holding all v2 records: the log buffer itself when nothing is compressed, else the
    concatenation of every batch's (decompressed) records. `region_*` are per v2 batch."""

    data: bytes
    region_start: np.ndarray
    region_end: np.ndarray
    compressed: np.ndarray


def _arena(data: bytes, b: BatchHeaders, rows: np.ndarray, source: str) -> _Arena:
    pos = b.position[rows]
    start = pos + V2_HEADER_SIZE
    end = pos + b.size[rows]
    codec = b.codec[rows]
    compressed = codec != compression.NONE
    if not compressed.any():
        return _Arena(data, start, end, compressed)
    chunks = []
    new_start = np.empty_like(start)
    cursor = 0
    mv = memoryview(data)
    for i, (s, e, c) in enumerate(zip(start.tolist(), end.tolist(), codec.tolist(), strict=True)):
        if c == compression.NONE:
            chunk = mv[s:e]
        else:
            try:
                chunk = compression.decompress(c, mv[s:e], magic=2)
            except compression.CompressionError as exc:
                raise CorruptRecordError(source, int(pos[i]), "records", str(exc)) from exc
        chunks.append(chunk)
        new_start[i] = cursor
        cursor += len(chunk)
    joined = b"".join(chunks)
    lengths = np.diff(np.append(new_start, cursor))
    return _Arena(joined, new_start, new_start + lengths, compressed)


def _record_starts(arena: _Arena, counts: np.ndarray, batch_pos: np.ndarray, source: str) -> np.ndarray:
    """Walk each batch's records by their length varints (the one sequential step of decoding)."""
    ab = arena.data
    starts: list[int] = []
    append = starts.append
    for region_start, region_end, count, bpos in zip(arena.region_start.tolist(), arena.region_end.tolist(),
                                                     counts.tolist(), batch_pos.tolist(), strict=True):
        p = region_start
        try:
            for _ in range(count):
                if p >= region_end:
                    raise CorruptRecordError(source, bpos, "recordsCount",
                                             f"batch declares {count} records but its data ends after fewer")
                append(p)
                b0 = ab[p]
                if b0 < 0x80:
                    p += 1 + ((b0 >> 1) ^ -(b0 & 1))
                    continue
                b1 = ab[p + 1]
                if b1 < 0x80:
                    v = (b0 & 0x7F) | (b1 << 7)
                    p += 2 + ((v >> 1) ^ -(v & 1))
                    continue
                v, q = decode_one(ab, p, VARINT_MAX_BYTES)
                if v < 0:
                    raise CorruptRecordError(source, bpos, "record length", f"negative record length {v}")
                p = q + v
        except (IndexError, VarintError) as exc:
            raise CorruptRecordError(source, bpos, "record length", f"bad record length varint: {exc}") from exc
        if p != region_end:
            raise CorruptRecordError(
                source, bpos, "size",
                f"Incorrect declared batch size: {count} records end at byte {p - region_start} of the "
                f"records but the batch holds {region_end - region_start}")
    return np.asarray(starts, dtype=np.int64)


class _Fields:
    """Vectorized cursor over one field at a time of many records, with Kafka's record checks."""

    def __init__(self, buf: np.ndarray, pos: np.ndarray, end: np.ndarray, locate) -> None:
        self.buf, self.pos, self.end, self.locate = buf, pos, end, locate

    def varint(self, name: str, max_bytes: int = VARINT_MAX_BYTES, rows: np.ndarray | None = None) -> np.ndarray:
        pos = self.pos if rows is None else self.pos[rows]
        end = self.end if rows is None else self.end[rows]
        try:
            value, length = decode_at(self.buf, pos, max_bytes, end)
        except VarintError as exc:
            row = exc.index if rows is None else int(rows[exc.index])
            raise self.locate(row, name, str(exc)) from exc
        if rows is None:
            self.pos = pos + length
        else:
            self.pos[rows] = pos + length
        return value

    def skip(self, lengths: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Advance over `lengths` bytes (null = -1 counts as 0); returns the data start positions."""
        if rows is None:
            start = self.pos
            self.pos = start + np.maximum(lengths, 0)
            return start
        start = self.pos[rows].copy()
        self.pos[rows] = start + np.maximum(lengths, 0)
        return start

    def require(self, ok: np.ndarray, name: str, message: str) -> None:
        if not ok.all():
            row = int(np.argmin(ok))
            raise self.locate(row, name, message)


def _decode_v2(data: bytes, b: BatchHeaders, rows: np.ndarray, source: str) -> RecordTable:
    arena = _arena(data, b, rows, source)
    counts = b.records_count[rows].astype(np.int64)
    batch_pos = b.position[rows]
    starts = _record_starts(arena, counts, batch_pos, source)
    rec_batch = np.repeat(np.arange(rows.shape[0]), counts)
    first_rec = np.cumsum(counts) - counts

    def locate(row: int, name: str, message: str) -> CorruptRecordError:
        k = int(rec_batch[row])
        where = int(starts[row]) if not arena.compressed[k] else int(batch_pos[k])
        inside = "" if not arena.compressed[k] else " (in the decompressed records)"
        return CorruptRecordError(source, where, name,
                                  f"record {row - int(first_rec[k])} of batch at byte {int(batch_pos[k])}{inside}: "
                                  f"{message}")

    buf = np.frombuffer(arena.data, dtype=np.uint8)
    f = _Fields(buf, starts, arena.region_end[rec_batch], locate)
    length = f.varint("record length")
    f.end = f.pos + length
    f.require(length >= MIN_RECORD_BODY, "record length", "record shorter than its fixed fields")
    f.pos = f.pos + 1  # attributes: unused
    ts_delta = f.varint("timestampDelta", VARLONG_MAX_BYTES)
    off_delta = f.varint("offsetDelta")
    key_len = f.varint("keyLength")
    f.require(key_len >= -1, "keyLength", "negative key length other than -1")
    key_start = f.skip(key_len)
    f.require(f.pos <= f.end, "key", "key runs past the end of the record")
    value_len = f.varint("valueLength")
    f.require(value_len >= -1, "valueLength", "negative value length other than -1")
    value_start = f.skip(value_len)
    f.require(f.pos <= f.end, "value", "value runs past the end of the record")
    header_count = f.varint("headerCount")
    f.require((header_count >= 0) & (header_count <= f.end - f.pos), "headerCount",
              "header count is negative or exceeds the remaining bytes")
    headers = _decode_headers(f, header_count, arena.data)
    f.require(f.pos == f.end, "record length", "record length does not match its fields")

    bi = rows[rec_batch].astype(np.int32)
    log_append = (b.attributes[rows] & ATTR_TIMESTAMP_TYPE) != 0
    timestamp = np.where(log_append[rec_batch], b.max_timestamp[rows][rec_batch],
                         b.base_timestamp[rows][rec_batch] + ts_delta)
    offset = b.base_offset[rows][rec_batch] + off_delta
    payload = pa.py_buffer(arena.data)
    return RecordTable(bi, offset, timestamp, binary_column(payload, buf, key_start, key_len),
                       binary_column(payload, buf, value_start, value_len), headers)


def _decode_headers(f: _Fields, count: np.ndarray, raw: bytes) -> pa.Array:
    """Headers in record-major order: for header slot h, decode it for every record with > h headers."""
    n = count.shape[0]
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    if total == 0:
        return pa.ListArray.from_arrays(pa.array(list_offsets), pa.array([], HEADER_TYPE))
    key_start = np.empty(total, np.int64)
    key_len = np.empty(total, np.int64)
    val_start = np.empty(total, np.int64)
    val_len = np.empty(total, np.int64)
    for h in range(int(count.max())):
        rows = np.flatnonzero(count > h)
        slot = list_offsets[rows] + h
        klen = f.varint("headerKeyLength", rows=rows)
        f.require(klen >= 0, "headerKeyLength", "null or negative header key length")
        key_start[slot] = f.skip(klen, rows)
        key_len[slot] = klen
        vlen = f.varint("headerValueLength", rows=rows)
        f.require(vlen >= -1, "headerValueLength", "negative header value length other than -1")
        val_start[slot] = f.skip(vlen, rows)
        val_len[slot] = vlen
        f.require(f.pos[rows] <= f.end[rows], "headers", "header runs past the end of the record")
    payload = pa.py_buffer(raw)
    keys = _utf8(binary_column(payload, f.buf, key_start, key_len))
    values = binary_column(payload, f.buf, val_start, val_len)
    entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(pa.array(list_offsets), entries)


def _utf8(keys: pa.Array) -> pa.Array:
    """Header keys are UTF-8 strings; invalid bytes are replaced as Java's decoder does."""
    try:
        return keys.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([k.decode("utf-8", errors="replace") for k in keys.to_pylist()], pa.string())


def binary_column(payload: pa.Buffer, buf: np.ndarray, start: np.ndarray, length: np.ndarray) -> pa.Array:
    """A binary Arrow column of slices `buf[start:start+length]` (length -1 = null).

    Built as Arrow binary views (16-byte structs: length, then 12 inline bytes or a 4-byte prefix and
    an offset into `payload`) without touching the payload bytes, then cast to plain binary in C++.
    """
    n = start.shape[0]
    lens = np.maximum(length, 0).astype(np.int32)
    if n and int(start.max(initial=0)) > _MAX_VIEW_OFFSET:
        return pa.array([None if ln < 0 else buf[s:s + ln].tobytes() for s, ln in zip(start, length, strict=True)],
                        pa.binary())
    views = np.zeros((n, 16), dtype=np.uint8)
    words = views.view(np.int32)
    words[:, 0] = lens
    if n:
        inline = np.arange(12) < np.minimum(lens, 12)[:, None]
        gathered = buf[np.minimum(start[:, None] + np.arange(12), buf.shape[0] - 1)] if buf.shape[0] else 0
        views[:, 4:16] = np.where(inline, gathered, 0)
        long = lens > 12
        words[long, 2] = 0
        words[long, 3] = start[long]
    valid = length >= 0
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    array = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), payload],
                                  null_count=int(n - valid.sum()))
    return array.cast(pa.binary())


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

