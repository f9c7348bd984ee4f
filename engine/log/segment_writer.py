"""Fill segments the way a broker's leader does: Kafka's roll rules and index rules per append.

Before every append the active segment asks Kafka's roll rule (`engine.log.roll_rule.should_roll`,
`LogSegment.shouldRoll`, spec 3: size, time with jitter, index full, offset overflow).
The new segment's base offset is `max(first offset of the append, log end offset)` (KAFKA-6530).
Index entries follow `LogSegment.append` through `SegmentIndexer` (spec 2.5) and a rolled segment
gets its final time-index entry (spec 2.6). `SegmentWriter.resume` continues an active segment
written by an earlier job from its `ActiveSegmentState`, with the same rolls and index entries.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.index.append_rule import SegmentIndexer
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.roll_rule import NO_ROLL, ROLL_RULES, RollPolicy, should_roll, time_waited_for_roll
from engine.log.timestamp_floor import no_timestamp


@dataclass(frozen=True)
class Append:
    """One append chunk: whole batches, as one produce request would write them."""

    data: bytes
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int


@dataclass
class ClosedSegment:
    base_offset: int
    chunks: list[bytes]  # its bytes as the appends wrote them; stored as parts, never joined (`log` joins)
    index: bytes
    timeindex: bytes
    max_timestamp: int
    offset_of_max_timestamp: int
    next_offset: int
    rolled_because: str | None
    start_position: int = 0  # `chunks` hold the segment's bytes from here (> 0: resumed without its bytes)

    @property
    def log(self) -> bytes:
        """The segment's bytes (from `start_position`) in one piece."""
        return b"".join(self.chunks)

    @property
    def size(self) -> int:
        """The segment's size in bytes, `start_position` included."""
        return self.start_position + sum(map(len, self.chunks))


@dataclass(frozen=True)
class ActiveSegmentState:
    """What continuing an active segment needs: a catalog row plus its `.index` / `.timeindex`.

    `rolling_base_timestamp` is the first batch's maxTimestamp (spec 3; the index's "no timestamp"
    sentinel when the segment is empty); `bytes_since_last_index_entry` None means "size - position
    of the last offset entry" (an uninterrupted broker); the time index's `min_timestamp` carries
    the KIP-228 opt-in.
    """

    base_offset: int
    size: int
    next_offset: int
    offset_index: OffsetIndex
    time_index: TimeIndex
    max_timestamp: int
    offset_of_max_timestamp: int
    rolling_base_timestamp: int
    created_ms: int
    jitter_ms: int
    bytes_since_last_index_entry: int | None = None


