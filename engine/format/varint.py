"""Zig-zag varint sizes and encoding, vectorized with numpy (the decoder is compiled: `_codec.pyx`).

Kafka v2 records encode lengths, deltas and counts as zig-zag + unsigned LEB128: 7 bits per byte,
least significant group first, high bit = "more follows"; at most 5 bytes for a varint and 10 for a
varlong (spec 1.5). Append planning sizes records with `encoded_size` before encoding them.
"""

from __future__ import annotations

import numpy as np

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

_SIZE_THRESHOLDS = np.array([1 << (7 * k) for k in range(1, VARLONG_MAX_BYTES)], dtype=np.uint64)


def zigzag_encode(values: np.ndarray) -> np.ndarray:
    """int64 -> zig-zag uint64: (v << 1) ^ (v >> 63)."""
    v = values.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).view(np.uint64)


def encoded_size(values: np.ndarray) -> np.ndarray:
    """Bytes needed for each value as a zig-zag varint (1..10)."""
    return np.searchsorted(_SIZE_THRESHOLDS, zigzag_encode(values), side="right") + 1


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
