"""`engine.log.append`: Kafka's leader append path (spec 2, 3, 9) checked against kafka-python and brute force.

Every produced segment is read back by kafka-python's `MemoryRecords` (an independent decoder, CRCs
validated); expectations are computed here from the spec's rules, record by record.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.format import compression
from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.format.records import HEADERS_TYPE
from engine.index.append_rule import SegmentIndexer
from engine.index.checks import check_indexes
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.append import (
    INVALID_RECORD,
    INVALID_TIMESTAMP,
    NEGATIVE_TIMESTAMP,
    RECORD_TOO_LARGE,
    append_records,
)
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import ActiveSegment
from engine.log.summary import TxnSummary, summarize_segment
from engine.log.topic_config import KIP228_MIN_TIMESTAMP, TopicConfig, min_timestamp
from tests.oracles.kafka_python import read_with_kafka_python

NOW = 1_700_000_000_000
LONG_MAX = 2**63 - 1
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _table(keys, values, timestamps=None, headers=None) -> pa.Table:
    cols = {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}
    if timestamps is not None:
        cols["timestamp"] = pa.array(timestamps, pa.int64())
    if headers is not None:
        cols["headers"] = pa.array([None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
                                   HEADERS_TYPE)
    return pa.table(cols)


def _segments(result) -> list[tuple[int, bytes]]:
    """(base offset, log bytes) of every segment, the active one last (non-resumed results only)."""
    out = [(s.base_offset, s.log) for s in result.closed]
    if b"".join(result.active.pieces):
        out.append((result.active.base_offset, b"".join(result.active.pieces)))
    return out


def _read_all(result) -> tuple[list, list]:
    records, batches = [], []
    for _, log in _segments(result):
        r, b = read_with_kafka_python(log)
        records += r
        batches += b
    return records, batches


def _check_segments(result, min_timestamp: int = 0) -> None:
    """Every closed segment's indexes agree with its log (final entry included); the active one's too."""
    for seg in result.closed:
        headers = scan_batches(seg.log, "seg").headers
        offsets = OffsetIndex.load(seg.index, seg.base_offset).index
        times = TimeIndex.load(seg.timeindex, seg.base_offset, min_timestamp=min_timestamp).index
        assert check_indexes(headers, offsets, times, "seg") == []
    active = result.active
    headers = scan_batches(b"".join(active.pieces), "active").headers
    assert check_indexes(headers, active.offset_index, active.time_index, "active", active=True) == []


def _expected_reason(key, ts, config: TopicConfig, now: int) -> str | None:
    """Kafka's per-record rules, in LogValidator's order (spec 2.1, 2.3, 9)."""
    if config.compacted and key is None:
        return INVALID_RECORD
    ts = now if ts is None else ts
    if not config.allow_negative_timestamps and ts < -1:
        return NEGATIVE_TIMESTAMP
    checked = config.message_timestamp_type == "CreateTime" and (config.allow_negative_timestamps or ts != -1)
    if checked and (now - ts > config.message_timestamp_before_max_ms
                    or ts - now > config.message_timestamp_after_max_ms):
        return INVALID_TIMESTAMP
    return None


def test_timestamp_window_has_strict_boundaries() -> None:
    config = TopicConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    stamps = [NOW - 1000, NOW - 1001, NOW + 500, NOW + 501, -1, None, -2, 0, NOW]
    result = append_records(_table([b"k"] * len(stamps), [b"v"] * len(stamps), stamps), config,
                            log_end_offset=100, now_ms=NOW)
    rejects = result.rejects.to_pydict()
    assert rejects["row"] == [1, 3, 6, 7]
    assert rejects["reason"] == [INVALID_TIMESTAMP, INVALID_TIMESTAMP, NEGATIVE_TIMESTAMP, INVALID_TIMESTAMP]
    window = "[2023-11-14T22:13:19Z, 2023-11-14T22:13:20.500Z] with now = 2023-11-14T22:13:20Z, before = 1 second"
    assert all(window in m for m, r in zip(rejects["message"], rejects["reason"], strict=True)
               if r == INVALID_TIMESTAMP)
    assert rejects["message"][0].startswith("timestamp 2023-11-14T22:13:18.999Z is out of range")
    assert rejects["message"][2].startswith("timestamp 1969-12-31T23:59:59.998Z is before 1970 (negative)")
    records, batches = _read_all(result)
    assert [(o, t) for o, t, *_ in records] == [(100, NOW - 1000), (101, NOW + 500), (102, -1), (103, NOW),
                                                (104, NOW)]
    assert all(b.timestamp_type == 0 for b in batches)
    assert result.offsets.tolist() == [100, -1, 101, -1, 102, 103, -1, -1, 104]
    assert result.log_end_offset == 105 and result.counters.records_accepted == 5
    assert result.counters.rejected[INVALID_TIMESTAMP] == 3 and result.counters.rejected[NEGATIVE_TIMESTAMP] == 1


@SETTINGS
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=8)),
                          st.one_of(st.none(), st.just(-1), st.integers(-3, 3), st.integers(NOW - 3000, NOW + 3000))),
                min_size=1, max_size=80),
       st.integers(0, 2500), st.integers(0, 2500), st.booleans(), st.booleans(), st.integers(0, 10**6))
def test_rejects_match_the_rules_and_accepted_records_are_unaffected(rows, before, after, compacted, kip228, leo):
    config = TopicConfig(message_timestamp_before_max_ms=before, message_timestamp_after_max_ms=after,
                         cleanup_policy="compact" if compacted else "delete", allow_negative_timestamps=kip228,
                         max_message_bytes=300)
    keys = [k for k, _ in rows]
    values = [b"value-%d" % i for i in range(len(rows))]
    stamps = [t for _, t in rows]
    result = append_records(_table(keys, values, stamps), config, log_end_offset=leo, now_ms=NOW)
    expected = [_expected_reason(k, t, config, NOW) for k, t in rows]
    rejects = result.rejects.to_pydict()
    assert rejects["row"] == [i for i, r in enumerate(expected) if r is not None]
    assert rejects["reason"] == [r for r in expected if r is not None]
    assert rejects["value"] == [values[i] for i in rejects["row"]]
    kept = [i for i, r in enumerate(expected) if r is None]
    records, _ = _read_all(result)
    assert records == [(leo + j, NOW if stamps[i] is None else stamps[i], keys[i], values[i], [])
                       for j, i in enumerate(kept)]
    assert result.log_end_offset == leo + len(kept)
    assert sum(result.counters.rejected.values()) == len(rows) - len(kept)
    _check_segments(result, KIP228_MIN_TIMESTAMP if kip228 else 0)


@pytest.mark.parametrize("monotonic", [False, True])
def test_log_append_time_stamps_now_once_and_skips_the_window(monotonic: bool) -> None:
    config = TopicConfig(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=10,
                         message_timestamp_after_max_ms=10, monotonic_log_append_time=monotonic,
                         max_message_bytes=200, compression_type="lz4")
    stamps = [0, NOW - 10**9, None, NOW + 10**9, -1]
    later = NOW + 5_000  # the last append happened after this job's clock: the clock stepped back
    result = append_records(_table([b"k"] * 5, [b"v" * 60] * 5, stamps), config, log_end_offset=7, now_ms=NOW,
                            last_log_append_time=later)
    stamped = later if monotonic else NOW
    records, batches = _read_all(result)
    assert result.rejects.num_rows == 0 and len(batches) > 1
    assert [(o, t) for o, t, *_ in records] == [(7 + i, stamped) for i in range(5)]
    assert all(b.timestamp_type == 1 and b.max_timestamp == stamped for b in batches)
    assert result.last_log_append_time == stamped
    assert result.active.state.max_timestamp == stamped
    _check_segments(result)


def test_log_append_time_without_records_keeps_the_last_append_time() -> None:
    config = TopicConfig(message_timestamp_type="LogAppendTime", cleanup_policy="compact")
    result = append_records(_table([None], [b"v"]), config, log_end_offset=3, now_ms=NOW, last_log_append_time=42)
    assert result.last_log_append_time == 42 and result.log_end_offset == 3
    assert result.rejects.column("reason").to_pylist() == [INVALID_RECORD]


def test_keyless_records_on_compacted_topics_are_invalid() -> None:
    table = _table([b"a", None, b"c", None], [b"1", b"2", None, b"4"], [NOW] * 4)
    compacted = append_records(table, TopicConfig(cleanup_policy="compact,delete"), log_end_offset=0, now_ms=NOW)
    assert compacted.rejects.column("row").to_pylist() == [1, 3]
    assert set(compacted.rejects.column("reason").to_pylist()) == {INVALID_RECORD}
    assert "KAFKA-1755" in compacted.rejects.column("message")[0].as_py()
    assert [(o, k, v) for o, _, k, v, _ in _read_all(compacted)[0]] == [(0, b"a", b"1"), (1, b"c", None)]
    plain = append_records(table, TopicConfig(), log_end_offset=0, now_ms=NOW)
    assert plain.rejects.num_rows == 0 and [k for _, _, k, *_ in _read_all(plain)[0]] == [b"a", None, b"c", None]


def test_headers_and_null_header_keys() -> None:
    headers = [[("h", b"1"), ("e", None)], None, [], [(None, b"x")], [("ü", b"")]]
    result = append_records(_table([b"k"] * 5, [b"v"] * 5, [NOW] * 5, headers), TopicConfig(),
                            log_end_offset=0, now_ms=NOW)
    assert result.rejects.column("row").to_pylist() == [3]
    assert result.rejects.column("reason").to_pylist() == [INVALID_RECORD]
    records, _ = _read_all(result)
    assert [h for *_, h in records] == [[("h", b"1"), ("e", None)], [], [], [("ü", b"")]]


def test_spark_timestamp_column_and_missing_key() -> None:
    table = pa.table({"value": pa.array([b"a", b"b"]),
                      "timestamp": pa.array([1_500_000, None], pa.timestamp("us"))})
    result = append_records(table, TopicConfig(message_timestamp_after_max_ms=LONG_MAX), log_end_offset=0,
                            now_ms=NOW)
    records, _ = _read_all(result)
    assert [(t, k) for _, t, k, *_ in records] == [(1500, None), (NOW, None)]


def _greedy(sizes_of, n: int, limit: int) -> list[int]:
    """Brute force: batches grow while the encoded batch stays <= limit."""
    lengths, start = [], 0
    while start < n:
        end = start + 1
        while end < n and sizes_of(start, end + 1) <= limit:
            end += 1
        lengths.append(end - start)
        start = end
    return lengths


@SETTINGS
@given(st.lists(st.integers(0, 700), min_size=1, max_size=40), st.integers(150, 1500),
       st.lists(st.integers(NOW - 10**6, NOW), min_size=40, max_size=40))
def test_uncompressed_batches_are_greedy_and_within_max_message_bytes(sizes, limit, stamps) -> None:
    values = [bytes([i % 251]) * s for i, s in enumerate(sizes)]
    stamps = stamps[:len(sizes)]
    config = TopicConfig(max_message_bytes=limit, message_timestamp_before_max_ms=LONG_MAX)
    result = append_records(_table([b"key"] * len(sizes), values, stamps), config, log_end_offset=5, now_ms=NOW)

    def solo(i: int) -> int:
        return len(encode_batch([b"key"], [values[i]], [stamps[i]]))

    too_big = [i for i in range(len(sizes)) if solo(i) > limit]
    assert result.rejects.column("row").to_pylist() == too_big
    assert set(result.rejects.column("reason").to_pylist()) <= {RECORD_TOO_LARGE}
    kept = [i for i in range(len(sizes)) if i not in too_big]

    def batch_size(a: int, b: int) -> int:
        rows = kept[a:b]
        return len(encode_batch([b"key"] * len(rows), [values[i] for i in rows], [stamps[i] for i in rows]))

    records, batches = _read_all(result)
    assert [b.records_count for b in batches] == _greedy(batch_size, len(kept), limit)
    assert all(b.size_in_bytes <= limit for b in batches)
    assert [(o, v) for o, _, _, v, _ in records] == [(5 + j, values[i]) for j, i in enumerate(kept)]
    _check_segments(result)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_fit_and_oversized_records_are_judged_compressed(codec: str) -> None:
    rng = np.random.default_rng(7)
    limit = 2_000
    values = [rng.bytes(int(n)) for n in rng.integers(10, 400, 60)]  # incompressible
    values[10] = b"z" * 20_000  # far over the limit uncompressed, tiny compressed: Kafka accepts it
    values[20] = rng.bytes(limit)  # incompressible and over the limit: rejected
    config = TopicConfig(max_message_bytes=limit, compression_type=codec)
    result = append_records(_table([b"k"] * 60, values, [NOW] * 60), config, log_end_offset=0, now_ms=NOW)
    assert result.rejects.column("row").to_pylist() == [20]
    assert result.rejects.column("reason").to_pylist() == [RECORD_TOO_LARGE]
    records, batches = _read_all(result)
    assert [v for *_, v, _ in records] == values[:20] + values[21:]
    assert [o for o, *_ in records] == list(range(59))
    assert all(b.size_in_bytes <= limit and b.compression_type == compression.codec_id(codec) for b in batches)
    _check_segments(result)


def test_kip228_negative_timestamps_are_real_instants() -> None:
    stamps = [-5, -1, None, -(2**62), 0, -7]
    config = TopicConfig(allow_negative_timestamps=True, message_timestamp_before_max_ms=LONG_MAX,
                         max_message_bytes=140, index_interval_bytes=0)
    result = append_records(_table([b"k"] * 6, [b"v" * 40] * 6, stamps), config, log_end_offset=0, now_ms=NOW)
    records, batches = _read_all(result)
    assert result.rejects.num_rows == 0
    assert [t for _, t, *_ in records] == [-5, -1, NOW, -(2**62), 0, -7]
    # maxTimestamp is the true maximum, also below -1 (Kafka's builder would floor it at -1)
    assert [b.max_timestamp for b in batches] == [-5, -1, NOW, -(2**62), 0, -7]
    state = result.active.state
    assert state.time_index.min_timestamp == KIP228_MIN_TIMESTAMP and state.max_timestamp == NOW
    # Negative first-batch timestamps are record time (Kafka: firstTs >= 0): NOW - (-1) > segment.ms rolls.
    assert [(s.base_offset, s.rolled_because, s.max_timestamp) for s in result.closed] == [(0, "time", -1)]
    assert state.base_offset == 2 and state.rolling_base_timestamp == NOW
    _check_segments(result, KIP228_MIN_TIMESTAMP)
    # The window applies to -1 too in KIP-228 mode; Kafka mode rejects < -1 and exempts -1.
    windowed = TopicConfig(allow_negative_timestamps=True, message_timestamp_before_max_ms=1000)
    assert append_records(_table([b"k"], [b"v"], [-1]), windowed, log_end_offset=0,
                          now_ms=NOW).rejects.column("reason").to_pylist() == [INVALID_TIMESTAMP]
    kafka = TopicConfig(message_timestamp_before_max_ms=1000)
    assert append_records(_table([b"k"] * 2, [b"v"] * 2, [-1, -5]), kafka, log_end_offset=0,
                          now_ms=NOW).rejects.column("reason").to_pylist() == [NEGATIVE_TIMESTAMP]


def test_kip228_cuts_batches_where_a_timestamp_delta_overflows() -> None:
    stamps = [NOW - LONG_MAX, LONG_MAX, 0]  # both ends of the window: the delta does not fit int64
    config = TopicConfig(allow_negative_timestamps=True, message_timestamp_before_max_ms=LONG_MAX,
                         message_timestamp_after_max_ms=LONG_MAX)
    result = append_records(_table([b"k"] * 3, [b"v"] * 3, stamps), config, log_end_offset=0, now_ms=NOW)
    records, batches = _read_all(result)
    assert [t for _, t, *_ in records] == stamps and len(batches) == 2


def test_kafka_mode_time_roll_uses_wall_clock_without_timestamps() -> None:
    config = TopicConfig(segment_ms=1000)
    first = append_records(_table([b"k"], [b"v"], [-1]), config, log_end_offset=0, now_ms=NOW)
    assert first.active.state.rolling_base_timestamp == -1
    same = append_records(_table([b"k"], [b"v"], [-1]), config, log_end_offset=1, now_ms=NOW + 1000,
                          resume=first.active.state, resume_log=b"".join(first.active.pieces))
    assert same.closed == []
    later = append_records(_table([b"k"], [b"v"], [-1]), config, log_end_offset=1, now_ms=NOW + 1001,
                           resume=first.active.state, resume_log=b"".join(first.active.pieces))
    assert [s.rolled_because for s in later.closed] == ["time"] and later.active.base_offset == 1


# ------------------------------------------------------------------------------------------ resume


def _assemble(calls) -> tuple[list, tuple]:
    """Whole segments from resumed calls that carried only new bytes: (closed, active) comparables."""
    pending = b""  # bytes of the segment still active after the previous call
    closed = []
    for result in calls:
        for seg in result.closed:
            assert seg.start_position in (0, len(pending))
            data = (pending if seg.start_position else b"") + seg.log
            closed.append((seg.base_offset, data, seg.index, seg.timeindex, seg.max_timestamp,
                           seg.offset_of_max_timestamp, seg.next_offset, seg.rolled_because))
            pending = b""
        active = result.active
        assert active.start_position in (0, len(pending))
        pending = (pending if active.start_position else b"") + b"".join(active.pieces)
    last = calls[-1].active
    return closed, (last.base_offset, pending, last.offset_index.to_bytes(), last.time_index.to_bytes(),
                    last.state)


def test_one_call_per_batch_equals_one_call_across_all_roll_reasons() -> None:
    rng = np.random.default_rng(3)
    n = 400
    stamps = NOW - 4_000 + np.cumsum(rng.integers(0, 30, n))
    stamps[rng.random(n) < 0.1] = -1
    stamps[200] = NOW + 2_000  # a jump forward: time roll
    table = _table([b"k%d" % i for i in range(n)], [b"x" * int(v) for v in rng.integers(0, 200, n)],
                   stamps.tolist())
    config = TopicConfig(segment_bytes=3_000, segment_ms=1_500, index_interval_bytes=300, segment_index_bytes=96,
                         max_message_bytes=500)
    # batch_bytes=1 packs every record alone (a packing target, like batch.size), as one call per record does
    whole = append_records(table, config, log_end_offset=1000, now_ms=NOW, segment_key="t-0", batch_bytes=1)
    assert {s.rolled_because for s in whole.closed} == {"size", "time", "index-full"}
    calls = _in_calls(table, config, list(range(1, n)))
    assert _assemble(calls) == _assemble([whole])


def _resume_config(data) -> TopicConfig:
    return TopicConfig(
        segment_bytes=data.draw(st.integers(700, 4000)), segment_ms=data.draw(st.integers(500, 20_000)),
        segment_jitter_ms=data.draw(st.integers(0, 300)), index_interval_bytes=data.draw(st.integers(0, 600)),
        segment_index_bytes=data.draw(st.sampled_from([10_485_760, 36, 60])), max_message_bytes=600,
        message_timestamp_type=data.draw(st.sampled_from(["CreateTime", "LogAppendTime"])),
        message_timestamp_after_max_ms=3_000, compression_type=data.draw(st.sampled_from(["producer", "lz4"])),
        allow_negative_timestamps=data.draw(st.booleans()))


def _in_calls(table: pa.Table, config: TopicConfig, cuts: list[int]) -> list:
    calls, leo, state = [], 1000, None
    for a, b in zip([0, *cuts], [*cuts, table.num_rows], strict=True):
        part = append_records(table.slice(a, b - a), config, log_end_offset=leo, now_ms=NOW, resume=state,
                              segment_key="t-0")
        calls.append(part)
        leo, state = part.log_end_offset, part.active.state
    return calls


@st.composite
def _resume_rows(draw) -> list[tuple[int, int]]:
    """Up to 150 records: value sizes 0..300, timestamps drifting forward with jitter (some far ahead,
    some -1), so that size, time and index-full rolls and index entries all happen."""
    n = draw(st.integers(1, 150))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = rng.integers(0, 300, n)
    stamps = NOW - 4_000 + np.cumsum(rng.integers(0, 120, n)) + rng.integers(-300, 300, n)
    stamps[rng.random(n) < 0.1] = -1
    stamps[rng.random(n) < 0.03] = -7  # NEGATIVE_TIMESTAMP in Kafka mode, a real instant in KIP-228 mode
    return list(zip(sizes.tolist(), stamps.tolist(), strict=True))


RESUME_ROWS = _resume_rows()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RESUME_ROWS, st.data())
def test_appending_in_resumed_calls_equals_one_call(rows, data) -> None:
    """Splitting the input between produce requests (batches) must not change a single byte: the
    resumed writer makes the same rolls and index entries as one uninterrupted writer."""
    config = _resume_config(data)
    table = _table([b"k%d" % i for i in range(len(rows))], [b"x" * n for n, _ in rows], [t for _, t in rows])
    whole = append_records(table, config, log_end_offset=1000, now_ms=NOW, segment_key="t-0")
    batch_bases = [int(b) for _, log in _segments(whole) for b in scan_batches(log).headers.base_offset]
    boundaries = [int(np.flatnonzero(whole.offsets == b)[0]) for b in batch_bases[1:]]
    cuts = sorted(data.draw(st.sets(st.sampled_from(boundaries), max_size=8))) if boundaries else []
    calls = _in_calls(table, config, cuts)
    assert _assemble(calls) == _assemble([whole])
    assert calls[-1].log_end_offset == whole.log_end_offset
    assert sum(c.rejects.num_rows for c in calls) == whole.rejects.num_rows
    # With the segment's bytes passed along, each output segment is whole.
    rest = table.slice(cuts[0]) if cuts else table.slice(0, 0)
    full = append_records(rest, config, log_end_offset=calls[0].log_end_offset, now_ms=NOW,
                          resume=calls[0].active.state, resume_log=b"".join(calls[0].active.pieces), segment_key="t-0")
    assert full.active.start_position == 0 and all(s.start_position == 0 for s in full.closed)
    before = [r for s in calls[0].closed for r in read_with_kafka_python(s.log)[0]]
    assert before + _read_all(full)[0] == _read_all(whole)[0]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RESUME_ROWS, st.data())
def test_appending_in_arbitrary_calls_keeps_records_and_valid_indexes(rows, data) -> None:
    """Splits inside what would have been one batch give other batches (other produce requests), but the
    same records at the same offsets, and indexes that agree with the log."""
    config = _resume_config(data)
    table = _table([b"k%d" % i for i in range(len(rows))], [b"x" * n for n, _ in rows], [t for _, t in rows])
    whole = append_records(table, config, log_end_offset=1000, now_ms=NOW, segment_key="t-0")
    cuts = sorted(data.draw(st.sets(st.integers(1, len(rows) - 1), max_size=6))) if len(rows) > 1 else []
    calls = _in_calls(table, config, cuts)
    closed, active = _assemble(calls)
    logs = [c[1] for c in closed] + [active[1]]
    assert [r for log in logs for r in read_with_kafka_python(log)[0]] == _read_all(whole)[0]
    for base, log, index, timeindex, *_ in closed:
        headers = scan_batches(log).headers
        assert check_indexes(headers, OffsetIndex.load(index, base).index, TimeIndex.load(timeindex, base, min_timestamp=0).index,
                             "seg") == []
    assert check_indexes(scan_batches(active[1]).headers, OffsetIndex.load(active[2], active[0]).index,
                         TimeIndex.load(active[3], active[0],
                                        min_timestamp=0).index, "active", active=True) == []


def test_active_segment_state_round_trips() -> None:
    policy = RollPolicy(TopicConfig(index_interval_bytes=100))
    result = append_records(_table([b"k"] * 50, [b"v" * 30] * 50, list(range(NOW, NOW + 50))),
                            TopicConfig(index_interval_bytes=100, max_message_bytes=400), log_end_offset=0,
                            now_ms=NOW)
    state = result.active.state
    assert len(state.offset_index) > 0 and state.bytes_since_last_index_entry == \
        state.size - state.offset_index.last_entry()[1]
    assert ActiveSegment.resume(state, policy).state() == state
    derived = type(state)(**{**state.__dict__, "bytes_since_last_index_entry": None})
    assert ActiveSegment.resume(derived, policy).state() == state
    with pytest.raises(ValueError, match="does not cover"):
        SegmentIndexer.resume(state.offset_index, state.time_index, size=10, last_offset=49,
                              max_timestamp=state.max_timestamp, offset_of_max_timestamp=49)
    with pytest.raises(ValueError, match="resume log"):
        ActiveSegment.resume(state, policy, b"short")
    with pytest.raises(ValueError, match="log end offset"):
        append_records(_table([b"k"], [b"v"]), TopicConfig(), log_end_offset=7, now_ms=NOW, resume=state)
    with pytest.raises(ValueError, match="min_timestamp"):
        append_records(_table([b"k"], [b"v"]), TopicConfig(allow_negative_timestamps=True), log_end_offset=50,
                       now_ms=NOW, resume=state)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(RESUME_ROWS, st.data())
def test_segment_facts_come_from_the_encoder_and_equal_a_decode_of_the_bytes(rows, data) -> None:
    """Each segment's catalog facts (`AppendResult.summaries`) are what `summarize_segment` reads back
    from its bytes, also when the append continues an active segment written by an earlier call."""
    config = _resume_config(data)
    floor = min_timestamp(config)
    table = _table([b"k%d" % i for i in range(len(rows))], [b"x" * n for n, _ in rows], [t for _, t in rows])
    cut = data.draw(st.integers(0, len(rows)))
    first = append_records(table.slice(0, cut), config, log_end_offset=1000, now_ms=NOW, segment_key="t-0")
    act = first.active
    resumed = summarize_segment(b"".join(act.pieces), act.base_offset, "active", min_timestamp=floor)
    second = append_records(table.slice(cut), config, log_end_offset=first.log_end_offset, now_ms=NOW + 1,
                            resume=act.state, resume_log=b"".join(act.pieces), resume_summary=resumed, segment_key="t-0")
    for result in (first, second):
        segments = [(s.base_offset, s.log) for s in result.closed] + [(result.active.base_offset, b"".join(result.active.pieces))]
        assert len(result.summaries) == len(segments)
        for (base, log), summary in zip(segments, result.summaries, strict=True):
            assert summary == summarize_segment(log, base, "segment", min_timestamp=floor), base


@pytest.mark.parametrize("recorded", [(None, None, None), (2, 40, 160)])
def test_an_append_keeps_what_the_resumed_segment_says_of_its_transactions(recorded) -> None:
    """An append writes no transactional batch, so the segment it continues holds the transactional batches
    (and their span) its row recorded, or still unknown ones (a row of an older catalog: null)."""
    first = append_records(_table([b"a", b"b"], [b"x", b"y"]), TopicConfig(), log_end_offset=0, now_ms=NOW,
                           segment_key="t-0")
    act = first.active
    resumed = summarize_segment(b"".join(act.pieces), act.base_offset, "active", min_timestamp=0)
    assert resumed.transactions == TxnSummary(0, None, None)
    said = replace(resumed, **dict(zip(("txn_batch_count", "txn_start_position", "txn_end_position"), recorded,
                                       strict=True)))
    second = append_records(_table([b"c"], [b"z"]), TopicConfig(), log_end_offset=first.log_end_offset,
                            now_ms=NOW + 1, resume=act.state, resume_log=b"".join(act.pieces), resume_summary=said,
                            segment_key="t-0")
    assert [s.base_offset for s in second.summaries] == [act.base_offset]
    assert second.summaries[0].transactions == TxnSummary(*recorded)
    assert second.summaries[0].record_count == 3
