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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.format.batch import NO_TIMESTAMP
from engine.log.topic_config import TopicConfig
from engine.times import format_duration

UNCLEANABLE_LSO = "last stable offset"
UNCLEANABLE_ACTIVE = "active segment"
UNCLEANABLE_MIN_LAG = "min.compaction.lag.ms"


@dataclass(frozen=True)
class SegmentInfo:
    """What selection needs of one segment (a catalog row or `summarize_segment` gives it)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int = NO_TIMESTAMP
    first_batch_timestamp: int = NO_TIMESTAMP
    is_active: bool = False
    last_modified_ms: int | None = None

    @property
    def largest_timestamp_or_mtime(self) -> int:
        """`LogSegment.largestTimestamp`: the max timestamp, else the file's mtime (spec 7.3)."""
        if self.largest_timestamp > NO_TIMESTAMP or self.last_modified_ms is None:
            return self.largest_timestamp
        return self.last_modified_ms


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

    @property
    def needs_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0


@dataclass(frozen=True)
class CleanDecision:
    clean: bool
    reasons: tuple[str, ...]
    range: CleanableRange


def _validate(segments: Sequence[SegmentInfo]) -> None:
    for prev, seg in zip(segments, segments[1:], strict=False):
        if seg.base_offset <= prev.base_offset or seg.base_offset < prev.next_offset:
            raise ValueError(f"segments must be in offset order without overlap: base {seg.base_offset} "
                             f"follows [{prev.base_offset}, {prev.next_offset})")
    for seg in segments[:-1]:
        if seg.is_active:
            raise ValueError(f"only the last segment can be active, not the one at {seg.base_offset}")


def overlapping(segments: Sequence[SegmentInfo], start: int, end: float) -> list[int]:
    """Indexes of `UnifiedLog.logSegments(start, end)`: segments from the one holding `start` (the floor
    by base offset) with base < end; empty when start == end."""
    if start == end:
        return []
    rows = []
    for i, seg in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if seg.base_offset < end and (following is None or following > start):
            rows.append(i)
    return rows


def _active_base(segments: Sequence[SegmentInfo]) -> int | None:
    return segments[-1].base_offset if segments and segments[-1].is_active else None


def _non_active_from(segments: Sequence[SegmentInfo], start: int, active_base: int | None) -> list[int]:
    """`nonActiveLogSegmentsFrom(start)`."""
    if active_base is None:
        return overlapping(segments, start, float("inf"))
    if start > active_base:
        return []
    return overlapping(segments, start, active_base)


def _round_end(segments: Sequence[SegmentInfo], uncleanable: int, active_base: int | None,
               log_end: int) -> int:
    """Base of the segment holding the first uncleanable offset (`calculateCleanableBytes`); the log end
    offset when every segment is closed and the offset is at or past the end."""
    rows = _non_active_from(segments, uncleanable, active_base)
    if rows and not (active_base is None and uncleanable >= log_end):
        return segments[rows[0]].base_offset
    return log_end if active_base is None else active_base


