"""Retention planning (spec 4): hand-computed scenarios per rule, and a literal simulation of Kafka's
`deleteOldSegments` (written from the spec text with plain loops) compared on generated partitions."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.catalog.schema import SegmentRow, SegmentState, rows_to_table
from engine.log.retention import PartitionRetention, RetentionAction, RetentionPass, plan_retention
from engine.log.retention_explain import RetentionExplanation as explain
from engine.log.topic_config import TopicConfig
from kernel.names import TopicPartition
from tests.catalog_rows import make_row

DAY, HOUR = 86_400_000, 3_600_000
NOW = int(datetime(2026, 11, 9, 2, tzinfo=UTC).timestamp() * 1000)
WEEK = 7 * DAY
LOG_START, SIZE, TIME, NONE = (RetentionPass.LOG_START_OFFSET, RetentionPass.SIZE, RetentionPass.TIME,
                               RetentionPass.NONE)


def seg(sid: str, base: int, count: int, size: int = 100, largest: int = -1, created: int = 1,
        state: SegmentState = SegmentState.ROLLED) -> SegmentRow:
    return replace(make_row("t", 0, base, base + count, largest_ts=largest, state=state, segment_id=sid,
                            size=size if count else 0), created_at_ms=created)


def chain(*specs: tuple[int, int], count: int = 100, active_last: bool = False) -> list[SegmentRow]:
    """Contiguous segments s0, s1, ... of `count` offsets each, from (size, largest timestamp) pairs."""
    rows = [seg(f"s{k}", k * count, count, size, largest) for k, (size, largest) in enumerate(specs)]
    if active_last:
        rows[-1] = replace(rows[-1], state=str(SegmentState.ACTIVE))
    return rows


def config(policy: str = "delete", retention_ms: int = -1, retention_bytes: int = -1) -> TopicConfig:
    return TopicConfig(cleanup_policy=policy, retention_ms=retention_ms, retention_bytes=retention_bytes)


def plan_one(rows: list[SegmentRow], topic_config: TopicConfig, now: int, log_start_offset: int | None = None,
             high_watermark: int | None = None) -> PartitionRetention:
    """Plan one partition t-0 through the vectorised planner; its log start offset is the catalog's
    (the first row's `log_start_offset` column, as DeleteRecords leaves it), raised to the first base offset."""
    if log_start_offset is not None:
        rows = [replace(rows[0], log_start_offset=log_start_offset), *rows[1:]]
    watermarks = None if high_watermark is None else {TopicPartition("t", 0): high_watermark}
    return plan_retention(rows_to_table(rows), {"t": topic_config}, now, watermarks).partition(TopicPartition("t", 0))


def decision(plan: PartitionRetention, sid: str):
    return next(d for d in explain(plan).decisions if d.segment_id == sid)


# ---- log-start-offset pass -------------------------------------------------------------------------

@pytest.mark.parametrize(("log_start", "deleted", "new_start"), [
    (0, (), 0), (99, (), 99), (100, ("s0",), 100), (150, ("s0",), 150), (200, ("s0", "s1"), 200),
    (300, ("s0", "s1"), 300),  # the last segment has no next: kept even when the log start is the LEO
])
def test_log_start_pass_deletes_segments_wholly_below_it(log_start: int, deleted: tuple[str, ...],
                                                         new_start: int) -> None:
    """Spec 4: S goes iff the next segment exists and next.base <= log start offset."""
    plan = plan_one(chain((100, NOW), (100, NOW), (100, NOW)), config(), NOW, log_start_offset=log_start)
    assert plan.delete_ids == deleted and plan.new_log_start_offset == new_start and plan.roll_new_active_at is None
    kept = decision(plan, f"s{len(deleted)}")
    assert kept.action == RetentionAction.KEEP and kept.decided_by == LOG_START  # the only pass that ran
    assert all(decision(plan, s).decided_by == LOG_START for s in deleted)


def test_log_start_pass_reason_and_pass_outcomes() -> None:
    plan = plan_one(chain((100, NOW), (100, NOW), (100, NOW)), config(), NOW, log_start_offset=150)
    assert decision(plan, "s0").reason == ("wholly below the log start offset: the next segment starts at 100 <= 150")
    assert decision(plan, "s1").reason.startswith("kept: log-start-offset: holds the log start offset 150 "
                                                  "(the next segment starts at 200 > 150)")
    assert decision(plan, "s2").decided_by == NONE and "the walk stopped at s1" in decision(plan, "s2").reason
    ran = {p.name: p.ran for p in explain(plan).passes}
    assert ran == {LOG_START: True, SIZE: False, TIME: False}


def test_log_start_pass_runs_first_kafka_12177() -> None:
    """With the log-start pass first, its deletions shrink the log before the size pass measures it."""
    plan = plan_one(chain((100, NOW), (100, NOW), (100, NOW)), config(retention_bytes=150), NOW,
                          log_start_offset=200)
    assert plan.delete_ids == ("s0", "s1")
    assert [decision(plan, s).decided_by for s in ("s0", "s1")] == [LOG_START, LOG_START]
    assert explain(plan).passes[1].note == "skipped: log size 100 B < retention.bytes 150 B"


def test_compact_only_runs_just_the_log_start_pass_kafka_7400() -> None:
    rows = chain((100, NOW - 30 * DAY), (100, NOW - 30 * DAY), (100, NOW - 30 * DAY))
    plan = plan_one(rows, config("compact", WEEK, 0), NOW, log_start_offset=150)
    assert plan.delete_ids == ("s0",) and plan.roll_new_active_at is None
    assert [(p.name, p.ran) for p in explain(plan).passes] == [(LOG_START, True), (SIZE, False), (TIME, False)]
    assert "KAFKA-7400" in explain(plan).passes[2].note
    both = plan_one(rows, config("compact,delete", WEEK, 0), NOW, log_start_offset=150)
    assert both.delete_ids == ("s0", "s1", "s2") and both.roll_new_active_at == 300
    assert [decision(both, s).decided_by for s in ("s0", "s1", "s2")] == [LOG_START, SIZE, SIZE]


# ---- size pass --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("retention_bytes", "deleted"), [
    (150, ("s0",)), (200, ("s0",)),  # 200: diff - size == 0 still deletes (>= 0)
    (199, ("s0",)), (100, ("s0", "s1")), (99, ("s0", "s1")), (300, ()), (301, ()), (-1, ()),
])
def test_size_pass_keeps_at_least_retention_bytes(retention_bytes: int, deleted: tuple[str, ...]) -> None:
    plan = plan_one(chain((100, NOW), (100, NOW), (100, NOW)), config(retention_bytes=retention_bytes), NOW)
    assert plan.delete_ids == deleted
    assert sum(r.size_bytes for r in explain(plan).to_delete) == plan.bytes_to_delete == 100 * len(deleted)
    assert all(decision(plan, s).decided_by == SIZE for s in deleted)
    size_pass = explain(plan).passes[1]
    assert size_pass.ran == (0 <= retention_bytes <= 300)


