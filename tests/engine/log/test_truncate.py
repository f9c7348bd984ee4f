"""`engine.log.truncate`: spec 6 truncation with klake's partial-batch rewrite, checked against kafka-python.

Segments are built batch by batch with known parameters; for every target offset the expected log is
computed here: the untouched batches' bytes, then the batch holding target rebuilt from the spec's
rules (same header fields, lastOffsetDelta = target - 1 - base, CreateTime max recomputed).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from engine.format import compression
from engine.format.batch import LOG_APPEND_TIME, scan_batches
from engine.format.builder import CONTROL_COMMIT, encode_batch
from engine.index.checks import check_indexes
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.append import append_records
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.topic_config import TopicConfig
from engine.log.truncate import (
    BATCH_ALIGNED,
    KAFKA_WHOLE_BATCH,
    KLAKE_REWRITE,
    plan_truncation,
    truncate_segment,
)
from tests.codecs_for_tests import control_record
from tests.oracles.kafka_python import read_with_kafka_python

BASE = 500
LAT = 1_700_000_500_000


def _batch_specs(codec: int) -> list[dict]:
    """Batches of one segment: producer fields, LogAppendTime, offset gaps, a control batch, a delete
    horizon, negative-free out-of-order timestamps, then plain batches for index entries."""
    rng = np.random.default_rng(codec)
    lat = dict(records=[(b"b%d" % i, None, 100 + i, []) for i in range(4)], timestamp_type=LOG_APPEND_TIME,
               log_append_time=LAT, partition_leader_epoch=7)
    specs = [
        dict(records=[(b"a%d" % i, b"x" * 30, t, [("h", b"%d" % i)]) for i, t in enumerate([50, 90, 20, 90, 10])],
             producer_id=42, producer_epoch=3, base_sequence=10, partition_leader_epoch=7, transactional=True),
        dict(records=[(b"c%d" % i, b"y" * 20, 70 - i, []) for i in range(3)], offset_deltas=[0, 2, 5],
             last_offset_delta=7),
        dict(records=[(*control_record(CONTROL_COMMIT), 95, [])], control=True, transactional=True,
             producer_id=42, producer_epoch=3),
        dict(records=[(b"d%d" % i, None if i == 1 else b"z", 60 + i, []) for i in range(3)], delete_horizon=999),
        dict(records=[(b"e", b"w", -1, []), (b"f", b"w", 30, [])]),
    ]
    for k in range(10):  # timestamps drift upwards (with reordering) so the time index grows
        n = int(rng.integers(1, 6))
        specs.append(dict(records=[(b"r%d" % i, rng.bytes(int(rng.integers(0, 80))),
                                    100 * k + int(rng.integers(0, 300)), []) for i in range(n)]))
        if k == 7:
            specs.append(lat)
    for spec in specs:
        spec["codec"] = codec
    return specs


def _encode(spec: dict, base_offset: int, keep: int | None = None, last_offset_delta: int | None = None,
            max_timestamp: int | None = None) -> bytes:
    records = spec["records"][:keep]
    deltas = spec.get("offset_deltas", list(range(len(spec["records"]))))[:len(records)]
    params = {k: v for k, v in spec.items() if k not in ("records", "offset_deltas")}
    if last_offset_delta is not None:
        params["last_offset_delta"] = last_offset_delta
    if max_timestamp is not None:
        params["max_timestamp"] = max_timestamp
    keys, values, stamps, headers = (list(c) for c in zip(*records, strict=True))
    return encode_batch(keys, values, stamps, headers, base_offset=base_offset, offset_deltas=deltas, **params)


def _segment(codec: int) -> tuple[bytes, list[dict], list[int], OffsetIndex, TimeIndex]:
    """(log, specs, batch base offsets, live indexes) of a segment written one batch per append."""
    specs = _batch_specs(codec)
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=10**15, index_interval_bytes=120)), next_offset=BASE,
                           min_timestamp=0)
    bases, offset = [], BASE
    for spec in specs:
        data = _encode(spec, offset)
        h = scan_batches(data).headers
        last = int(h.last_offset[0])
        writer.append(Append(data, offset, last, int(h.max_timestamp[0]), last), now_ms=0)
        bases.append(offset)
        offset = last + 1
    assert not writer.closed
    offsets, times = writer.active.indexer.snapshot()
    return b"".join(writer.active.chunks), specs, bases, offsets, times


def _expected_max(data: bytes, base_offset: int, none: int = -1) -> tuple[int, int]:
    """Brute force (spec 2.4): the largest batch maxTimestamp, first carrier's last offset; else (none, base)."""
    best = (none, base_offset)
    headers = scan_batches(data).headers
    for ts, last in zip(headers.max_timestamp.tolist(), headers.last_offset.tolist(), strict=True):
        if ts > best[0]:
            best = (ts, last)
    return best