def cleanable_range(segments: Sequence[SegmentInfo], config: TopicConfig, now_ms: int,
                    first_dirty_offset: int | None = None, *, log_start_offset: int | None = None,
                    last_stable_offset: int | None = None, high_watermark: int | None = None) -> CleanableRange:
    """Kafka's dirty range and dirtiness for one partition (see the module docstring)."""
    _validate(segments)
    log_start = log_start_offset if log_start_offset is not None else (
        segments[0].base_offset if segments else 0)
    log_end = segments[-1].next_offset if segments else log_start
    checkpoint = log_start if first_dirty_offset is None else first_dirty_offset
    reset = checkpoint < log_start or checkpoint > log_end
    first_dirty = log_start if reset else checkpoint
    stable = min(x for x in (log_end, last_stable_offset, high_watermark) if x is not None)
    active_base = _active_base(segments)
    limits = [(stable, UNCLEANABLE_LSO), (log_end if active_base is None else active_base, UNCLEANABLE_ACTIVE)]
    dirty_non_active = _non_active_from(segments, first_dirty, active_base)
    lag = max(config.min_compaction_lag_ms, 0)
    if lag > 0:
        for i in dirty_non_active:
            if segments[i].largest_timestamp_or_mtime > now_ms - lag:
                limits.append((segments[i].base_offset, UNCLEANABLE_MIN_LAG))
                break
    limit, reason = min(limits, key=lambda item: item[0])
    uncleanable = max(first_dirty, limit)
    round_end = _round_end(segments, uncleanable, active_base, log_end)
    clean_bytes = sum(segments[i].size_bytes for i in overlapping(segments, -1, first_dirty))
    cleanable_bytes = sum(segments[i].size_bytes
                          for i in overlapping(segments, min(first_dirty, round_end), round_end))
    total = clean_bytes + cleanable_bytes
    firsts = [segments[i].first_batch_timestamp for i in dirty_non_active if segments[i].first_batch_timestamp > 0]
    earliest = min(firsts) if firsts else None
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    delay = clean_until - earliest if earliest is not None and earliest < clean_until else 0
    return CleanableRange(
        log_start_offset=log_start, log_end_offset=log_end, checkpoint=checkpoint, checkpoint_reset=reset,
        first_dirty_offset=first_dirty, last_stable_offset=stable, first_uncleanable_offset=uncleanable,
        uncleanable_reason=reason, round_end=round_end, clean_bytes=clean_bytes, cleanable_bytes=cleanable_bytes,
        total_bytes=total, dirty_ratio=cleanable_bytes / total if total else 0.0,
        earliest_dirty_first_batch_timestamp=earliest, max_compaction_delay_ms=delay)


def decide(rng: CleanableRange, config: TopicConfig) -> CleanDecision:
    """`grabFilthiestCompactedLog`'s filter for one log, with the reasons spelled out."""
    if not config.compacted:
        return CleanDecision(False, (f"cleanup.policy={config.cleanup_policy} does not compact",), rng)
    if rng.total_bytes == 0:
        return CleanDecision(False, ("the log holds no bytes",), rng)
    reasons = []
    ratio, threshold = rng.dirty_ratio, config.min_cleanable_dirty_ratio
    if ratio > threshold:
        reasons.append(f"dirty ratio {ratio:.6g} > min.cleanable.dirty.ratio {threshold:g}")
    if rng.needs_compaction_now and rng.cleanable_bytes > 0:
        reasons.append(f"max.compaction.lag.ms {format_duration(config.max_compaction_lag_ms, precise=True)} "
                       f"exceeded by {format_duration(rng.max_compaction_delay_ms, precise=True)}")
    if reasons:
        return CleanDecision(True, tuple(reasons), rng)
    why = [f"dirty ratio {ratio:.6g} <= min.cleanable.dirty.ratio {threshold:g}"]
    if rng.cleanable_bytes == 0:
        why.append(f"nothing cleanable: dirty range [{rng.first_dirty_offset}, {rng.round_end}) "
                   f"is limited by the {rng.uncleanable_reason}")
    elif not rng.needs_compaction_now:
        why.append("max.compaction.lag.ms not exceeded")
    return CleanDecision(False, tuple(why), rng)


def should_clean(segments: Sequence[SegmentInfo], config: TopicConfig, now_ms: int,
                 first_dirty_offset: int | None = None, *, log_start_offset: int | None = None,
                 last_stable_offset: int | None = None, high_watermark: int | None = None) -> CleanDecision:
    """Whether Kafka's cleaner would pick this log now, with the numbers and reasons."""
    rng = cleanable_range(segments, config, now_ms, first_dirty_offset, log_start_offset=log_start_offset,
                          last_stable_offset=last_stable_offset, high_watermark=high_watermark)
    return decide(rng, config)