def test_size_pass_reasons_carry_the_numbers() -> None:
    plan = plan_one(chain((100, NOW), (100, NOW), (100, NOW)), config(retention_bytes=150), NOW)
    assert decision(plan, "s0").reason == ("the log is 150 B over retention.bytes 150 B; dropping its 100 B "
                                           "leaves it 50 B over")
    assert decision(plan, "s1").reason == ("kept: size: the log is only 50 B over retention.bytes 150 B; dropping "
                                           "its 100 B would leave it 50 B under; the walk stops here")


def test_size_walk_stops_at_first_keeper_even_if_a_later_one_fits() -> None:
    """Sizes 100, 500, 10 over a 450 B limit: diff 160 -> s0 goes (60 left); s1 stays; s2 (10 <= 60) is not reached."""
    plan = plan_one(chain((100, NOW), (500, NOW), (10, NOW)), config(retention_bytes=450), NOW)
    assert plan.delete_ids == ("s0",)
    assert decision(plan, "s2").action == RetentionAction.KEEP and decision(plan, "s2").decided_by == NONE


# ---- time pass --------------------------------------------------------------------------------------

def test_time_pass_deletes_expired_prefix_with_readable_reason() -> None:
    rows = chain((100, NOW - 8 * DAY - 2 * HOUR), (100, NOW - 8 * DAY), (100, NOW - DAY))
    plan = plan_one(rows, config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == ("s0", "s1") and plan.new_log_start_offset == 200
    assert decision(plan, "s0").reason == "largest timestamp 2026-11-01T00:00:00Z is 8 days old > retention.ms 7 days"
    assert decision(plan, "s2").reason == ("kept: time: largest timestamp 2026-11-08T02:00:00Z is a day old <= "
                                           "retention.ms 7 days; the walk stops here")
    assert decision(plan, "s2").decided_by == TIME


def test_time_walk_stops_at_first_keeper_even_if_a_later_one_expired() -> None:
    plan = plan_one(chain((100, NOW - 8 * DAY), (100, NOW - DAY), (100, NOW - 9 * DAY)),
                          config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == ("s0",)
    assert decision(plan, "s2").action == RetentionAction.KEEP and decision(plan, "s2").decided_by == NONE


def test_time_equality_keeps_kafkas_local_rule_kafka_20091() -> None:
    """`now - largest == retention.ms` keeps the segment (strict >); one ms later it goes."""
    rows = chain((100, NOW - WEEK), (100, NOW))
    plan = plan_one(rows, config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == () and "KAFKA-20091" in decision(plan, "s0").reason
    later = plan_one(rows, config(retention_ms=WEEK), NOW + 1)
    assert later.delete_ids == ("s0",)
    assert decision(later, "s0").reason == ("largest timestamp 2026-11-02T02:00:00Z is 7 days and 1 millisecond "
                                            "old > retention.ms 7 days")


def test_time_uses_created_at_as_mtime_when_largest_timestamp_is_missing() -> None:
    """Kafka's largestTimestamp falls back to the file mtime when < 0; klake's mtime is created_at_ms."""
    rows = [seg("old", 0, 10, largest=-1, created=NOW - 10 * DAY), seg("new", 10, 10, largest=-1, created=NOW - DAY),
            seg("last", 20, 10, largest=NOW)]
    plan = plan_one(rows, config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == ("old",)
    assert decision(plan, "old").reason.startswith("created_at_ms (mtime; largest_timestamp -1) 2026-10-30T02:00:00Z "
                                                   "is 10 days old")
    # a real timestamp wins over created_at_ms, however old the row version is
    assert plan_one([seg("a", 0, 10, largest=NOW, created=0), seg("b", 10, 10, largest=NOW)],
                          config(retention_ms=WEEK), NOW).delete_ids == ()


def test_future_timestamp_blocks_time_retention_and_is_reported_kafka_4340() -> None:
    future = 1_900_000_000_000
    rows = chain((100, NOW - 30 * DAY), (100, future), (100, NOW - 30 * DAY), (100, NOW - 30 * DAY), (100, NOW - DAY))
    plan = plan_one(rows, config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == ("s0",)
    [hold] = plan.held_back_by_future_timestamp
    assert (hold.segment_id, hold.largest_timestamp, hold.from_mtime) == ("s1", future, False)
    assert hold.in_future_ms == future - NOW and hold.deletable_from_ms == future + WEEK + 1
    assert (hold.newer_segments, hold.newer_past_retention) == (3, 2)
    reason = decision(plan, "s1").reason
    assert "held back: largest timestamp 2030-03-17T17:46:40Z is in the future by 3 years" in reason
    assert "KAFKA-4340" in reason and "3 newer segments" in reason and "2 of them past retention.ms" in reason
    assert "HELD BACK s1" in explain(plan).describe()
    # until wall time passes largest + retention.ms; then the whole expired prefix goes
    assert plan_one(rows[1:], config(retention_ms=WEEK), hold.deletable_from_ms - 1).delete_ids == ()
    assert plan_one(rows[1:], config(retention_ms=WEEK), hold.deletable_from_ms).delete_ids == (
        "s1", "s2", "s3", "s4")


def test_future_timestamp_does_not_block_size_or_log_start_retention() -> None:
    rows = chain((100, NOW - 30 * DAY), (100, 1_900_000_000_000), (100, NOW - 30 * DAY), (100, NOW))
    plan = plan_one(rows, config(retention_ms=WEEK, retention_bytes=100), NOW)
    assert plan.delete_ids == ("s0", "s1", "s2") and decision(plan, "s1").decided_by == SIZE
    assert plan.held_back_by_future_timestamp == ()
    by_start = plan_one(rows, config(retention_ms=WEEK), NOW, log_start_offset=250)
    assert by_start.delete_ids == ("s0", "s1", "s2")
    assert [decision(by_start, s).decided_by for s in ("s0", "s1", "s2")] == [LOG_START, LOG_START, TIME]


def test_future_timestamp_behind_an_earlier_keeper_is_not_reported_as_blocking() -> None:
    plan = plan_one(chain((100, NOW - DAY), (100, 1_900_000_000_000), (100, NOW - 30 * DAY)),
                          config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == () and plan.held_back_by_future_timestamp == ()


def test_future_mtime_fallback_is_reported_too() -> None:
    rows = [seg("skewed", 0, 10, largest=-1, created=NOW + HOUR), seg("old", 10, 10, largest=NOW - 30 * DAY)]
    [hold] = plan_one(rows, config(retention_ms=WEEK), NOW).held_back_by_future_timestamp
    assert (hold.segment_id, hold.from_mtime, hold.in_future_ms, hold.newer_past_retention) == ("skewed", True, HOUR, 1)


# ---- active segment, roll, high watermark ----------------------------------------------------------

def test_active_segment_can_be_deleted_after_rolling_a_new_empty_one() -> None:
    rows = chain((100, NOW - 30 * DAY), (100, NOW - 30 * DAY), (100, NOW - 30 * DAY), active_last=True)
    plan = plan_one(rows, config(retention_ms=WEEK), NOW)
    assert plan.delete_ids == ("s0", "s1", "s2")
    assert plan.roll_new_active_at == 300 and plan.new_log_start_offset == 300
    assert "roll it (ACTIVE -> ROLLED)" in decision(plan, "s2").reason
    assert "ROLL   a new empty active segment at offset 300" in explain(plan).describe()
    assert explain(plan).passes[2].note == "every segment goes: roll a new empty active segment at 300 first"


def test_roll_in_size_pass_leaves_nothing_for_the_time_pass() -> None:
    plan = plan_one(chain((100, NOW - 30 * DAY), (100, NOW)), config(retention_ms=WEEK, retention_bytes=0), NOW)
    assert plan.delete_ids == ("s0", "s1") and plan.roll_new_active_at == 200
    assert explain(plan).passes[2].deleted == () and explain(plan).passes[2].note.startswith("nothing to walk")


def test_empty_last_segment_is_never_deleted() -> None:
    rows = chain((100, NOW - 30 * DAY), (100, NOW - 30 * DAY)) + [
        seg("empty", 200, 0, largest=-1, created=NOW - 30 * DAY, state=SegmentState.ACTIVE)]
    plan = plan_one(rows, config(retention_ms=WEEK, retention_bytes=0), NOW)
    assert plan.delete_ids == ("s0", "s1") and plan.roll_new_active_at is None and plan.new_log_start_offset == 200
    assert "the last segment is empty; Kafka never deletes it" in decision(plan, "empty").reason


@pytest.mark.parametrize(("hw", "deleted"), [(300, ("s0", "s1", "s2")), (200, ("s0", "s1")), (199, ("s0",)),
                                             (100, ("s0",)), (99, ())])
def test_high_watermark_gate_kafka_5634(hw: int, deleted: tuple[str, ...]) -> None:
    """S goes only if HW >= its upper bound (next segment's base, or the LEO for the last)."""
    plan = plan_one(chain((100, 0), (100, 0), (100, 0)), config(retention_ms=WEEK), NOW, high_watermark=hw)
    assert plan.delete_ids == deleted
    if len(deleted) < 3:
        kept = decision(plan, f"s{len(deleted)}")
        assert f"held back by the high watermark {hw} < {100 * (len(deleted) + 1)}" in kept.reason


def test_log_start_offset_never_decreases() -> None:
    plan = plan_one(chain((100, NOW - 30 * DAY), (100, NOW)), config(retention_ms=WEEK), NOW, log_start_offset=170)
    assert plan.delete_ids == ("s0",) and plan.new_log_start_offset == 170
    stale = plan_one(chain((100, NOW), (100, NOW))[1:], config(), NOW, log_start_offset=3)
    assert stale.new_log_start_offset == 100  # raised to the first segment's base, as Kafka's loader does


def test_applying_a_plan_then_replanning_deletes_nothing_more() -> None:
    rows = chain((100, NOW - 30 * DAY), (300, NOW - 20 * DAY), (100, 1_900_000_000_000), (100, NOW - 30 * DAY),
                 (100, NOW), active_last=True)
    plan = plan_one(rows, config(retention_ms=WEEK, retention_bytes=450), NOW, log_start_offset=50)
    assert plan.delete_ids == ("s0", "s1") and len(plan.held_back_by_future_timestamp) == 1
    again = plan_one(apply(rows, plan, NOW), config(retention_ms=WEEK, retention_bytes=450), NOW,
                           plan.new_log_start_offset)
    assert again.delete_ids == () and again.new_log_start_offset == plan.new_log_start_offset


# ---- report, validation --------------------------------------------------------------------------

def test_to_dict_is_json_and_describe_has_one_line_per_segment() -> None:
    rows = chain((100, NOW - 30 * DAY), (50, NOW), active_last=True)
    plan = plan_one(rows, config(retention_ms=WEEK), NOW)
    data = json.loads(json.dumps(explain(plan).to_dict()))
    assert (data["first_deleted"], data["last_deleted"], data["first_kept"]) == ("s0", "s0", "s1")
    assert data["totals"] == {"segments": 1, "bytes": 100, "records": 100}
    assert data["reasons"] == {"time: older than retention.ms": 1, "kept: time: not older than retention.ms": 1}
    assert plan.rows["action"].to_pylist() == ["delete", "keep"]  # every decision is in the plan's columns
    assert plan.rows["decided_by"].to_pylist() == ["time", "time"]
    assert data["new_log_start_offset"] == 100 and data["roll_new_active_at"] is None
    lines = explain(plan).describe().splitlines()
    assert [line.split()[:2] for line in lines[1:3]] == [["DELETE", "s0"], ["KEEP", "s1"]]
    assert sum(" s0 " in line or " s1 " in line for line in lines) == 2


def test_no_segments_plans_nothing() -> None:
    plan = plan_retention(rows_to_table([]), {"t": config(retention_ms=0, retention_bytes=0)}, NOW)
    assert plan.topic_partitions() == [] and plan.segments.num_rows == 0 and plan.segments_to_delete == 0


def test_partitions_plan_independently_in_one_table() -> None:
    """Each partition walks its own segments: one plan over interleaved rows equals the plans one by one."""
    t0 = chain((100, NOW - 30 * DAY), (100, NOW - 30 * DAY), (100, NOW))
    t1 = [replace(r, partition=1, segment_id=f"p1-{r.segment_id}") for r in chain((100, NOW - 30 * DAY), (100, NOW))]
    other = [replace(r, topic="u", segment_id=f"u-{r.segment_id}") for r in t0]
    table = rows_to_table([t1[0], t0[0], other[0], t0[1], t1[1], other[1], t0[2], other[2]])
    plan = plan_retention(table, {"t": config(retention_ms=WEEK), "u": config(retention_bytes=100)}, NOW)
    assert plan.partition(TopicPartition("t", 0)).delete_ids == ("s0", "s1")
    assert plan.partition(TopicPartition("t", 1)).delete_ids == ("p1-s0",)
    assert plan.partition(TopicPartition("u", 0)).delete_ids == ("u-s0", "u-s1")
    assert plan.segments_to_delete == 5 and plan.totals()["delete_bytes"] == 500


@pytest.mark.parametrize(("rows", "kwargs", "message"), [
    (chain((100, 0), (100, 0))[::-1], {}, "overlaps or precedes"),
    ([seg("a", 0, 10), seg("b", 5, 10)], {}, "overlaps or precedes"),
    ([seg("a", 0, 10, state=SegmentState.ACTIVE), seg("b", 10, 10)], {}, "ACTIVE but not the last"),
    ([seg("a", 0, 10, state=SegmentState.DELETE_STARTED)], {}, "not live"),
    ([replace(seg("a", 0, 10), size_bytes=0)], {}, "inconsistent"),
    (chain((100, 0)), {"high_watermark": 101}, "above the log end offset"),
    (chain((100, 0)), {"high_watermark": 50, "log_start_offset": 60}, "above the high watermark"),
])
def test_invalid_input_is_rejected(rows: list[SegmentRow], kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_one(rows, config(), NOW, **kwargs)


# ---- reference: Kafka's deleteOldSegments, literally ------------------------------------------------

def kafka_reference(rows: list[SegmentRow], policy: str, retention_ms: int, retention_bytes: int, now: int,
                    log_start: int | None, hw: int | None) -> dict:
    """Spec 4 step by step: deletableSegments (HW gate, predicate, last-and-empty, stop at first miss),
    deleteSegments (roll a new segment at LEO when all go, raise the log start offset), passes in order."""
    log = [{"id": r.segment_id, "base": r.base_offset, "size": r.size_bytes, "largest": r.largest_timestamp,
            "mtime": r.created_at_ms} for r in rows]
    leo = rows[-1].next_offset
    hw = leo if hw is None else hw
    state = {"lso": log[0]["base"] if log_start is None else max(log_start, log[0]["base"]), "roll": None}
    deleted: dict[str, str] = {}

    def deletable_segments(predicate) -> tuple[list[dict], dict | None, bool]:
        result = []
        for k in range(len(log)):
            segment = log[k]
            nxt = log[k + 1] if k + 1 < len(log) else None
            upper = nxt["base"] if nxt is not None else leo
            if hw >= upper and predicate(segment, nxt) and not (nxt is None and segment["size"] == 0):
                result.append(segment)
            else:
                return result, segment, hw >= upper
        return result, None, False

    def delete_segments(segments: list[dict], reason: str) -> None:
        if not segments:
            return
        if len(segments) == len(log):  # always keep a segment: roll first (rows never have base == LEO and bytes)
            log.append({"id": None, "base": leo, "size": 0, "largest": -1, "mtime": now})
            state["roll"] = leo
        for segment in segments:
            log.remove(segment)
            deleted[segment["id"]] = reason
        state["lso"] = max(state["lso"], log[0]["base"])

    def timestamp(segment: dict) -> int:
        return segment["largest"] if segment["largest"] >= 0 else segment["mtime"]

    lso = state["lso"]
    delete_segments(deletable_segments(lambda s, n: n is not None and n["base"] <= lso)[0], "log-start-offset")
    holds = []
    if "delete" in policy.split(","):
        log_size = 0
        for segment in log:
            log_size += segment["size"]
        if not (retention_bytes < 0 or log_size < retention_bytes):
            diff = [log_size - retention_bytes]

            def by_size(segment: dict, nxt: dict | None) -> bool:
                if diff[0] - segment["size"] >= 0:
                    diff[0] -= segment["size"]
                    return True
                return False
            delete_segments(deletable_segments(by_size)[0], "size")
        if retention_ms >= 0:
            found, stopper, hw_ok = deletable_segments(lambda s, n: now - timestamp(s) > retention_ms)
            if stopper is not None and stopper["id"] is not None and hw_ok and timestamp(stopper) > now:
                behind = log[log.index(stopper) + 1:]
                expired = [b for b in behind if now - timestamp(b) > retention_ms]
                holds.append((stopper["id"], timestamp(stopper), timestamp(stopper) - now, len(behind), len(expired)))
            delete_segments(found, "time")
    return {"deleted": deleted, "lso": state["lso"], "roll": state["roll"], "holds": holds}


def apply(rows: list[SegmentRow], plan: PartitionRetention, now: int) -> list[SegmentRow]:
    """The catalog after the plan: deleted rows gone, a new empty ACTIVE segment if the plan rolls."""
    left = [r for r in rows if r.segment_id not in set(plan.delete_ids)]
    if plan.roll_new_active_at is not None:
        left.append(seg("rolled", plan.roll_new_active_at, 0, created=now, state=SegmentState.ACTIVE))
    return left


SMALL_NOW = 1_000


_TICKS = st.integers(0, 26).map(lambda t: 50 * t)  # a coarse clock around SMALL_NOW: equality and future are common
_SEGMENTS = st.lists(st.tuples(st.integers(0, 4), st.integers(1, 60), st.one_of(st.just(-1), _TICKS), _TICKS,
                               st.integers(0, 2)), min_size=1, max_size=7)
_CONFIGS = st.builds(TopicConfig, cleanup_policy=st.sampled_from(["delete", "compact", "compact,delete"]),
                     retention_ms=st.one_of(st.just(-1), st.integers(0, 20).map(lambda t: 50 * t)),
                     retention_bytes=st.integers(-1, 300))


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[SegmentRow], TopicConfig, int | None, int | None]:
    """Small partitions: empty segments anywhere (count 0), offset gaps, -1 and future timestamps and mtimes,
    ACTIVE or ROLLED last segment, HW below the LEO, log start offsets below, inside and between segments."""
    rows, base = [], draw(st.integers(0, 20))
    specs = draw(_SEGMENTS)
    for k, (count, size, largest, created, gap) in enumerate(specs):
        rows.append(seg(f"s{k}", base, count, size, largest, created))
        base = max(base + count, base + 1) + gap  # gaps, as compaction leaves
    if draw(st.booleans()):
        rows[-1] = replace(rows[-1], state=str(SegmentState.ACTIVE))
    leo = rows[-1].next_offset
    hw = draw(st.one_of(st.none(), st.integers(rows[0].base_offset, leo)))
    log_start = draw(st.one_of(st.none(), st.integers(0, leo if hw is None else hw)))
    return rows, draw(_CONFIGS), log_start, hw


@settings(max_examples=400, deadline=None)
@given(partitions())
def test_plan_matches_literal_kafka_simulation(case: tuple[list[SegmentRow], TopicConfig, int | None, int | None]
                                               ) -> None:
    rows, topic, log_start, hw = case
    plan = plan_one(rows, topic, SMALL_NOW, log_start, hw)
    ref = kafka_reference(rows, topic.cleanup_policy, topic.retention_ms, topic.retention_bytes, SMALL_NOW,
                          log_start, hw)
    assert plan.delete_ids == tuple(ref["deleted"])
    assert {d.segment_id: str(d.decided_by) for d in explain(plan).decisions if d.action == RetentionAction.DELETE} == ref[
        "deleted"]
    assert plan.new_log_start_offset == ref["lso"] and plan.roll_new_active_at == ref["roll"]
    assert [(h.segment_id, h.largest_timestamp, h.in_future_ms, h.newer_segments, h.newer_past_retention)
            for h in plan.held_back_by_future_timestamp] == ref["holds"]
    assert [d.segment_id for d in explain(plan).decisions] == [r.segment_id for r in rows]
    gone = [r for r in rows if r.segment_id in ref["deleted"]]
    assert (plan.bytes_to_delete, plan.records_to_delete) == (sum(r.size_bytes for r in gone),
                                                              sum(r.record_count for r in gone))
    kept = [d for d in explain(plan).decisions if d.action == RetentionAction.KEEP]
    assert all(d.decided_by != NONE for d in kept[:1]) and all(d.decided_by == NONE for d in kept[1:])
    json.dumps(explain(plan).to_dict())
    assert len(explain(plan).describe().splitlines()) == 1 + len(rows) + (plan.roll_new_active_at is not None) + len(
        plan.held_back_by_future_timestamp) + 3 + 1


@settings(max_examples=200, deadline=None)
@given(partitions())
def test_replanning_after_applying_deletes_nothing(case: tuple[list[SegmentRow], TopicConfig, int | None, int | None]
                                                   ) -> None:
    """Retention is idempotent at a fixed `now` (the point of KAFKA-12177's pass order)."""
    rows, topic, log_start, hw = case
    plan = plan_one(rows, topic, SMALL_NOW, log_start, hw)
    after = apply(rows, plan, SMALL_NOW)
    again = plan_one(after, topic, SMALL_NOW, plan.new_log_start_offset, hw)
    assert again.delete_ids == () and again.roll_new_active_at is None
    assert again.new_log_start_offset == plan.new_log_start_offset
    assert after[0].base_offset <= plan.new_log_start_offset
