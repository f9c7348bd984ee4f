"""`engine.log.kept_offsets` and `append_records(keep_offsets=True)` (issue 30, item 1): the follower's offset
rule against a record-by-record brute force, and the written batches read back by kafka-python."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from engine.format.batch import scan_batches
from engine.index.checks import check_indexes
from engine.log.append import INVALID_TIMESTAMP, RECORD_TOO_LARGE, append_records
from engine.log.kept_offsets import OFFSETS_OUT_OF_ORDER, kept_offset_mask
from engine.log.topic_config import TopicConfig

NOW = 1_700_000_000_000
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OFFSETS = st.lists(st.one_of(st.none(), st.integers(0, 40)), max_size=60)


def _brute_force(offsets: list[int | None], log_end: int) -> list[bool]:
    """Record by record, as a follower checks a leader's batches: kept iff above every earlier kept offset
    and at or after the log end."""
    highest, out = log_end - 1, []
    for offset in offsets:
        keep = offset is not None and offset > highest
        out.append(keep)
        if keep:
            highest = offset
    return out


@SETTINGS
@given(OFFSETS, st.integers(0, 30))
def test_the_rule_is_the_record_by_record_check(offsets, log_end) -> None:
    values = np.array([-1 if o is None else o for o in offsets], np.int64)
    valid = np.array([o is not None for o in offsets], bool)
    assert kept_offset_mask(values, valid, log_end).tolist() == _brute_force(offsets, log_end)


def _table(offsets, stamps, types=None, values=None) -> pa.Table:
    n = len(offsets)
    cols = {"key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            "value": pa.array(values or [b"v%d" % i for i in range(n)], pa.binary()),
            "timestamp": pa.array(stamps, pa.int64()), "offset": pa.array(offsets, pa.int64())}
    if types is not None:
        cols["timestampType"] = pa.array(types, pa.int32())
    return pa.table(cols)


def _read(result) -> tuple[list, list]:
    """Records (offset, timestamp, key, value) and batches (batch, its records' offsets), read by kafka-python
    (every batch CRC-checked) from every segment."""
    records, batches = [], []
    for log in [*(seg.log for seg in result.closed), b"".join(result.active.pieces)]:
        reader = MemoryRecords(log)
        while (batch := reader.next_batch()) is not None:
            assert batch.validate_crc()
            inside = [(r.offset, r.timestamp, r.key, r.value) for r in batch]
            records += inside
            batches.append((batch, [o for o, *_ in inside]))
    return records, batches


@SETTINGS
@given(OFFSETS, st.integers(0, 30), st.booleans(), st.integers(1, 4))
def test_kept_records_sit_at_their_offsets_and_the_others_are_rejected(offsets, log_end, compressed, per_batch):
    config = TopicConfig(segment_bytes=400, compression_type="gzip" if compressed else "producer",
                         message_timestamp_before_max_ms=1000)  # old timestamps: a follower keeps them
    stamps = [NOW - 10**9 + i for i in range(len(offsets))]
    result = append_records(_table(offsets, stamps), config, log_end_offset=log_end, now_ms=NOW,
                            batch_bytes=70 + 20 * per_batch, keep_offsets=True)
    keep = _brute_force(offsets, log_end)
    rejects = result.rejects.to_pydict()
    assert rejects["row"] == [i for i, k in enumerate(keep) if not k]
    assert set(rejects["reason"]) <= {OFFSETS_OUT_OF_ORDER}
    records, batches = _read(result)
    expected = [(offsets[i], stamps[i], b"k%d" % i, b"v%d" % i) for i, k in enumerate(keep) if k]
    assert records == expected
    assert result.offsets.tolist() == [o if k else -1 for o, k in zip(offsets, keep, strict=True)]
    assert result.log_end_offset == (expected[-1][0] + 1 if expected else log_end)
    for batch, inside in batches:  # a batch spans consecutive offsets: base offset and lastOffsetDelta as Kafka's
        assert inside == list(range(batch.base_offset, batch.base_offset + len(inside)))
        assert batch.last_offset_delta == len(inside) - 1
    for seg in result.closed:
        assert check_indexes(scan_batches(seg.log, "seg").headers, *_indexes(seg), "seg") == []
    if expected:  # a new log starts at its first kept record
        first = result.closed[0].base_offset if result.closed else result.active.base_offset
        assert first == expected[0][0]


def _indexes(seg):
    from engine.index.offset_index import OffsetIndex
    from engine.index.time_index import TimeIndex
    return OffsetIndex.load(seg.index, seg.base_offset).index, TimeIndex.load(seg.timeindex, seg.base_offset).index


def test_timestamp_types_and_times_are_kept_as_given() -> None:
    offsets = [5, 6, 7, 8, 9, 12]
    stamps = [NOW - 10**10, NOW - 10**10 + 1, 4242, 4242, 4243, NOW - 5]
    types = [0, 0, 1, 1, 1, 0]
    config = TopicConfig(message_timestamp_before_max_ms=1000)
    result = append_records(_table(offsets, stamps, types), config, log_end_offset=0, now_ms=NOW, keep_offsets=True)
    assert result.rejects.num_rows == 0
    records, batches = _read(result)
    assert [(r[0], r[1]) for r in records] == list(zip(offsets, stamps, strict=True))
    assert [(b.base_offset, b.timestamp_type, b.max_timestamp) for b, _ in batches] == [
        (5, 0, NOW - 10**10 + 1), (7, 1, 4242), (9, 1, 4243), (12, 0, NOW - 5)]
    window = append_records(_table([0], [NOW - 10**10]), config, log_end_offset=0, now_ms=NOW)  # a leader's append
    assert window.rejects.column("reason").to_pylist() == [INVALID_TIMESTAMP]


def test_a_record_compression_cannot_fit_leaves_a_gap() -> None:
    rng = np.random.default_rng(7)
    values = [b"a" * 20, rng.bytes(300), b"b" * 20, b"c" * 20]
    config = TopicConfig(compression_type="gzip", max_message_bytes=300)
    result = append_records(_table([10, 11, 12, 13], [NOW] * 4, values=values), config, log_end_offset=3,
                            now_ms=NOW, keep_offsets=True)
    assert result.rejects.column("reason").to_pylist() == [RECORD_TOO_LARGE]
    records, _ = _read(result)
    assert [r[0] for r in records] == [10, 12, 13]
    assert result.log_end_offset == 14


def test_chunks_continue_the_rule_where_the_previous_one_ended() -> None:
    config = TopicConfig()
    first = append_records(_table([3, 4, 9], [NOW] * 3), config, log_end_offset=0, now_ms=NOW, keep_offsets=True)
    second = append_records(_table([9, 8, 10], [NOW] * 3), config, log_end_offset=first.log_end_offset, now_ms=NOW,
                            resume=first.active.state, resume_log=b"".join(first.active.pieces), keep_offsets=True)
    assert second.rejects.column("row").to_pylist() == [0, 1]
    messages = second.rejects.column("message").to_pylist()
    assert all("below the log end offset 10" in m for m in messages)
    assert second.offsets.tolist() == [-1, -1, 10]
