"""Kafka's retention (`UnifiedLog.deleteOldSegments`, spec 4) as a pure, vectorised plan over catalog rows.

`plan_retention` reads nothing and writes nothing: given the live segments of any number of partitions
as an Arrow table (the catalog's columns), each topic's config and an explicit `now_ms`, it says which
segments go, which pass removed each, why each one stays, every partition's new log start offset, and
whether a new empty active segment must be rolled first. Each pass is one numpy walk over the whole
column for every partition at once (a million segments plan in well under a second); the plan is
Arrow: one row per segment (action, deciding pass, a dictionary-encoded reason, the numbers behind it)
and one row per partition (its offsets, where each pass stopped and why, its totals).
`RetentionPlan.partition` renders one partition's decisions as sentences carrying their numbers. The
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
- Log-start pass: S goes iff the next segment exists and `next.base_offset <= log start offset`. The
  log start offset is the catalog's (`engine.catalog.schema.log_start_offsets`: the first live base
  offset, raised by DeleteRecords, KIP-107).
- Size pass: skipped if `retention.bytes < 0` or the log size is below it; otherwise
  `diff = size - retention.bytes` and S goes iff `diff - S.size >= 0` (diff shrinks by S.size).
- Time pass: skipped if `retention.ms < 0`; S goes iff `now - largestTimestamp > retention.ms`.
  **Equality keeps the segment** (Kafka's local rule; the tiered path deletes at equality,
  KAFKA-20091 -- klake picks the local one). A `largest_timestamp` below the topic's `min_timestamp`
  (no timestamps: v0 data, all -1) falls back to the file's mtime; on object storage klake's mtime is
  the row's `created_at_ms`, the commit time of that row version (an ACTIVE segment gets a new version
  per append, like an mtime; an imported segment ages from its import).
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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import LIVE_STATES, SegmentState, log_start_offsets, owned
from engine.log.plan_columns import PartitionRows, dictionary, group_partitions, int64
from engine.log.timestamp_floor import has_timestamp, largest_timestamp_or_mtime
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.names import TopicPartition
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


class Why(StrEnum):
    """Why a pass deleted a segment or stopped at it: the words of the plan's `reason` column (one
    dictionary entry each); `RetentionPlan.partition` renders them with their numbers."""

    BELOW_LOG_START = "wholly below the log start offset"
    OVER_RETENTION_BYTES = "the log stays over retention.bytes without it"
    PAST_RETENTION_MS = "older than retention.ms"
    HIGH_WATERMARK = "held back by the high watermark (KAFKA-5634)"
    LAST_HOLDS_LOG_START = "the last segment, holding the log start offset"
    HOLDS_LOG_START = "holds the log start offset"
    UNDER_RETENTION_BYTES = "dropping it would leave the log under retention.bytes"
    EXACTLY_RETENTION_MS = "exactly retention.ms old (strict >, KAFKA-20091)"
    WITHIN_RETENTION_MS = "not older than retention.ms"
    FUTURE_TIMESTAMP = "held back by a future timestamp (KAFKA-4340)"
    LAST_EMPTY = "the last segment is empty; Kafka never deletes it"
    NOT_REACHED = "not reached: the walk stopped at an earlier segment, Kafka never deletes past it"


class PassStatus(StrEnum):
    """Whether the size or time pass ran for a partition, or why it was skipped."""

    RAN = "ran"
    POLICY = "skipped: cleanup.policy"
    UNLIMITED = "skipped: unlimited"
    UNDER = "skipped: log size below retention.bytes"


_WHYS = list(Why)
_PASSES = (RetentionPass.LOG_START_OFFSET, RetentionPass.SIZE, RetentionPass.TIME)
_DELETED_BY = (Why.BELOW_LOG_START, Why.OVER_RETENTION_BYTES, Why.PAST_RETENTION_MS)
_STATUSES = list(PassStatus)
_RAN, _POLICY, _UNLIMITED, _UNDER = (_STATUSES.index(s) for s in (PassStatus.RAN, PassStatus.POLICY,
                                                                 PassStatus.UNLIMITED, PassStatus.UNDER))
_WORDS = pa.dictionary(pa.int32(), pa.string())
SEGMENT_PLAN_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment_id", pa.string()), ("base_offset", pa.int64()),
    ("next_offset", pa.int64()), ("size_bytes", pa.int64()), ("record_count", pa.int64()), ("state", pa.string()),
    ("action", _WORDS), ("decided_by", _WORDS), ("reason", _WORDS), ("largest_timestamp", pa.int64()),
    ("retention_timestamp", pa.int64()), ("from_mtime", pa.bool_()), ("log_over_bytes", pa.int64()),
])
PARTITION_PLAN_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("first_row", pa.int64()), ("segments", pa.int64()),
    ("log_start_offset", pa.int64()), ("high_watermark", pa.int64()), ("log_end_offset", pa.int64()),
    ("new_log_start_offset", pa.int64()), ("roll_new_active_at", pa.int64()), ("log_size", pa.int64()),
    ("size_pass", _WORDS), ("time_pass", _WORDS), ("log_start_stop", pa.int64()), ("log_start_why", _WORDS),
    ("size_stop", pa.int64()), ("size_why", _WORDS), ("time_stop", pa.int64()), ("time_why", _WORDS),
    ("delete_segments", pa.int64()), ("delete_bytes", pa.int64()), ("delete_records", pa.int64()),
])
RETENTION_INPUT_COLUMNS = ("topic", "partition", "segment_id", "base_offset", "next_offset", "size_bytes", "record_count", "state",
          "largest_timestamp", "created_at_ms", "log_start_offset")


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
class RetentionPlan(PartitionRows):
    """The outcome of `plan_retention`: `segments` (one row per segment, partitions in input order,
    offsets ascending) and `partitions` (one row per partition, `first_row` pointing into `segments`)."""

    now_ms: int
    configs: Mapping[str, TopicConfig]
    segments: pa.Table
    partitions: pa.Table
    holds: Mapping[TopicPartition, FutureTimestampHold] = field(default_factory=dict)

    def partition(self, tp: TopicPartition) -> PartitionRetention:
        """One partition's plan (KeyError if it had no segment)."""
        i = self._index[tp]
        info = {name: column[i].as_py() for name, column in zip(self.partitions.column_names,
                                                                  self.partitions.columns, strict=True)}
        rows = self.segments.slice(info["first_row"], info["segments"])
        return PartitionRetention(tp, self.now_ms, self.configs[tp.topic], info, rows, self.holds.get(tp))

    def side_files(self) -> dict[str, pa.Table]:
        """The run report's Parquet side files: every segment's decision."""
        return {"segments": self.segments}

    @property
    def segments_to_delete(self) -> int:
        return int(pc.sum(self.partitions["delete_segments"]).as_py() or 0)

    def totals(self) -> dict[str, Any]:
        """Counts over every partition: segments, bytes and records to delete, segments kept, by reason."""
        p = self.partitions
        reasons = self.segments["reason"].value_counts().to_pylist() if self.segments.num_rows else []
        return {"partitions": p.num_rows, "segments": self.segments.num_rows,
                "delete_segments": self.segments_to_delete,
                "delete_bytes": int(pc.sum(p["delete_bytes"]).as_py() or 0),
                "delete_records": int(pc.sum(p["delete_records"]).as_py() or 0),
                "kept_segments": self.segments.num_rows - self.segments_to_delete,
                "rolled_partitions": p.num_rows - p["roll_new_active_at"].null_count,
                "by_reason": {r["values"]: r["counts"] for r in sorted(reasons, key=lambda r: -r["counts"])}}