@pytest.mark.parametrize("codec", sorted(compression.NAMES))
def test_truncation_at_every_offset_keeps_everything_below_target(codec: int) -> None:
    log, specs, bases, offset_index, time_index = _segment(codec)
    records, _ = read_with_kafka_python(log)
    starts = scan_batches(log).headers.position.tolist() + [len(log)]
    next_offset = int(scan_batches(log).headers.last_offset[-1]) + 1
    assert len(offset_index) > 2 and len(time_index) > 1
    modes = []
    for target in range(BASE, next_offset + 1):
        result = truncate_segment(log, BASE, target, offset_index=offset_index, time_index=time_index,
                                  min_timestamp=0)
        modes.append(result.mode)
        # independent truth: the records below target, read back identically by kafka-python
        kept, batches = read_with_kafka_python(result.log)
        assert kept == [r for r in records if r[0] < target]
        assert result.removed.column("offset").to_pylist() == [r[0] for r in records if r[0] >= target]
        assert result.next_offset == target and result.lost_below_target.size == 0
        # expected bytes: untouched batches, then the batch holding target rebuilt by the spec's rules
        row = next((i for i, b in enumerate(bases) if b <= target and (i + 1 == len(bases) or target < bases[i + 1])
                    and target > b), None)
        if row is None or target >= next_offset:
            cut = starts[bases.index(target)] if target in bases else len(log)
            assert result.log == log[:cut] and result.mode == BATCH_ALIGNED
        else:
            spec, base = specs[row], bases[row]
            deltas = spec.get("offset_deltas", range(len(spec["records"])))
            keep = sum(1 for d in deltas if base + d < target)
            if keep == 0:
                assert result.log == log[:starts[row]] and result.mode == BATCH_ALIGNED
            else:
                stamps = [r[2] for r in spec["records"][:keep]]
                max_ts = LAT if spec.get("timestamp_type") == LOG_APPEND_TIME else max(max(stamps), -1)
                expected = _encode(spec, base, keep, target - 1 - base, max_ts)
                assert result.log == log[:starts[row]] + expected and result.mode == KLAKE_REWRITE
                last = batches[-1]
                original = read_with_kafka_python(log[starts[row]:starts[row + 1]])[1][0]
                assert (last.base_offset, last.base_offset + last.last_offset_delta) == (base, target - 1)
                for name in ("compression_type", "timestamp_type", "producer_id", "producer_epoch", "base_sequence",
                             "leader_epoch", "is_transactional", "is_control_batch", "first_timestamp"):
                    assert getattr(last, name) == getattr(original, name), name
                assert last.max_timestamp == max_ts
        # indexes: entries at or above target gone, the rest consistent with the new log
        assert result.offset_index.offsets.tolist() == [o for o in offset_index.offsets.tolist() if o < target]
        assert result.time_index.offsets.tolist() == [o for o in time_index.offsets.tolist() if o < target]
        assert check_indexes(scan_batches(result.log).headers, result.offset_index, result.time_index, "t",
                             active=True) == []
        assert OffsetIndex.load(result.index, BASE).index == result.offset_index
        assert (result.max_timestamp, result.offset_of_max_timestamp) == _expected_max(result.log, BASE)
    assert modes.count(KLAKE_REWRITE) > 20 and modes.count(BATCH_ALIGNED) == len(bases) + 1


def test_truncation_without_indexes_rebuilds_them() -> None:
    log, _, bases, _, _ = _segment(compression.ZSTD)
    result = truncate_segment(log, BASE, bases[6] + 2, index_interval_bytes=100, min_timestamp=0)
    assert result.mode == KLAKE_REWRITE and len(result.offset_index) > 0
    assert check_indexes(scan_batches(result.log).headers, result.offset_index, result.time_index, "t",
                         active=True) == []


