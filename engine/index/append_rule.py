"""Kafka's index-entry rule for live appends (`LogSegment.append`, spec 2.5-2.6), and the time index's
append rule that it, recovery's rebuild (`engine.index.rebuild`) and the cleaner's sizing share.

Two placement rules exist and both are kept (spec 7.2, "rebuilt != original"): live appends decide
per **append chunk** (here), recovery per **batch** (`engine.index.rebuild`). Both produce valid
indexes; lookups through either give the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.index.common import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    INT32_MAX,
    OffsetOverflowError,
)
from engine.index.full_rule import IndexFullRule
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from kernel.errors import InvalidIndexError


@dataclass(frozen=True)
class TimeIndexAppendRule:
    """`TimeIndex.maybeAppend` (spec 2.6): a candidate `(segment max, its offset)` becomes an entry only
    if its timestamp is above the last entry's, so the index's timestamps strictly increase.

    `min_timestamp` is the smallest timestamp an entry may hold (`engine.log.topic_config.min_timestamp`:
    0, Kafka's rule, or KIP-228's opt-in); `none`, one below it, is what an empty index's last entry
    counts as ("no timestamp" stays distinct from every real one).
    """

    min_timestamp: int

    @property
    def none(self) -> int:
        return self.min_timestamp - 1

    @staticmethod
    def admits(timestamp: int, last_entry: int) -> bool:
        """One candidate after an index whose last entry holds `last_entry`."""
        return timestamp > last_entry

    def admitted(self, candidates: np.ndarray, last_entry: int | None = None) -> np.ndarray:
        """Which of a sequence of candidates become entries, each judged after the ones admitted before it."""
        last = self.none if last_entry is None else last_entry
        before = np.maximum.accumulate(np.concatenate(([last], candidates)).astype(np.int64))[:-1]
        return candidates > before


class SegmentIndexer:
    """Index entries of one segment as Kafka's leader appends them, one call per append chunk.

    Follows `LogSegment.append` (spec 2.5): the segment max is updated with a strict `>` (so ties
    keep the earlier batch); an offset entry `(last offset of the chunk, chunk start)` and a time
    entry `(segment max, its shallow offset)` are added only when more than `index_interval_bytes`
    were appended since the last entry, checked *before* counting this chunk, so a segment's first
    append is never indexed. The time index only grows when the segment max grew. `close()` /
    `roll()` add the final time entry that makes the index's last entry the segment max (spec 2.6).
    `min_timestamp` is the KIP-228 opt-in of `engine.index.time_index`; the default 0 is Kafka's rule.
    """

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, *,
                 min_timestamp: int) -> None:
        if index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes must be >= 0, got {index_interval_bytes}")
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.min_timestamp = min_timestamp
        self._time_rule = TimeIndexAppendRule(min_timestamp)
        self._no_timestamp = self._time_rule.none
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
        indexer = cls(offset_index.base_offset, index_interval_bytes, min_timestamp=time_index.min_timestamp)
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

    def is_full(self, segment_index_bytes: int) -> bool:
        """Whether either index is full (`engine.index.full_rule`), which rolls the segment (spec 3)."""
        return IndexFullRule(segment_index_bytes).is_full(len(self._offset_rel), len(self._time_ts))

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


    def _maybe_append_time(self) -> None:
        """`TimeIndex.maybeAppend`: only a timestamp above the last entry's (or the empty sentinel) is added."""
        last = self._time_ts[-1] if self._time_ts else self._no_timestamp
        if self._time_rule.admits(self._max_timestamp, last):
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
