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