def _legacy(magic: int, codec: int, first: int, stamps: list[int]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 10**6)
    for i, ts in enumerate(stamps):
        relative = codec and magic == 1  # KIP-31; v0 inner offsets are absolute
        builder.append(i if relative else first + i, ts, b"k%d" % (first + i), b"v%d" % (first + i))
    data = bytearray(builder.build())
    if codec:  # the wrapper carries the absolute last offset
        struct.pack_into(">q", data, 0, first + len(stamps) - 1)
    return bytes(data)


def test_legacy_batches_keep_kafkas_whole_batch_rule() -> None:
    parts = [_legacy(1, 1, 0, [10, 30, 20]), _legacy(1, 0, 3, [40]), _legacy(1, 0, 4, [5]),
             _legacy(1, 2, 5, [50, 45, 60]), _legacy(0, 1, 8, [-1, -1]),
             encode_batch([b"k10", b"k11", b"k12"], [b"v", b"v", b"v"], [70, 80, 75], base_offset=10)]
    log = b"".join(parts)
    records, _ = read_with_kafka_python(log)
    assert [r[0] for r in records] == list(range(13))
    wrappers = {0: range(0, 3), 5: range(5, 8), 8: range(8, 10)}
    modes = []
    for target in range(0, 14):
        result = truncate_segment(log, 0, target, index_interval_bytes=50, min_timestamp=0)
        modes.append(result.mode)
        kept, _ = read_with_kafka_python(result.log)
        holder = next((r for r in wrappers.values() if r.start < target <= r[-1]), None)
        if holder is not None:  # target inside a legacy wrapper: Kafka drops it whole
            assert result.mode == KAFKA_WHOLE_BATCH and "cannot be rewritten" in result.note
            assert result.lost_below_target.tolist() == list(range(holder.start, target))
            assert kept == [r for r in records if r[0] < holder.start]
        else:
            assert kept == [r for r in records if r[0] < target]
            assert result.mode == (KLAKE_REWRITE if 10 < target < 13 else BATCH_ALIGNED)
        assert result.next_offset == target
        assert all(r[0] < target for r in kept)
        assert check_indexes(scan_batches(result.log).headers, result.offset_index, result.time_index, "t",
                             active=True) == []
        assert (result.max_timestamp, result.offset_of_max_timestamp) == _expected_max(result.log, 0)
    assert modes.count(KAFKA_WHOLE_BATCH) == 5 and modes.count(KLAKE_REWRITE) == 2


def test_kip228_rewrite_keeps_a_negative_max_timestamp() -> None:
    data = encode_batch([b"a", b"b", b"c"], [b"1", b"2", b"3"], [-50, -20, 5], base_offset=0)
    result = truncate_segment(data, 0, 2, min_timestamp=-(2**63) + 1)
    _, batches = read_with_kafka_python(result.log)
    assert batches[0].max_timestamp == -20 and result.max_timestamp == -20
    kafka = truncate_segment(data, 0, 2, min_timestamp=0)
    assert read_with_kafka_python(kafka.log)[1][0].max_timestamp == -1 and kafka.max_timestamp == -1


def test_truncated_segment_resumes_appends() -> None:
    config = TopicConfig(index_interval_bytes=200, max_message_bytes=400, compression_type="gzip")
    now = 1_700_000_000_000
    table = pa.table({"key": [b"k%d" % i for i in range(60)], "value": [b"v" * 50] * 60,
                                         "timestamp": list(range(now - 600, now, 10))})
    first = append_records(table, config, log_end_offset=0, now_ms=now)
    active = first.active
    cut = truncate_segment(b"".join(active.pieces), 0, 37, offset_index=active.offset_index, time_index=active.time_index,
                           min_timestamp=0)
    state = cut.state(active.state.created_ms, active.state.jitter_ms, now_ms=now + 5)
    assert state.bytes_since_last_index_entry == 0 and state.next_offset == 37 and state.created_ms == now
    assert state.rolling_base_timestamp == read_with_kafka_python(cut.log)[1][0].max_timestamp
    again = append_records(table.slice(37), config, log_end_offset=37, now_ms=now, resume=state, resume_log=cut.log)
    records, _ = read_with_kafka_python(b"".join(again.active.pieces))
    assert [r[0] for r in records] == list(range(60)) and records == read_with_kafka_python(b"".join(active.pieces))[0]
    assert check_indexes(scan_batches(b"".join(again.active.pieces)).headers, again.active.offset_index,
                         again.active.time_index, "t", active=True) == []
    emptied = truncate_segment(b"".join(active.pieces), 0, 0, offset_index=active.offset_index, time_index=active.time_index,
                               min_timestamp=0)
    empty_state = emptied.state(1, 0, now_ms=now + 5)
    assert emptied.log == b"" and empty_state.created_ms == now + 5 and empty_state.rolling_base_timestamp == -1
    assert (emptied.max_timestamp, emptied.offset_of_max_timestamp) == (-1, 0)


