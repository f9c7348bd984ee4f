"""Offset-for-timestamp lookups with ListOffsets semantics (spec 5).

For a target timestamp T >= 0 the answer is the smallest offset >= the log start offset whose record
timestamp is >= T, with that record's timestamp; "no result" is (-1, -1). Each segment is searched as
Kafka does (time-index floor -> offset-index floor -> forward batch scan -> first qualifying record),
but, unlike Kafka, the search falls through to later segments when a segment yields nothing and
starts at the segment holding the log start offset (spec 5.2 QUIRKs; fixed in AutoMQ, not in Kafka).
Special targets: -1 latest (log end offset), -2 earliest (log start offset), -3 max timestamp (the
largest timestamp and the first offset carrying it, KIP-734 after KAFKA-16310).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from engine.format.batch import NO_TIMESTAMP, BatchHeaders
from engine.format.records import decode_records
from engine.log.timestamp_floor import has_timestamp
from kernel.times import format_time

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


class SearchableSegment(Protocol):
    """What a lookup needs from a segment, served alike from memory and from storage.

    `time_lookup(target)` is Kafka's time-index floor: the entry `(T, O)` with the largest `T <= target`
    (None if there is none), and an offset whose batch holds a timestamp >= target (the next entry's;
    None if unknown); a segment that knows more (a batch index) may return a tighter pair of the same
    meaning. The entry says every record up to O has a timestamp <= T (spec 1.10), so a record
    >= target > T lies after O; the search ends by the second offset's batch.
    `batches_from(offset, until)` yields the log's batches from the one holding `offset` (earlier ones
    may come too) to the end, a chunk at a time (each chunk one ranged read for a stored segment), so a
    search that ends early reads only what it needs; `until` is the offset the caller expects to stop
    at, which lets a stored segment size its first read to end with that batch.
    """

    base_offset: int
    source: str

    @property
    def next_offset(self) -> int: ...

    @property
    def largest_timestamp(self) -> int: ...

    @property
    def offset_of_largest_timestamp(self) -> int: ...

    def time_lookup(self, target: int) -> tuple[tuple[int, int] | None, int | None]: ...

    def batches_from(self, offset: int, until: int | None = None) -> Iterator[tuple[bytes, BatchHeaders]]: ...


@dataclass(frozen=True)
class OffsetAnswer:
    offset: int
    timestamp: int
    leader_epoch: int | None = None

    @property
    def found(self) -> bool:
        return self.offset >= 0


NO_ANSWER = OffsetAnswer(-1, NO_TIMESTAMP)


def list_offsets(segments: Sequence[SearchableSegment], target: int, log_start_offset: int | None = None, *,
                 min_timestamp: int) -> OffsetAnswer:
    """Answer one ListOffsets query over a partition's segments (in offset order).

    -1, -2 and -3 are always ListOffsets' special targets (latest, earliest, max timestamp); any other
    target is a timestamp, which must be >= the topic's `min_timestamp` (`engine.log.topic_config`):
    0 for Kafka topics, any int64 above -2**63 with KIP-228's opt-in.
    """
    start = _log_start(segments, log_start_offset)
    if target == LATEST:
        return OffsetAnswer(segments[-1].next_offset if segments else start, NO_TIMESTAMP)
    if target == EARLIEST:
        return OffsetAnswer(start, NO_TIMESTAMP)
    if target == MAX_TIMESTAMP:
        return max_timestamp_offset(segments, start, min_timestamp)
    if not has_timestamp(target, min_timestamp):
        raise ValueError(f"timestamp {format_time(target)} is before the topic's earliest "
                         f"{format_time(min_timestamp)} and not one of -1 (latest), -2 (earliest), -3 (max); "
                         "times before 1970 need klake.timestamps.allow.negative (KIP-228)")
    return offset_for_timestamp(segments, target, start)


def _log_start(segments: Sequence[SearchableSegment], log_start_offset: int | None) -> int:
    first = segments[0].base_offset if segments else 0
    return first if log_start_offset is None else max(first, log_start_offset)


def offset_for_timestamp(segments: Sequence[SearchableSegment], target: int, log_start_offset: int
                         ) -> OffsetAnswer:
    """First record with timestamp >= target at or after the log start offset, falling through segments."""
    for segment in segments:
        if segment.next_offset <= log_start_offset or segment.largest_timestamp < target:
            continue
        answer = _search_segment(segment, target, log_start_offset)
        if answer is not None:
            return answer
    return NO_ANSWER


def _search_segment(segment: SearchableSegment, target: int, log_start_offset: int) -> OffsetAnswer | None:
    """Kafka's search (time-index floor, then forward from the batch holding its offset), started after
    the floor entry's offset when its timestamp is below the target: no record up to it qualifies."""
    floor, upper = segment.time_lookup(target)
    first = segment.base_offset if floor is None else floor[1] + int(floor[0] < target)
    first = max(first, log_start_offset)
    until = upper if upper is not None and upper >= first else None
    for data, headers in segment.batches_from(first, until):
        rows = np.flatnonzero((headers.max_timestamp >= target) & (headers.last_offset >= log_start_offset))
        answer = _first_record(data, headers, rows, segment.source,
                               lambda ts, off: (ts >= target) & (off >= log_start_offset))
        if answer is not None:
            return answer
    return None


