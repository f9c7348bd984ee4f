"""The vectorised roll plan (spec 3) against the rule's per-segment form: `ActiveSegment.roll_reason`, asked
about each generated partition's resumed active segment, for an empty append at `now`, one by one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.catalog.schema import SegmentRow, SegmentState, rows_to_table
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.roll_plan import RollAction, RollWhy, plan_roll
from engine.log.roll_rule import ROLL_INDEX_FULL, ROLL_OFFSET_OVERFLOW, RollPolicy
from engine.log.segment_writer import ActiveSegment, ActiveSegmentState, Append
from engine.log.topic_config import TopicConfig, min_timestamp
from kernel.names import TopicPartition
from tests.catalog_rows import make_row

NOW = 1_000_000


def roll_by_segment(row: SegmentRow, config: TopicConfig, offset_entries: int, time_entries: int) -> str | None:
    """What the roll job asked before it planned: resume the active segment (indexes of the given lengths)
    and ask `shouldRoll` about an empty append at NOW (`engine.ops.roll` before the plan)."""
    if row.state != SegmentState.ACTIVE or row.size_bytes == 0:
        return None
    floor = min_timestamp(config)
    tp = TopicPartition(row.topic, row.partition)
    state = ActiveSegmentState(
        base_offset=row.base_offset, size=row.size_bytes, next_offset=row.next_offset,
        offset_index=OffsetIndex(row.base_offset, np.arange(1, offset_entries + 1, dtype=np.int32),
                                 np.arange(1, offset_entries + 1, dtype=np.int32)),
        time_index=TimeIndex(row.base_offset, floor + np.arange(time_entries, dtype=np.int64),
                             np.arange(1, time_entries + 1, dtype=np.int32), floor),
        max_timestamp=row.largest_timestamp, offset_of_max_timestamp=row.offset_of_largest_timestamp,
        rolling_base_timestamp=row.first_batch_timestamp, created_ms=row.created_at_ms,
        jitter_ms=RollPolicy(config).jitter_for(f"{tp}:{row.base_offset}"))
    segment = ActiveSegment.resume(state, RollPolicy(config))
    return segment.roll_reason(Append(b"", row.next_offset, row.next_offset, NOW, row.next_offset), NOW)


_CONFIGS = st.builds(
    TopicConfig, cleanup_policy=st.sampled_from(["delete", "compact"]), segment_bytes=st.integers(14, 400),
    segment_ms=st.integers(1, 2_000), segment_jitter_ms=st.sampled_from([0, 0, 500, 5_000]),
    max_compaction_lag_ms=st.sampled_from([1, 700, 2**63 - 1]), segment_index_bytes=st.sampled_from([24, 60, 10_485_760]),
    allow_negative_timestamps=st.booleans())


@st.composite
def partition(draw: st.DrawFn, topic: str, number: int) -> tuple[list[SegmentRow], int, int]:
    """Some rolled segments, then maybe an ACTIVE one: empty or not, with or without a first-batch
    timestamp (negative ones too), old or young, few or many batches, offsets near Int.MaxValue."""
    rows, base = [], draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 3))):
        rows.append(make_row(topic, number, base, base + 10, state=SegmentState.ROLLED))
        base += 10
    entries = (0, 0)
    if not rows or draw(st.booleans()):
        span = draw(st.sampled_from([0, 10, 2**31 - 1, 2**31]))
        size = 0 if span == 0 else draw(st.integers(7, 500))
        batches = draw(st.integers(0, 6)) if size else 0
        first = draw(st.sampled_from([-1, -5, 0, NOW - 3_000, NOW - 1_000, NOW - 700, NOW, NOW + 50]))
        row = make_row(topic, number, base, base + span, base_ts=first, state=SegmentState.ACTIVE, size=size)
        rows.append(replace(row, batch_count=batches, created_at_ms=draw(st.sampled_from([0, NOW - 2_000, NOW]))))
        entries = (draw(st.integers(0, batches)), draw(st.integers(0, batches)))
    return rows, *entries


@st.composite
def catalogs(draw: st.DrawFn) -> tuple[list[tuple[list[SegmentRow], int, int]], dict[str, TopicConfig]]:
    configs = {t: draw(_CONFIGS) for t in ("a", "b")}
    parts = [draw(partition(t, p)) for t in configs for p in range(draw(st.integers(1, 3)))]
    return draw(st.permutations(parts)), configs


@settings(max_examples=400, deadline=None)
@given(catalogs())
def test_plan_matches_should_roll_segment_by_segment(case: tuple[list[tuple[list[SegmentRow], int, int]],
                                                                 dict[str, TopicConfig]]) -> None:
    parts, configs = case
    table = pa.concat_tables([rows_to_table(rows) for rows, _, _ in parts])
    plan = plan_roll(table, configs, NOW)
    assert plan.partitions.num_rows == len(parts)
    for rows, offset_entries, time_entries in parts:
        tp = TopicPartition(rows[0].topic, rows[0].partition)
        planned = plan.partition(tp)
        truth = roll_by_segment(rows[-1], configs[tp.topic], offset_entries, time_entries)
        assert planned.info["segment_id"] == rows[-1].segment_id and planned.info["segments"] == len(rows)
        if planned.action == RollAction.CHECK_INDEX:  # only the index tells; size and time did not roll it
            assert truth in (None, ROLL_INDEX_FULL, ROLL_OFFSET_OVERFLOW), (planned.describe(), truth)
        else:
            assert planned.rule == truth, (planned.describe(), truth)
        if truth == ROLL_INDEX_FULL:
            assert planned.action == RollAction.CHECK_INDEX
        assert planned.describe()


def test_reasons_carry_the_rule_and_its_numbers() -> None:
    config = TopicConfig(segment_ms=1_000)
    old = replace(make_row("t", 0, 0, 10, base_ts=NOW - 1_001, state=SegmentState.ACTIVE), batch_count=2)
    exact = replace(make_row("t", 1, 0, 10, base_ts=NOW - 1_000, state=SegmentState.ACTIVE), batch_count=2)
    untimed = replace(make_row("t", 2, 0, 10, base_ts=-1, state=SegmentState.ACTIVE), batch_count=2,
                      created_at_ms=NOW - 5_000)
    empty = make_row("t", 3, 0, 0, state=SegmentState.ACTIVE, size=0)
    closed = make_row("t", 4, 0, 10)
    plan = plan_roll(rows_to_table([old, exact, untimed, empty, closed]), {"t": config}, NOW)
    got = {p: plan.partition(TopicPartition("t", p)) for p in range(5)}
    assert got[0].action == RollAction.ROLL and got[0].why == RollWhy.TIME
    assert got[0].describe().startswith("time: now - first batch timestamp 1970-01-01T00:16:38.999Z = 1001 ms > segment.ms 1000")
    assert got[1].action == RollAction.KEEP and got[1].why == RollWhy.NOT_DUE  # strict >
    assert got[1].describe().endswith("<= segment.ms 1000 - jitter 0; due from 1970-01-01T00:16:40.001Z")
    assert got[2].why == RollWhy.TIME_CREATED and got[2].rule == "time"
    assert got[3].why == RollWhy.EMPTY and got[4].why == RollWhy.NO_ACTIVE
    assert plan.totals()["by_action"] == {"roll": 2, "keep": 3}
