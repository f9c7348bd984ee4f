"""Whether a timestamp is one, and a segment's age: the topic's floor in Kafka's two rules.

Kafka reserves -1 for "no timestamp" and counts every timestamp >= 0 (spec 9):
`LogSegment.largestTimestamp` is `maxTimestampSoFar` when it is >= 0, else the `.log` file's mtime
(spec 4, 7.3), and `rollingBasedTimestamp` counts when >= 0 (spec 3). klake's KIP-228 opt-in
(`klake.timestamps.allow.negative`, KAFKA-6048) lowers that floor (`engine.log.topic_config.min_timestamp`),
and "none" is then one below it; so every "has it a timestamp?" asks here with the topic's floor, never
compares with -1 (`NO_TIMESTAMP`) or 0. The floor is always the caller's to give: a forgotten one would
silently treat a pre-1970 topic as having no timestamps.
"""

from __future__ import annotations

from typing import overload

import numpy as np


@overload
def has_timestamp(ts: int, floor: int) -> bool: ...


@overload
def has_timestamp(ts: np.ndarray, floor: np.ndarray | int) -> np.ndarray: ...


def has_timestamp(ts: int | np.ndarray, floor: np.ndarray | int) -> bool | np.ndarray:
    """A timestamp (a record's, a batch's max, a segment's largest or first batch's) is one when it is at
    least the topic's floor: Kafka's `ts >= 0`, or with KIP-228 every int64 above the floor's "none"."""
    return ts >= floor


def no_timestamp(floor: int) -> int:
    """The "none" of a topic whose floor is `floor`: Kafka's -1, or one below the KIP-228 floor."""
    return floor - 1


@overload
def largest_timestamp_or_mtime(largest: int, mtime: int, floor: int) -> int: ...


@overload
def largest_timestamp_or_mtime(largest: np.ndarray, mtime: np.ndarray,
                               floor: np.ndarray | int) -> np.ndarray: ...


def largest_timestamp_or_mtime(largest: int | np.ndarray, mtime: int | np.ndarray,
                               floor: np.ndarray | int) -> int | np.ndarray:
    """Kafka's `LogSegment.largestTimestamp`: the segment's largest timestamp (`maxTimestampSoFar`) when it
    has one, else its mtime (spec 7.3): the clock retention.ms and min.compaction.lag.ms age a segment by."""
    if isinstance(largest, np.ndarray) or isinstance(mtime, np.ndarray) or isinstance(floor, np.ndarray):
        return np.where(has_timestamp(np.asarray(largest), floor), largest, mtime)
    return largest if has_timestamp(largest, floor) else mtime
