"""ListOffsets' max timestamp (-3) on a topic whose records are all before 1970 (KIP-228's opt-in), against
brute force over the records as kafka-python decodes them: Kafka's rule (spec 5.3) is the largest
timestamp and the first offset carrying it, whatever its sign once the topic admits negative times."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from engine.log.append import append_records
from engine.log.lookup import MAX_TIMESTAMP, list_offsets
from engine.log.segment import InMemorySegment
from engine.log.topic_config import KAFKA_MIN_TIMESTAMP, TopicConfig, min_timestamp
from tests.oracles.kafka_python import read_with_kafka_python

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1


def _partition(stamps: list[int], config: TopicConfig) -> tuple[list[InMemorySegment], list[tuple[int, int]]]:
    """The partition an append of `stamps` makes (every segment, the active one last, loaded with the
    topic's floor) and its (offset, timestamp) records read back by kafka-python."""
    n = len(stamps)
    table = pa.table({"key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
                      "value": pa.array([b"v" * 30] * n, pa.binary()),
                      "timestamp": pa.array(stamps, pa.int64())})
    result = append_records(table, config, log_end_offset=0, now_ms=NOW)
    assert result.rejects.num_rows == 0
    logs = [(s.base_offset, s.log, s.index, s.timeindex) for s in result.closed]
    logs.append((result.active.base_offset, b"".join(result.active.pieces), None, None))
    floor = min_timestamp(config)
    segments = [InMemorySegment.load(base, log, index, timeindex, f"{base:020d}.log", min_timestamp=floor)
                for base, log, index, timeindex in logs if log]
    records = [(r[0], r[1]) for _, log, _, _ in logs if log for r in read_with_kafka_python(log)[0]]
    return segments, records


def brute_max_timestamp(records: list[tuple[int, int]], log_start: int) -> tuple[int, int]:
    """-3 by brute force: the largest timestamp at or after the log start offset, its first offset."""
    live = [r for r in records if r[0] >= log_start]
    if not live:
        return -1, -1
    largest = max(t for _, t in live)
    return next(o for o, t in live if t == largest), largest


def _kip228(**kw) -> TopicConfig:
    return TopicConfig(allow_negative_timestamps=True, message_timestamp_before_max_ms=LONG_MAX, **kw)


def test_max_timestamp_of_a_pre_1970_partition_is_its_largest_record() -> None:
    """The issue's three records: -9000, -5000, -7000 ms answer offset 1 at -5000 (not "none")."""
    segments, records = _partition([-9_000, -5_000, -7_000], _kip228())
    answer = list_offsets(segments, MAX_TIMESTAMP, min_timestamp=min_timestamp(_kip228()))
    assert (answer.offset, answer.timestamp) == brute_max_timestamp(records, 0) == (1, -5_000)


@pytest.mark.parametrize("seed", range(4))
def test_max_timestamp_over_pre_1970_segments_equals_brute_force(seed: int) -> None:
    """Several segments of out-of-order, tied, all-negative timestamps; every log start offset (one inside
    a segment recomputes its max from the records at or after it)."""
    rng = np.random.default_rng(seed)
    stamps = (-rng.integers(1, 50, 60) * 1_000 - rng.integers(0, 3, 60)).tolist()  # ties, 1969-12-31
    config = _kip228(segment_bytes=400, max_message_bytes=200, index_interval_bytes=0)
    segments, records = _partition(stamps, config)
    assert len(segments) > 3 and [t for _, t in records] == stamps
    for start in range(len(stamps) + 1):
        answer = list_offsets(segments, MAX_TIMESTAMP, start, min_timestamp=min_timestamp(config))
        assert (answer.offset, answer.timestamp) == brute_max_timestamp(records, start), start


def test_a_kafka_topic_without_timestamps_has_no_max() -> None:
    """Kafka's floor: records without a timestamp (-1) give no -3 answer (spec 5.3: only max >= 0 counts)."""
    kafka = TopicConfig(message_timestamp_before_max_ms=LONG_MAX)
    segments, records = _partition([-1, -1], kafka)
    assert [t for _, t in records] == [-1, -1]
    answer = list_offsets(segments, MAX_TIMESTAMP, min_timestamp=KAFKA_MIN_TIMESTAMP)
    assert (answer.offset, answer.timestamp) == (-1, -1)
