"""The index-full rule (`engine.index.full_rule`) against Kafka's numbers and the file arithmetic it states:
an index of `segment.index.bytes` holds floor(bytes / 8) offset entries and floor(bytes / 12) time entries,
the time index keeping one of them for the final entry (`AbstractIndex.isFull`, `TimeIndex.isFull`)."""

from __future__ import annotations

import numpy as np

from engine.format.builder import encode_batch
from engine.index.full_rule import IndexFullRule
from engine.log.roll_rule import ROLL_INDEX_FULL, RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.topic_config import TopicConfig
from tests.catalog_rows import all_segments
from tests.oracles.kafka_tools import run_java_helper


def test_kafka_default_index_holds_its_numbers() -> None:
    rule = IndexFullRule(10 * 1024 * 1024)  # segment.index.bytes default
    assert (rule.max_offset_entries, rule.max_time_entries) == (1_310_720, 873_813)
    assert not rule.is_full(1_310_719, 873_811) and rule.is_full(1_310_720, 0) and rule.is_full(0, 873_812)


def test_full_when_the_file_has_no_room_brute_force() -> None:
    """Full iff one more 8-byte entry does not fit the file, or one more 12-byte live entry leaves no room
    for the final one; fits iff every entry has its bytes. Scalars and columns answer alike."""
    sizes = np.arange(12, 400)
    entries = np.arange(0, 60)
    b, n = np.meshgrid(sizes, entries)
    offset_full = (n + 1) * 8 > b
    time_full = (n + 2) * 12 > b
    no_time_room = b < 2 * 12  # an empty .timeindex under 24 bytes is full: its one slot is the final entry's
    assert np.array_equal(IndexFullRule(b).is_full(n, np.zeros_like(n)), offset_full | no_time_room)
    assert np.array_equal(IndexFullRule(b).is_full(np.zeros_like(n), n), time_full)
    for size in (12, 23, 24, 25, 95, 96, 120, 131):
        rule = IndexFullRule(size)
        for k in range(0, 20):
            assert rule.is_full(k, 0) == ((k + 1) * 8 > size or size < 2 * 12)
            assert rule.holds(k, 0) == (k * 8 <= size and size >= 12)
            assert rule.holds(0, k) == ((k + 1) * 12 <= size)  # k live entries and the final one's slot


def _append(offset: int, timestamp: int) -> Append:
    data = encode_batch([b"k"], [b"v"], [timestamp], base_offset=offset)
    return Append(data, offset, offset, timestamp, offset)


def _writer(index_bytes: int) -> SegmentWriter:
    config = TopicConfig(segment_index_bytes=index_bytes, index_interval_bytes=0, segment_ms=10**15)
    return SegmentWriter(RollPolicy(config), min_timestamp=0)


def test_written_segments_roll_at_kafkas_entry_counts() -> None:
    """With an entry per append after a segment's first (index.interval.bytes 0), a segment rolls when its
    index is full: rising timestamps at floor(bytes/12) - 1 time entries (the last one holds the max, so the
    final entry adds none), a constant timestamp (one time entry) at floor(bytes/8) offset entries."""
    for index_bytes in (24, 60, 100, 131):
        rising = _writer(index_bytes)
        for offset in range(60):
            rising.append(_append(offset, 1_000 + offset), now_ms=0)
        rolled = [s for s in all_segments(rising) if s.rolled_because]
        assert len(rolled) >= 2 and all(s.rolled_because == ROLL_INDEX_FULL for s in rolled)
        assert {len(s.timeindex) // 12 for s in rolled} == {index_bytes // 12 - 1}
    for index_bytes in (60, 100, 131):
        flat = _writer(index_bytes)
        for offset in range(60):
            flat.append(_append(offset, 1_000), now_ms=0)
        rolled = [s for s in all_segments(flat) if s.rolled_because]
        assert len(rolled) >= 2 and all(s.rolled_because == ROLL_INDEX_FULL for s in rolled)
        assert {len(s.index) // 8 for s in rolled} == {index_bytes // 8}
        assert {len(s.timeindex) // 12 for s in rolled} == {1}


def test_kafkas_own_indexes_fill_where_the_rule_says() -> None:
    """Kafka 4.1's `OffsetIndex` / `TimeIndex`, filled by live appends until `isFull()`, then the final time entry
    past the check: each holds what `IndexFullRule` says, at every size around the entry boundaries."""
    sizes = [12, 16, 23, 24, 25, 35, 36, 47, 48, 96, 100, 131, 4096]
    lines = run_java_helper("IndexFull", *map(str, sizes)).split()
    got = [tuple(map(int, lines[i:i + 6])) for i in range(0, len(lines), 6)]
    want = []
    for size in sizes:
        rule = IndexFullRule(size)
        live_offsets = next(k for k in range(size) if rule.offset_index_full(k))
        live_times = next(k for k in range(size) if rule.time_index_full(k))
        want.append((size, rule.max_offset_entries, live_offsets, rule.max_time_entries, live_times, live_times + 1))
    assert got == want
