"""Kafka's retention (`UnifiedLog.deleteOldSegments`, spec 4) as a pure, vectorised plan over catalog rows.

`plan_retention` reads nothing and writes nothing: given the live segments of any number of partitions
as an Arrow table (the catalog's columns), each topic's config and an explicit `now_ms`, it says which
segments go, which pass removed each, why each one stays, every partition's new log start offset, and
whether a new empty active segment must be rolled first. Each pass is a function named after
`UnifiedLog`'s (`log_start_offset_breached`, `retention_size_breached`, `retention_ms_breached`), one
numpy walk over the whole column for every partition at once (a million segments plan in well under a
second); the plan is Arrow: one row per segment (action, deciding pass, a dictionary-encoded reason, the
numbers behind it) and one row per partition (its offsets, where each pass stopped and why, as `Why`
columns, its totals). This module decides; `engine.log.retention_explain` renders one partition's
decisions as sentences carrying their numbers. The retention job applies the plan with the catalog's
two-phase delete (`engine.ops.deletion`).

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

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import LIVE_STATES, SegmentState, log_start_offsets, owned
from engine.log.plan_columns import Groups, PartitionRows, dictionary, group_partitions, int64
from engine.log.timestamp_floor import has_timestamp, largest_timestamp_or_mtime
from engine.log.topic_config import TopicConfig, min_timestamp
from kernel.names import TopicPartition


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
    dictionary entry each); `engine.log.retention_explain` renders them with their numbers."""

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
PASSES = (RetentionPass.LOG_START_OFFSET, RetentionPass.SIZE, RetentionPass.TIME)
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
    """One partition's retention plan: its row of `RetentionPlan.partitions` (`info`) and its segments'
    rows (`engine.log.retention_explain` renders the sentences that explain them, on demand: reports and
    dry runs of many partitions read the columns, not the sentences)."""

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
    def bytes_to_delete(self) -> int:
        return self.info["delete_bytes"]

    @property
    def records_to_delete(self) -> int:
        return self.info["delete_records"]


@dataclass(frozen=True)
class _Walk:
    """One pass over every partition (arrays by partition): whether it ran or why it was skipped (`status`,
    a `PassStatus` code), where its walk stopped (`stop`: the first segment it keeps, the partition's end
    if none stays), whether it walked at all (`walked`: it ran, and the earlier passes left it segments),
    and why it stopped there (`note`: a `Why` code; -1 if it did not stop)."""

    status: np.ndarray
    stop: np.ndarray
    walked: np.ndarray
    note: np.ndarray

    @property
    def ran(self) -> np.ndarray:
        return self.status == _RAN


@dataclass(frozen=True)
class _Log:
    """The segments of every partition at once, as the passes read them: rows grouped by partition (`gid`,
    `starts`, `ends`), sizes (`sizes0`: their running sum from 0), the last segment of each, and
    `deletableSegments`' gates common to every pass: the upper bound (the next segment's base offset, or
    the log end offset), the high watermark at or above it (KAFKA-5634), the last segment while empty."""

    idx: np.ndarray
    gid: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    size: np.ndarray
    sizes0: np.ndarray
    last: np.ndarray
    upper: np.ndarray
    hw_ok: np.ndarray
    last_empty: np.ndarray

    def walk(self, stays: np.ndarray, begin: np.ndarray, status: np.ndarray, why: np.ndarray) -> _Walk:
        """A pass's walk (`deletableSegments`): from `begin` (where the previous pass stopped), oldest first,
        it stops at the first segment that `stays` (Kafka never deletes past it); `why` is the reason
        read at that segment. A pass that does not run (`status`) stops where it began."""
        n = len(self.idx)
        candidate = np.where(stays & (self.idx >= begin[self.gid]), self.idx, n)
        ran = status == _RAN
        stop = np.where(ran, np.minimum(np.minimum.reduceat(candidate, self.starts), self.ends), begin)
        walked = ran & (begin < self.ends)
        return _Walk(status, stop, walked, np.where(walked & (stop < self.ends), why[np.minimum(stop, n - 1)], -1))


def log_start_offset_breached(log: _Log, start: np.ndarray) -> _Walk:
    """`UnifiedLog.deleteLogStartOffsetBreachedSegments`: a segment goes iff the next one starts at or
    below the log start offset `start` (by partition); the one holding it stays. It runs whatever the
    cleanup.policy (KAFKA-7400)."""
    stays = ~(log.hw_ok & ~log.last & (log.upper <= start[log.gid]))
    why = np.where(~log.hw_ok, _code(Why.HIGH_WATERMARK), np.where(log.last, _code(Why.LAST_HOLDS_LOG_START),
                                                                    _code(Why.HOLDS_LOG_START)))
    return log.walk(stays, log.starts, np.full(len(log.starts), _RAN), why)


