"""`should_roll` against Kafka's `LogSegment.shouldRoll` transcribed line by line, for one segment (ints)
and for columns (the roll plan's form): both forms give the same first rule."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.log.roll_rule import NO_ROLL, ROLL_RULES, RollPolicy, should_roll, time_waited_for_roll
from engine.log.topic_config import TopicConfig

INT_MAX = 2**31 - 1


def kafka_should_roll(size: int, messages_size: int, max_segment_bytes: int, max_timestamp_in_messages: int,
                      now: int, rolling_based_timestamp: int, created: int, max_segment_ms: int, jitter: int,
                      index_full: bool, max_offset_in_messages: int, base_offset: int) -> str | None:
    """`LogSegment.shouldRoll` (Kafka 4.1), which answers a boolean; the reason is the first disjunct that holds."""
    waited = (max_timestamp_in_messages - rolling_based_timestamp if rolling_based_timestamp >= 0
              else now - created)
    reached_roll_ms = waited > max_segment_ms - jitter
    relative = max_offset_in_messages - base_offset
    for reason, holds in (("size", size > max_segment_bytes - messages_size), ("time", size > 0 and reached_roll_ms),
                          ("index-full", index_full), ("offset-overflow", not 0 <= relative <= INT_MAX)):
        if holds:
            return reason
    return None


_SEGMENTS = st.tuples(
    st.integers(0, 300), st.integers(0, 100), st.integers(14, 300), st.integers(-10, 5_000), st.integers(0, 5_000),
    st.sampled_from([-1, 0, 10, 900, 4_000]), st.integers(0, 5_000), st.integers(1, 3_000), st.integers(0, 500),
    st.booleans(), st.sampled_from([0, 5, INT_MAX, INT_MAX + 1, INT_MAX + 7]), st.sampled_from([0, 6]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_SEGMENTS, min_size=1, max_size=20))
def test_should_roll_is_kafkas_rule_for_one_segment_and_for_columns(segments: list[tuple]) -> None:
    truth = [kafka_should_roll(*s) for s in segments]
    one = []
    for size, incoming, seg_bytes, max_ts, now, base_ts, created, seg_ms, jitter, full, last, base in segments:
        waited = time_waited_for_roll(base_ts, max_ts, created, now, 0)
        rule = should_roll(size, incoming, seg_bytes, waited, seg_ms, jitter, full, last - base)
        one.append(None if rule == NO_ROLL else ROLL_RULES[rule])
    assert one == truth
    c = [np.array(column, np.int64) for column in zip(*segments, strict=True)]
    size, incoming, seg_bytes, max_ts, now, base_ts, created, seg_ms, jitter, full, last, base = c
    waited = time_waited_for_roll(base_ts, max_ts, created, now, 0)
    rules = should_roll(size, incoming, seg_bytes, waited, seg_ms, jitter, full.astype(bool), last - base)
    assert [None if r == NO_ROLL else ROLL_RULES[r] for r in rules.tolist()] == truth


def test_policy_reads_the_topic_config() -> None:
    compacted = TopicConfig(cleanup_policy="compact", segment_ms=5_000, max_compaction_lag_ms=1_000,
                            segment_bytes=500, segment_jitter_ms=7, segment_index_bytes=48, index_interval_bytes=9)
    policy = RollPolicy(compacted)
    assert (policy.segment_bytes, policy.segment_ms, policy.segment_jitter_ms, policy.segment_index_bytes,
            policy.index_interval_bytes) == (500, 1_000, 7, 48, 9)
    assert RollPolicy(TopicConfig()).segment_ms == TopicConfig().segment_ms == 604_800_000
