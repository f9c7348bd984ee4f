"""The vectorised cleaner selection (spec 8.1) against a literal per-segment simulation of Kafka's
`LogCleanerManager` (`cleanableOffsets`, `calculateCleanableBytes`, `maxCompactionDelay`, the filter of
`grabFilthiestCompactedLog`), written with plain loops from the spec text, on generated catalogs of
many partitions planned at once."""

from __future__ import annotations

import bisect
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.catalog.schema import SegmentRow, SegmentState, rows_to_table
from engine.cleaner.selection import SegmentInfo, SegmentZone, log_segments, overlapping, plan_compaction
from engine.log.topic_config import TopicConfig
from kernel.names import TopicPartition
from tests.catalog_rows import make_row

NOW = 10_000


def logs(rows: list[SegmentRow], start: int, end: float) -> list[int]:
    """`UnifiedLog.logSegments(start, end)`: from the segment holding `start` to those with base < end."""
    if start == end:
        return []
    return [i for i, r in enumerate(rows)
            if r.base_offset < end and (i + 1 == len(rows) or rows[i + 1].base_offset > start)]


def kafka_selection(rows: list[SegmentRow], config: TopicConfig, now: int) -> dict:
    """Kafka's selection for one partition's live rows, by hand: the numbers and whether it cleans. A
    KIP-228 topic (`klake.timestamps.allow.negative`) has a timestamp wherever it is above -2**63."""
    kip228 = config.allow_negative_timestamps
    none = -(2**63) if kip228 else -1
    log_start = max([rows[0].base_offset] + [r.log_start_offset for r in rows])
    checkpoint = rows[0].base_offset
    for r in rows:
        if not r.cleaned:
            break
        checkpoint = r.next_offset
    checkpoint = max(checkpoint, log_start)
    log_end = rows[-1].next_offset
    first_dirty = log_start if checkpoint < log_start or checkpoint > log_end else checkpoint
    active = rows[-1].base_offset if rows[-1].state == SegmentState.ACTIVE else None

    def non_active_from(start: int) -> list[int]:
        if active is None:
            return logs(rows, start, float("inf"))
        return [] if start > active else logs(rows, start, active)

    limit, why = log_end, "last stable offset"
    if (active if active is not None else log_end) < limit:
        limit, why = active if active is not None else log_end, "active segment"
    if config.min_compaction_lag_ms > 0:
        for i in non_active_from(first_dirty):
            r = rows[i]
            aged = r.largest_timestamp if r.largest_timestamp > none else r.created_at_ms
            if aged > now - config.min_compaction_lag_ms:
                if r.base_offset < limit:
                    limit, why = r.base_offset, "min.compaction.lag.ms"
                break
    uncleanable = max(first_dirty, limit)
    holding = non_active_from(uncleanable)
    if holding and not (active is None and uncleanable >= log_end):
        round_end = rows[holding[0]].base_offset
    else:
        round_end = log_end if active is None else active
    clean = sum(rows[i].size_bytes for i in logs(rows, -1, first_dirty))
    in_round = logs(rows, min(first_dirty, round_end), round_end)
    cleanable = sum(rows[i].size_bytes for i in in_round)
    firsts = [rows[i].first_batch_timestamp for i in non_active_from(first_dirty)
              if rows[i].first_batch_timestamp > (none if kip228 else 0)]
    until = now - max(config.max_compaction_lag_ms, 0)
    delay = until - min(firsts) if firsts and min(firsts) < until else 0
    ratio = cleanable / (clean + cleanable) if clean + cleanable else 0.0
    cleans = (config.compacted and clean + cleanable > 0
              and (ratio > config.min_cleanable_dirty_ratio or (delay > 0 and cleanable > 0)))
    return {"log_start_offset": log_start, "checkpoint": checkpoint, "first_dirty_offset": first_dirty,
            "first_uncleanable_offset": uncleanable, "uncleanable_reason": why, "round_end": round_end,
            "clean_bytes": clean, "cleanable_bytes": cleanable, "dirty_ratio": ratio,
            "earliest_dirty_first_batch_timestamp": min(firsts) if firsts else None, "max_compaction_delay_ms": delay,
            "clean": cleans, "in_round": {rows[i].segment_id for i in in_round}}