def retention_size_breached(log: _Log, begin: np.ndarray, deletes: np.ndarray, retention_bytes: np.ndarray,
                            ) -> tuple[_Walk, np.ndarray, np.ndarray]:
    """`UnifiedLog.deleteRetentionSizeBreachedSegments` over the segments from `begin`: skipped unless the
    policy deletes, `retention.bytes >= 0` and the log is not below it; then, with `diff` = log size -
    retention.bytes, a segment goes iff `diff - size >= 0` (diff shrinks by each one gone). Also the log
    size by partition, and by segment how far the log is over retention.bytes before it (`diff`)."""
    gid, sizes0 = log.gid, log.sizes0
    log_size = sizes0[log.ends] - sizes0[begin]
    status = np.where(~deletes, _POLICY, np.where(retention_bytes < 0, _UNLIMITED,
                                                  np.where(log_size < retention_bytes, _UNDER, _RAN)))
    over = (log_size - retention_bytes)[gid] - (sizes0[:len(log.idx)] - sizes0[begin][gid])
    stays = ~(log.hw_ok & (over - log.size >= 0) & ~log.last_empty)
    why = np.where(~log.hw_ok, _code(Why.HIGH_WATERMARK), np.where(over - log.size < 0, _code(Why.UNDER_RETENTION_BYTES),
                                                                    _code(Why.LAST_EMPTY)))
    return log.walk(stays, begin, status, why), log_size, over


def retention_ms_breached(log: _Log, begin: np.ndarray, deletes: np.ndarray, retention_ms: np.ndarray,
                          aged_by: np.ndarray, now_ms: int) -> tuple[_Walk, np.ndarray]:
    """`UnifiedLog.deleteRetentionMsBreachedSegments` over the segments from `begin`: skipped unless the
    policy deletes and `retention.ms >= 0`; a segment goes iff `now - aged_by > retention.ms`, strictly
    (`aged_by`: its largest timestamp, else its mtime). Also by segment whether it is past retention.ms."""
    age = now_ms - aged_by
    rms = retention_ms[log.gid]
    past = age > rms
    status = np.where(~deletes, _POLICY, np.where(retention_ms < 0, _UNLIMITED, _RAN))
    stays = ~(log.hw_ok & past & ~log.last_empty)
    why = np.where(~log.hw_ok, _code(Why.HIGH_WATERMARK), np.where(
        past, _code(Why.LAST_EMPTY), np.where(age == rms, _code(Why.EXACTLY_RETENTION_MS), np.where(
            aged_by <= now_ms, _code(Why.WITHIN_RETENTION_MS), _code(Why.FUTURE_TIMESTAMP)))))
    return log.walk(stays, begin, status, why), past