def test_target_below_the_segment_is_an_error() -> None:
    with pytest.raises(ValueError, match="below the segment base"):
        truncate_segment(b"", 10, 9, min_timestamp=0)


def test_plan_truncation_examples() -> None:
    bases, nexts = [0, 100, 200], [100, 180, 250]  # a gap [180, 200)
    plan = plan_truncation(bases, nexts, 250, log_start_offset=40)
    assert plan.noop and plan.log_end_offset == 250 and plan.log_start_offset == 40
    plan = plan_truncation(bases, nexts, 150, log_start_offset=40)
    assert (plan.deleted, plan.truncated, plan.new_segment_base) == ((200,), 100, None)
    assert (plan.log_end_offset, plan.log_start_offset) == (150, 40)
    plan = plan_truncation(bases, nexts, 100, log_start_offset=40)  # Kafka keeps 100 as an empty active segment
    assert (plan.deleted, plan.truncated, plan.new_segment_base) == ((100, 200), None, 100)
    plan = plan_truncation(bases, nexts, 190)  # inside the gap: segment 100 is active again, nothing cut
    assert (plan.deleted, plan.truncated, plan.log_end_offset) == ((200,), 100, 190)
    plan = plan_truncation([50, 100], [100, 120], 20, log_start_offset=60)  # below the first segment
    assert plan.full and plan.deleted == (50, 100) and plan.new_segment_base == 20
    assert (plan.log_end_offset, plan.log_start_offset) == (20, 20)
    plan = plan_truncation([50, 100], [100, 120], 70, log_start_offset=90)
    assert plan.log_start_offset == 70 and plan.truncated == 50
    with pytest.raises(ValueError):
        plan_truncation(bases, nexts, -1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8)), min_size=1, max_size=8), st.integers(0, 70),
       st.integers(0, 70))
def test_plan_truncation_keeps_exactly_the_records_below_target(shape, target, log_start) -> None:
    """Record-level model: segment i holds offsets [base_i, next_i); after the plan, every record below
    target lies in a kept segment, and no kept segment but the active one reaches target."""
    bases, nexts, at = [], [], 0
    for gap, size in shape:
        bases.append(at + gap)
        nexts.append(at + gap + size)
        at = nexts[-1]
    log_start = bases[0] + log_start % (nexts[-1] - bases[0] + 1)
    plan = plan_truncation(bases, nexts, target, log_start)
    if target >= nexts[-1]:
        assert plan.noop and plan.deleted == () and plan.log_end_offset == nexts[-1]
        return
    assert plan.log_end_offset == target
    assert plan.log_start_offset == (target if target < bases[0] else min(log_start, target))
    kept = [(b, n) for b, n in zip(bases, nexts, strict=True) if b not in plan.deleted]
    assert all(b >= target for b in plan.deleted)
    assert all(any(b <= o < n for b, n in kept) for o in range(bases[0], target)
               if any(b <= o < n for b, n in zip(bases, nexts, strict=True)))
    assert all(n <= target for b, n in kept if b != plan.truncated)
    if plan.truncated is not None:
        assert plan.truncated == max(b for b, _ in kept) and plan.new_segment_base is None
    else:  # a fresh segment at target is the active one: Kafka's emptied segment at base == target
        assert plan.new_segment_base == target and all(b < target for b, _ in kept)
        assert target in bases or target < bases[0] or not kept
