"""Which part of a compacted partition the cleaner may clean, and whether it should (spec 8.1).

Kafka's `LogCleanerManager.cleanableOffsets`, `calculateCleanableBytes`, `maxCompactionDelay` and the
filter of `grabFilthiestCompactedLog`, for one partition described by its segments in offset order:
- first dirty offset = the cleaner checkpoint, reset to the log start offset when it is below it or
  above the log end offset;
- first uncleanable offset = min(last stable offset (bounded by the high watermark, KAFKA-13194),
  active segment base, base of the first dirty non-active segment whose largest timestamp (mtime
  when it has none) is > now - min.compaction.lag.ms when that lag is > 0), clamped >= first dirty;
- the round ends at the base of the segment holding the first uncleanable offset (whole segments);
- cleanable bytes = sizes of the segments overlapping [min(first dirty, that base), that base),
  clean bytes = sizes of the segments below the first dirty offset, ratio = cleanable / total;
- clean when ratio > min.cleanable.dirty.ratio (strict), or when max.compaction.lag.ms is exceeded
  (earliest first-batch timestamp > 0 among dirty non-active segments < now - lag) and cleanable
  bytes > 0; a log with no bytes is never cleaned.
Without an active segment (klake may hold a closed log) the active base is the log end offset.

Every rule is computed over columns for many partitions at once (`cleanable_ranges`, `clean_verdicts`,
one numpy pass each; `log_segments` is Kafka's segment range they and the cleaner's round share); `cleanable_range` and `should_clean` are their one-partition case (the cleaner's
round over segments it has read), and `plan_compaction` their whole-catalog case (the compact job's
driver plan over the catalog's columns: a reason per partition, a zone per segment).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import SegmentState, first_dirty_offsets, log_start_offsets
from engine.log.plan_columns import PartitionRows, dictionary, group_partitions, int64
from engine.log.timestamp_floor import has_timestamp, largest_timestamp_or_mtime
from engine.log.topic_config import KAFKA_MIN_TIMESTAMP, TopicConfig, min_timestamp
from kernel.names import TopicPartition
from kernel.times import format_duration

UNCLEANABLE_LSO = "last stable offset"
UNCLEANABLE_ACTIVE = "active segment"
UNCLEANABLE_MIN_LAG = "min.compaction.lag.ms"


@dataclass(frozen=True)
class SegmentInfo:
    """What selection needs of one segment (a catalog row or `summarize_segment` gives it)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int
    first_batch_timestamp: int
    is_active: bool = False
    last_modified_ms: int | None = None


def largest_timestamps_or_mtimes(segments: Sequence[SegmentInfo], floor: int) -> np.ndarray:
    """Each segment's `LogSegment.largestTimestamp` (`largest_timestamp_or_mtime`); without a known mtime the
    largest timestamp stands for it (none: the segment ages as the oldest)."""
    largest = np.array([s.largest_timestamp for s in segments], np.int64)
    mtime = np.array([s.largest_timestamp if s.last_modified_ms is None else s.last_modified_ms
                      for s in segments], np.int64)
    return largest_timestamp_or_mtime(largest, mtime, floor)