def _first_record(data: bytes, headers: BatchHeaders, rows: np.ndarray, source: str, accept) -> OffsetAnswer | None:
    """The first record, in log order among batches `rows`, that `accept(timestamps, offsets)` selects."""
    for row in rows.tolist():
        records = decode_records(data, headers.take(np.array([row])), source)
        ok = accept(records.timestamp, records.offset)
        if ok.any():
            i = int(np.argmax(ok))
            epoch = int(headers.partition_leader_epoch[row])
            return OffsetAnswer(int(records.offset[i]), int(records.timestamp[i]), epoch if epoch >= 0 else None)
    return None


def max_timestamp_offset(segments: Sequence[SearchableSegment], log_start_offset: int, min_timestamp: int
                         ) -> OffsetAnswer:
    """-3: the largest timestamp at or after the log start offset and the first offset carrying it; none
    when no record has a timestamp (`has_timestamp` with the topic's `min_timestamp`: a KIP-228 topic's
    records before 1970 have one).

    Kafka picks the segment with the greatest max (first on ties), then scans from the offset-index
    floor of the max's shallow offset to the first batch whose maxTimestamp equals it (spec 5.3); that
    offset is the first carrier's, so the scan starts at the batch holding it. Only
    the segment holding the log start offset can have records below it; its max is recomputed from
    the records at or after the log start offset, so such records never win.
    """
    best: tuple[int, SearchableSegment] | None = None
    straddling: OffsetAnswer | None = None
    for segment in segments:
        if (segment.next_offset <= log_start_offset
                or not has_timestamp(segment.largest_timestamp, min_timestamp)):
            continue
        if segment.base_offset < log_start_offset:
            straddling = _max_from(segment, log_start_offset, min_timestamp)
            if straddling is None:
                continue
            largest = straddling.timestamp
        else:
            largest = segment.largest_timestamp
        if best is None or largest > best[0]:
            best = (largest, segment)
    if best is None:
        return NO_ANSWER
    largest, segment = best
    if segment.base_offset < log_start_offset:
        return straddling or NO_ANSWER
    carrier = segment.offset_of_largest_timestamp
    for data, headers in segment.batches_from(carrier, carrier):
        rows = np.flatnonzero(headers.max_timestamp == largest)
        answer = _first_record(data, headers, rows, segment.source, lambda ts, off: ts == largest)
        if answer is not None:
            return answer
    return NO_ANSWER


def _max_from(segment: SearchableSegment, log_start_offset: int, min_timestamp: int) -> OffsetAnswer | None:
    """The largest record timestamp at or after `log_start_offset` in one segment, and its first offset."""
    best: OffsetAnswer | None = None
    for data, headers in segment.batches_from(log_start_offset):
        records = decode_records(data, headers, segment.source)
        ts = np.where(records.offset >= log_start_offset, records.timestamp, np.iinfo(np.int64).min)
        if ts.shape[0] == 0:
            continue
        i = int(np.argmax(ts))  # the first of equal maxima
        if has_timestamp(int(ts[i]), min_timestamp) and (best is None or ts[i] > best.timestamp):
            epoch = int(headers.partition_leader_epoch[records.batch_index[i]])
            best = OffsetAnswer(int(records.offset[i]), int(ts[i]), epoch if epoch >= 0 else None)
    return best