_CONFIGS = st.builds(
    TopicConfig, cleanup_policy=st.sampled_from(["compact", "compact", "compact,delete", "delete"]),
    min_cleanable_dirty_ratio=st.sampled_from([0.0, 0.25, 0.5, 0.99]),
    min_compaction_lag_ms=st.sampled_from([0, 1, 3_000, 9_000]),
    max_compaction_lag_ms=st.sampled_from([1, 2_000, 8_000, 2**63 - 1]))


@st.composite
def partition(draw: st.DrawFn, topic: str, number: int, shift: int = 0, none: int = -1) -> list[SegmentRow]:
    """Segments with gaps, empty ones, a leading run of cleaned ones (and cleaned ones after a dirty
    one), timestamps missing (mtime fallback) or not, a log start offset raised inside, ACTIVE last or not.
    Every timestamp is moved by `shift` (not the mtimes); `none` is the topic's "no timestamp"."""
    rows, base = [], draw(st.integers(0, 20))
    for k in range(draw(st.integers(1, 6))):
        count = draw(st.integers(0, 30))
        largest = draw(st.sampled_from([none] + [t + shift for t in (500, 4_000, 7_500, 9_500, NOW + 100)]))
        first = draw(st.sampled_from([none] + [t + shift for t in (0, 400, 1_500, 6_000, 9_900)]))
        row = make_row(topic, number, base, base + count, base_ts=first, largest_ts=largest,
                       segment_id=f"{topic}{number}s{k}", size=draw(st.integers(1, 500)) if count else 0)
        rows.append(replace(row, created_at_ms=draw(st.sampled_from([0, 5_000, 9_990])),
                            cleaned=draw(st.booleans())))
        base += max(count, 1) + draw(st.integers(0, 3))
    if draw(st.booleans()):
        rows[-1] = replace(rows[-1], state=str(SegmentState.ACTIVE))
    if draw(st.booleans()):
        rows[0] = replace(rows[0], log_start_offset=draw(st.integers(rows[0].base_offset, rows[-1].next_offset)))
    return rows


@st.composite
def catalogs(draw: st.DrawFn) -> tuple[list[list[SegmentRow]], dict[str, TopicConfig]]:
    configs = {t: draw(_CONFIGS) for t in ("a", "b")}
    parts = [draw(partition(t, p)) for t in configs for p in range(draw(st.integers(1, 3)))]
    return draw(st.permutations(parts)), configs


PRE_1970 = -12_000  # moves every timestamp before 1970: 1969-12-31T23:59:48Z to 23:59:58.100Z
_PRE_1970_CONFIGS = st.builds(
    TopicConfig, cleanup_policy=st.sampled_from(["compact", "compact", "compact,delete"]),
    min_cleanable_dirty_ratio=st.sampled_from([0.0, 0.5, 0.99]),
    min_compaction_lag_ms=st.sampled_from([0, 1, 12_000, 14_500, 18_000, 21_000]),
    max_compaction_lag_ms=st.sampled_from([1, 12_000, 16_000, 21_000, 2**63 - 1]),
    allow_negative_timestamps=st.just(True))


@st.composite
def pre_1970_catalogs(draw: st.DrawFn) -> tuple[list[list[SegmentRow]], dict[str, TopicConfig]]:
    """KIP-228 topics whose timestamps all lie before 1970 (their "none" is -2**63), with mtimes after it."""
    configs = {t: draw(_PRE_1970_CONFIGS) for t in ("a", "b")}
    parts = [draw(partition(t, p, PRE_1970, -(2**63)))
             for t in configs for p in range(draw(st.integers(1, 3)))]
    return draw(st.permutations(parts)), configs


@settings(max_examples=400, deadline=None)
@given(catalogs(), st.booleans())
def test_plan_matches_kafka_selection_partition_by_partition(case: tuple[list[list[SegmentRow]],
                                                                         dict[str, TopicConfig]], force: bool) -> None:
    _check_plan(case, NOW, force)


@settings(max_examples=300, deadline=None)
@given(pre_1970_catalogs(), st.booleans())
def test_pre_1970_compaction_lags_match_kafka_selection(
        case: tuple[list[list[SegmentRow]], dict[str, TopicConfig]], force: bool) -> None:
    """min.compaction.lag.ms ages segments by their (negative) largest timestamps, mtimes only where
    a segment has none; max.compaction.lag.ms counts negative first batch timestamps (KIP-228)."""
    _check_plan(case, NOW, force)


