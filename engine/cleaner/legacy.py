"""Rebuild a compressed legacy (magic 0/1) wrapper with the records the cleaner keeps (spec 1.7, 8.5).

Kafka never changes the format while cleaning (KAFKA-4298): `MemoryRecords.buildRetainedRecordsInto`
writes the retained records with the wrapper's own magic and codec, as `MemoryRecordsBuilder` does:
- inner messages: uncompressed, same magic, offsets relative to the first retained record for magic 1
  (KIP-31) and absolute for magic 0; magic 1 LogAppendTime inner messages carry the append time and
  the timestamp-type bit;
- the wrapper: offset = last retained offset, null key, value = the compressed inner messages,
  timestamp (magic 1) = the append time (LogAppendTime) or the max of the inner timestamps;
- magic-0 LZ4 carries Kafka's historical frame-descriptor checksum (KAFKA-3160).
An uncompressed legacy "batch" is one message: it is kept byte-for-byte or dropped, never rebuilt.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import xxhash

from engine.format import compression
from engine.format.batch import ATTR_TIMESTAMP_TYPE, NO_TIMESTAMP

_PREFIX = struct.Struct(">qiI")  # offset, size, crc


def _nullable(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def legacy_message(magic: int, attributes: int, offset: int, timestamp: int, key: bytes | None,
                   value: bytes | None) -> bytes:
    """One v0/v1 message-set entry; CRC-32 over [magic, end)."""
    body = (struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic == 1 else b"")
            + _nullable(key) + _nullable(value))
    return _PREFIX.pack(offset, 4 + len(body), zlib.crc32(body)) + body


def _compress(codec: int, data: bytes, magic: int) -> bytes:
    if codec == compression.ZSTD:
        raise ValueError("zstd is not a legacy (magic 0/1) codec")
    out = bytes(compression.compress(codec, data, magic))
    if codec == compression.LZ4 and magic == 0:  # KAFKA-3160: checksum over magic + descriptor
        end = 6 + (8 if out[4] & 0x08 else 0)
        out = out[:end] + bytes([(xxhash.xxh32_intdigest(out[:end]) >> 8) & 0xFF]) + out[end + 1:]
    return out


def rebuild_wrapper(magic: int, codec: int, log_append_time: int | None, offsets: Sequence[int],
                    timestamps: Sequence[int], keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> bytes:
    """A compressed wrapper holding these records (at least one), as Kafka's cleaner writes it."""
    if not offsets:
        raise ValueError("a legacy wrapper needs at least one record")
    log_append = magic == 1 and log_append_time is not None
    attributes = ATTR_TIMESTAMP_TYPE if log_append else 0
    base = offsets[0]
    inner = []
    max_timestamp = NO_TIMESTAMP
    for offset, ts, key, value in zip(offsets, timestamps, keys, values, strict=True):
        ts = log_append_time if log_append else (ts if magic == 1 else NO_TIMESTAMP)
        max_timestamp = max(max_timestamp, ts)
        inner.append(legacy_message(magic, attributes, offset - base if magic == 1 else offset, ts, key, value))
    payload = _compress(codec, b"".join(inner), magic)
    wrapper_ts = log_append_time if log_append else max_timestamp
    return legacy_message(magic, (codec & 0x07) | attributes, offsets[-1], wrapper_ts, None, payload)