def lag_first_batch(first_batch_ts: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Whether a dirty segment's first batch timestamp enters `maxCompactionDelay`: Kafka keeps those `> 0`
    (spec 8.1), so one at the epoch itself is skipped like one without a timestamp; a KIP-228 topic counts
    every timestamp it has (`has_timestamp` with its floor)."""
    return has_timestamp(first_batch_ts, floor) & ((first_batch_ts != 0) | (floor != KAFKA_MIN_TIMESTAMP))


@dataclass(frozen=True)
class CleanableRange:
    """The numbers of one selection; `round_end` is the upper bound of a cleaning round."""

    log_start_offset: int
    log_end_offset: int
    checkpoint: int
    checkpoint_reset: bool
    first_dirty_offset: int
    last_stable_offset: int
    first_uncleanable_offset: int
    uncleanable_reason: str
    round_end: int
    clean_bytes: int
    cleanable_bytes: int
    total_bytes: int
    dirty_ratio: float
    earliest_dirty_first_batch_timestamp: int | None
    max_compaction_delay_ms: int


@dataclass(frozen=True)
class CleanDecision:
    clean: bool
    reasons: tuple[str, ...]
    range: CleanableRange


def _validate(base: np.ndarray, nxt: np.ndarray, active: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              where: Callable[[int], str]) -> None:
    """Each partition's segments in offset order without overlap, only its last one active (`where(row)`
    names a faulty row's partition in the message)."""
    n = len(base)
    first, last = np.zeros(n, bool), np.zeros(n, bool)
    first[starts[ends > starts]] = True
    last[ends[ends > starts] - 1] = True
    prev_base, prev_next = np.r_[0, base[:-1]][:n], np.r_[0, nxt[:-1]][:n]
    overlap = ~first & ((base <= prev_base) | (base < prev_next))
    if overlap.any():
        i = int(np.argmax(overlap))
        raise ValueError(f"{where(i)}segments must be in offset order without overlap: base {base[i]} "
                         f"follows [{prev_base[i]}, {prev_next[i]})")
    stray = active & ~last
    if stray.any():
        i = int(np.argmax(stray))
        raise ValueError(f"{where(i)}only the last segment can be active, not the one at {base[i]}")


_INF = np.iinfo(np.int64).max


def log_segments(base: np.ndarray, following: np.ndarray, start: np.ndarray | int, end: np.ndarray | int) -> np.ndarray:
    """Kafka's `LogSegments.values(from, to)` (what `UnifiedLog.logSegments(from, to)` returns) as a row
    mask over segments in offset order: empty when from == to ("non-segment-aligned empty sets"), else
    the segments from the floor of `from` by base offset (from the first one when none is at or below it)
    with base < `to`; Kafka refuses to < from (IllegalArgumentException), and so does this. `following`
    is the base of the next segment of the same partition (int64 max after a partition's last), so a row
    is at or after the floor exactly when its follower's base is above `from`. `start`/`end` are per row
    (each partition's bounds repeated over its rows) or one pair for all rows."""
    start, end = np.broadcast_to(start, base.shape), np.broadcast_to(end, base.shape)
    backwards = end < start
    if backwards.any():
        i = int(np.argmax(backwards))
        raise ValueError(f"invalid log segment range: from offset {start[i]} is above limit offset {end[i]}")
    return (start != end) & (base < end) & (following > start)


def overlapping(segments: Sequence[SegmentInfo], start: int, end: int) -> list[int]:
    """Indexes of `UnifiedLog.logSegments(start, end)` among one partition's segments (`log_segments`)."""
    base = np.array([s.base_offset for s in segments], np.int64)
    return np.flatnonzero(log_segments(base, np.r_[base[1:], _INF], start, end)).tolist()


UNCLEANABLE_REASONS = (UNCLEANABLE_LSO, UNCLEANABLE_ACTIVE, UNCLEANABLE_MIN_LAG)


class CleanWhy(StrEnum):
    """`grabFilthiestCompactedLog`'s verdict on one log, in words (one dictionary entry each in a plan's
    `reason` column); `decide` renders each with its numbers."""

    NOT_COMPACTED = "cleanup.policy does not compact"
    NO_BYTES = "the log holds no bytes"
    DIRTY = "dirty ratio > min.cleanable.dirty.ratio"
    LAGGED = "max.compaction.lag.ms exceeded"
    DIRTY_AND_LAGGED = "dirty ratio > min.cleanable.dirty.ratio; max.compaction.lag.ms exceeded"
    NOTHING_CLEANABLE = "dirty ratio <= min.cleanable.dirty.ratio; nothing cleanable"
    NOT_LAGGED = "dirty ratio <= min.cleanable.dirty.ratio; max.compaction.lag.ms not exceeded"


CLEAN_WHYS = list(CleanWhy)
_CLEANS = np.array([w in (CleanWhy.DIRTY, CleanWhy.LAGGED, CleanWhy.DIRTY_AND_LAGGED) for w in CLEAN_WHYS])


def cleanable_ranges(base: np.ndarray, nxt: np.ndarray, size: np.ndarray, aged_by: np.ndarray,
                     first_batch_ts: np.ndarray, active: np.ndarray, starts: np.ndarray, ends: np.ndarray, *,
                     log_start: np.ndarray, checkpoint: np.ndarray, stable_bound: np.ndarray, min_lag: np.ndarray,
                     max_lag: np.ndarray, floor: np.ndarray, now_ms: int) -> dict[str, np.ndarray]:
    """Kafka's dirty range and dirtiness (module docstring) of many partitions at once, from the columns of
    their segments (rows `[starts[g], ends[g])` of partition g, offset order, only a last one active; a
    partition may have none). Per row: `aged_by` is the largest timestamp or the mtime
    (`largest_timestamp_or_mtime`). Per partition: `log_start`, `checkpoint` (the cleaner's,
    before its reset), `stable_bound` (min of the last stable offset and the high watermark; int64 max
    for none), `min_lag`/`max_lag` (the topic's compaction lags), `floor` (its `min_timestamp`). Each
    step is one pass over the columns;
    `round_rows` (per row) marks the segments of each round (the cleanable bytes' rows)."""
    n, groups = len(base), len(starts)
    nonempty = ends > starts
    gid = np.repeat(np.arange(groups), ends - starts)
    last_row = np.maximum(ends - 1, 0)
    following = np.r_[base[1:], 0][:n]
    following[ends[nonempty] - 1] = _INF
    log_end = np.where(nonempty, nxt[last_row] if n else 0, log_start)
    has_active = nonempty & (active[last_row] if n else False)
    active_base = np.where(has_active, base[last_row] if n else 0, 0)

    def overlapping_rows(start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """`UnifiedLog.logSegments(start, end)` of every partition as a row mask."""
        return log_segments(base, following, start[gid], end[gid])

    def non_active_from(start: np.ndarray) -> np.ndarray:
        """`nonActiveLogSegmentsFrom(start)`: `logSegments(start, active base)`, empty from past it (an
        empty range: from = to)."""
        limit = np.where(has_active, active_base, _INF)
        return overlapping_rows(np.minimum(start, limit), limit)

    def group_min(values: np.ndarray) -> np.ndarray:
        out = np.full(groups, _INF, np.int64)
        if n:
            out[nonempty] = np.minimum.reduceat(values, starts[nonempty])
        return out

    def group_sum(values: np.ndarray) -> np.ndarray:
        sums = np.r_[0, np.cumsum(values)]
        return sums[ends] - sums[starts]

    rows = np.arange(n)
    reset = (checkpoint < log_start) | (checkpoint > log_end)
    first_dirty = np.where(reset, log_start, checkpoint)
    stable = np.minimum(log_end, stable_bound)
    limit, reason = stable, np.zeros(groups, np.int64)
    active_limit = np.where(has_active, active_base, log_end)
    reason = np.where(active_limit < limit, 1, reason)
    limit = np.minimum(limit, active_limit)
    dirty_non_active = non_active_from(first_dirty)
    lag = np.maximum(min_lag, 0)
    young = group_min(np.where(dirty_non_active & (lag[gid] > 0) & (aged_by > now_ms - lag[gid]), rows, _INF))
    young_base = np.where(young < _INF, base[np.minimum(young, max(n - 1, 0))] if n else 0, _INF)
    reason = np.where(young_base < limit, 2, reason)
    limit = np.minimum(limit, young_base)
    uncleanable = np.maximum(first_dirty, limit)
    holding = group_min(np.where(non_active_from(uncleanable), rows, _INF))
    round_end = np.where((holding < _INF) & ~(~has_active & (uncleanable >= log_end)),
                         base[np.minimum(holding, max(n - 1, 0))] if n else 0, np.where(has_active, active_base, log_end))
    clean_bytes = group_sum(np.where(overlapping_rows(np.full(groups, -1), first_dirty), size, 0))
    round_rows = overlapping_rows(np.minimum(first_dirty, round_end), round_end)
    cleanable_bytes = group_sum(np.where(round_rows, size, 0))
    total = clean_bytes + cleanable_bytes
    lagging = dirty_non_active & lag_first_batch(first_batch_ts, floor[gid])
    earliest = group_min(np.where(lagging, first_batch_ts, _INF))
    clean_until = now_ms - np.maximum(max_lag, 0)
    delay = np.where((earliest < _INF) & (earliest < clean_until), clean_until - earliest, 0)
    return {"log_start_offset": log_start, "log_end_offset": log_end, "checkpoint": checkpoint,
            "checkpoint_reset": reset, "first_dirty_offset": first_dirty, "last_stable_offset": stable,
            "first_uncleanable_offset": uncleanable, "uncleanable_reason": reason, "round_end": round_end,
            "clean_bytes": clean_bytes, "cleanable_bytes": cleanable_bytes, "total_bytes": total,
            "dirty_ratio": np.divide(cleanable_bytes, total, out=np.zeros(groups), where=total > 0),
            "earliest_dirty_first_batch_timestamp": earliest, "max_compaction_delay_ms": delay,
            "round_rows": round_rows}


def clean_verdicts(ranges: Mapping[str, np.ndarray], compacted: np.ndarray, min_dirty_ratio: np.ndarray) -> np.ndarray:
    """`grabFilthiestCompactedLog`'s filter for many logs: each one's `CleanWhy` index. A log is cleaned
    when its dirty ratio is strictly above min.cleanable.dirty.ratio, or when max.compaction.lag.ms is
    exceeded and it has cleanable bytes; never without compaction or without bytes."""
    dirty = ranges["dirty_ratio"] > min_dirty_ratio
    cleanable = ranges["cleanable_bytes"] > 0
    lagged = (ranges["max_compaction_delay_ms"] > 0) & cleanable
    code = np.select([~compacted, ranges["total_bytes"] == 0, dirty & lagged, dirty, lagged, ~cleanable],
                     [CLEAN_WHYS.index(w) for w in (CleanWhy.NOT_COMPACTED, CleanWhy.NO_BYTES,
                                                    CleanWhy.DIRTY_AND_LAGGED, CleanWhy.DIRTY, CleanWhy.LAGGED,
                                                    CleanWhy.NOTHING_CLEANABLE)],
                     CLEAN_WHYS.index(CleanWhy.NOT_LAGGED))
    return code


def verdict_cleans(code: np.ndarray) -> np.ndarray:
    """Whether each `CleanWhy` index is a verdict to clean."""
    return _CLEANS[code]


def range_at(ranges: Mapping[str, np.ndarray], g: int) -> CleanableRange:
    """Partition g of `cleanable_ranges` as one `CleanableRange`."""
    earliest = int(ranges["earliest_dirty_first_batch_timestamp"][g])
    values = {name: int(column[g]) for name, column in ranges.items()
              if name not in ("checkpoint_reset", "uncleanable_reason", "dirty_ratio", "round_rows")}
    return CleanableRange(**values | {
        "checkpoint_reset": bool(ranges["checkpoint_reset"][g]),
        "uncleanable_reason": UNCLEANABLE_REASONS[int(ranges["uncleanable_reason"][g])],
        "dirty_ratio": float(ranges["dirty_ratio"][g]),
        "earliest_dirty_first_batch_timestamp": None if earliest == _INF else earliest})


def cleanable_range(segments: Sequence[SegmentInfo], config: TopicConfig, now_ms: int,
                    first_dirty_offset: int | None = None, *, log_start_offset: int | None = None,
                    last_stable_offset: int | None = None, high_watermark: int | None = None) -> CleanableRange:
    """Kafka's dirty range and dirtiness for one partition (see the module docstring): `cleanable_ranges`
    of one partition."""
    log_start = log_start_offset if log_start_offset is not None else (
        segments[0].base_offset if segments else 0)
    checkpoint = log_start if first_dirty_offset is None else first_dirty_offset
    bound = min((x for x in (last_stable_offset, high_watermark) if x is not None), default=_INF)
    floor = min_timestamp(config)
    columns = np.array([(s.base_offset, s.next_offset, s.size_bytes, s.first_batch_timestamp, s.is_active)
                        for s in segments], np.int64).reshape(-1, 5)
    one = np.array([0]), np.array([len(segments)])
    _validate(columns[:, 0], columns[:, 1], columns[:, 4].astype(bool), *one, lambda _: "")
    ranges = cleanable_ranges(*columns[:, :3].T, largest_timestamps_or_mtimes(segments, floor),
                              columns[:, 3], columns[:, 4].astype(bool),
                              *one, log_start=np.array([log_start]), checkpoint=np.array([checkpoint]),
                              stable_bound=np.array([bound]), min_lag=np.array([config.min_compaction_lag_ms]),
                              max_lag=np.array([config.max_compaction_lag_ms]), floor=np.array([floor]),
                              now_ms=now_ms)
    return range_at(ranges, 0)


def decide(rng: CleanableRange, config: TopicConfig) -> CleanDecision:
    """`grabFilthiestCompactedLog`'s filter for one log (`clean_verdicts`), with the reasons spelled out."""
    ranges = {"dirty_ratio": np.array([rng.dirty_ratio]), "cleanable_bytes": np.array([rng.cleanable_bytes]),
              "max_compaction_delay_ms": np.array([rng.max_compaction_delay_ms]),
              "total_bytes": np.array([rng.total_bytes])}
    code = clean_verdicts(ranges, np.array([config.compacted]), np.array([config.min_cleanable_dirty_ratio]))[0]
    return CleanDecision(bool(verdict_cleans(code)), explain(CLEAN_WHYS[code], rng, config), rng)


def explain(why: CleanWhy, rng: CleanableRange, config: TopicConfig) -> tuple[str, ...]:
    """A verdict's sentences with the numbers behind it."""
    ratio, threshold = rng.dirty_ratio, config.min_cleanable_dirty_ratio
    if why == CleanWhy.NOT_COMPACTED:
        return (f"cleanup.policy={config.cleanup_policy} does not compact",)
    if why == CleanWhy.NO_BYTES:
        return ("the log holds no bytes",)
    dirty = f"dirty ratio {ratio:.6g} > min.cleanable.dirty.ratio {threshold:g}"
    lagged = (f"max.compaction.lag.ms {format_duration(config.max_compaction_lag_ms, precise=True)} "
              f"exceeded by {format_duration(rng.max_compaction_delay_ms, precise=True)}")
    if why == CleanWhy.DIRTY:
        return (dirty,)
    if why == CleanWhy.LAGGED:
        return (lagged,)
    if why == CleanWhy.DIRTY_AND_LAGGED:
        return dirty, lagged
    not_dirty = f"dirty ratio {ratio:.6g} <= min.cleanable.dirty.ratio {threshold:g}"
    if why == CleanWhy.NOTHING_CLEANABLE:
        return not_dirty, (f"nothing cleanable: dirty range [{rng.first_dirty_offset}, {rng.round_end}) "
                           f"is limited by the {rng.uncleanable_reason}")
    return not_dirty, "max.compaction.lag.ms not exceeded"


def should_clean(segments: Sequence[SegmentInfo], config: TopicConfig, now_ms: int,
                 first_dirty_offset: int | None = None, *, log_start_offset: int | None = None,
                 last_stable_offset: int | None = None, high_watermark: int | None = None) -> CleanDecision:
    """Whether Kafka's cleaner would pick this log now, with the numbers and reasons."""
    rng = cleanable_range(segments, config, now_ms, first_dirty_offset, log_start_offset=log_start_offset,
                          last_stable_offset=last_stable_offset, high_watermark=high_watermark)
    return decide(rng, config)


class SegmentZone(StrEnum):
    """Where a segment lies in its partition's cleaning round (a plan's per-segment `zone` column)."""

    CLEAN = "clean: below the cleaner checkpoint"
    CLEANABLE = "cleanable: in this round's dirty range"
    UNCLEANABLE = "uncleanable: at or past the first uncleanable offset's segment"


_ZONES = list(SegmentZone)
COMPACTION_INPUT_COLUMNS = ("topic", "partition", "segment_id", "base_offset", "next_offset", "size_bytes", "state",
                            "largest_timestamp", "first_batch_timestamp", "created_at_ms", "log_start_offset",
                            "cleaned")
_WORDS = pa.dictionary(pa.int32(), pa.string())
COMPACTION_SEGMENT_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segment_id", pa.string()), ("base_offset", pa.int64()),
    ("next_offset", pa.int64()), ("size_bytes", pa.int64()), ("state", pa.string()), ("zone", _WORDS),
])
COMPACTION_PARTITION_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("first_row", pa.int64()), ("segments", pa.int64()),
    ("log_start_offset", pa.int64()), ("log_end_offset", pa.int64()), ("checkpoint", pa.int64()),
    ("checkpoint_reset", pa.bool_()), ("first_dirty_offset", pa.int64()), ("last_stable_offset", pa.int64()),
    ("first_uncleanable_offset", pa.int64()), ("uncleanable_reason", _WORDS), ("round_end", pa.int64()),
    ("clean_bytes", pa.int64()), ("cleanable_bytes", pa.int64()), ("total_bytes", pa.int64()),
    ("dirty_ratio", pa.float64()), ("min_cleanable_dirty_ratio", pa.float64()),
    ("earliest_dirty_first_batch_timestamp", pa.int64()), ("max_compaction_delay_ms", pa.int64()),
    ("clean", pa.bool_()), ("due", pa.bool_()), ("reason", _WORDS),
])


