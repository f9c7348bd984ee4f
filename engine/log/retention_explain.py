"""Retention's plan explained (`engine.log.retention` decides): one partition's decisions as sentences
carrying their numbers, each pass's outcome, the run report's per-partition summary and a dry run's
printout. Rendered on demand from the plan's columns: reports and dry runs of many partitions read the
columns, not the sentences.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import pyarrow as pa

from engine.catalog.schema import SegmentState
from engine.log.retention import (
    PASSES,
    FutureTimestampHold,
    PartitionRetention,
    PassStatus,
    RetentionAction,
    RetentionPass,
    Why,
)
from kernel.times import format_duration, format_time


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


@dataclass(frozen=True)
class PassOutcome:
    """One pass: whether it ran, what it deleted (`segments`: their ids), where its walk stopped and why
    (or why it was skipped)."""

    name: RetentionPass
    ran: bool
    segments: pa.ChunkedArray
    stopped_at: str | None
    note: str

    @property
    def deleted(self) -> tuple[str, ...]:
        return tuple(self.segments.to_pylist())

    def to_dict(self) -> dict[str, Any]:
        """The report's form: the deleted segments are counted (they are listed in the plan's side file)."""
        return {"name": str(self.name), "ran": self.ran, "deleted": len(self.segments),
                "stopped_at": self.stopped_at, "note": self.note}


@dataclass(frozen=True)
class RetentionExplanation:
    """The sentences of one partition's retention plan (`PartitionRetention`): every segment's decision,
    each pass's outcome, the report's summary and the dry-run printout."""

    plan: PartitionRetention

    @property
    def to_delete(self) -> tuple[SegmentDecision, ...]:
        return self.decisions[:self.plan.info["delete_segments"]]

    @cached_property
    def _columns(self) -> dict[str, list[Any]]:
        return self.plan.rows.to_pydict()

    def _at(self, column: str, i: int) -> Any:
        """One value: from the Python columns once every decision was rendered, else from Arrow."""
        columns = self.__dict__.get("_columns")
        return columns[column][i] if columns is not None else self.plan.rows[column][i].as_py()

    def _upper(self, i: int) -> int:
        return self._at("base_offset", i + 1) if i + 1 < self.plan.info["segments"] else self.plan.log_end_offset

    def _stops(self) -> list[tuple[RetentionPass, int | None, Why | None]]:
        return [(name, self.plan.info[f"{key}_stop"], None if self.plan.info[f"{key}_why"] is None else Why(self.plan.info[f"{key}_why"]))
                for name, key in zip(PASSES, ("log_start", "size", "time"), strict=True)]

    def _deleted_why(self, name: RetentionPass, i: int) -> str:
        start, size = self.plan.log_start_offset, self._at("size_bytes", i)
        if name == RetentionPass.LOG_START_OFFSET:
            return f"wholly below the log start offset: the next segment starts at {self._upper(i)} <= {start}"
        if name == RetentionPass.SIZE:
            over, limit = self._at("log_over_bytes", i), self.plan.config.retention_bytes
            return (f"the log is {over} B over retention.bytes {limit} B; dropping its {size} B leaves it "
                    f"{over - size} B over")
        what, age, retention = self._aged(i)
        return f"{what} is {_age(age, retention)} old > retention.ms {retention}"

    def _aged(self, i: int) -> tuple[str, int, str]:
        largest = self._at("retention_timestamp", i)
        what = (f"created_at_ms (mtime; largest_timestamp {self._at('largest_timestamp', i)}) {format_time(largest)}"
                if self._at("from_mtime", i) else f"largest timestamp {format_time(largest)}")
        return what, self.plan.now_ms - largest, _setting(self.plan.config.retention_ms)

    def _stop_why(self, name: RetentionPass, why: Why, i: int) -> str:
        """The sentence for a pass that stopped at segment `i` for `why`, with its numbers."""
        start = self.plan.log_start_offset
        if why == Why.HIGH_WATERMARK:
            return (f"held back by the high watermark {self.plan.high_watermark} < {self._upper(i)}, the offset after it "
                    "(KAFKA-5634)")
        if why == Why.LAST_EMPTY:
            return "the last segment is empty; Kafka never deletes it"
        if why == Why.LAST_HOLDS_LOG_START:
            return f"the last segment, holding the log start offset {start}"
        if why == Why.HOLDS_LOG_START:
            nxt = self._upper(i)
            return f"holds the log start offset {start} (the next segment starts at {nxt} > {start})"
        if why == Why.UNDER_RETENTION_BYTES:
            over, size = self._at("log_over_bytes", i), self._at("size_bytes", i)
            return (f"the log is only {over} B over retention.bytes {self.plan.config.retention_bytes} B; dropping "
                    f"its {size} B would leave it {size - over} B under")
        what, age, retention = self._aged(i)
        if why == Why.EXACTLY_RETENTION_MS:
            return (f"{what} is exactly retention.ms {retention} old: kept (strict >, Kafka's local rule; "
                    "tiered storage deletes at equality, KAFKA-20091)")
        if why == Why.WITHIN_RETENTION_MS:
            return f"{what} is {_age(age, retention)} old <= retention.ms {retention}"
        assert self.plan.hold is not None, f"{self.plan.tp}: a future-timestamp stop without its hold"
        return f"held back: {describe_hold(self.plan.hold)}"

    @cached_property
    def decisions(self) -> tuple[SegmentDecision, ...]:
        """Every segment's decision with its reason as a sentence, in offset order."""
        c, stops = self._columns, self._stops()
        first = self.plan.info["delete_segments"]
        out = []
        for i, sid in enumerate(c["segment_id"]):
            name = RetentionPass(c["decided_by"][i])
            if i < first:
                action, reason = RetentionAction.DELETE, self._deleted_why(name, i)
                if c["state"][i] == SegmentState.ACTIVE:
                    reason += "; the active segment: roll it (ACTIVE -> ROLLED) before DELETE_STARTED"
            elif i == first:
                notes = [f"{n}: {self._stop_why(n, why, i)}" for n, stop, why in stops if stop == i and why]
                action, reason = RetentionAction.KEEP, "kept: " + "; ".join(notes) + "; the walk stops here"
            else:
                action = RetentionAction.KEEP
                reason = (f"kept: not reached; the walk stopped at {c['segment_id'][first]} (offset "
                          f"{c['base_offset'][first]}), and Kafka never deletes past the first segment that stays")
            out.append(SegmentDecision(sid, c["base_offset"][i], c["next_offset"][i], c["size_bytes"][i],
                                       c["record_count"][i], c["state"][i], action, name, reason))
        return tuple(out)

    @cached_property
    def passes(self) -> tuple[PassOutcome, ...]:
        """Each pass: ran or skipped (and why), what it deleted, where and why it stopped."""
        ids, n, out, begin = self.plan.rows["segment_id"], self.plan.info["segments"], [], 0
        none = ids.slice(0, 0)
        for name, stop, why in self._stops():
            status = PassStatus.RAN if name == RetentionPass.LOG_START_OFFSET else PassStatus(
                self.plan.info[f"{'size' if name == RetentionPass.SIZE else 'time'}_pass"])
            if status != PassStatus.RAN:
                out.append(PassOutcome(name, False, none, None, self._skipped(name, status)))
                continue
            if begin == n:
                out.append(PassOutcome(name, True, none, None, "nothing to walk: only the new empty active segment "
                                       "remains (last and empty, never deleted)"))
                continue
            deleted = ids.slice(begin, (n if stop is None else stop) - begin)
            if stop is None:
                out.append(PassOutcome(name, True, deleted, None, f"every segment goes: roll a new empty active "
                                       f"segment at {self.plan.log_end_offset} first"))
                begin = n
            else:
                assert why is not None
                sid = ids[stop].as_py()
                out.append(PassOutcome(name, True, deleted, sid, f"stopped at {sid}: {self._stop_why(name, why, stop)}"))
                begin = stop
        return tuple(out)

    def _skipped(self, name: RetentionPass, status: PassStatus) -> str:
        config = self.plan.config
        if status == PassStatus.POLICY:
            return f"skipped: cleanup.policy={config.cleanup_policy} runs only the log-start-offset pass (KAFKA-7400)"
        if status == PassStatus.UNDER:
            return f"skipped: log size {self.plan.info['log_size']} B < retention.bytes {config.retention_bytes} B"
        if name == RetentionPass.SIZE:
            return f"skipped: retention.bytes {config.retention_bytes} (unlimited)"
        return f"skipped: retention.ms {config.retention_ms} (unlimited)"

    def reasons(self) -> dict[str, int]:
        """How many segments each reason decided (the `reason` column's counts for this partition)."""
        return {r["values"]: r["counts"] for r in self.plan.rows["reason"].value_counts().to_pylist()}

    def to_dict(self) -> dict[str, Any]:
        """The run report's per-partition summary: offsets, passes, holds, totals, first and last segment
        deleted, counts by reason. Every segment's decision is in the plan's `segments` (a Parquet side file)."""
        info, deleted = self.plan.info, self.plan.info["delete_segments"]

        def sid(i: int) -> str | None:
            return self._at("segment_id", i) if 0 <= i < info["segments"] else None

        return {
            "topic": self.plan.topic, "partition": self.plan.partition, "now_ms": self.plan.now_ms,
            "cleanup_policy": self.plan.config.cleanup_policy, "retention_ms": self.plan.config.retention_ms,
            "retention_bytes": self.plan.config.retention_bytes, "log_start_offset": self.plan.log_start_offset,
            "high_watermark": self.plan.high_watermark, "log_end_offset": self.plan.log_end_offset,
            "new_log_start_offset": self.plan.new_log_start_offset, "roll_new_active_at": self.plan.roll_new_active_at,
            "segments": info["segments"],
            "first_deleted": sid(0) if deleted else None, "last_deleted": sid(deleted - 1), "first_kept": sid(deleted),
            "held_back_by_future_timestamp": [h.to_dict() for h in self.plan.held_back_by_future_timestamp],
            "passes": [p.to_dict() for p in self.passes],
            "reasons": self.reasons(),
            "totals": {"segments": deleted, "bytes": self.plan.bytes_to_delete, "records": self.plan.records_to_delete},
        }

    def describe(self) -> str:
        """A dry-run printout: a header, one line per segment, then the roll, holds, passes and totals."""
        cfg = self.plan.config
        lines = [f"{self.plan.tp}: now {format_time(self.plan.now_ms)}, cleanup.policy={cfg.cleanup_policy}, "
                 f"retention.ms {_limit(cfg.retention_ms, _setting)}, "
                 f"retention.bytes {_limit(cfg.retention_bytes, lambda b: f'{b} B')}; "
                 f"log start {self.plan.log_start_offset} -> {self.plan.new_log_start_offset}, "
                 f"HW {self.plan.high_watermark}, LEO {self.plan.log_end_offset}"]
        for d in self.decisions:
            lines.append(f"  {d.action.upper():<6} {d.segment_id} [{d.base_offset}, {d.next_offset}) "
                         f"{d.size_bytes} B {d.record_count} rec {d.state} by {d.decided_by}: {d.reason}")
        if self.plan.roll_new_active_at is not None:
            lines.append(f"  ROLL   a new empty active segment at offset {self.plan.roll_new_active_at} "
                         "(every segment goes; a partition always keeps one)")
        for hold in self.plan.held_back_by_future_timestamp:
            lines.append(f"  HELD BACK {hold.segment_id}: {describe_hold(hold)}")
        for p in self.passes:
            lines.append(f"  pass {p.name}: " + (f"deleted {len(p.deleted)}; {p.note}" if p.ran else p.note))
        lines.append(f"  total: delete {len(self.plan.delete_ids)} segments, {self.plan.bytes_to_delete} B, "
                     f"{self.plan.records_to_delete} records")
        return "\n".join(lines)


def describe_hold(hold: FutureTimestampHold) -> str:
    """What holds the segment back, until when: one sentence for its decision, the plan, the run report."""
    what = "created_at_ms (mtime)" if hold.from_mtime else "largest timestamp"
    return (f"{what} {format_time(hold.largest_timestamp)} is in the future by "
            f"{format_duration(hold.in_future_ms)} (KAFKA-4340); it blocks time retention of the "
            f"{hold.newer_segments} newer segments behind it ({hold.newer_past_retention} of them past "
            f"retention.ms) until {format_time(hold.deletable_from_ms)}")


def _setting(ms: int) -> str:
    """A configured duration (retention.ms), to the millisecond: it is what the user wrote."""
    return format_duration(ms, precise=True)


def _age(age: int, retention: str) -> str:
    """A segment's age in words, to the millisecond where rounding would make it read as retention.ms."""
    words = format_duration(age)
    return format_duration(age, precise=True) if words == retention else words


def _limit(value: int, show: Callable[[int], str]) -> str:
    return f"{value} (unlimited)" if value < 0 else show(value)
