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

_SIZE_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, VARLONG_MAX_BYTES)], dtype=np.uint64)


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


def encoded_size(values: np.ndarray) -> np.ndarray:
    """Bytes needed for each value as a zig-zag varint (1..10)."""
    return np.searchsorted(_SIZE_THRESHOLDS, zigzag_encode(values), side="right") + 1


def encode_into(out: np.ndarray, positions: np.ndarray, values: np.ndarray, sizes: np.ndarray) -> None:
    """Write each value as a zig-zag varint of `sizes` bytes at `positions` in `out` (uint8)."""
    u = zigzag_encode(values)
    pos = positions
    k = 0
    while u.shape[0]:
        more = sizes > k + 1
        out[pos + k] = (u & np.uint64(0x7F)).astype(np.uint8) | (more.view(np.uint8) << 7)
        if not more.any():
            return
        if not more.all():
            u, pos, sizes = u[more], pos[more], sizes[more]
        u = u >> np.uint64(7)
        k += 1


def pack_rows(fields: list[np.ndarray], sizes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's varints of `fields`, back to back, for all rows at once.

    Returns (offsets int32 of n+1, bytes uint8): row i's bytes are `bytes[offsets[i]:offsets[i+1]]`.
    The bytes of every field are laid out as columns of one (rows x width) matrix whose unused cells
    are masked out; boolean-mask selection reads it row-major, which is exactly the wire order.
    """
    n = fields[0].shape[0]
    columns, valid = [], []
    for values, size in zip(fields, sizes, strict=True):
        u = zigzag_encode(values)
        for k in range(int(size.max()) if n else 0):
            columns.append(((u >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
                           | ((size > k + 1).view(np.uint8) << 7))
            valid.append(size > k)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.sum(sizes, axis=0), out=offsets[1:])
    if not columns:
        return offsets, np.zeros(0, np.uint8)
    return offsets, np.stack(columns, axis=1)[np.stack(valid, axis=1)]


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