@dataclass(frozen=True)
class PartitionRetention:
    """One partition's retention plan: its row of `RetentionPlan.partitions` (`info`), its segments'
    rows, and the sentences that explain them (rendered on demand: reports and dry runs of many
    partitions read the columns, not the sentences)."""

    tp: TopicPartition
    now_ms: int
    config: TopicConfig
    info: Mapping[str, Any]
    rows: pa.Table
    hold: FutureTimestampHold | None

    def __getstate__(self) -> dict[str, Any]:
        """Shipped to a task as its own rows only (Arrow), not the whole plan the slice was cut from."""
        return {**self.__dict__, "rows": owned(self.rows)}

    @property
    def topic(self) -> str:
        return self.tp.topic

    @property
    def partition(self) -> int:
        return self.tp.partition

    @property
    def log_start_offset(self) -> int:
        return self.info["log_start_offset"]

    @property
    def high_watermark(self) -> int:
        return self.info["high_watermark"]

    @property
    def log_end_offset(self) -> int:
        return self.info["log_end_offset"]

    @property
    def new_log_start_offset(self) -> int:
        return self.info["new_log_start_offset"]

    @property
    def roll_new_active_at(self) -> int | None:
        return self.info["roll_new_active_at"]

    @property
    def held_back_by_future_timestamp(self) -> tuple[FutureTimestampHold, ...]:
        return () if self.hold is None else (self.hold,)

    @property
    def delete_ids(self) -> tuple[str, ...]:
        return tuple(self.rows["segment_id"].to_pylist()[:self.info["delete_segments"]])

    @property
    def to_delete(self) -> tuple[SegmentDecision, ...]:
        return self.decisions[:self.info["delete_segments"]]

    @property
    def bytes_to_delete(self) -> int:
        return self.info["delete_bytes"]

    @property
    def records_to_delete(self) -> int:
        return self.info["delete_records"]

    @cached_property
    def _columns(self) -> dict[str, list[Any]]:
        return self.rows.to_pydict()

    def _at(self, column: str, i: int) -> Any:
        """One value: from the Python columns once every decision was rendered, else from Arrow."""
        columns = self.__dict__.get("_columns")
        return columns[column][i] if columns is not None else self.rows[column][i].as_py()

    def _upper(self, i: int) -> int:
        return self._at("base_offset", i + 1) if i + 1 < self.info["segments"] else self.log_end_offset

    def _stops(self) -> list[tuple[RetentionPass, int | None, Why | None]]:
        return [(name, self.info[f"{key}_stop"], None if self.info[f"{key}_why"] is None else Why(self.info[f"{key}_why"]))
                for name, key in zip(_PASSES, ("log_start", "size", "time"), strict=True)]

    def _deleted_why(self, name: RetentionPass, i: int) -> str:
        start, size = self.log_start_offset, self._at("size_bytes", i)
        if name == RetentionPass.LOG_START_OFFSET:
            return f"wholly below the log start offset: the next segment starts at {self._upper(i)} <= {start}"
        if name == RetentionPass.SIZE:
            over, limit = self._at("log_over_bytes", i), self.config.retention_bytes
            return (f"the log is {over} B over retention.bytes {limit} B; dropping its {size} B leaves it "
                    f"{over - size} B over")
        what, age, retention = self._aged(i)
        return f"{what} is {_age(age, retention)} old > retention.ms {retention}"

    def _aged(self, i: int) -> tuple[str, int, str]:
        largest = self._at("retention_timestamp", i)
        what = (f"created_at_ms (mtime; largest_timestamp {self._at('largest_timestamp', i)}) {format_time(largest)}"
                if self._at("from_mtime", i) else f"largest timestamp {format_time(largest)}")
        return what, self.now_ms - largest, _setting(self.config.retention_ms)

    def _stop_why(self, name: RetentionPass, why: Why, i: int) -> str:
        """The sentence for a pass that stopped at segment `i` for `why`, with its numbers."""
        start = self.log_start_offset
        if why == Why.HIGH_WATERMARK:
            return (f"held back by the high watermark {self.high_watermark} < {self._upper(i)}, the offset after it "
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
            return (f"the log is only {over} B over retention.bytes {self.config.retention_bytes} B; dropping "
                    f"its {size} B would leave it {size - over} B under")
        what, age, retention = self._aged(i)
        if why == Why.EXACTLY_RETENTION_MS:
            return (f"{what} is exactly retention.ms {retention} old: kept (strict >, Kafka's local rule; "
                    "tiered storage deletes at equality, KAFKA-20091)")
        if why == Why.WITHIN_RETENTION_MS:
            return f"{what} is {_age(age, retention)} old <= retention.ms {retention}"
        assert self.hold is not None, f"{self.tp}: a future-timestamp stop without its hold"
        return f"held back: {self.hold.describe()}"

    @cached_property
    def decisions(self) -> tuple[SegmentDecision, ...]:
        """Every segment's decision with its reason as a sentence, in offset order."""
        c, stops = self._columns, self._stops()
        first = self.info["delete_segments"]
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
        ids, n, out, begin = self.rows["segment_id"], self.info["segments"], [], 0
        none = ids.slice(0, 0)
        for name, stop, why in self._stops():
            status = PassStatus.RAN if name == RetentionPass.LOG_START_OFFSET else PassStatus(
                self.info[f"{'size' if name == RetentionPass.SIZE else 'time'}_pass"])
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
                                       f"segment at {self.log_end_offset} first"))
                begin = n
            else:
                assert why is not None
                sid = ids[stop].as_py()
                out.append(PassOutcome(name, True, deleted, sid, f"stopped at {sid}: {self._stop_why(name, why, stop)}"))
                begin = stop
        return tuple(out)

    def _skipped(self, name: RetentionPass, status: PassStatus) -> str:
        config = self.config
        if status == PassStatus.POLICY:
            return f"skipped: cleanup.policy={config.cleanup_policy} runs only the log-start-offset pass (KAFKA-7400)"
        if status == PassStatus.UNDER:
            return f"skipped: log size {self.info['log_size']} B < retention.bytes {config.retention_bytes} B"
        if name == RetentionPass.SIZE:
            return f"skipped: retention.bytes {config.retention_bytes} (unlimited)"
        return f"skipped: retention.ms {config.retention_ms} (unlimited)"

    def reasons(self) -> dict[str, int]:
        """How many segments each reason decided (the `reason` column's counts for this partition)."""
        return {r["values"]: r["counts"] for r in self.rows["reason"].value_counts().to_pylist()}

    def to_dict(self) -> dict[str, Any]:
        """The run report's per-partition summary: offsets, passes, holds, totals, first and last segment
        deleted, counts by reason. Every segment's decision is in the plan's `segments` (a Parquet side file)."""
        info, deleted = self.info, self.info["delete_segments"]

        def sid(i: int) -> str | None:
            return self._at("segment_id", i) if 0 <= i < info["segments"] else None

        return {
            "topic": self.topic, "partition": self.partition, "now_ms": self.now_ms,
            "cleanup_policy": self.config.cleanup_policy, "retention_ms": self.config.retention_ms,
            "retention_bytes": self.config.retention_bytes, "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark, "log_end_offset": self.log_end_offset,
            "new_log_start_offset": self.new_log_start_offset, "roll_new_active_at": self.roll_new_active_at,
            "segments": info["segments"],
            "first_deleted": sid(0) if deleted else None, "last_deleted": sid(deleted - 1), "first_kept": sid(deleted),
            "held_back_by_future_timestamp": [h.to_dict() for h in self.held_back_by_future_timestamp],
            "passes": [p.to_dict() for p in self.passes],
            "reasons": self.reasons(),
            "totals": {"segments": deleted, "bytes": self.bytes_to_delete, "records": self.records_to_delete},
        }

    def describe(self) -> str:
        """A dry-run printout: a header, one line per segment, then the roll, holds, passes and totals."""
        cfg = self.config
        lines = [f"{self.tp}: now {format_time(self.now_ms)}, cleanup.policy={cfg.cleanup_policy}, "
                 f"retention.ms {_limit(cfg.retention_ms, _setting)}, "
                 f"retention.bytes {_limit(cfg.retention_bytes, lambda b: f'{b} B')}; "
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
        lines.append(f"  total: delete {len(self.delete_ids)} segments, {self.bytes_to_delete} B, "
                     f"{self.records_to_delete} records")
        return "\n".join(lines)


def plan_retention(segments: pa.Table, configs: Mapping[str, TopicConfig], now_ms: int,
                   high_watermarks: Mapping[TopicPartition, int] | None = None) -> RetentionPlan:
    """Plan Kafka's retention for the live segments of every partition in `segments` (catalog columns).

    Each partition's rows must be in offset order (ACTIVE last if any); partitions may come in any
    order, each one's rows together or not (the plan groups them: topics in first-seen order, partition
    numbers ascending). Its log
    start offset is the catalog's; `high_watermarks` defaults to each log end offset. Raises ValueError
    for rows that are not live logs in order, a HW outside [log start, LEO], or a topic without config.
    """
    table = segments.select(list(RETENTION_INPUT_COLUMNS))
    n = table.num_rows
    if not n:
        return RetentionPlan(now_ms, dict(configs), SEGMENT_PLAN_SCHEMA.empty_table(), PARTITION_PLAN_SCHEMA.empty_table())
    table, groups = group_partitions(table)
    starts, ends, gid = groups.starts, groups.ends, groups.gid
    idx = np.arange(n)
    base, nxt, size = int64(table["base_offset"]), int64(table["next_offset"]), int64(table["size_bytes"])
    last = np.zeros(n, bool)
    last[ends - 1] = True
    _validate(table, base, nxt, size, last, starts)

    topics, group_topic, group_part = groups.topics, groups.topic_of, groups.partitions
    try:
        cfgs = [configs[t] for t in topics]
    except KeyError as exc:
        raise ValueError(f"no topic config for {exc.args[0]}") from None
    deletes = np.array([c.deletes for c in cfgs], bool)[group_topic]
    retention_bytes = np.array([c.retention_bytes for c in cfgs], np.int64)[group_topic]
    retention_ms = np.array([c.retention_ms for c in cfgs], np.int64)[group_topic]
    floor = np.array([min_timestamp(c) for c in cfgs], np.int64)[group_topic]

    leo = nxt[ends - 1]
    start = log_start_offsets(base, int64(table["log_start_offset"]), starts)
    hw = leo.copy()
    for tp, value in (high_watermarks or {}).items():
        hits = np.flatnonzero((np.array(topics, object)[group_topic] == tp.topic) & (group_part == tp.partition))
        hw[hits] = value
    for g in np.flatnonzero((hw > leo) | (start > hw)):
        where = f"{topics[group_topic[g]]}-{group_part[g]}"
        if hw[g] > leo[g]:
            raise ValueError(f"{where}: high watermark {hw[g]} is above the log end offset {leo[g]}")
        raise ValueError(f"{where}: log start offset {start[g]} is above the high watermark {hw[g]} "
                         "(KIP-107: it never is)")

    upper = np.where(last, leo[gid], np.r_[base[1:], 0][:n])
    hw_ok = hw[gid] >= upper
    last_empty = last & (size == 0)

    def first_stop(fail: np.ndarray, begin: np.ndarray) -> np.ndarray:
        """Per partition, the first segment at or after `begin` where the walk stops (`ends` if none)."""
        candidate = np.where(fail & (idx >= begin[gid]), idx, n)
        return np.minimum(np.minimum.reduceat(candidate, starts), ends)

    # pass 1: log start offset
    stop1 = first_stop(~(hw_ok & ~last & (upper <= start[gid])), starts)
    # pass 2: retention.bytes, over the segments pass 1 left
    sizes0 = np.r_[0, np.cumsum(size)]
    log_size = sizes0[ends] - sizes0[stop1]
    size_status = np.where(~deletes, _POLICY, np.where(retention_bytes < 0, _UNLIMITED,
                                                      np.where(log_size < retention_bytes, _UNDER, _RAN)))
    over = (log_size - retention_bytes)[gid] - (sizes0[:n] - sizes0[stop1][gid])
    size_ok = hw_ok & (over - size >= 0) & ~last_empty
    ran2 = size_status == _RAN
    stop2 = np.where(ran2, first_stop(~size_ok, stop1), stop1)
    # pass 3: retention.ms, aging by the largest timestamp or the mtime fallback
    largest, created = int64(table["largest_timestamp"]), int64(table["created_at_ms"])
    from_mtime = ~has_timestamp(largest, floor[gid])
    aged_by = largest_timestamp_or_mtime(largest, created, floor[gid])
    age = now_ms - aged_by
    past = age > retention_ms[gid]
    time_status = np.where(~deletes, _POLICY, np.where(retention_ms < 0, _UNLIMITED, _RAN))
    ran3 = time_status == _RAN
    stop3 = np.where(ran3, first_stop(~(hw_ok & past & ~last_empty), stop2), stop2)

    rolled = stop3 == ends
    deleted = idx < stop3[gid]
    by = np.where(idx < stop1[gid], 0, np.where(idx < stop2[gid], 1, 2))
    stop_row = idx == stop3[gid]
    # why each pass stopped where it did (read at that pass's stop row only)
    why1 = np.where(~hw_ok, _code(Why.HIGH_WATERMARK), np.where(last, _code(Why.LAST_HOLDS_LOG_START),
                                                                 _code(Why.HOLDS_LOG_START)))
    why2 = np.where(~hw_ok, _code(Why.HIGH_WATERMARK), np.where(over - size < 0, _code(Why.UNDER_RETENTION_BYTES),
                                                                 _code(Why.LAST_EMPTY)))
    rms = retention_ms[gid]
    why3 = np.where(~hw_ok, _code(Why.HIGH_WATERMARK), np.where(
        past, _code(Why.LAST_EMPTY), np.where(age == rms, _code(Why.EXACTLY_RETENTION_MS), np.where(
            aged_by <= now_ms, _code(Why.WITHIN_RETENTION_MS), _code(Why.FUTURE_TIMESTAMP)))))

    def at_stop(why: np.ndarray, stop: np.ndarray, ran: np.ndarray) -> np.ndarray:
        """A pass's stop reason per partition (-1: it did not run, or walked to the end)."""
        walked = ran & (stop < ends)
        return np.where(walked, why[np.minimum(stop, n - 1)], -1)

    notes = [at_stop(why1, stop1, np.ones(len(starts), bool)), at_stop(why2, stop2, ran2 & (stop1 < ends)),
             at_stop(why3, stop3, ran3 & (stop2 < ends))]
    # the reason column: a deleting pass's words, or the notes of the passes that stopped at the keeper
    final_notes = [np.where((note >= 0) & (stop == stop3), note, -1) for note, stop in
                   zip(notes, (stop1, stop2, stop3), strict=True)]
    combo = (final_notes[0] + 1) * 256 + (final_notes[1] + 1) * 16 + (final_notes[2] + 1)
    combos = np.unique(combo[~rolled])
    labels = [f"{name}: {why}" for name, why in zip(_PASSES, _DELETED_BY, strict=True)] + [f"kept: {Why.NOT_REACHED}"]
    labels += ["kept: " + "; ".join(f"{name}: {_WHYS[(c >> shift & 15) - 1]}" for name, shift in
                                    zip(_PASSES, (8, 4, 0), strict=True) if c >> shift & 15) for c in combos.tolist()]
    stop_label = 4 + np.searchsorted(combos, combo)
    reason = np.where(deleted, by, np.where(stop_row, stop_label[gid], 3))
    stop_pass = np.where(ran3, 2, np.where(ran2, 1, 0))  # the last pass that ran stopped at the keeper
    decided = np.where(deleted, by, np.where(stop_row, stop_pass[gid], 3))

    holds: dict[TopicPartition, FutureTimestampHold] = {}
    past0 = np.r_[0, np.cumsum(past)]
    for g in np.flatnonzero(notes[2] == _code(Why.FUTURE_TIMESTAMP)):
        i = int(stop3[g])
        tp = TopicPartition(topics[group_topic[g]], int(group_part[g]))
        holds[tp] = FutureTimestampHold(table["segment_id"][i].as_py(), int(base[i]), int(aged_by[i]),
                                        bool(from_mtime[i]), int(aged_by[i] - now_ms),
                                        int(aged_by[i] + retention_ms[g] + 1), int(ends[g] - i - 1),
                                        int(past0[ends[g]] - past0[i + 1]))

    counts0 = np.r_[0, np.cumsum(int64(table["record_count"]))]
    first_kept_base = base[np.minimum(stop3, n - 1)]
    segments_out = pa.Table.from_pydict({
        "topic": table["topic"], "partition": table["partition"], "segment_id": table["segment_id"],
        "base_offset": table["base_offset"], "next_offset": table["next_offset"],
        "size_bytes": table["size_bytes"], "record_count": table["record_count"], "state": table["state"],
        "action": dictionary(np.where(deleted, 1, 0), [str(RetentionAction.KEEP), str(RetentionAction.DELETE)]),
        "decided_by": dictionary(decided, [str(p) for p in (*_PASSES, RetentionPass.NONE)]),
        "reason": dictionary(reason, labels),
        "largest_timestamp": table["largest_timestamp"],
        "retention_timestamp": pa.array(aged_by, pa.int64()), "from_mtime": pa.array(from_mtime),
        "log_over_bytes": pa.array(over, pa.int64(), mask=~(ran2[gid] & (idx >= stop1[gid]) & (idx <= stop2[gid]))),
    }, schema=SEGMENT_PLAN_SCHEMA)

    def relative(stop: np.ndarray, walked: np.ndarray) -> pa.Array:
        return pa.array(stop - starts, pa.int64(), mask=~(walked & (stop < ends)))

    def why_column(note: np.ndarray) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(note, pa.int32(), mask=note < 0),
                                              pa.array([str(w) for w in _WHYS], pa.string()))

    partitions = pa.Table.from_pydict({
        "topic": pa.array([topics[t] for t in group_topic.tolist()], pa.string()),
        "partition": pa.array(group_part, pa.int32()),
        "first_row": pa.array(starts, pa.int64()), "segments": pa.array(ends - starts, pa.int64()),
        "log_start_offset": pa.array(start, pa.int64()), "high_watermark": pa.array(hw, pa.int64()),
        "log_end_offset": pa.array(leo, pa.int64()),
        "new_log_start_offset": pa.array(np.maximum(start, np.where(rolled, leo, first_kept_base)), pa.int64()),
        "roll_new_active_at": pa.array(leo, pa.int64(), mask=~rolled),
        "log_size": pa.array(log_size, pa.int64()),
        "size_pass": dictionary(size_status, [str(s) for s in _STATUSES]),
        "time_pass": dictionary(time_status, [str(s) for s in _STATUSES]),
        "log_start_stop": relative(stop1, np.ones(len(starts), bool)), "log_start_why": why_column(notes[0]),
        "size_stop": relative(stop2, ran2 & (stop1 < ends)), "size_why": why_column(notes[1]),
        "time_stop": relative(stop3, ran3 & (stop2 < ends)), "time_why": why_column(notes[2]),
        "delete_segments": pa.array(stop3 - starts, pa.int64()),
        "delete_bytes": pa.array(sizes0[stop3] - sizes0[starts], pa.int64()),
        "delete_records": pa.array(counts0[stop3] - counts0[starts], pa.int64()),
    }, schema=PARTITION_PLAN_SCHEMA)
    return RetentionPlan(now_ms, dict(configs), segments_out, partitions, holds)


