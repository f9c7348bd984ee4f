"""Kafka's default partitioner for keyed records: murmur2 of the key bytes, positive, modulo partitions.

`Utils.murmur2` (seed 0x9747b28c, m 0x5bd1e995, r 24) and `Utils.toPositive(h) % numPartitions` from
kafka-clients, over a whole Arrow binary column: the hash in one compiled pass (`codec.murmur2`), the
modulo with numpy.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from engine.format.compiled import codec


def murmur2(keys: pa.Array) -> np.ndarray:
    """murmur2 hash (as uint32) of every non-null key; null keys hash as empty. One compiled pass
    (`codec.murmur2`)."""
    return codec.murmur2(keys.cast(pa.binary()) if keys.type != pa.binary() else keys)


def partition_for_keys(keys: pa.Array, num_partitions: int) -> np.ndarray:
    """Kafka's `toPositive(murmur2(key)) % numPartitions`; -1 for null keys (they need the sticky rule)."""
    if num_partitions <= 0:
        raise ValueError(f"number of partitions must be positive, got {num_partitions}")
    parts = ((murmur2(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).astype(np.int32)
    if keys.null_count:
        parts[~keys.is_valid().to_numpy(zero_copy_only=False)] = -1
    return parts