def _check_plan(case: tuple[list[list[SegmentRow]], dict[str, TopicConfig]], now: int, force: bool) -> None:
    parts, configs = case
    plan = plan_compaction(pa.concat_tables([rows_to_table(rows) for rows in parts]), configs, now, force)
    zones = dict(zip(plan.segments["segment_id"].to_pylist(), plan.segments["zone"].to_pylist(), strict=True))
    assert len(zones) == sum(len(rows) for rows in parts)
    for rows in parts:
        tp = TopicPartition(rows[0].topic, rows[0].partition)
        got, ref = plan.partition(tp), kafka_selection(rows, configs[tp.topic], now)
        numbers = {k: got.info[k] for k in ref if k not in ("clean", "in_round")}
        assert numbers == {k: v for k, v in ref.items() if k not in ("clean", "in_round")}
        assert got.decision.clean == ref["clean"] and got.decision.reasons
        assert got.due == ((ref["clean"] or force) and ref["cleanable_bytes"] > 0)
        assert {r.segment_id for r in rows if zones[r.segment_id] == SegmentZone.CLEANABLE} == ref["in_round"]


def test_verdicts_read_as_before_and_count_by_reason() -> None:
    compact = TopicConfig(cleanup_policy="compact")
    dirty = [make_row("c", 0, 0, 10, segment_id="d0"), make_row("c", 0, 10, 11, segment_id="d1",
                                                                  state=SegmentState.ACTIVE)]
    clean = [replace(make_row("c", 1, 0, 10, segment_id="k0"), cleaned=True),
             make_row("c", 1, 10, 11, segment_id="k1", state=SegmentState.ACTIVE)]
    plan = plan_compaction(rows_to_table(dirty + clean), {"c": compact}, NOW)
    assert plan.partition(TopicPartition("c", 0)).decision.reasons == ("dirty ratio 1 > min.cleanable.dirty.ratio 0.5",)
    assert plan.partition(TopicPartition("c", 0)).due
    assert plan.partition(TopicPartition("c", 1)).decision.reasons == (
        "dirty ratio 0 <= min.cleanable.dirty.ratio 0.5",
        "nothing cleanable: dirty range [10, 10) is limited by the active segment")
    assert plan.totals()["partitions"] == 2 and sum(plan.totals()["by_reason"].values()) == 2
    with pytest.raises(ValueError, match="no topic config for c"):
        plan_compaction(rows_to_table(dirty), {}, NOW)
    with pytest.raises(ValueError, match="c-0: segments must be in offset order without overlap: base 5 follows"):
        plan_compaction(rows_to_table([dirty[0], make_row("c", 0, 5, 20, segment_id="x")]), {"c": compact}, NOW)
    with pytest.raises(ValueError, match="c-1: only the last segment can be active, not the one at 10"):
        plan_compaction(rows_to_table([clean[1], make_row("c", 1, 20, 30)]), {"c": compact}, NOW)


def tree_map_values(bases: list[int], start: int, end: int) -> list[int]:
    """`LogSegments.values(from, to)` as Kafka writes it over its `ConcurrentSkipListMap`: empty when
    from == to, else `subMap(floorKey(from), to)` or `headMap(to)` when there is no floor."""
    if start == end:
        return []
    floor = bisect.bisect_right(bases, start) - 1
    return [i for i in range(max(floor, 0), len(bases)) if bases[i] < end]


@given(st.lists(st.integers(0, 60), min_size=0, max_size=8, unique=True), st.integers(-1, 70), st.integers(0, 12))
def test_log_segments_is_kafkas_sub_map_from_the_floor(bases: list[int], start: int, width: int) -> None:
    bases = sorted(bases)
    infos = [SegmentInfo(b, b + 1, 1, -1, -1) for b in bases]
    assert overlapping(infos, start, start + width) == tree_map_values(bases, start, start + width)
    base = np.array(bases, np.int64)
    mask = log_segments(base, np.r_[base[1:], np.iinfo(np.int64).max], np.full(len(bases), start),
                        np.full(len(bases), start + width))
    assert np.flatnonzero(mask).tolist() == tree_map_values(bases, start, start + width)


def test_log_segments_refuses_a_backwards_range() -> None:
    with pytest.raises(ValueError, match="from offset 5 is above limit offset 4"):
        overlapping([SegmentInfo(0, 10, 1, -1, -1)], 5, 4)
