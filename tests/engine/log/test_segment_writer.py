"""Kafka's roll rules (spec 3) and per-append index rules (spec 2.5) in `SegmentWriter`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.index.checks import check_indexes
from engine.index.offset_index import OffsetIndex
from engine.index.rebuild import build_indexes
from engine.index.time_index import TimeIndex
from engine.log.roll_rule import ROLL_INDEX_FULL, ROLL_OFFSET_OVERFLOW, ROLL_SIZE, ROLL_TIME, RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.topic_config import TopicConfig
from tests.catalog_rows import all_segments


def _append(offset: int, timestamps: list[int], value_size: int = 10) -> Append:
    n = len(timestamps)
    data = encode_batch([b"k"] * n, [b"v" * value_size] * n, timestamps, base_offset=offset)
    return Append(data, offset, offset + n - 1, max(timestamps), offset + n - 1)


def _bases(segments) -> list[int]:
    return [s.base_offset for s in segments]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=40), st.integers(200, 3000))
def test_size_roll_matches_kafkas_rule(value_sizes: list[int], segment_bytes: int) -> None:
    appends = [_append(i, [1000 + i], size) for i, size in enumerate(value_sizes)]
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=segment_bytes)), min_timestamp=0)
    for a in appends:
        writer.append(a, now_ms=0)
    segments = all_segments(writer)
    expected, size = [0], 0
    for a in appends:  # brute force: roll if size > segment.bytes - incoming
        if size > segment_bytes - len(a.data):
            expected.append(a.first_offset)
            size = 0
        size += len(a.data)
    assert _bases(segments) == expected
    assert all(len(s.log) <= segment_bytes for s in segments)
    assert b"".join(s.log for s in segments) == b"".join(a.data for a in appends)


def test_time_roll_uses_first_batch_timestamp_and_incoming_max() -> None:
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=1000)), min_timestamp=0)
    for offset, ts in enumerate([5_000, 5_400, 6_000, 6_001, 5_500, 7_002]):
        writer.append(_append(offset, [ts]), now_ms=0)
    segments = all_segments(writer)
    # 6000 - 5000 = 1000 is not > 1000; 6001 - 5000 > 1000 rolls; 7002 - 6001 > 1000 rolls
    assert _bases(segments) == [0, 3, 5]
    assert [s.rolled_because for s in segments] == [ROLL_TIME, ROLL_TIME, None]


def test_far_future_timestamp_rolls_and_then_pins_the_segment() -> None:
    """Spec 3 consequences: a far-future batch starts a new segment; later normal batches give a negative
    wait, so the segment then rolls only on size or index limits."""
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=1000)), min_timestamp=0)
    stamps = [1_000, 1_500, 10**12, 2_000, 50_000, 900_000]
    for offset, ts in enumerate(stamps):
        writer.append(_append(offset, [ts]), now_ms=0)
    assert _bases(all_segments(writer)) == [0, 2]


def test_jitter_is_deterministic_and_bounded() -> None:
    policy = RollPolicy(TopicConfig(segment_ms=10_000, segment_jitter_ms=4_000))
    draws = {policy.jitter_for(f"t-0:{base}") for base in range(200)}
    assert all(0 <= j < 4_000 for j in draws) and len(draws) > 100
    assert policy.jitter_for("t-0:7") == RollPolicy(TopicConfig(segment_ms=10_000, segment_jitter_ms=4_000)).jitter_for("t-0:7")
    assert RollPolicy(TopicConfig(segment_ms=100, segment_jitter_ms=4_000)).jitter_for("x") < 100


def test_offset_overflow_rolls_at_the_incoming_first_offset() -> None:
    writer = SegmentWriter(RollPolicy(TopicConfig()), min_timestamp=0)
    writer.append(_append(0, [1]), now_ms=0)
    far = 2**31 + 10
    writer.append(_append(far, [2, 3]), now_ms=0)
    segments = all_segments(writer)
    assert _bases(segments) == [0, far] and segments[0].rolled_because == ROLL_OFFSET_OVERFLOW


def test_index_full_rolls() -> None:
    policy = RollPolicy(TopicConfig(segment_index_bytes=24, index_interval_bytes=0))  # 3 offset entries, 1 time entry
    writer = SegmentWriter(policy, min_timestamp=0)
    for offset in range(8):
        writer.append(_append(offset, [100 + offset]), now_ms=0)
    segments = all_segments(writer)
    assert segments[0].rolled_because == ROLL_INDEX_FULL
    for seg in segments:
        assert len(seg.timeindex) // 12 <= 2


def test_empty_segment_never_time_rolls_and_size_roll_reason() -> None:
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=200, segment_ms=1)), min_timestamp=0)
    writer.append(_append(0, [0], 100), now_ms=0)
    writer.append(_append(1, [10**9], 100), now_ms=0)
    segments = all_segments(writer)
    assert [s.rolled_because for s in segments] == [ROLL_SIZE, None]


def test_rejects_appends_below_log_end_and_larger_than_a_segment() -> None:
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=100)), min_timestamp=0)
    writer.append(_append(0, [0], 1), now_ms=0)
    with pytest.raises(ValueError, match="below the log end offset"):
        writer.append(_append(0, [0], 1), now_ms=0)
    with pytest.raises(ValueError, match="RecordBatchTooLargeException"):
        writer.append(_append(1, [0], 200), now_ms=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10**6), st.integers(1, 200)), min_size=1, max_size=60))
def test_segments_indexes_are_consistent_and_equal_the_recovery_rebuild(appends) -> None:
    """One batch per append: live index placement equals recovery's (spec 7.2), and every entry agrees with the log."""
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=4000, index_interval_bytes=300, segment_ms=10**9)),
                           min_timestamp=0)
    offset = 0
    for count, ts, size in appends:
        stamps = list(ts + np.arange(count) * 7 % 50)
        writer.append(_append(offset, stamps, size), now_ms=0)
        offset += count
    for seg in all_segments(writer):
        headers = scan_batches(seg.log, "seg").headers
        offsets = OffsetIndex.load(seg.index, seg.base_offset).index
        times = TimeIndex.load(seg.timeindex, seg.base_offset, min_timestamp=0).index
        assert check_indexes(headers, offsets, times, "seg") == []
        rebuilt = build_indexes(headers, seg.base_offset, 300, min_timestamp=0)
        assert rebuilt[0] == offsets and rebuilt[1] == times
        assert times.last_entry()[0] == int(headers.max_timestamp.max())
