"""Kafka's default partitioner for keyed records: murmur2 of the key bytes, positive, modulo partitions.

`Utils.murmur2` (seed 0x9747b28c, m 0x5bd1e995, r 24) and `Utils.toPositive(h) % numPartitions` from
kafka-clients, vectorized over a whole Arrow binary column: the 4-byte words of all keys are mixed
word by word, then the 1-3 tail bytes, with uint32 arithmetic that wraps as Java's int does.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_SEED = np.uint32(0x9747B28C)
_M = np.uint32(0x5BD1E995)
_R = np.uint32(24)


def murmur2(keys: pa.Array) -> np.ndarray:
    """murmur2 hash (as uint32) of every non-null key; null keys hash as empty."""
    keys = keys.cast(pa.binary()) if keys.type != pa.binary() else keys
    n = len(keys)
    offsets = np.frombuffer(keys.buffers()[1], np.int32, count=keys.offset + n + 1)[keys.offset:].astype(np.int64)
    data = np.frombuffer(keys.buffers()[2], np.uint8) if keys.buffers()[2] is not None else np.zeros(1, np.uint8)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    if keys.null_count:
        lengths = np.where(keys.is_valid().to_numpy(zero_copy_only=False), lengths, 0)
    h = _SEED ^ lengths.astype(np.uint32)
    words = lengths // 4
    padded = np.concatenate([data, np.zeros(4, np.uint8)])
    with np.errstate(over="ignore"):
        for w in range(int(words.max()) if n else 0):
            rows = np.flatnonzero(words > w)
            at = starts[rows] + 4 * w
            k = (padded[at].astype(np.uint32) | (padded[at + 1].astype(np.uint32) << 8)
                 | (padded[at + 2].astype(np.uint32) << 16) | (padded[at + 3].astype(np.uint32) << 24))
            k *= _M
            k ^= k >> _R
            k *= _M
            h[rows] = (h[rows] * _M) ^ k
        extra = lengths % 4
        tail = starts + (lengths & ~3)
        for shift, needed in ((16, 3), (8, 2)):
            rows = np.flatnonzero(extra >= needed)
            h[rows] ^= padded[tail[rows] + needed - 1].astype(np.uint32) << np.uint32(shift)
        rows = np.flatnonzero(extra >= 1)
        h[rows] ^= padded[tail[rows]].astype(np.uint32)
        h[rows] *= _M
        h ^= h >> np.uint32(13)
        h *= _M
        h ^= h >> np.uint32(15)
    return h


def partition_for_keys(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """Kafka's `toPositive(murmur2(key)) % numPartitions`; -1 for null keys (they need the sticky rule)."""
    if num_partitions <= 0:
        raise ValueError(f"number of partitions must be positive, got {num_partitions}")
    parts = ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    if keys.null_count:
        parts[~keys.is_valid().to_numpy(zero_copy_only=False)] = -1
    return parts