@dataclass(frozen=True)
class PartitionCompaction:
    """One partition's row of the compaction plan (`info`), with the range and decision it stands for."""

    tp: TopicPartition
    config: TopicConfig
    info: Mapping[str, Any]

    @property
    def due(self) -> bool:
        """Kafka's trigger (or `force`) picks the log and it has cleanable bytes: a round runs."""
        return bool(self.info["due"])

    @property
    def range(self) -> CleanableRange:
        return CleanableRange(**{f: self.info[f] for f in CleanableRange.__dataclass_fields__})

    @property
    def decision(self) -> CleanDecision:
        return CleanDecision(bool(self.info["clean"]), explain(CleanWhy(self.info["reason"]), self.range, self.config),
                             self.range)


@dataclass(frozen=True)
class CompactionPlan(PartitionRows):
    """`plan_compaction`'s outcome: `partitions` (one row per partition: its range, verdict and reason)
    and `segments` (one row per segment: its zone in the round), partitions in the same order."""

    configs: Mapping[str, TopicConfig]
    partitions: pa.Table
    segments: pa.Table

    def partition(self, tp: TopicPartition) -> PartitionCompaction:
        """One partition's row (KeyError if it had no live segment)."""
        return PartitionCompaction(tp, self.configs[tp.topic], self._rows[self._index[tp]])

    def side_files(self) -> dict[str, pa.Table]:
        return {"partitions": self.partitions, "segments": self.segments}

    def totals(self) -> dict[str, Any]:
        p = self.partitions
        reasons = p["reason"].value_counts().to_pylist() if p.num_rows else []
        return {"partitions": p.num_rows, "due": int(pc.sum(p["due"]).as_py() or 0),
                "cleanable_bytes": int(pc.sum(pc.if_else(p["due"], p["cleanable_bytes"], 0)).as_py() or 0),
                "by_reason": {r["values"]: r["counts"] for r in sorted(reasons, key=lambda r: -r["counts"])}}


