"""The compiled batch planner against a brute force written from the v2 record layout (spec 1.5)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.format.batch import V2_HEADER_SIZE
from engine.log.append import plan_batches
from tests.oracles.varint import varint_size

I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _wrap(value: int) -> int:
    """int64 two's-complement wrap (a delta at the KIP-228 extremes without the cut)."""
    return (value + 2**63) % 2**64 - 2**63


def _brute_force(fixed: list[int], ts: list[int], limit: int, cut: bool) -> list[int]:
    lengths, start = [], 0
    while start < len(fixed):
        total, i = V2_HEADER_SIZE, start
        while i < len(fixed):
            delta = ts[i] - ts[start]
            if cut and not I64_MIN <= delta <= I64_MAX:
                break
            body = fixed[i] + varint_size(_wrap(delta)) + varint_size(i - start)
            total += body + varint_size(body)
            if total > limit:
                break
            i += 1
        i = max(i, start + 1)
        lengths.append(i - start)
        start = i
    return lengths


@pytest.mark.parametrize("seed", range(40))
def test_plan_batches_matches_the_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 300))
    fixed = rng.integers(3, 3000 if seed % 2 else 60, n).astype(np.int64)
    extremes = np.array([I64_MIN, I64_MIN + 1, -2, -1, 0, 1, I64_MAX - 1, I64_MAX], np.int64)
    ts = [rng.integers(-1, 10**13, n), rng.choice(extremes, n), rng.integers(I64_MIN, I64_MAX, n, dtype=np.int64),
          np.sort(rng.integers(0, 10**6, n))][seed % 4].astype(np.int64)
    limit = int(rng.choice([61, 100, 500, 4096, 1 << 20]))
    for cut in (False, True):
        planned = plan_batches(fixed, ts, limit, cut_on_delta_overflow=cut)
        assert planned.dtype == np.int64
        assert planned.tolist() == _brute_force(fixed.tolist(), ts.tolist(), limit, cut)
