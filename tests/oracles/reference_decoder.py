"""The pure-Python v2 record decoder klake used before its compiled codec: the oracle the compiled
decoder (`engine/format/_codec.pyx`) is checked against, record for record and failure for failure
(`tests/engine/format/test_compiled_codec.py`). Test-only: klake never falls back to it.

It decodes field by field for all records at once with numpy (`decode_at`), after one Python walk
over the record-length chain, so it shares no code with the compiled decoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.format import compression
from engine.format.batch import ATTR_TIMESTAMP_TYPE, V2_HEADER_SIZE, BatchHeaders
from engine.format.records import HEADER_TYPE, RecordTable, _utf8
from engine.format.varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES
from kernel.errors import CorruptRecordError

MIN_RECORD_BODY = 6
_MAX_VIEW_OFFSET = 2**31 - 1


def decode_v2(data: bytes, batches: BatchHeaders, source: str = "<bytes>") -> RecordTable:
    """Every record of the v2 batches of `batches`."""
    return _decode_v2(data, batches, np.flatnonzero(batches.magic == 2), source)


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




def decode_at(buf: np.ndarray, positions: np.ndarray, max_bytes: int, limit: np.ndarray | int | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zig-zag varint at each position of `buf` (uint8).

    Returns (values int64, byte lengths int64). `limit` (scalar or per position) is the exclusive end
    the varint must stay within. Raises `VarintError` naming the first bad position's index. Each
    round reads one more byte, only for the varints still continuing, so 1- and 2-byte varints (the
    common case) cost one or two vectorized passes.
    """
    n = positions.shape[0]
    end = np.broadcast_to(np.asarray(len(buf) if limit is None else limit, dtype=np.int64), (n,))
    unsigned = np.zeros(n, dtype=np.uint64)
    length = np.zeros(n, dtype=np.int64)
    active = np.arange(n)
    last = len(buf) - 1
    for k in range(max_bytes):
        at = positions[active] + k
        outside = at >= end[active]
        if outside.any():
            raise VarintError(int(active[np.argmax(outside)]), "varint runs past the end of its data")
        byte = buf[np.minimum(at, last)]
        unsigned[active] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        done = byte < 0x80
        length[active[done]] = k + 1
        active = active[~done]
        if active.shape[0] == 0:
            return zigzag_decode(unsigned), length
    raise VarintError(int(active[0]), f"varint longer than {max_bytes} bytes")


class VarintError(ValueError):
    """A varint that does not terminate within its maximum length, or runs past the buffer."""

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        super().__init__(message)


def zigzag_decode(values: np.ndarray) -> np.ndarray:
    """zig-zag uint64 -> int64."""
    u = values.astype(np.uint64, copy=False)
    return ((u >> np.uint64(1)) ^ (np.uint64(0) - (u & np.uint64(1)))).view(np.int64)


def decode_one(data: bytes | memoryview, pos: int, max_bytes: int = VARLONG_MAX_BYTES) -> tuple[int, int]:
    """Scalar zig-zag varint at `pos`: returns (value, next position)."""
    result = 0
    shift = 0
    for i in range(max_bytes):
        if pos + i >= len(data):
            raise VarintError(0, "varint runs past the end of its data")
        b = data[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos + i + 1
        shift += 7
    raise VarintError(0, f"varint longer than {max_bytes} bytes")
