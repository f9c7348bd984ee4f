"""Zig-zag varints (protobuf sint32/sint64), scalar and vectorized.

Kafka v2 records encode lengths, deltas and counts as zig-zag + unsigned LEB128: 7 bits per byte,
least significant group first, high bit = "more follows"; at most 5 bytes for a varint and 10 for a
varlong (spec 1.5). The vectorized forms decode or encode one field of many records at once with
numpy, which is what makes whole-batch decoding fast.
"""

from __future__ import annotations

import numpy as np

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)


class VarintError(ValueError):
    """A varint that does not terminate within its maximum length, or runs past the buffer."""

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        super().__init__(message)


def zigzag_encode(values: np.ndarray) -> np.ndarray:
    """int64 -> zig-zag uint64: (v << 1) ^ (v >> 63)."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def zigzag_decode(values: np.ndarray) -> np.ndarray:
    """zig-zag uint64 -> int64."""
    u = values.astype(np.uint64, copy=False)
    return ((u >> np.uint64(1)) ^ (np.uint64(0) - (u & np.uint64(1)))).view(np.int64)


def decode_at(buf: np.ndarray, positions: np.ndarray, max_bytes: int, limit: np.ndarray | int | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zig-zag varint at each position of `buf` (uint8).

    Returns (values int64, byte lengths int64). `limit` (scalar or per position) is the exclusive end
    the varint must stay within. Raises `VarintError` naming the first bad position's index.
    """
    n = positions.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    end = len(buf) if limit is None else limit
    idx = positions[:, None] + np.arange(max_bytes, dtype=np.int64)
    inside = idx < (np.asarray(end)[..., None] if np.ndim(end) else end)
    raw = buf[np.minimum(idx, len(buf) - 1)]
    cont = (raw & 0x80) != 0
    stop = ~cont & inside
    has_stop = stop.any(axis=1)
    if not has_stop.all():
        bad = int(np.argmin(has_stop))
        runs_out = not inside[bad].all() and cont[bad][inside[bad]].all()
        raise VarintError(bad, "varint runs past the end of its data" if runs_out
                          else f"varint longer than {max_bytes} bytes")
    length = np.argmax(stop, axis=1) + 1
    keep = np.arange(max_bytes) < length[:, None]
    groups = np.where(keep, raw & 0x7F, 0).astype(np.uint64)
    unsigned = np.bitwise_or.reduce(groups << _SHIFTS[:max_bytes], axis=1)
    return zigzag_decode(unsigned), length.astype(np.int64)


def encoded_size(values: np.ndarray) -> np.ndarray:
    """Bytes needed for each value as a zig-zag varint (1..10)."""
    u = zigzag_encode(values)
    size = np.ones(u.shape[0], dtype=np.int64)
    for k in range(1, VARLONG_MAX_BYTES):
        size += u >= (np.uint64(1) << np.uint64(7 * k))
    return size


def encode_into(out: np.ndarray, positions: np.ndarray, values: np.ndarray, sizes: np.ndarray) -> None:
    """Write each value as a zig-zag varint of `sizes` bytes at `positions` in `out` (uint8)."""
    u = zigzag_encode(values)
    top = int(sizes.max()) if sizes.shape[0] else 0
    for k in range(top):
        sel = sizes > k
        if not sel.all():
            pos, vk, sk = positions[sel], u[sel], sizes[sel]
        else:
            pos, vk, sk = positions, u, sizes
        byte = ((vk >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        byte |= np.where(sk > k + 1, 0x80, 0).astype(np.uint8)
        out[pos + k] = byte


def encode_one(value: int) -> bytes:
    """Scalar zig-zag varint, for the rare per-item paths (headers of control records, tests)."""
    u = (value << 1) ^ (value >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


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
