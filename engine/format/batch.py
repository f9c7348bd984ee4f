"""Batch framing: find every batch in a log buffer and read its header fields as columns.

A `.log` (or a record set) is batches back to back. Every magic shares the 17-byte prefix
`offset int64 | size int32 | 4 bytes | magic int8`; total batch bytes = 12 + size (spec 1.2). v2
headers are 61 bytes (spec 1.3); a legacy (v0/v1) "batch" is one message-set entry (spec 1.7).

`scan_batches` walks the framing once (one `struct` read per batch), then extracts every header field
for all batches at once with numpy. Unlike Kafka's `FileLogInputStream`, a partial trailing batch is
reported as a `TruncatedBatchError` instead of being dropped silently.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c
import numpy as np

from kernel.errors import CorruptRecordError, TruncatedBatchError

LOG_OVERHEAD = 12  # offset int64 + size int32
HEADER_PREFIX = 17  # LOG_OVERHEAD + 4 + magic
V2_HEADER_SIZE = 61  # RECORD_BATCH_OVERHEAD
LEGACY_MIN_SIZE = {0: 14, 1: 22}  # message overhead after the 12-byte prefix
MIN_DECLARED_SIZE = 14  # Kafka's check: size < v0 record overhead is corrupt
V2_CRC_START = 21  # the v2 CRC-32C covers [attributes, end) (spec 1.3)
LEGACY_CRC_START = 16  # the legacy CRC-32 covers [magic, end) (spec 1.7)

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_TIMESTAMP = -1
CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE = 0, 1, -1
TIMESTAMP_TYPE_NAMES = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime",
                        NO_TIMESTAMP_TYPE: "NoTimestampType"}

_SIZE = struct.Struct(">i")


@dataclass
class BatchHeaders:
    """Header fields of n batches, one numpy column each (entry i = i-th batch in the buffer).

    Legacy entries fill the v2-only columns with Kafka's "none" values (-1). For a compressed legacy
    wrapper `base_offset` and `records_count` are -1 here: they need the inner messages
    (see `engine.format.records`), exactly as Kafka's shallow batch view cannot know them.
    """

    position: np.ndarray
    size: np.ndarray
    magic: np.ndarray
    attributes: np.ndarray
    crc: np.ndarray
    base_offset: np.ndarray
    last_offset: np.ndarray
    partition_leader_epoch: np.ndarray
    base_timestamp: np.ndarray
    max_timestamp: np.ndarray
    producer_id: np.ndarray
    producer_epoch: np.ndarray
    base_sequence: np.ndarray
    records_count: np.ndarray

    def __len__(self) -> int:
        return int(self.position.shape[0])

    @property
    def codec(self) -> np.ndarray:
        return (self.attributes & ATTR_CODEC_MASK).astype(np.int8)

    @property
    def timestamp_type(self) -> np.ndarray:
        """CreateTime / LogAppendTime per batch; NoTimestampType for magic 0 (spec 1.4, 1.7)."""
        kind = np.where(self.attributes & ATTR_TIMESTAMP_TYPE, LOG_APPEND_TIME, CREATE_TIME)
        return np.where(self.magic == 0, NO_TIMESTAMP_TYPE, kind).astype(np.int8)

    @property
    def is_control(self) -> np.ndarray:
        return (self.magic == 2) & ((self.attributes & ATTR_CONTROL) != 0)

    @property
    def is_transactional(self) -> np.ndarray:
        return (self.magic == 2) & ((self.attributes & ATTR_TRANSACTIONAL) != 0)

    @property
    def has_delete_horizon(self) -> np.ndarray:
        return (self.magic == 2) & ((self.attributes & ATTR_DELETE_HORIZON) != 0)

    @property
    def next_position(self) -> np.ndarray:
        return self.position + self.size

    def take(self, index: np.ndarray | slice) -> BatchHeaders:
        """A subset of the batches, keeping their order."""
        return BatchHeaders(**{name: getattr(self, name)[index] for name in _COLUMNS})

    @staticmethod
    def concat(parts: Sequence[BatchHeaders]) -> BatchHeaders:
        """The batches of several scans, in order (positions stay as each scan gave them)."""
        return BatchHeaders(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS})


_COLUMNS = tuple(BatchHeaders.__dataclass_fields__)


@dataclass
class BatchScan:
    """What one pass over a log buffer found.

    `valid_bytes` is the end of the longest valid prefix (Kafka recovery's `validBytes`), relative to
    the buffer start; `problems` lists every defect found, in position order. With `strict=True` the
    scan raises the first problem instead.
    """

    headers: BatchHeaders
    valid_bytes: int
    problems: list[CorruptRecordError] = field(default_factory=list)


def _be(buf: np.ndarray, positions: np.ndarray, offset: int, width: int, dtype: str) -> np.ndarray:
    """Gather a big-endian field of `width` bytes at `positions + offset` for every batch."""
    if positions.shape[0] == 0:
        return np.zeros(0, dtype=np.dtype(dtype).newbyteorder("="))
    raw = buf[np.minimum(positions[:, None] + (offset + np.arange(width)), buf.shape[0] - 1)]
    return np.ascontiguousarray(raw).view(dtype).reshape(-1).astype(np.dtype(dtype).newbyteorder("="))


def _frame(data: bytes, start: int, end: int, source: str) -> tuple[list[int], list[int], list[CorruptRecordError]]:
    """Walk the size fields from `start`; stop at the first framing error or the end of the data."""
    positions: list[int] = []
    sizes: list[int] = []
    problems: list[CorruptRecordError] = []
    pos = start
    unpack = _SIZE.unpack_from
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_PREFIX:
            problems.append(TruncatedBatchError(
                source, pos, "batch", f"{remaining} trailing bytes, fewer than a {HEADER_PREFIX}-byte batch prefix"))
            break
        (size,) = unpack(data, pos + 8)
        if size < MIN_DECLARED_SIZE:
            problems.append(CorruptRecordError(
                source, pos, "size", f"declared size {size} is below the minimum {MIN_DECLARED_SIZE}"))
            break
        magic = data[pos + 16]
        if magic > 2:
            problems.append(CorruptRecordError(source, pos, "magic", f"unknown magic {magic}"))
            break
        minimum = V2_HEADER_SIZE - LOG_OVERHEAD if magic == 2 else LEGACY_MIN_SIZE[magic]
        if size < minimum:
            problems.append(CorruptRecordError(
                source, pos, "size", f"declared size {size} is below the magic-{magic} minimum {minimum}"))
            break
        if size > remaining - LOG_OVERHEAD:
            problems.append(TruncatedBatchError(
                source, pos, "size",
                f"batch declares {LOG_OVERHEAD + size} bytes but only {remaining} remain (partial trailing batch)"))
            break
        positions.append(pos)
        sizes.append(LOG_OVERHEAD + size)
        pos += LOG_OVERHEAD + size
    return positions, sizes, problems


def crc_problems(data: bytes, h: BatchHeaders, source: str, verify: bool = True) -> list[CorruptRecordError]:
    """CRC-32C over [attributes, end) for v2; CRC-32 over [magic, end) for legacy (spec 1.3, 1.7)."""
    if not verify:
        return []
    problems = []
    mv = memoryview(data)
    for pos, size, magic, stored in zip(h.position.tolist(), h.size.tolist(), h.magic.tolist(), h.crc.tolist(),
                                        strict=True):
        if magic == 2:
            computed = crc32c.crc32c(mv[pos + V2_CRC_START:pos + size])
        else:
            computed = zlib.crc32(mv[pos + LEGACY_CRC_START:pos + size])
        if computed != stored:
            problems.append(crc_mismatch(source, pos, magic, stored, computed))
    return problems


def crc_mismatch(source: str, position: int, magic: int, stored: int, computed: int) -> CorruptRecordError:
    """The error of a batch whose stored CRC is not the one its bytes compute."""
    return CorruptRecordError(
        source, position, "crc", f"stored CRC {stored:#010x} but the magic-{magic} batch computes {computed:#010x}")


def scan_batches(data: bytes, source: str = "<bytes>", start: int = 0, end: int | None = None,
                 verify_crc: bool = True, strict: bool = True) -> BatchScan:
    """Find and decode the header of every batch in `data[start:end]`.

    Positions are absolute in `data`. `strict` raises the first problem; otherwise problems are
    collected and `valid_bytes` marks where the valid prefix ends (recovery truncates there).
    """
    end = len(data) if end is None else end
    positions, sizes, problems = _frame(data, start, end, source)
    buf = np.frombuffer(data, dtype=np.uint8)
    pos = np.asarray(positions, dtype=np.int64)
    headers = _extract(buf, pos, np.asarray(sizes, dtype=np.int64))
    crc_bad = crc_problems(data, headers, source, verify_crc)
    structural = _offset_problems(headers, source)
    all_problems = sorted(crc_bad + structural + problems, key=lambda p: p.position)
    valid_bytes = (all_problems[0].position if all_problems else
                   (int(headers.next_position[-1]) if len(headers) else start)) - start
    if strict and all_problems:
        raise all_problems[0]
    return BatchScan(headers=headers, valid_bytes=valid_bytes, problems=all_problems)


def _extract(buf: np.ndarray, pos: np.ndarray, size: np.ndarray) -> BatchHeaders:
    n = pos.shape[0]
    magic = buf[pos + 16].astype(np.int8) if n else np.zeros(0, np.int8)
    offset = _be(buf, pos, 0, 8, ">i8")
    v2 = magic == 2
    v1 = magic == 1
    minus1 = np.full(n, -1, dtype=np.int64)
    # v2 fields (read for all rows, kept where magic == 2; legacy rows are long enough for the prefix only)
    p2 = np.where(v2, pos, 0)  # legacy rows read (and then ignore) clipped bytes
    if n and v2.any():
        ple = np.where(v2, _be(buf, p2, 12, 4, ">i4"), -1).astype(np.int32)
        attr2 = _be(buf, p2, 21, 2, ">i2")
        last_delta = _be(buf, p2, 23, 4, ">i4").astype(np.int64)
        base_ts = _be(buf, p2, 27, 8, ">i8")
        max_ts = _be(buf, p2, 35, 8, ">i8")
        pid = _be(buf, p2, 43, 8, ">i8")
        pepoch = _be(buf, p2, 51, 2, ">i2")
        bseq = _be(buf, p2, 53, 4, ">i4")
        count = _be(buf, p2, 57, 4, ">i4")
    else:
        ple = np.full(n, -1, np.int32)
        attr2 = np.zeros(n, np.int16)
        last_delta = np.zeros(n, np.int64)
        base_ts = max_ts = pid = minus1
        pepoch = np.full(n, -1, np.int16)
        bseq = np.full(n, -1, np.int32)
        count = np.full(n, -1, np.int32)
    crc = _crc_field(buf, pos, v2)
    legacy_attr = buf[pos + 17].astype(np.int16) if n else np.zeros(0, np.int16)
    legacy_ts = np.where(v1, _be(buf, np.where(v1, pos, 0), 18, 8, ">i8") if n else minus1, NO_TIMESTAMP)
    legacy_compressed = (legacy_attr & ATTR_CODEC_MASK) != 0
    attributes = np.where(v2, attr2, legacy_attr).astype(np.int16)
    return BatchHeaders(
        position=pos,
        size=size,
        magic=magic,
        attributes=attributes,
        crc=crc,
        base_offset=np.where(v2, offset, np.where(legacy_compressed, -1, offset)).astype(np.int64),
        last_offset=np.where(v2, offset + last_delta, offset).astype(np.int64),
        partition_leader_epoch=np.where(v2, ple, -1).astype(np.int32),
        base_timestamp=np.where(v2, base_ts, legacy_ts).astype(np.int64),
        max_timestamp=np.where(v2, max_ts, legacy_ts).astype(np.int64),
        producer_id=np.where(v2, pid, -1).astype(np.int64),
        producer_epoch=np.where(v2, pepoch, -1).astype(np.int16),
        base_sequence=np.where(v2, bseq, -1).astype(np.int32),
        records_count=np.where(v2, count, np.where(legacy_compressed, -1, 1)).astype(np.int32),
    )


def _crc_field(buf: np.ndarray, pos: np.ndarray, v2: np.ndarray) -> np.ndarray:
    """The stored CRC: at byte 17 for v2, at byte 12 (start of the message) for legacy."""
    if pos.shape[0] == 0:
        return np.zeros(0, np.uint32)
    return _be(buf, pos + np.where(v2, 5, 0), 12, 4, ">u4").astype(np.uint32)


def _offset_problems(h: BatchHeaders, source: str) -> list[CorruptRecordError]:
    """v2 sanity: lastOffsetDelta >= 0 and records_count >= 0 (spec 1.3)."""
    bad = (h.magic == 2) & ((h.last_offset < h.base_offset) | (h.records_count < 0))
    return [CorruptRecordError(source, int(p), "lastOffsetDelta/recordsCount",
                               "negative lastOffsetDelta or record count")
            for p in h.position[bad].tolist()]


def with_base_offset(batch: bytes | memoryview, base_offset: int) -> bytes:
    """A v2 batch moved to `base_offset`: the field is outside the CRC (spec 1.3), so the broker assigns
    offsets in place and every record keeps its offsetDelta (and the batch its lastOffsetDelta)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def with_max_timestamp(batch: bytes | memoryview, max_timestamp: int, timestamp_type: int | None = None) -> bytes:
    """A v2 batch with a new maxTimestamp (and, if given, timestamp type bit) and its CRC-32C recomputed:
    the broker's in-place LogAppendTime stamp (`setMaxTimestamp`, spec 2.2), which leaves the records'
    deltas alone, as a reader of a LogAppendTime batch ignores them."""
    out = bytearray(batch)
    if timestamp_type is not None:
        attributes = struct.unpack_from(">h", out, 21)[0]
        attributes = attributes | ATTR_TIMESTAMP_TYPE if timestamp_type == LOG_APPEND_TIME \
            else attributes & ~ATTR_TIMESTAMP_TYPE
        struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">q", out, 35, max_timestamp)
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[21:]))
    return bytes(out)
