"""Kafka's roll rule, stated once (`LogSegment.shouldRoll`, spec 3), and the topic settings it reads.

`UnifiedLog.maybeRoll` asks the active segment before every append whether it rolls; the first rule that
holds, in `shouldRoll`'s order, is the reason:
1. size: `size > segment.bytes - incoming size`;
2. time: the segment is non-empty and `timeWaitedForRoll > segment.ms - jitter`, where the time waited is
   the incoming batch's max timestamp minus the rolling base (the first batch's max timestamp) when the
   segment has one (Kafka: `>= 0`; the topic's floor with KIP-228), else the wall clock minus the segment's
   creation time (KAFKA-4099);
3. index full: either index takes no further entry (`AbstractIndex.isFull`, `TimeIndex.isFull`:
   `engine.index.full_rule`);
4. offset overflow: the incoming last offset is not relative to the base (`offset - baseOffset` outside
   `[0, Int.MaxValue]`, `canConvertToRelativeOffset`).
`should_roll` is that statement for one segment (ints) or many (numpy columns): the writer asks it per
append (`ActiveSegment.roll_reason`), the roll job's planner for every partition's active segment at once
(`engine.log.roll_plan`), with the catalog's batch count as the bound on the index's entries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import overload

import numpy as np

from engine.index.common import INT32_MAX
from engine.log.timestamp_floor import has_timestamp
from engine.log.topic_config import TopicConfig

ROLL_SIZE, ROLL_TIME, ROLL_INDEX_FULL, ROLL_OFFSET_OVERFLOW = "size", "time", "index-full", "offset-overflow"
ROLL_RULES = (ROLL_SIZE, ROLL_TIME, ROLL_INDEX_FULL, ROLL_OFFSET_OVERFLOW)
"""The rules in `shouldRoll`'s order: `should_roll` answers an index into this, or `NO_ROLL`."""
NO_ROLL = -1


@dataclass(frozen=True)
class RollPolicy:
    """A topic's rolling settings, read from its `TopicConfig` (Kafka's names and defaults live there)."""

    config: TopicConfig

    @property
    def segment_bytes(self) -> int:
        return self.config.segment_bytes

    @property
    def segment_ms(self) -> int:
        """`segment.ms`, capped by `max.compaction.lag.ms` on compacted topics (spec 3, KIP-354)."""
        c = self.config
        return min(c.segment_ms, c.max_compaction_lag_ms) if c.compacted else c.segment_ms

    @property
    def segment_jitter_ms(self) -> int:
        return self.config.segment_jitter_ms

    @property
    def segment_index_bytes(self) -> int:
        return self.config.segment_index_bytes

    @property
    def index_interval_bytes(self) -> int:
        return self.config.index_interval_bytes

    def jitter_for(self, segment_key: str) -> int:
        """Per-segment jitter, uniform in [0, min(jitter, segment.ms)) (spec 3). Drawn from a hash of
        the segment's identity instead of a random generator, so re-running a job rolls identically."""
        bound = min(self.segment_jitter_ms, self.segment_ms)
        if bound <= 0:
            return 0
        digest = hashlib.blake2b(segment_key.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") % bound


@overload
def time_waited_for_roll(rolling_base: int, incoming_max_timestamp: int, created_ms: int, now_ms: int,
                         floor: int) -> int: ...


@overload
def time_waited_for_roll(rolling_base: np.ndarray, incoming_max_timestamp: np.ndarray | int,
                         created_ms: np.ndarray, now_ms: np.ndarray | int, floor: np.ndarray | int) -> np.ndarray: ...


def time_waited_for_roll(rolling_base: int | np.ndarray, incoming_max_timestamp: int | np.ndarray,
                         created_ms: int | np.ndarray, now_ms: int | np.ndarray, floor: int | np.ndarray
                         ) -> int | np.ndarray:
    """`LogSegment.timeWaitedForRoll`: record time (incoming max timestamp - rolling base) when the segment
    has a rolling base timestamp, else wall-clock time since it was created (KAFKA-4099)."""
    if isinstance(rolling_base, np.ndarray):
        return np.where(has_timestamp(rolling_base, floor), incoming_max_timestamp - rolling_base, now_ms - created_ms)
    if has_timestamp(rolling_base, floor):
        return incoming_max_timestamp - rolling_base
    return now_ms - created_ms


@overload
def should_roll(size: int, incoming_bytes: int, segment_bytes: int, waited_ms: int, segment_ms: int,
                jitter_ms: int, index_full: bool, relative_offset: int) -> int: ...


@overload
def should_roll(size: np.ndarray, incoming_bytes: np.ndarray | int, segment_bytes: np.ndarray, waited_ms: np.ndarray,
                segment_ms: np.ndarray, jitter_ms: np.ndarray, index_full: np.ndarray,
                relative_offset: np.ndarray) -> np.ndarray: ...


def should_roll(size: int | np.ndarray, incoming_bytes: int | np.ndarray, segment_bytes: int | np.ndarray,
                waited_ms: int | np.ndarray, segment_ms: int | np.ndarray, jitter_ms: int | np.ndarray,
                index_full: bool | np.ndarray, relative_offset: int | np.ndarray) -> int | np.ndarray:
    """`LogSegment.shouldRoll` (module docstring): the index in `ROLL_RULES` of the first rule that holds for
    an append of `incoming_bytes` whose last offset is `relative_offset` past the base, or `NO_ROLL`; one
    answer per segment for columns."""
    holds = (size > segment_bytes - incoming_bytes,
             (size > 0) & (waited_ms > segment_ms - jitter_ms),
             index_full,
             (relative_offset < 0) | (relative_offset > INT32_MAX))
    if isinstance(size, np.ndarray):
        return np.select(holds, range(len(ROLL_RULES)), NO_ROLL)
    return next((rule for rule, held in enumerate(holds) if held), NO_ROLL)
