"""Kafka's retention (`UnifiedLog.deleteOldSegments`, spec 4) as a pure plan over catalog rows.

`plan_retention` reads nothing and writes nothing: given one partition's live segments, the topic's
config and an explicit `now_ms`, it says which segments go, which pass removed each, why each one
stays, the new log start offset, and whether a new empty active segment must be rolled first. The
retention job applies the plan with the catalog's two-phase delete (`engine.ops.deletion`).

Kafka's rules, kept exactly:
- Passes, in KAFKA-12177's order: log-start-offset breach, size (`retention.bytes`), time
  (`retention.ms`). `cleanup.policy=compact` runs only the first (KAFKA-7400); `delete` and
  `compact,delete` run all three. Each pass walks the segments left by the previous ones, oldest
  first, and **stops at the first segment that stays**: a later segment that would qualify is kept.
- A segment S is deletable iff `HW >= upperBound` (the next segment's base offset, or the log end
  offset for the last; KAFKA-5634), the pass predicate holds, and S is not the last segment while
  empty (`size_bytes == 0`, Kafka's `segment.size == 0`). HW defaults to the log end offset: klake is
  a single-writer batch engine.
- Log-start pass: S goes iff the next segment exists and `next.base_offset <= log start offset`.
- Size pass: skipped if `retention.bytes < 0` or the log size is below it; otherwise
  `diff = size - retention.bytes` and S goes iff `diff - S.size >= 0` (diff shrinks by S.size).
- Time pass: skipped if `retention.ms < 0`; S goes iff `now - largestTimestamp > retention.ms`.
  **Equality keeps the segment** (Kafka's local rule; the tiered path deletes at equality,
  KAFKA-20091 -- klake picks the local one). A negative `largest_timestamp` (no timestamps: v0 data,
  all -1) falls back to the file's mtime; on object storage klake's mtime is the row's
  `created_at_ms`, the commit time of that row version (an ACTIVE segment gets a new version per
  append, like an mtime; an imported segment ages from its import).
- The active segment can be deleted. If every segment goes, Kafka rolls a new empty segment at the
  log end offset first, so a partition always keeps one: the plan says so in `roll_new_active_at`.
  An ACTIVE row must be rolled (ACTIVE -> ROLLED) before it is marked DELETE_STARTED.
- The log start offset becomes the base offset of the first remaining segment (the log end offset
  after a roll) and never decreases.

klake's addition (README, "Kafka compatibility"): a segment whose largest timestamp is in the future
stops the time walk for as long as `now - largest <= retention.ms` (KAFKA-4340/KAFKA-5344); instead
of stalling silently the plan reports it in `held_back_by_future_timestamp`, with how far in the
future it is and how many newer segments it holds back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.catalog.schema import LIVE_STATES, SegmentRow, SegmentState
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.times import format_duration, format_time


class RetentionAction(StrEnum):
    KEEP = "keep"
    DELETE = "delete"


class RetentionPass(StrEnum):
    """The pass that decided a segment; NONE for segments no walk reached."""

    LOG_START_OFFSET = "log-start-offset"
    SIZE = "size"
    TIME = "time"
    NONE = "none"


@dataclass(frozen=True)
class SegmentDecision:
    """What retention does with one segment, and why (the numbers that decided it)."""

    segment_id: str
    base_offset: int
    next_offset: int
    size_bytes: int
    record_count: int
    state: str
    action: RetentionAction
    decided_by: RetentionPass
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "base_offset": self.base_offset, "next_offset": self.next_offset,
                "size_bytes": self.size_bytes, "record_count": self.record_count, "state": self.state,
                "action": str(self.action), "decided_by": str(self.decided_by), "reason": self.reason}


@dataclass(frozen=True)
class FutureTimestampHold:
    """A segment whose future largest timestamp stops the time walk (KAFKA-4340): reported, not silent.

    `largest_timestamp` is the value the time pass used (`created_at_ms` when `from_mtime`);
    `deletable_from_ms` is the first `now` at which time retention can delete it;
    `newer_past_retention` counts the newer segments that are themselves past `retention.ms`.
    """

    segment_id: str
    base_offset: int
    largest_timestamp: int
    from_mtime: bool
    in_future_ms: int
    deletable_from_ms: int
    newer_segments: int
    newer_past_retention: int

    def to_dict(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "base_offset": self.base_offset,
                "largest_timestamp": self.largest_timestamp, "from_mtime": self.from_mtime,
                "in_future_ms": self.in_future_ms, "deletable_from_ms": self.deletable_from_ms,
                "newer_segments": self.newer_segments, "newer_past_retention": self.newer_past_retention}

    def describe(self) -> str:
        """What holds the segment back, until when: one sentence for its decision, the plan, the run report."""
        what = "created_at_ms (mtime)" if self.from_mtime else "largest timestamp"
        return (f"{what} {format_time(self.largest_timestamp)} is in the future by "
                f"{format_duration(self.in_future_ms)} (KAFKA-4340); it blocks time retention of the "
                f"{self.newer_segments} newer segments behind it ({self.newer_past_retention} of them past "
                f"retention.ms) until {format_time(self.deletable_from_ms)}")


@dataclass(frozen=True)
class PassOutcome:
    """One pass: whether it ran, what it deleted, where its walk stopped and why (or why it was skipped)."""

    name: RetentionPass
    ran: bool
    deleted: tuple[str, ...]
    stopped_at: str | None
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": str(self.name), "ran": self.ran, "deleted": list(self.deleted),
                "stopped_at": self.stopped_at, "note": self.note}


@dataclass(frozen=True)
class RetentionPlan:
    """The outcome of `plan_retention` for one partition; `decisions` follow the segments' offset order."""

    topic: str
    partition: int
    now_ms: int
    cleanup_policy: str
    retention_ms: int
    retention_bytes: int
    log_start_offset: int | None
    high_watermark: int | None
    log_end_offset: int | None
    decisions: tuple[SegmentDecision, ...]
    to_delete: tuple[SegmentRow, ...]
    new_log_start_offset: int | None
    roll_new_active_at: int | None
    held_back_by_future_timestamp: tuple[FutureTimestampHold, ...]
    passes: tuple[PassOutcome, ...]

    @property
    def delete_ids(self) -> tuple[str, ...]:
        return tuple(row.segment_id for row in self.to_delete)

    @property
    def bytes_to_delete(self) -> int:
        return sum(row.size_bytes for row in self.to_delete)

    @property
    def records_to_delete(self) -> int:
        return sum(row.record_count for row in self.to_delete)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form for run reports and `--dry-run --json`."""
        return {
            "topic": self.topic, "partition": self.partition, "now_ms": self.now_ms,
            "cleanup_policy": self.cleanup_policy, "retention_ms": self.retention_ms,
            "retention_bytes": self.retention_bytes, "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark, "log_end_offset": self.log_end_offset,
            "decisions": [d.to_dict() for d in self.decisions],
            "delete": list(self.delete_ids),
            "new_log_start_offset": self.new_log_start_offset,
            "roll_new_active_at": self.roll_new_active_at,
            "held_back_by_future_timestamp": [h.to_dict() for h in self.held_back_by_future_timestamp],
            "passes": [p.to_dict() for p in self.passes],
            "totals": {"segments": len(self.to_delete), "bytes": self.bytes_to_delete,
                       "records": self.records_to_delete},
        }

    def describe(self) -> str:
        """A dry-run printout: a header, one line per segment, then the roll, holds, passes and totals."""
        lines = [f"{self.topic}-{self.partition}: now {format_time(self.now_ms)}, cleanup.policy={self.cleanup_policy}, "
                 f"retention.ms {_limit(self.retention_ms, _setting)}, "
                 f"retention.bytes {_limit(self.retention_bytes, lambda b: f'{b} B')}; "
                 f"log start {self.log_start_offset} -> {self.new_log_start_offset}, "
                 f"HW {self.high_watermark}, LEO {self.log_end_offset}"]
        for d in self.decisions:
            lines.append(f"  {d.action.upper():<6} {d.segment_id} [{d.base_offset}, {d.next_offset}) "
                         f"{d.size_bytes} B {d.record_count} rec {d.state} by {d.decided_by}: {d.reason}")
        if self.roll_new_active_at is not None:
            lines.append(f"  ROLL   a new empty active segment at offset {self.roll_new_active_at} "
                         "(every segment goes; a partition always keeps one)")
        for hold in self.held_back_by_future_timestamp:
            lines.append(f"  HELD BACK {hold.segment_id}: {hold.describe()}")
        for p in self.passes:
            lines.append(f"  pass {p.name}: " + (f"deleted {len(p.deleted)}; {p.note}" if p.ran else p.note))
        lines.append(f"  total: delete {len(self.to_delete)} segments, {self.bytes_to_delete} B, "
                     f"{self.records_to_delete} records")
        return "\n".join(lines)


def largest_timestamp_for_retention(row: SegmentRow, config: TopicConfig) -> tuple[int, bool]:
    """The timestamp the time pass ages a segment by, and whether it is the mtime fallback.

    Kafka's `LogSegment.largestTimestamp`: the max timestamp if >= 0 (the topic's `min_timestamp`, which
    KIP-228's opt-in lowers), else the file's mtime; klake's mtime is the row version's `created_at_ms`
    (object stores have no settable mtime).
    """
    if row.largest_timestamp >= min_timestamp(config):
        return row.largest_timestamp, False
    return row.created_at_ms, True


def plan_retention(segments: Sequence[SegmentRow], config: TopicConfig, now_ms: int,
                   log_start_offset: int | None = None, high_watermark: int | None = None) -> RetentionPlan:
    """Plan Kafka's retention for one partition's live segments (offset order, ACTIVE last if any).

    `log_start_offset` defaults to the first segment's base offset and is raised to it if lower (as
    Kafka's loader does); `high_watermark` defaults to the log end offset. Raises ValueError for
    segments that are not one partition's live log in order, or a HW outside [log start, LEO].
    """
    rows = tuple(segments)
    _validate(rows)
    if not rows:
        return RetentionPlan("", -1, now_ms, config.cleanup_policy, config.retention_ms, config.retention_bytes,
                             log_start_offset, high_watermark, None, (), (), log_start_offset, None, (), ())
    leo = rows[-1].next_offset
    hw = leo if high_watermark is None else high_watermark
    start = rows[0].base_offset if log_start_offset is None else max(log_start_offset, rows[0].base_offset)
    if hw > leo:
        raise ValueError(f"high watermark {hw} is above the log end offset {leo}")
    if start > hw:
        raise ValueError(f"log start offset {start} is above the high watermark {hw} (KIP-107: it never is)")

    walk = _Walk(rows, leo, hw)
    passes = [walk.run(RetentionPass.LOG_START_OFFSET, _log_start_predicate(start))]
    holds: list[FutureTimestampHold] = []
    if not config.deletes:
        skipped = f"skipped: cleanup.policy={config.cleanup_policy} runs only the log-start-offset pass (KAFKA-7400)"
        passes += [PassOutcome(RetentionPass.SIZE, False, (), None, skipped),
                   PassOutcome(RetentionPass.TIME, False, (), None, skipped)]
    else:
        size = sum(row.size_bytes for row in rows[walk.first:])
        if config.retention_bytes < 0:
            passes.append(PassOutcome(RetentionPass.SIZE, False, (), None,
                                      f"skipped: retention.bytes {config.retention_bytes} (unlimited)"))
        elif size < config.retention_bytes:
            passes.append(PassOutcome(RetentionPass.SIZE, False, (), None,
                                      f"skipped: log size {size} B < retention.bytes {config.retention_bytes} B"))
        else:
            passes.append(walk.run(RetentionPass.SIZE, _size_predicate(size, config.retention_bytes)))
        if config.retention_ms < 0:
            passes.append(PassOutcome(RetentionPass.TIME, False, (), None,
                                      f"skipped: retention.ms {config.retention_ms} (unlimited)"))
        else:
            passes.append(walk.run(RetentionPass.TIME, _time_predicate(rows, now_ms, config, holds)))

    to_delete = tuple(rows[i] for i in sorted(walk.deleted))
    roll_at = leo if walk.rolled else None
    new_start = max(start, leo if walk.rolled else rows[walk.first].base_offset)
    return RetentionPlan(rows[0].topic, rows[0].partition, now_ms, config.cleanup_policy, config.retention_ms,
                         config.retention_bytes, start, hw, leo, walk.decisions(), to_delete, new_start, roll_at,
                         tuple(holds), tuple(passes))


# A pass predicate: (segment, next segment or None, its index) -> (deletable, why).
_Predicate = Callable[[SegmentRow, SegmentRow | None, int], tuple[bool, str]]


class _Walk:
    """Kafka's `deletableSegments` + `deleteSegments` over the suffix `rows[first:]` still in the log."""

    def __init__(self, rows: tuple[SegmentRow, ...], leo: int, hw: int) -> None:
        self.rows, self.leo, self.hw = rows, leo, hw
        self.first = 0
        self.rolled = False
        self.deleted: dict[int, tuple[RetentionPass, str]] = {}
        self.stops: dict[int, list[tuple[RetentionPass, str]]] = {}

    def run(self, name: RetentionPass, predicate: _Predicate) -> PassOutcome:
        """Walk oldest first, delete while deletable, stop at the first segment that stays."""
        rows, i, deleted = self.rows, self.first, []
        if i == len(rows):
            return PassOutcome(name, True, (), None, "nothing to walk: only the new empty active segment remains "
                               "(last and empty, never deleted)")
        while i < len(rows):
            row, nxt = rows[i], rows[i + 1] if i + 1 < len(rows) else None
            upper = nxt.base_offset if nxt is not None else self.leo
            if self.hw < upper:
                ok, why = False, (f"held back by the high watermark {self.hw} < {upper}, the offset after it "
                                  "(KAFKA-5634)")
            else:
                ok, why = predicate(row, nxt, i)
                if ok and nxt is None and row.size_bytes == 0:
                    ok, why = False, "the last segment is empty; Kafka never deletes it"
            if not ok:
                self.stops.setdefault(i, []).append((name, why))
                self.first = i
                return PassOutcome(name, True, tuple(deleted), row.segment_id, f"stopped at {row.segment_id}: {why}")
            self.deleted[i] = (name, why)
            deleted.append(row.segment_id)
            i += 1
        self.first, self.rolled = i, True
        return PassOutcome(name, True, tuple(deleted), None,
                           f"every segment goes: roll a new empty active segment at {self.leo} first")

    def decisions(self) -> tuple[SegmentDecision, ...]:
        out = []
        for i, row in enumerate(self.rows):
            if i in self.deleted:
                name, why = self.deleted[i]
                if row.state == SegmentState.ACTIVE:
                    why += "; the active segment: roll it (ACTIVE -> ROLLED) before DELETE_STARTED"
                action, reason = RetentionAction.DELETE, why
            elif i == self.first:
                notes = self.stops[i]
                name = notes[-1][0]
                action = RetentionAction.KEEP
                reason = "kept: " + "; ".join(f"{n}: {why}" for n, why in notes) + "; the walk stops here"
            else:
                first = self.rows[self.first]
                name, action = RetentionPass.NONE, RetentionAction.KEEP
                reason = (f"kept: not reached; the walk stopped at {first.segment_id} (offset {first.base_offset}), "
                          "and Kafka never deletes past the first segment that stays")
            out.append(SegmentDecision(row.segment_id, row.base_offset, row.next_offset, row.size_bytes,
                                       row.record_count, row.state, action, name, reason))
        return tuple(out)