def _code(why: Why) -> int:
    return _WHYS.index(why)


def _validate(table: pa.Table, base: np.ndarray, nxt: np.ndarray, size: np.ndarray, last: np.ndarray,
              starts: np.ndarray) -> None:
    """Live logs in offset order, one per partition: anything else is a caller bug, not a retention case."""
    n = len(base)
    if not n:
        return
    state = table["state"]
    live = np.asarray(pc.is_in(state, pa.array([str(s) for s in LIVE_STATES])).to_numpy(zero_copy_only=False))
    active = np.asarray(pc.equal(state, str(SegmentState.ACTIVE)).to_numpy(zero_copy_only=False))
    first = np.zeros(n, bool)
    first[starts] = True
    prev_next, prev_base = np.r_[0, nxt[:-1]], np.r_[0, base[:-1]]
    bad = (~live | (active & ~last) | (size < 0) | (nxt < base) | ((size > 0) != (nxt > base))
           | (~first & (base < np.maximum(prev_next, prev_base + 1))))
    if not bad.any():
        return
    i = int(np.argmax(bad))
    row = table.slice(i, 1).to_pylist()[0]
    where = f"segment {row['segment_id']} (base offset {row['base_offset']})"
    if not live[i]:
        raise ValueError(f"{where} is {row['state']}, not live (ACTIVE or ROLLED)")
    if active[i] and not last[i]:
        raise ValueError(f"{where} is ACTIVE but not the last segment")
    if size[i] < 0 or nxt[i] < base[i] or (size[i] > 0) != (nxt[i] > base[i]):
        raise ValueError(f"{where} is inconsistent: size {size[i]} B, offsets [{base[i]}, {nxt[i]})")
    prev = table.slice(i - 1, 1).to_pylist()[0]
    raise ValueError(f"{where} overlaps or precedes segment {prev['segment_id']} "
                     f"[{prev['base_offset']}, {prev['next_offset']})")


def _setting(ms: int) -> str:
    """A configured duration (retention.ms), to the millisecond: it is what the user wrote."""
    return format_duration(ms, precise=True)


def _age(age: int, retention: str) -> str:
    """A segment's age in words, to the millisecond where rounding would make it read as retention.ms."""
    words = format_duration(age)
    return format_duration(age, precise=True) if words == retention else words


def _limit(value: int, show: Callable[[int], str]) -> str:
    return f"{value} (unlimited)" if value < 0 else show(value)
