"""Index-guided batch lookups the tests use to check indexes the way Kafka's reads use them (spec 1.9,
5.2): the product's lookups are `engine.log.lookup`'s, which also read records; these stop at the batch."""

from __future__ import annotations

import numpy as np

from engine.format.batch import BatchHeaders
from engine.index.common import INT64_MAX, INT64_MIN, clamp
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from kernel.errors import InvalidIndexError


def position_for_offset(headers: BatchHeaders, offset_index: OffsetIndex, target_offset: int) -> int | None:
    """Byte position of the first batch with `lastOffset >= target`, scanning from the index's floor
    entry as Kafka's `LogSegment.translateOffset` does (spec 1.9); None past the segment's end."""
    row = batch_for_offset(headers, offset_index, target_offset)
    return None if row is None else int(headers.position[row])


def batch_for_offset(headers: BatchHeaders, offset_index: OffsetIndex, target_offset: int) -> int | None:
    """Row in `headers` of the batch `position_for_offset` finds."""
    _, start = offset_index.lookup(target_offset)
    return _first_at_least(headers.last_offset, _row_at(headers, start, offset_index.base_offset), target_offset)


def first_batch_at_or_after_timestamp(headers: BatchHeaders, offset_index: OffsetIndex, time_index: TimeIndex,
                                      target_ts: int) -> int | None:
    """Row of the first batch with `maxTimestamp >= target`, found the way Kafka does (spec 5.2 step 2).

    Time-index floor `(T, O)`, then the offset-index floor of O gives a position, then batches are
    scanned forward from there. The record-level step (first record >= target, log start offset)
    is the caller's. None when no batch of this segment qualifies.
    """
    _, offset = time_index.lookup(target_ts)
    _, start = offset_index.lookup(offset)
    return _first_at_least(headers.max_timestamp, _row_at(headers, start, offset_index.base_offset), target_ts)


def _row_at(headers: BatchHeaders, position: int, base_offset: int) -> int:
    if not len(headers) and position == 0:
        return 0
    row = int(np.searchsorted(headers.position, np.int64(position), side="left"))
    if row >= len(headers) or int(headers.position[row]) != position:
        raise InvalidIndexError(f"segment {base_offset}: index position {position} is not the start of a batch")
    return row


def _first_at_least(values: np.ndarray, start: int, threshold: int) -> int | None:
    """First row >= `start` with `values[row] >= threshold`: a linear forward scan in growing chunks."""
    threshold = np.int64(clamp(threshold, INT64_MIN, INT64_MAX))
    n = values.shape[0]
    width = 64
    while start < n:
        hits = np.flatnonzero(values[start:start + width] >= threshold)
        if hits.size:
            return start + int(hits[0])
        start += width
        width *= 4
    return None
