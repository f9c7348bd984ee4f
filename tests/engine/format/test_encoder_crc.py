"""Batch CRCs taken by the encoder as it writes the records (`codec.encode_records` with batch firsts).

The uncompressed batches of `encode_batches` get their CRC-32C from the records' CRC, computed in the
compiled encoder while they are in the cache (the folding loop on CPUs with VPCLMULQDQ, the crc32 loop
otherwise), combined with the header's (`codec.crc32c_combine`). Checked against the `crc32c` package:
every batch equals `encode_batch` of the same records (whose CRC is the package's over the whole batch)
byte for byte, for batches of a few bytes to over 1 MiB and for outputs large enough to be streamed
(`STREAM_FROM`, 8 MiB, in `_codec.pyx`, records of 512 bytes on average, on CPUs with AVX-512BW; a record
larger than the encoder's 256 KiB scratch buffer included).
"""

from __future__ import annotations

import os

import crc32c
import numpy as np
import pytest

from engine.format.batch import scan_batches
from engine.format.builder import encode_batch, encode_batches
from engine.format.compiled import codec


@pytest.mark.parametrize("length_b", [0, 1, 7, 255, 256, 511, 512, 513, 1000, 4096, 100_003])
def test_crc32c_combine_is_the_crc_of_the_concatenation(length_b: int) -> None:
    a, b = os.urandom(40), os.urandom(length_b)
    assert codec.crc32c_combine(crc32c.crc32c(a), crc32c.crc32c(b), length_b) == crc32c.crc32c(a + b)


def _records(rng: np.random.Generator, n: int, longest: int) -> tuple[list, list, np.ndarray]:
    lengths = np.where(rng.random(n) < 0.5, rng.integers(0, 40, n), rng.integers(0, longest + 1, n))
    values = [None if rng.random() < 0.05 else rng.integers(0, 256, k, dtype=np.uint8).tobytes() for k in lengths]
    keys = [None if rng.random() < 0.1 else rng.integers(0, 256, rng.integers(0, 30), dtype=np.uint8).tobytes()
            for _ in range(n)]
    return keys, values, np.sort(rng.integers(0, 2**41, n))


def _same_as_one_by_one(keys: list, values: list, ts: np.ndarray, lengths: list[int]) -> None:
    batches = encode_batches(keys, values, ts, batch_lengths=lengths, base_offset=5)
    start = 0
    for batch, count in zip(batches, lengths, strict=True):
        stop = start + count
        assert bytes(batch) == encode_batch(keys[start:stop], values[start:stop], ts[start:stop],
                                            base_offset=5 + start), (start, count)
        start = stop
    data = b"".join(bytes(b) for b in batches)
    assert len(scan_batches(data, "encoded").headers) == len(lengths)  # every CRC checked by the package


@pytest.mark.parametrize("seed", range(6))
def test_batch_crcs_of_small_and_large_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys, values, ts = _records(rng, 3000, [10, 300, 3000][seed % 3])
    cuts = np.unique(np.concatenate([[0, 3000], rng.integers(1, 3000, 25)]))
    _same_as_one_by_one(keys, values, ts, np.diff(cuts).tolist())


def test_batch_crcs_of_a_streamed_output() -> None:
    rng = np.random.default_rng(11)
    keys, values, ts = _records(rng, 8000, 6000)
    values[4321] = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()  # more than the scratch buffer
    lengths = [1, 2, 997, 3000, 1, 3999]
    assert sum(len(v or b"") for v in values) > 9 << 20
    _same_as_one_by_one(keys, values, ts, lengths)
