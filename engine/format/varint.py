"""Zig-zag varint sizes, computed by the compiled codec (`_codec.pyx`), which also encodes and decodes them.

Kafka v2 records encode lengths, deltas and counts as zig-zag + unsigned LEB128: 7 bits per byte,
least significant group first, high bit = "more follows"; at most 5 bytes for a varint and 10 for a
varlong (spec 1.5). Append planning sizes records with `encoded_size` before encoding them.
"""

from __future__ import annotations

import numpy as np

from engine.format.compiled import codec

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def encoded_size(values: np.ndarray) -> np.ndarray:
    """Bytes needed for each value as a zig-zag varint (1..10), int64; one compiled pass."""
    return codec.varint_sizes(np.ascontiguousarray(values, np.int64))