class ActiveSegment:
    """The segment being appended to: its bytes, its indexer and its roll state."""

    def __init__(self, base_offset: int, policy: RollPolicy, created_ms: int, segment_key: str, *,
                 min_timestamp: int) -> None:
        self.base_offset = base_offset
        self.policy = policy
        self.created_ms = created_ms
        self.jitter_ms = policy.jitter_for(f"{segment_key}:{base_offset}")
        self.indexer = SegmentIndexer(base_offset, policy.index_interval_bytes, min_timestamp=min_timestamp)
        self.chunks: list[bytes] = []
        self.start_position = 0
        self.rolling_base_timestamp = no_timestamp(min_timestamp)
        self.next_offset = base_offset

    @classmethod
    def resume(cls, state: ActiveSegmentState, policy: RollPolicy, log: bytes | None = None) -> ActiveSegment:
        """The active segment described by `state`; with `log` (its bytes) the output holds the whole
        segment, without it only the bytes appended from now on (`start_position` = `state.size`)."""
        if log is not None and len(log) != state.size:
            raise ValueError(f"resume log has {len(log)} bytes but the state says {state.size}")
        segment = cls(state.base_offset, policy, state.created_ms, "",
                      min_timestamp=state.time_index.min_timestamp)
        segment.jitter_ms = state.jitter_ms
        segment.indexer = SegmentIndexer.resume(
            state.offset_index, state.time_index, size=state.size,
            last_offset=state.next_offset - 1 if state.size else None, max_timestamp=state.max_timestamp,
            offset_of_max_timestamp=state.offset_of_max_timestamp,
            bytes_since_last_index_entry=state.bytes_since_last_index_entry,
            index_interval_bytes=policy.index_interval_bytes)
        segment.rolling_base_timestamp = state.rolling_base_timestamp
        segment.next_offset = state.next_offset
        if log is None:
            segment.start_position = state.size
        elif log:
            segment.chunks.append(log)
        return segment

    def state(self) -> ActiveSegmentState:
        """This segment's facts for `resume` in a later job (indexes without the final entry)."""
        offsets, times = self.indexer.snapshot()
        return ActiveSegmentState(self.base_offset, self.size, self.next_offset, offsets, times,
                                  self.indexer.max_timestamp, self.indexer.offset_of_max_timestamp,
                                  self.rolling_base_timestamp, self.created_ms, self.jitter_ms,
                                  self.indexer.bytes_since_last_index_entry)

    @property
    def size(self) -> int:
        return self.indexer.size

    def roll_reason(self, incoming: Append, now_ms: int) -> str | None:
        """Kafka's `LogSegment.shouldRoll` for `incoming` (`engine.log.roll_rule.should_roll`), or None."""
        waited = time_waited_for_roll(self.rolling_base_timestamp, incoming.max_timestamp, self.created_ms, now_ms,
                                      self.indexer.min_timestamp)
        rule = should_roll(self.size, len(incoming.data), self.policy.segment_bytes, waited, self.policy.segment_ms,
                           self.jitter_ms, self.indexer.is_full(self.policy.segment_index_bytes),
                           incoming.last_offset - self.base_offset)
        return None if rule == NO_ROLL else ROLL_RULES[rule]

    def append(self, incoming: Append) -> None:
        if self.size == 0:
            self.rolling_base_timestamp = incoming.max_timestamp
        self.indexer.append(self.size, len(incoming.data), incoming.last_offset, incoming.max_timestamp,
                            incoming.shallow_offset_of_max_timestamp)
        self.chunks.append(incoming.data)
        self.next_offset = incoming.last_offset + 1

    def close(self, rolled_because: str | None) -> ClosedSegment:
        offsets, times = self.indexer.close()
        return ClosedSegment(self.base_offset, self.chunks, offsets.to_bytes(), times.to_bytes(),
                             self.indexer.max_timestamp, self.indexer.offset_of_max_timestamp, self.next_offset,
                             rolled_because, self.start_position)


class SegmentWriter:
    """Appends chunks to a partition's log, rolling segments by Kafka's rules."""

    def __init__(self, policy: RollPolicy, next_offset: int = 0, segment_key: str = "", now_ms: int = 0, *,
                 min_timestamp: int) -> None:
        self.policy = policy
        self.segment_key = segment_key
        self.min_timestamp = min_timestamp
        self.active = ActiveSegment(next_offset, policy, now_ms, segment_key, min_timestamp=min_timestamp)
        self.closed: list[ClosedSegment] = []

    @classmethod
    def resume(cls, policy: RollPolicy, state: ActiveSegmentState, segment_key: str = "",
               log: bytes | None = None) -> SegmentWriter:
        """A writer continuing the active segment `state` (see `ActiveSegment.resume`)."""
        writer = cls(policy, state.next_offset, segment_key, state.created_ms,
                     min_timestamp=state.time_index.min_timestamp)
        writer.active = ActiveSegment.resume(state, policy, log)
        return writer

    def append(self, incoming: Append, now_ms: int) -> None:
        if incoming.first_offset < self.active.next_offset:
            raise ValueError(f"append at offset {incoming.first_offset} is below the log end offset "
                             f"{self.active.next_offset}")
        if len(incoming.data) > self.policy.segment_bytes:
            raise ValueError(f"an append of {len(incoming.data)} bytes exceeds segment.bytes "
                             f"{self.policy.segment_bytes} (RecordBatchTooLargeException)")
        reason = self.active.roll_reason(incoming, now_ms)
        if reason is not None:
            self.roll(max(incoming.first_offset, self.active.next_offset), now_ms, reason)
        self.active.append(incoming)

    def roll(self, new_base_offset: int, now_ms: int, reason: str) -> None:
        """Close the active segment (if it holds anything) and start a new one at `new_base_offset`."""
        if self.active.size:
            self.closed.append(self.active.close(reason))
        self.active = ActiveSegment(new_base_offset, self.policy, now_ms, self.segment_key,
                                    min_timestamp=self.min_timestamp)
