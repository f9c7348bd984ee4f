"""Kafka's index-full rule (spec 3), stated once: how many entries an index of `segment.index.bytes` holds,
and when it takes no more.

An index file is sized `segment.index.bytes` rounded down to whole entries (`AbstractIndex.resize`), so it
holds `maxEntries = floor(bytes / 8)` offset entries (`.index`) and `floor(bytes / 12)` time entries
(`.timeindex`). `AbstractIndex.isFull` is `entries >= maxEntries`; `TimeIndex.isFull` keeps one slot for
the entry `onBecomeInactiveSegment` appends past the check (`maybeAppend(..., skipFullCheck = true)`), so
it is `entries >= maxEntries - 1`. A full index rolls the segment (`LogSegment.shouldRoll`); an append
finds it not full, so after the last live append an index holds at most its maximum (time: maximum - 1,
then the final entry). The same rule answers for live appends (`SegmentIndexer.is_full`), the roll
plan's bound from the catalog's batch counts (`engine.log.roll_rule.should_roll`) and the cleaner's
grouping (`engine.cleaner.grouping`, Kafka's `groupSegmentsBySize`: the group's indexes fit their files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import numpy as np

from engine.index.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from engine.index.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE


@dataclass(frozen=True)
class IndexFullRule:
    """`AbstractIndex.isFull` / `TimeIndex.isFull` for indexes of `segment_index_bytes` (one number or one per
    segment, as a numpy array)."""

    segment_index_bytes: int | np.ndarray

    @property
    def max_offset_entries(self) -> int | np.ndarray:
        """`maxEntries` of an `.index`: floor(segment.index.bytes / 8)."""
        return self.segment_index_bytes // OFFSET_ENTRY_SIZE

    @property
    def max_time_entries(self) -> int | np.ndarray:
        """`maxEntries` of a `.timeindex`: floor(segment.index.bytes / 12)."""
        return self.segment_index_bytes // TIME_ENTRY_SIZE

    def offset_index_full(self, entries: int | np.ndarray) -> bool | np.ndarray:
        """`AbstractIndex.isFull` of an `.index`: entries >= maxEntries."""
        return entries >= self.max_offset_entries

    def time_index_full(self, entries: int | np.ndarray) -> bool | np.ndarray:
        """`TimeIndex.isFull`: entries >= maxEntries - 1, one slot kept for the final entry."""
        return entries >= self.max_time_entries - 1

    @overload
    def is_full(self, offset_entries: int, time_entries: int) -> bool: ...

    @overload
    def is_full(self, offset_entries: np.ndarray, time_entries: np.ndarray) -> np.ndarray: ...

    def is_full(self, offset_entries: int | np.ndarray, time_entries: int | np.ndarray) -> bool | np.ndarray:
        """Whether either index of a segment takes no further live entry, so the segment rolls
        (`LogSegment.shouldRoll`: `offsetIndex().isFull() || timeIndex().isFull()`)."""
        return self.offset_index_full(offset_entries) | self.time_index_full(time_entries)

    def holds(self, offset_entries: int, live_time_entries: int) -> bool:
        """Whether a segment's indexes fit their files: every live append found its index not full, and so did
        the last one, made at one entry fewer (then offset entries <= maxEntries, time entries <= maxEntries - 1,
        and the final time entry has its slot)."""
        return not (self.offset_index_full(offset_entries - 1) or self.time_index_full(live_time_entries - 1))
