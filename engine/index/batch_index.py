"""The `.batchindex` file: klake's own sidecar naming, for every `.timeindex` span, the batches in it.

Why: Kafka indexes a batch only once `index.interval.bytes` have been appended since the last entry
(spec 2.5), so with batches smaller than the interval a timestamp lookup lands on a span of several
batches, and nothing read before the log says which of them answers (spec 5.2's forward scan reads
them all). The batch index closes that gap without touching Kafka's files (`.log`, `.index`,
`.timeindex` stay byte-identical to a broker's): after the `.timeindex` floor entry of a target, one
ranged read of the entry's group gives the answering batch's position and size, so the log read is
that batch alone and the `.index` is not read at all (issue 14).

Layout: one group per `.timeindex` span. With the time index's entries `(T_i, O_i)`, i < E, group g
(0 <= g <= E) holds the batches a search whose floor entry is g - 1 can reach: from the batch holding
`O_{g-1} + 1` (the first batch for g = 0) to the batch holding `O_g` (the last batch for g = E), each
as `(maxTimestamp int64, relativeLastOffset int32, position int32, size int32)`, big-endian like
Kafka's indexes. Every group is padded with zero entries (size 0) to the same `stride`, so group g
starts at byte `g * stride * ENTRY_SIZE` and the file's length with the `.timeindex`'s entry count
gives the stride: no header to read first.

Written only where it pays (`batch_index_bytes`): when the spans average more than two batches (with
every batch above the interval each span holds one or two: Kafka's own indexes already pin them), and
the padding stays within `MAX_PADDING` entries per batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.format.batch import BatchHeaders
from engine.index.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from engine.index.time_index import TimeIndex

ENTRY_SIZE = 20
_ENTRY = np.dtype([("max_timestamp", ">i8"), ("offset", ">i4"), ("position", ">i4"), ("size", ">i4")])
PINNED_GROUP = 2
"""A span of at most this many batches is what Kafka's own indexes already narrow a search to."""
MAX_PADDING = 4
"""The file holds at most this many entries per batch of the segment (padding included)."""


@dataclass(frozen=True, eq=False)
class BatchGroup:
    """One group's batches (padding dropped), as native columns; `relative_offsets` are last offsets."""

    max_timestamps: np.ndarray
    relative_offsets: np.ndarray
    positions: np.ndarray
    sizes: np.ndarray

    def __len__(self) -> int:
        return int(self.sizes.shape[0])


def _entries(headers: BatchHeaders, time_index: TimeIndex) -> np.ndarray:
    """The file's entries: the groups of a segment's batches (`headers`, in log order) over its `.timeindex`,
    each padded with zero entries to the longest."""
    last = headers.last_offset
    n = len(headers)
    bounds = time_index.base_offset + time_index.relative_offsets.astype(np.int64)
    starts = np.concatenate([[0], np.searchsorted(last, bounds + 1, side="left")])
    ends = np.concatenate([np.minimum(np.searchsorted(last, bounds, side="left") + 1, n), [n]])
    counts = np.maximum(ends - starts, 0)
    stride = max(int(counts.max()), 1)
    slots = (np.arange(counts.shape[0]) * stride).repeat(counts) + _ramp(counts)
    batches = starts.repeat(counts) + _ramp(counts)
    out = np.zeros(counts.shape[0] * stride, dtype=_ENTRY)
    out["max_timestamp"][slots] = headers.max_timestamp[batches]
    out["offset"][slots] = last[batches] - time_index.base_offset
    out["position"][slots] = headers.position[batches]
    out["size"][slots] = headers.size[batches]
    return out


def group_span(g: int, stride: int) -> tuple[int, int]:
    """The byte range of group `g` in a file of the given stride."""
    return g * stride * ENTRY_SIZE, (g + 1) * stride * ENTRY_SIZE


def stride_of(size_bytes: int, time_entries: int) -> int | None:
    """A file's stride from its length and its `.timeindex`'s entry count; None if they do not fit."""
    groups = time_entries + 1
    if size_bytes <= 0 or size_bytes % (groups * ENTRY_SIZE):
        return None
    return size_bytes // (groups * ENTRY_SIZE)


def group_from_bytes(data: bytes) -> BatchGroup | None:
    """One group read alone: its batches (none for the span after a closed segment's last entry), or None if the bytes break the layout (not whole entries, padding
    before a batch, positions or last offsets out of order): a lookup then searches without it."""
    if not data or len(data) % ENTRY_SIZE:
        return None
    raw = np.frombuffer(data, dtype=_ENTRY)
    sizes = raw["size"].astype(np.int32)
    used = int(np.count_nonzero(sizes))
    if np.any(sizes[:used] <= 0) or np.any(sizes[used:] != 0):
        return None
    positions = raw["position"][:used].astype(np.int32)
    offsets = raw["offset"][:used].astype(np.int32)
    if np.any(positions < 0) or np.any(np.diff(positions.astype(np.int64)) <= 0) or np.any(np.diff(offsets) <= 0):
        return None
    if np.any(positions[:-1].astype(np.int64) + sizes[:used][:-1] != positions[1:]):
        return None  # the batches of a span are contiguous in the log
    return BatchGroup(raw["max_timestamp"][:used].astype(np.int64), offsets, positions, sizes[:used])


def batch_index_bytes(batch_count: int, timeindex: bytes, base_offset: int, headers: Callable[[], BatchHeaders], *,
                      min_timestamp: int) -> bytes | None:
    """The `.batchindex` for a segment version of `batch_count` batches (their `headers`, scanned only if
    needed) and its `.timeindex`, or None where it does not pay: a `.timeindex` that does not load, spans
    averaging at most `PINNED_GROUP` batches, or padding above `MAX_PADDING` entries per batch."""
    if len(timeindex) % TIME_ENTRY_SIZE or batch_count <= PINNED_GROUP * (len(timeindex) // TIME_ENTRY_SIZE + 1):
        return None
    loaded = TimeIndex.load(timeindex, base_offset, min_timestamp=min_timestamp)
    if not loaded.ok:
        return None
    scanned = headers()
    entries = _entries(scanned, loaded.index)
    return None if entries.shape[0] > MAX_PADDING * len(scanned) else entries.tobytes()


def _ramp(counts: np.ndarray) -> np.ndarray:
    """0..count-1 for each count, concatenated."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