def _log_start_predicate(start: int) -> _Predicate:
    def deletable(row: SegmentRow, nxt: SegmentRow | None, i: int) -> tuple[bool, str]:
        if nxt is None:
            return False, f"the last segment, holding the log start offset {start}"
        if nxt.base_offset <= start:
            return True, f"wholly below the log start offset: the next segment starts at {nxt.base_offset} <= {start}"
        return False, f"holds the log start offset {start} (the next segment starts at {nxt.base_offset} > {start})"
    return deletable


def _size_predicate(size: int, retention_bytes: int) -> _Predicate:
    diff = size - retention_bytes

    def deletable(row: SegmentRow, nxt: SegmentRow | None, i: int) -> tuple[bool, str]:
        nonlocal diff
        over = diff
        if over - row.size_bytes >= 0:
            diff -= row.size_bytes
            return True, (f"the log is {over} B over retention.bytes {retention_bytes} B; dropping its "
                          f"{row.size_bytes} B leaves it {over - row.size_bytes} B over")
        return False, (f"the log is only {over} B over retention.bytes {retention_bytes} B; dropping its "
                       f"{row.size_bytes} B would leave it {row.size_bytes - over} B under")
    return deletable


def _time_predicate(rows: tuple[SegmentRow, ...], now_ms: int, config: TopicConfig,
                    holds: list[FutureTimestampHold]) -> _Predicate:
    retention_ms = config.retention_ms
    retention = _setting(retention_ms)

    def past(row: SegmentRow) -> bool:
        return now_ms - largest_timestamp_for_retention(row, config)[0] > retention_ms

    def deletable(row: SegmentRow, nxt: SegmentRow | None, i: int) -> tuple[bool, str]:
        largest, from_mtime = largest_timestamp_for_retention(row, config)
        what = (f"created_at_ms (mtime; largest_timestamp {row.largest_timestamp}) {format_time(largest)}"
                if from_mtime else f"largest timestamp {format_time(largest)}")
        age = now_ms - largest
        if age > retention_ms:
            return True, f"{what} is {_age(age, retention)} old > retention.ms {retention}"
        if age == retention_ms:
            return False, (f"{what} is exactly retention.ms {retention} old: kept (strict >, Kafka's local rule; "
                           "tiered storage deletes at equality, KAFKA-20091)")
        if largest <= now_ms:
            return False, f"{what} is {_age(age, retention)} old <= retention.ms {retention}"
        newer = rows[i + 1:]
        hold = FutureTimestampHold(row.segment_id, row.base_offset, largest, from_mtime, largest - now_ms,
                                   largest + retention_ms + 1, len(newer), sum(map(past, newer)))
        holds.append(hold)
        return False, f"held back: {hold.describe()}"
    return deletable


