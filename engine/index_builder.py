"""Kafka's index-entry rules, index consistency checks, and index-guided batch lookups.

Two placement rules exist and both are kept (spec 7.2, "rebuilt != original"):
- `SegmentIndexer`: live appends decide per **append chunk** (`LogSegment.append`, spec 2.5/2.6);
- `build_indexes`: recovery decides per **batch** (`LogSegment.recover`, spec 7.2).
Both produce valid indexes; lookups through either give the same answers.
"""

from __future__ import annotations

import numpy as np

from engine.batch import BatchHeaders
from engine.errors import InvalidIndexError
from engine.index_common import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_INDEX_BYTES,
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    OffsetOverflowError,
    clamp,
)
from engine.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from engine.offset_index import OffsetIndex
from engine.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from engine.time_index import TimeIndex


class SegmentIndexer:
    """Index entries of one segment as Kafka's leader appends them, one call per append chunk.

    Follows `LogSegment.append` (spec 2.5): the segment max is updated with a strict `>` (so ties
    keep the earlier batch); an offset entry `(last offset of the chunk, chunk start)` and a time
    entry `(segment max, its shallow offset)` are added only when more than `index_interval_bytes`
    were appended since the last entry, checked *before* counting this chunk, so a segment's first
    append is never indexed. The time index only grows when the segment max grew. `close()` /
    `roll()` add the final time entry that makes the index's last entry the segment max (spec 2.6).
    `min_timestamp` is the KIP-228 opt-in of `engine.time_index`; the default 0 is Kafka's rule.
    """

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 min_timestamp: int = 0) -> None:
        if index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must be >= 0, got {index_interval_bytes}")
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.min_timestamp = min_timestamp
        self._no_timestamp = min_timestamp - 1
        self._max_timestamp = self._no_timestamp
        self._offset_of_max_timestamp = -1
        self._bytes_since_last_entry = 0
        self._size = 0
        self._last_offset: int | None = None
        self._offset_rel: list[int] = []
        self._offset_pos: list[int] = []
        self._time_ts: list[int] = []
        self._time_rel: list[int] = []
        self._closed = False

    @classmethod
    def resume(cls, offset_index: OffsetIndex, time_index: TimeIndex, *, size: int, last_offset: int | None,
               max_timestamp: int, offset_of_max_timestamp: int, bytes_since_last_index_entry: int | None = None,
               index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> SegmentIndexer:
        """Continue an active segment written earlier, as the broker that wrote it would (spec 2.5).

        The facts are the segment's `.index` / `.timeindex` (no final entry: the segment is active), its
        size, last offset and max timestamp with its offset. `bytes_since_last_index_entry` defaults
        to `size - position of the last offset entry` (or `size` without entries), which is what an
        uninterrupted broker holds; Kafka resets it to 0 on truncation (spec 6 step 8).
        """
        if offset_index.base_offset != time_index.base_offset:
            raise ValueError(f"index base offsets differ: {offset_index.base_offset} vs {time_index.base_offset}")
        problems = offset_index.problems() + time_index.problems()
        if problems:
            raise InvalidIndexError("; ".join(problems))
        last_pos = offset_index.last_entry()[1]
        if size < 0 or (len(offset_index) and last_pos >= size):
            raise ValueError(f"segment size {size} does not cover the last offset-index position {last_pos}")
        if (size == 0) != (last_offset is None):
            raise ValueError("a segment has a last offset iff it is non-empty")
        if len(time_index) and time_index.last_entry()[0] > max_timestamp:
            raise ValueError(f"max timestamp {max_timestamp} is below the time index's last entry "
                             f"{time_index.last_entry()[0]}")
        since = size - last_pos if bytes_since_last_index_entry is None else bytes_since_last_index_entry
        if not 0 <= since <= size:
            raise ValueError(f"bytes since the last index entry {since} is outside [0, size {size}]")
        indexer = cls(offset_index.base_offset, index_interval_bytes, time_index.min_timestamp)
        indexer._size = size
        indexer._last_offset = last_offset
        indexer._bytes_since_last_entry = since
        if max_timestamp > indexer._no_timestamp:
            indexer._max_timestamp = max_timestamp
            indexer._offset_of_max_timestamp = offset_of_max_timestamp
        indexer._offset_rel = offset_index.relative_offsets.tolist()
        indexer._offset_pos = offset_index.positions.tolist()
        indexer._time_ts = time_index.timestamps.tolist()
        indexer._time_rel = time_index.relative_offsets.tolist()
        return indexer

    @property
    def max_timestamp(self) -> int:
        """The segment's largest batch max timestamp so far; -1 (NO_TIMESTAMP) before any."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """Shallow offset (last offset of the first batch) carrying `max_timestamp`; -1 before any."""
        return self._offset_of_max_timestamp

    @property
    def size(self) -> int:
        """Bytes appended so far: the position the next append starts at."""
        return self._size

    @property
    def bytes_since_last_index_entry(self) -> int:
        return self._bytes_since_last_entry

    def append(self, first_position: int, size: int, last_offset: int, max_timestamp: int,
               shallow_offset_of_max_timestamp: int) -> None:
        """Account for one append chunk of `size` bytes written at `first_position` (spec 2.5)."""
        if self._closed:
            raise ValueError("segment indexer is closed")
        if first_position != self._size:
            raise ValueError(f"append at position {first_position}, but the segment ends at {self._size}")
        if size <= 0:
            raise ValueError(f"append size must be > 0, got {size}")
        if first_position > INT32_MAX:
            raise OffsetOverflowError(f"position {first_position} does not fit an int32 index entry")
        rel = self._relative(last_offset, "last offset")
        if self._last_offset is not None and last_offset <= self._last_offset:
            raise ValueError(f"last offset {last_offset} does not increase over {self._last_offset}")
        if max_timestamp > self._max_timestamp:
            self._relative(shallow_offset_of_max_timestamp, "shallow offset of max timestamp")
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = shallow_offset_of_max_timestamp
        if self._bytes_since_last_entry > self.index_interval_bytes:
            self._offset_rel.append(rel)
            self._offset_pos.append(first_position)
            self._maybe_append_time()
            self._bytes_since_last_entry = 0
        self._bytes_since_last_entry += size
        self._size += size
        self._last_offset = last_offset

    def is_full(self, segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES) -> bool:
        """Kafka's index-full roll rule (spec 3): offset entries >= max, time entries >= max - 1."""
        return (len(self._offset_rel) >= segment_index_bytes // OFFSET_ENTRY_SIZE
                or len(self._time_ts) >= segment_index_bytes // TIME_ENTRY_SIZE - 1)

    def snapshot(self) -> tuple[OffsetIndex, TimeIndex]:
        """The indexes as they stand, without the final entry: an active segment's files."""
        offsets = OffsetIndex(self.base_offset, np.asarray(self._offset_rel, np.int32),
                              np.asarray(self._offset_pos, np.int32))
        times = TimeIndex(self.base_offset, np.asarray(self._time_ts, np.int64),
                          np.asarray(self._time_rel, np.int32), self.min_timestamp)
        return offsets, times

    def close(self) -> tuple[OffsetIndex, TimeIndex]:
        """Append the final time entry `(segment max, its offset)` (skipFullCheck) and return both indexes."""
        if not self._closed:
            self._maybe_append_time()
            self._closed = True
        return self.snapshot()

    roll = close

    def _maybe_append_time(self) -> None:
        """`TimeIndex.maybeAppend`: only a timestamp above the last entry's (or the empty sentinel) is added."""
        last = self._time_ts[-1] if self._time_ts else self._no_timestamp
        if self._max_timestamp > last:
            rel = self._offset_of_max_timestamp - self.base_offset
            if self._time_rel and rel < self._time_rel[-1]:
                raise InvalidIndexError(f"time index offset {self._offset_of_max_timestamp} is below the last entry's "
                                        f"{self.base_offset + self._time_rel[-1]}")
            self._time_ts.append(self._max_timestamp)
            self._time_rel.append(rel)

    def _relative(self, offset: int, what: str) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise OffsetOverflowError(f"{what} {offset} is not in [base, base + Int.MAX] "
                                      f"for segment base {self.base_offset}")
        return rel


def build_indexes(headers: BatchHeaders, base_offset: int,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                  min_timestamp: int = 0) -> tuple[OffsetIndex, TimeIndex]:
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

    no_ts = min_timestamp - 1
    ts = headers.max_timestamp.astype(np.int64, copy=False)
    running = np.maximum.accumulate(np.maximum(ts, no_ts))
    before = np.concatenate(([no_ts], running[:-1]))
    holder = np.maximum.accumulate(np.where(ts > before, np.arange(n), -1))
    cand_rows = np.concatenate((rows, [n - 1]))
    cand_ts = running[cand_rows]
    keep = cand_ts > np.concatenate(([no_ts], cand_ts[:-1]))
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


def sidecar_names(source: str) -> tuple[str, str]:
    """`.index` and `.timeindex` names for a segment named by its `.log` path (or stem)."""
    stem = source[:-4] if source.endswith(".log") else source
    return f"{stem}.index", f"{stem}.timeindex"


def check_indexes(headers: BatchHeaders, offset_index: OffsetIndex, time_index: TimeIndex, source: str,
                  active: bool = False) -> list[str]:
    """Problems that make the sidecars disagree with the log (for `klake verify`).

    `source` names the segment's `.log`; problems name the `.index` / `.timeindex` file, the entry
    and its byte position. An entry is consistent iff Kafka's lookups through it give the right
    answer and it says what Kafka says it says:
    - offset entry `(K, P)`: P > 0 is the start of a batch, the batch before P ends below K (else
      lookups of K would skip it) and K is within the log;
    - time entry `(T, O)`: O is within the log, the batch holding O has max timestamp T and no
      earlier batch reaches T (spec 1.10; else timestamp lookups skip records, spec 5.2);
    - unless `active`, the last time entry is the segment's max timestamp: without that final entry
      (spec 2.6) Kafka under-estimates the segment's largest timestamp (retention, lookups; 7.3).
    """
    index_name, time_name = sidecar_names(source)
    if offset_index.base_offset != time_index.base_offset:
        return [f"{index_name}: base offset {offset_index.base_offset} differs from {time_name}'s "
                f"{time_index.base_offset}"]
    problems = offset_index.problems(index_name) + time_index.problems(time_name)
    problems += _offset_entry_problems(headers, offset_index, index_name)
    problems += _time_entry_problems(headers, time_index, time_name)
    if not active:
        problems += _final_entry_problems(headers, time_index, time_name)
    return problems


def _entry_label(name: str, entry_size: int, i: int, a: int, b: int) -> str:
    return f"{name}: byte {i * entry_size}: entry {i} ({a}, {b})"


def _offset_entry_problems(headers: BatchHeaders, index: OffsetIndex, name: str) -> list[str]:
    k = index.offsets
    p = index.positions.astype(np.int64)
    n = len(headers)
    if n == 0:
        return [f"{_entry_label(name, OFFSET_ENTRY_SIZE, i, int(k[i]), int(p[i]))}: the log is empty"
                for i in range(len(index))]
    pos, last = headers.position, headers.last_offset
    row = np.searchsorted(pos, p, side="left")
    is_start = (row < n) & (pos[np.minimum(row, n - 1)] == p)
    prev_last = np.where(row > 0, last[np.maximum(row - 1, 0)], INT64_MIN)
    log_last = int(last[-1])
    problems = []
    for i in np.flatnonzero(~is_start | (prev_last >= k) | (k > log_last) | (p <= 0)).tolist():
        ki, pi = int(k[i]), int(p[i])
        where = _entry_label(name, OFFSET_ENTRY_SIZE, i, ki, pi)
        if ki > log_last:
            problems.append(f"{where}: offset {ki} is beyond the log's last offset {log_last}")
        elif pi <= 0:
            problems.append(f"{where}: position 0 is never indexed (a segment's first append has no entry)")
        elif not is_start[i]:
            problems.append(f"{where}: position {pi} is not the start of a batch")
        else:
            problems.append(f"{where}: the batch before position {pi} ends at offset {int(prev_last[i])} >= {ki}, "
                            f"so offset lookups from {ki} would skip it")
    return problems


def _time_entry_problems(headers: BatchHeaders, index: TimeIndex, name: str) -> list[str]:
    t = index.timestamps
    o = index.offsets
    n = len(headers)
    if n == 0:
        return [f"{_entry_label(name, TIME_ENTRY_SIZE, i, int(t[i]), int(o[i]))}: the log is empty"
                for i in range(len(index))]
    no_ts = index.no_timestamp
    max_ts = headers.max_timestamp
    batch = np.searchsorted(headers.last_offset, o, side="left")
    inside = batch < n
    at = np.minimum(batch, n - 1)
    running = np.concatenate(([no_ts], np.maximum.accumulate(np.maximum(max_ts, no_ts))))
    earlier = running[np.where(inside, batch, 0)]
    carried = max_ts[at]
    problems = []
    for i in np.flatnonzero(~inside | (earlier >= t) | (carried != t)).tolist():
        ti, oi = int(t[i]), int(o[i])
        where = _entry_label(name, TIME_ENTRY_SIZE, i, ti, oi)
        if not inside[i]:
            problems.append(f"{where}: offset {oi} is beyond the log's last offset {int(headers.last_offset[-1])}")
            continue
        if earlier[i] >= ti:
            problems.append(f"{where}: an earlier batch already has max timestamp {int(earlier[i])} >= {ti}, "
                            f"so timestamp lookups from {ti} would skip it")
        if carried[i] != ti:
            problems.append(f"{where}: the batch at byte {int(headers.position[at[i]])} holding offset {oi} has "
                            f"max timestamp {int(carried[i])}, not {ti}")
    return problems


def _final_entry_problems(headers: BatchHeaders, index: TimeIndex, name: str) -> list[str]:
    if not len(headers):
        return []
    no_ts = index.no_timestamp
    ts = np.maximum(headers.max_timestamp, no_ts)
    seg_max = int(ts.max())
    last_t, _ = index.last_entry()
    if seg_max == no_ts or last_t >= seg_max:
        return []
    seg_offset = int(headers.last_offset[int(np.argmax(ts))])
    return [f"{name}: byte {len(index) * TIME_ENTRY_SIZE}: final entry missing: the last entry's timestamp is "
            f"{last_t} but the segment's max timestamp is {seg_max} (offset {seg_offset}), so Kafka would "
            f"under-estimate the segment's largest timestamp (spec 2.6, 7.3)"]


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
