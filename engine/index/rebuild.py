"""Kafka's recovery rule for index entries (`LogSegment.recover`, spec 7.2): indexes rebuilt from a
segment's batch headers, per batch (live appends decide per chunk: `engine.index.append_rule`)."""

from __future__ import annotations

import numpy as np

from engine.format.batch import BatchHeaders
from engine.index.append_rule import TimeIndexAppendRule
from engine.index.common import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    INT32_MAX,
    OffsetOverflowError,
)
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex


def build_indexes(headers: BatchHeaders, base_offset: int,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, *,
                  min_timestamp: int) -> tuple[OffsetIndex, TimeIndex]:
    """Rebuild a segment's indexes from its batch headers with Kafka's recovery rule (spec 7.2).

    Per batch: if `validBytes - lastEntryPos > interval`, add `(batch.lastOffset, validBytes)` and
    `maybeAppend(segMax, segMaxOffset)`; finally append the closing time entry. `headers` must be the
    segment's batches from position 0, back to back. Vectorized: the greedy entry chain is followed
    with one precomputed `searchsorted` per batch and a loop over entries only; the segment max is
    a running maximum. `min_timestamp` as in `SegmentIndexer`.
    """
    if index_interval_bytes < 0:
        raise ValueError(f"index.interval.bytes must be >= 0, got {index_interval_bytes}")
    n = len(headers)
    if n == 0:
        return OffsetIndex.empty(base_offset), TimeIndex.empty(base_offset, min_timestamp)
    pos = headers.position.astype(np.int64, copy=False)
    last = headers.last_offset.astype(np.int64, copy=False)
    _require_contiguous(headers)
    rel_last = last - base_offset
    overflow = np.flatnonzero((rel_last < 0) | (rel_last > INT32_MAX))
    if overflow.size:
        bad = int(overflow[0])
        raise OffsetOverflowError(f"batch at byte {int(pos[bad])}: last offset {int(last[bad])} is not in "
                                  f"[base, base + Int.MAX] for segment base {base_offset}")
    if int(pos[-1]) > INT32_MAX:
        raise OffsetOverflowError(f"batch at byte {int(pos[-1])} does not fit an int32 index position")

    rows = _entry_rows(pos, index_interval_bytes)
    offsets = OffsetIndex(base_offset, rel_last[rows].astype(np.int32), pos[rows].astype(np.int32))

    rule = TimeIndexAppendRule(min_timestamp)
    no_ts = rule.none
    ts = headers.max_timestamp.astype(np.int64, copy=False)
    running = np.maximum.accumulate(np.maximum(ts, no_ts))
    before = np.concatenate(([no_ts], running[:-1]))
    holder = np.maximum.accumulate(np.where(ts > before, np.arange(n), -1))
    cand_rows = np.concatenate((rows, [n - 1]))
    cand_ts = running[cand_rows]
    keep = rule.admitted(cand_ts)
    times = TimeIndex(base_offset, cand_ts[keep], rel_last[holder[cand_rows[keep]]].astype(np.int32),
                      min_timestamp)
    return offsets, times


def _entry_rows(pos: np.ndarray, interval: int) -> np.ndarray:
    """Rows of the batches that get an entry: each is the first batch more than `interval` past the last."""
    following = np.searchsorted(pos, pos + interval, side="right").tolist()
    rows = []
    row = int(np.searchsorted(pos, interval, side="right"))
    n = pos.shape[0]
    while row < n:
        rows.append(row)
        row = following[row]
    return np.asarray(rows, dtype=np.int64)


def _require_contiguous(headers: BatchHeaders) -> None:
    pos = headers.position
    gaps = np.flatnonzero(pos[1:] != headers.next_position[:-1])
    if int(pos[0]) != 0 or gaps.size:
        where = 0 if int(pos[0]) != 0 else int(pos[int(gaps[0]) + 1])
        raise ValueError(f"batch headers must cover a segment from byte 0 back to back; gap at byte {where}")