def plan_compaction(segments: pa.Table, configs: Mapping[str, TopicConfig], now_ms: int,
                    force: bool = False) -> CompactionPlan:
    """Kafka's cleaner selection (module docstring) for every partition in `segments` (live catalog rows,
    each partition's in offset order) at once: the cleaner checkpoint from the leading run of `cleaned`
    rows, the log start offset from the catalog (KIP-107), mtimes from `created_at_ms`, the high
    watermark at the log end offset (a single-writer batch engine). `due` is the verdict to clean (or
    `force`) with cleanable bytes. Raises ValueError for rows out of offset order, an ACTIVE row that is not
    its partition's last, or a topic without config."""
    table = segments.select(list(COMPACTION_INPUT_COLUMNS))
    if not table.num_rows:
        return CompactionPlan(dict(configs), COMPACTION_PARTITION_SCHEMA.empty_table(),
                              COMPACTION_SEGMENT_SCHEMA.empty_table())
    table, g = group_partitions(table)
    try:
        cfgs = [configs[t] for t in g.topics]
    except KeyError as exc:
        raise ValueError(f"no topic config for {exc.args[0]}") from None
    base, nxt, size = int64(table["base_offset"]), int64(table["next_offset"]), int64(table["size_bytes"])
    active = np.asarray(pc.equal(table["state"], str(SegmentState.ACTIVE)).to_numpy(zero_copy_only=False))
    cleaned = np.asarray(table["cleaned"].to_numpy(zero_copy_only=False), bool)
    _validate(base, nxt, active, g.starts, g.ends,
              lambda i: f"{g.topics[g.topic_of[g.gid[i]]]}-{g.partitions[g.gid[i]]}: ")
    log_start = log_start_offsets(base, int64(table["log_start_offset"]), g.starts)
    checkpoint = first_dirty_offsets(base, nxt, cleaned, log_start, g.starts, g.ends)
    per_topic = g.topic_of
    floor = np.array([min_timestamp(c) for c in cfgs], np.int64)[per_topic]
    ranges = cleanable_ranges(
        base, nxt, size,
        largest_timestamp_or_mtime(int64(table["largest_timestamp"]), int64(table["created_at_ms"]),
                                   floor[g.gid]),
        int64(table["first_batch_timestamp"]), active, g.starts, g.ends, log_start=log_start, checkpoint=checkpoint,
        stable_bound=np.full(len(g.starts), _INF), floor=floor, now_ms=now_ms,
        min_lag=np.array([c.min_compaction_lag_ms for c in cfgs], np.int64)[per_topic],
        max_lag=np.array([c.max_compaction_lag_ms for c in cfgs], np.int64)[per_topic])
    threshold = np.array([c.min_cleanable_dirty_ratio for c in cfgs], np.float64)[per_topic]
    verdict = clean_verdicts(ranges, np.array([c.compacted for c in cfgs], bool)[per_topic], threshold)
    clean = verdict_cleans(verdict)
    earliest = ranges["earliest_dirty_first_batch_timestamp"]
    partitions = pa.Table.from_pydict({
        "topic": pa.array([g.topics[t] for t in per_topic.tolist()], pa.string()),
        "partition": pa.array(g.partitions, pa.int32()), "first_row": pa.array(g.starts, pa.int64()),
        "segments": pa.array(g.ends - g.starts, pa.int64()),
        **{name: pa.array(ranges[name]) for name in (
            "log_start_offset", "log_end_offset", "checkpoint", "checkpoint_reset", "first_dirty_offset",
            "last_stable_offset", "first_uncleanable_offset")},
        "uncleanable_reason": dictionary(ranges["uncleanable_reason"], list(UNCLEANABLE_REASONS)),
        **{name: pa.array(ranges[name]) for name in ("round_end", "clean_bytes", "cleanable_bytes", "total_bytes",
                                                     "dirty_ratio")},
        "min_cleanable_dirty_ratio": pa.array(threshold),
        "earliest_dirty_first_batch_timestamp": pa.array(earliest, pa.int64(), mask=earliest == _INF),
        "max_compaction_delay_ms": pa.array(ranges["max_compaction_delay_ms"]),
        "clean": pa.array(clean), "due": pa.array((clean | force) & (ranges["cleanable_bytes"] > 0)),
        "reason": dictionary(verdict, [str(w) for w in CLEAN_WHYS]),
    }, schema=COMPACTION_PARTITION_SCHEMA)
    zone = np.where(ranges["round_rows"], 1, np.where(base < ranges["first_dirty_offset"][g.gid], 0, 2))
    segments_out = pa.Table.from_pydict({
        **{name: table[name] for name in ("topic", "partition", "segment_id", "base_offset", "next_offset",
                                          "size_bytes", "state")},
        "zone": dictionary(zone, [str(z) for z in _ZONES]),
    }, schema=COMPACTION_SEGMENT_SCHEMA)
    return CompactionPlan(dict(configs), partitions, segments_out)