def _validate(rows: tuple[SegmentRow, ...]) -> None:
    """One partition's live log in offset order: anything else is a caller bug, not a retention case."""
    for i, row in enumerate(rows):
        where = f"segment {row.segment_id} (base offset {row.base_offset})"
        if (row.topic, row.partition) != (rows[0].topic, rows[0].partition):
            raise ValueError(f"{where} is in {row.topic}-{row.partition}, not {rows[0].topic}-{rows[0].partition}")
        if row.state not in LIVE_STATES:
            raise ValueError(f"{where} is {row.state}, not live (ACTIVE or ROLLED)")
        if row.state == SegmentState.ACTIVE and i != len(rows) - 1:
            raise ValueError(f"{where} is ACTIVE but not the last segment")
        if row.size_bytes < 0 or row.next_offset < row.base_offset or (row.size_bytes > 0) != (
                row.next_offset > row.base_offset):
            raise ValueError(f"{where} is inconsistent: size {row.size_bytes} B, offsets "
                             f"[{row.base_offset}, {row.next_offset})")
        if i and row.base_offset < max(rows[i - 1].next_offset, rows[i - 1].base_offset + 1):
            raise ValueError(f"{where} overlaps or precedes segment {rows[i - 1].segment_id} "
                             f"[{rows[i - 1].base_offset}, {rows[i - 1].next_offset})")


def _setting(ms: int) -> str:
    """A configured duration (retention.ms), to the millisecond: it is what the user wrote."""
    return format_duration(ms, precise=True)


def _age(age: int, retention: str) -> str:
    """A segment's age in words, to the millisecond where rounding would make it read as retention.ms."""
    words = format_duration(age)
    return format_duration(age, precise=True) if words == retention else words


def _limit(value: int, show: Callable[[int], str]) -> str:
    return f"{value} (unlimited)" if value < 0 else show(value)
