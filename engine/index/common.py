"""Pieces shared by `.index` and `.timeindex`: load results, constants, prefix validation.

Kafka trusts an index file's length on load (`entries = length / entrySize`, spec 1.12), so an
untrimmed, zero-padded file reads as hundreds of thousands of garbage entries (KAFKA-10207). klake
instead keeps the longest prefix that satisfies the index invariants and reports the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from kernel.errors import KlakeError

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes

IndexT = TypeVar("IndexT")


class OffsetOverflowError(KlakeError):
    """An offset is not expressible relative to the segment base (`lastOffset - base` outside
    `[0, Int.MAX]`): Kafka's `LogSegmentOffsetOverflowException` (spec 2.5 step 2, 3 rule 4)."""


@dataclass(frozen=True)
class IndexLoad(Generic[IndexT]):
    """Result of loading an index file: the valid prefix as an index, plus what was wrong with the rest.

    `file_entries` is what Kafka would believe (`length // entrySize`); `valid_entries` is what klake
    keeps. Each problem names the file, the byte position and the defect.
    """

    index: IndexT
    valid_entries: int
    file_entries: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def frozen_column(values: object, dtype: type[np.generic], name: str) -> np.ndarray:
    """A read-only 1-D native-endian view of `values` as `dtype`; refuses values that would wrap."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype != dtype:
        converted = arr.astype(dtype)
        if arr.size and not np.array_equal(converted, arr):
            raise ValueError(f"{name} has values outside the {np.dtype(dtype).name} range")
        arr = converted
    view = arr.view()
    view.flags.writeable = False
    return view


def prefix_length(ok: np.ndarray) -> int:
    """Length of the leading run of True in a boolean mask (no Python loop)."""
    if ok.all():
        return int(ok.shape[0])
    return int(np.argmin(ok))


def length_problem(source: str, length: int, entry_size: int) -> list[str]:
    """Kafka's sanity check `length % entrySize == 0` (spec 1.12), as a problem string."""
    extra = length % entry_size
    if not extra:
        return []
    return [f"{source}: byte {length - extra}: file length {length} is not a multiple of the "
            f"{entry_size}-byte entry size; {extra} trailing bytes ignored"]


def prefix_problem(source: str, raw: np.ndarray, entry_size: int, valid: int, entries: int,
                   reason: str) -> list[str]:
    """Describe the entries after the valid prefix; name zero padding (KAFKA-10207) as such."""
    if valid >= entries:
        return []
    start = valid * entry_size
    ignored = entries - valid
    if not raw[start:entries * entry_size].any():
        span = f"entry {valid} is" if ignored == 1 else f"entries {valid}..{entries - 1} are"
        return [f"{source}: byte {start}: {span} zero bytes (an untrimmed, preallocated index; KAFKA-10207): "
                f"only the first {valid} entries are valid"]
    return [f"{source}: byte {start}: entry {valid}: {reason}; it and the {ignored - 1} entries after it "
            f"are ignored (valid prefix: {valid} of {entries} entries)"]


def clamp(value: int, low: int, high: int) -> int:
    return low if value < low else high if value > high else value