def _reason_words(walks: tuple[_Walk, _Walk, _Walk], rolled: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The `reason` column's words, and by partition its keeper's entry. The first four are a deleting
    pass's words and `not reached`; the keeper's reason is the passes whose walks stopped at it, with why:
    a row of three `Why` codes (-1: that pass did not stop there), one entry per row found."""
    keeper = walks[-1].stop
    stopped = np.stack([np.where((w.note >= 0) & (w.stop == keeper), w.note, -1) for w in walks], axis=1)
    found, entry = np.unique(stopped[~rolled], axis=0, return_inverse=True)
    words = [f"{name}: {why}" for name, why in zip(PASSES, _DELETED_BY, strict=True)] + [f"kept: {Why.NOT_REACHED}"]
    words += ["kept: " + "; ".join(f"{name}: {_WHYS[code]}" for name, code in zip(PASSES, row, strict=True)
                                   if code >= 0) for row in found.tolist()]
    keeper_entry = np.zeros(len(rolled), np.int64)
    keeper_entry[~rolled] = 4 + entry.reshape(-1)
    return words, keeper_entry


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
    log = _Log(idx, gid, starts, ends, size, np.r_[0, np.cumsum(size)], last, upper, hw[gid] >= upper,
               last & (size == 0))
    # the passes in UnifiedLog.deleteOldSegments' order (KAFKA-12177), each walking what the previous left
    by_start = log_start_offset_breached(log, start)
    by_size, log_size, over = retention_size_breached(log, by_start.stop, deletes, retention_bytes)
    largest, created = int64(table["largest_timestamp"]), int64(table["created_at_ms"])
    from_mtime = ~has_timestamp(largest, floor[gid])
    aged_by = largest_timestamp_or_mtime(largest, created, floor[gid])
    by_time, past = retention_ms_breached(log, by_size.stop, deletes, retention_ms, aged_by, now_ms)
    walks = (by_start, by_size, by_time)
    stop1, stop2, stop3 = by_start.stop, by_size.stop, by_time.stop

    rolled = stop3 == ends
    deleted = idx < stop3[gid]
    by = np.where(idx < stop1[gid], 0, np.where(idx < stop2[gid], 1, 2))
    stop_row = idx == stop3[gid]
    words, keeper_entry = _reason_words(walks, rolled)
    reason = np.where(deleted, by, np.where(stop_row, keeper_entry[gid], 3))
    stop_pass = np.where(by_time.ran, 2, np.where(by_size.ran, 1, 0))  # the last pass that ran stopped at the keeper
    decided = np.where(deleted, by, np.where(stop_row, stop_pass[gid], 3))
    holds = _future_timestamp_holds(table, groups, by_time, base, aged_by, from_mtime, past, retention_ms, now_ms)

    counts0 = np.r_[0, np.cumsum(int64(table["record_count"]))]
    first_kept_base = base[np.minimum(stop3, n - 1)]
    segments_out = pa.Table.from_pydict({
        "topic": table["topic"], "partition": table["partition"], "segment_id": table["segment_id"],
        "base_offset": table["base_offset"], "next_offset": table["next_offset"],
        "size_bytes": table["size_bytes"], "record_count": table["record_count"], "state": table["state"],
        "action": dictionary(np.where(deleted, 1, 0), [str(RetentionAction.KEEP), str(RetentionAction.DELETE)]),
        "decided_by": dictionary(decided, [str(p) for p in (*PASSES, RetentionPass.NONE)]),
        "reason": dictionary(reason, words),
        "largest_timestamp": table["largest_timestamp"],
        "retention_timestamp": pa.array(aged_by, pa.int64()), "from_mtime": pa.array(from_mtime),
        "log_over_bytes": pa.array(over, pa.int64(),
                                   mask=~(by_size.ran[gid] & (idx >= stop1[gid]) & (idx <= stop2[gid]))),
    }, schema=SEGMENT_PLAN_SCHEMA)

    def relative(walk: _Walk) -> pa.Array:
        return pa.array(walk.stop - starts, pa.int64(), mask=~(walk.walked & (walk.stop < ends)))

    def why_column(walk: _Walk) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(walk.note, pa.int32(), mask=walk.note < 0),
                                              pa.array([str(w) for w in _WHYS], pa.string()))

    sizes0 = log.sizes0
    partitions = pa.Table.from_pydict({
        "topic": pa.array([topics[t] for t in group_topic.tolist()], pa.string()),
        "partition": pa.array(group_part, pa.int32()),
        "first_row": pa.array(starts, pa.int64()), "segments": pa.array(ends - starts, pa.int64()),
        "log_start_offset": pa.array(start, pa.int64()), "high_watermark": pa.array(hw, pa.int64()),
        "log_end_offset": pa.array(leo, pa.int64()),
        "new_log_start_offset": pa.array(np.maximum(start, np.where(rolled, leo, first_kept_base)), pa.int64()),
        "roll_new_active_at": pa.array(leo, pa.int64(), mask=~rolled),
        "log_size": pa.array(log_size, pa.int64()),
        "size_pass": dictionary(by_size.status, [str(s) for s in _STATUSES]),
        "time_pass": dictionary(by_time.status, [str(s) for s in _STATUSES]),
        "log_start_stop": relative(by_start), "log_start_why": why_column(by_start),
        "size_stop": relative(by_size), "size_why": why_column(by_size),
        "time_stop": relative(by_time), "time_why": why_column(by_time),
        "delete_segments": pa.array(stop3 - starts, pa.int64()),
        "delete_bytes": pa.array(sizes0[stop3] - sizes0[starts], pa.int64()),
        "delete_records": pa.array(counts0[stop3] - counts0[starts], pa.int64()),
    }, schema=PARTITION_PLAN_SCHEMA)
    return RetentionPlan(now_ms, dict(configs), segments_out, partitions, holds)


def _future_timestamp_holds(table: pa.Table, groups: Groups, by_time: _Walk, base: np.ndarray, aged_by: np.ndarray,
                            from_mtime: np.ndarray, past: np.ndarray, retention_ms: np.ndarray, now_ms: int,
                            ) -> dict[TopicPartition, FutureTimestampHold]:
    """klake's addition: each partition whose time walk stopped at a future timestamp (KAFKA-4340), with
    how far in the future, until when, and how many newer segments (past retention.ms or not) it holds."""
    holds: dict[TopicPartition, FutureTimestampHold] = {}
    past0 = np.r_[0, np.cumsum(past)]
    ends = groups.ends
    for g in np.flatnonzero(by_time.note == _code(Why.FUTURE_TIMESTAMP)):
        i = int(by_time.stop[g])
        tp = TopicPartition(groups.topics[groups.topic_of[g]], int(groups.partitions[g]))
        holds[tp] = FutureTimestampHold(table["segment_id"][i].as_py(), int(base[i]), int(aged_by[i]),
                                        bool(from_mtime[i]), int(aged_by[i] - now_ms),
                                        int(aged_by[i] + retention_ms[g] + 1), int(ends[g] - i - 1),
                                        int(past0[ends[g]] - past0[i + 1]))
    return holds


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
