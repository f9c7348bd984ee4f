"""Group a round's segments into cleaned segments and write each group (spec 8.3, 2.5-2.6).

Kafka's `groupSegmentsBySize`: oldest first, the next segment joins the current group while
- the summed `.log` sizes stay <= segment.bytes,
- the offset index and the time index stay <= segment.index.bytes each, and
- the candidate is empty or its estimated last offset (next segment's base - 1) - the group's base
  offset <= Int.MAX (empty segments are exempt, KAFKA-12889).
Kafka groups before cleaning and sums the *source* files' sizes. klake cleans in memory first and
measures what the group will really hold: the cleaned `.log` bytes and the exact entry counts of the
group's indexes under the append rule below, held to `engine.index.full_rule` (offset entries <= bytes/8;
time entries <= bytes/12, with one slot reserved for the final entry). Adjacent small segments therefore merge up to
segment.bytes, the limits hold for the written files, and regrouping the output finds the same
groups (entry counts only grow when batches are appended), so a second round is a no-op.

Each group is written as one segment with the group's first base offset through Kafka's append path
(`SegmentIndexer` = `LogSegment.append`): one append per surviving batch, then the final time-index
entry (`onBecomeInactiveSegment`). Kafka's cleaner appends whatever survived of each read-buffer
window (log.cleaner.io.buffer.size / 2 = 256 KiB), so its indexes are sparser; per-batch appends
give the indexes recovery would rebuild (spec 7.2), independent of how the source was segmented.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from engine.format.batch import NO_TIMESTAMP
from engine.index.append_rule import SegmentIndexer, TimeIndexAppendRule
from engine.index.common import INT32_MAX
from engine.index.full_rule import IndexFullRule


@dataclass(frozen=True)
class OutputBatches:
    """The surviving batches of one source segment, in order."""

    data: list[bytes]
    last_offset: np.ndarray
    max_timestamp: np.ndarray

    @property
    def size(self) -> int:
        return sum(len(d) for d in self.data)


@dataclass(frozen=True)
class _IndexSizer:
    """Entry counts of a segment's indexes under `LogSegment.append`, without building them."""

    interval: int
    no_timestamp: int = NO_TIMESTAMP
    bytes_since_entry: int = 0
    offset_entries: int = 0
    time_entries: int = 0
    max_timestamp: int = NO_TIMESTAMP
    last_time_entry: int = NO_TIMESTAMP

    @classmethod
    def empty(cls, interval: int, min_timestamp: int) -> _IndexSizer:
        none = TimeIndexAppendRule(min_timestamp).none
        return cls(interval, none, max_timestamp=none, last_time_entry=none)

    def extended(self, batches: OutputBatches) -> _IndexSizer:
        since, offsets, times = self.bytes_since_entry, self.offset_entries, self.time_entries
        seg_max, last_time = self.max_timestamp, self.last_time_entry
        for data, ts in zip(batches.data, batches.max_timestamp.tolist(), strict=True):
            seg_max = max(seg_max, ts)
            if since > self.interval:
                offsets += 1
                if TimeIndexAppendRule.admits(seg_max, last_time):
                    times, last_time = times + 1, seg_max
                since = 0
            since += len(data)
        return replace(self, bytes_since_entry=since, offset_entries=offsets, time_entries=times,
                       max_timestamp=seg_max, last_time_entry=last_time)

    def fits(self, index_bytes: int) -> bool:
        """Whether the indexes, with the final time entry, fit files of `index_bytes` (`IndexFullRule.holds`)."""
        return IndexFullRule(index_bytes).holds(self.offset_entries, self.time_entries)


def group_segments(bases: Sequence[int], estimated_last_offsets: Sequence[int], outputs: Sequence[OutputBatches],
                   segment_bytes: int, segment_index_bytes: int, index_interval_bytes: int, *,
                   min_timestamp: int) -> list[list[int]]:
    """Greedy grouping, oldest first (see the module docstring); returns lists of segment positions."""
    groups: list[list[int]] = []
    k = 0
    while k < len(bases):
        group = [k]
        log_bytes = outputs[k].size
        sizer = _IndexSizer.empty(index_interval_bytes, min_timestamp).extended(outputs[k])
        k += 1
        while k < len(bases):
            size = outputs[k].size
            candidate = sizer.extended(outputs[k])
            if (log_bytes + size > segment_bytes or not candidate.fits(segment_index_bytes)
                    or (size > 0 and estimated_last_offsets[k] - bases[group[0]] > INT32_MAX)):
                break
            group.append(k)
            log_bytes += size
            sizer = candidate
            k += 1
        groups.append(group)
    return groups


@dataclass(frozen=True)
class WrittenSegment:
    base_offset: int
    log: bytes
    index: bytes
    timeindex: bytes


def write_segment(base_offset: int, outputs: Sequence[OutputBatches], index_interval_bytes: int, *,
                  min_timestamp: int) -> WrittenSegment:
    """Append every batch through `SegmentIndexer` (one append per batch) and close the segment.
    `min_timestamp` is the time index's KIP-228 opt-in (`engine.index.time_index`)."""
    indexer = SegmentIndexer(base_offset, index_interval_bytes, min_timestamp=min_timestamp)
    chunks: list[bytes] = []
    for out in outputs:
        for data, last, ts in zip(out.data, out.last_offset.tolist(), out.max_timestamp.tolist(), strict=True):
            indexer.append(indexer.size, len(data), last, ts, last)
            chunks.append(data)
    offsets, times = indexer.close()
    return WrittenSegment(base_offset, b"".join(chunks), offsets.to_bytes(), times.to_bytes())
