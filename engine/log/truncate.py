"""Truncate a partition's log to a target offset (spec 6), with klake's partial-batch rewrite.

`plan_truncation` is `UnifiedLog.truncateTo`: target >= LEO is a no-op; target below the first
segment truncates fully and starts the log at target; otherwise segments at or above target go and
the last remaining one is cut. `logStartOffset = min(logStartOffset, target)`. Kafka keeps a segment
whose base == target as an empty active segment; klake deletes it and starts a fresh segment at
target instead, which is the same thing (created = now, no rolling timestamp, no index entries).

`truncate_segment` is `LogSegment.truncateTo` with one deliberate difference: Kafka cuts the file at
the batch holding `target`, losing its records below target (callers must pass batch-aligned
offsets). klake rewrites that batch so the records below target survive: same base offset, magic 2,
codec, timestamp type, producer fields, sequence, leader epoch, control / transactional / delete-
horizon flags; lastOffsetDelta = target - 1 - base; a CreateTime maxTimestamp is recomputed over the
kept records, a LogAppendTime one is kept (and so are the kept records' original deltas).
Legacy (magic 0/1) compressed wrappers cannot be rewritten faithfully (their wrapper offset, CRC-32
and inner offsets would all change), so for them Kafka's whole-batch rule applies and the result
says so. The rest follows Kafka: index entries at or above target go, `bytesSinceLastIndexEntry` = 0,
an emptied segment's creation time resets, and the segment max is recomputed from the last remaining
time-index entry plus a scan of the batches after it (step 9).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from engine.format.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP, BatchHeaders, scan_batches
from engine.format.builder import encode_batch
from engine.format.records import decode_records
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.index.offset_index import OffsetIndex
from engine.index.rebuild import build_indexes
from engine.index.time_index import TimeIndex
from engine.log.segment_writer import ActiveSegmentState

KLAKE_REWRITE = "rewrite"  # the batch holding target was rewritten; its records below target kept
KAFKA_WHOLE_BATCH = "kafka-whole-batch"  # legacy batch: dropped whole, records below target lost
BATCH_ALIGNED = "batch-aligned"  # target is a batch boundary (or beyond the segment): nothing rewritten


@dataclass(frozen=True)
class TruncationPlan:
    """What `UnifiedLog.truncateTo(target)` does to the segments (given as base offsets)."""

    target: int
    noop: bool  # target >= log end offset
    full: bool  # target < first base offset: `truncateFullyAndStartAt(target)`
    deleted: tuple[int, ...]  # base offsets of whole segments removed (base >= target)
    truncated: int | None  # base of the segment to pass to `truncate_segment`; it becomes active
    new_segment_base: int | None  # a fresh empty active segment starts here (nothing was cut)
    log_end_offset: int
    log_start_offset: int


def plan_truncation(base_offsets: Sequence[int], next_offsets: Sequence[int], target: int,
                    log_start_offset: int | None = None) -> TruncationPlan:
    """Plan `truncateTo(target)` over segments sorted by base offset (spec 6)."""
    if target < 0:
        raise ValueError(f"cannot truncate to a negative offset {target}")
    bases = [int(b) for b in base_offsets]
    if len(bases) != len(next_offsets) or bases != sorted(bases):
        raise ValueError("base offsets must be sorted and match the next offsets one to one")
    start = (bases[0] if bases else target) if log_start_offset is None else log_start_offset
    if not bases:  # an empty partition: its log end offset is 0, so any target is at or past it
        return TruncationPlan(target, True, False, (), None, None, 0, 0 if log_start_offset is None else start)
    if target >= int(next_offsets[-1]):
        return TruncationPlan(target, True, False, (), None, None, int(next_offsets[-1]), start)
    if target < bases[0]:
        return TruncationPlan(target, False, True, tuple(bases), None, target, target, target)
    deleted = tuple(b for b in bases if b >= target)
    below = [b for b in bases if b < target]
    if (deleted and deleted[0] == target) or not below:
        return TruncationPlan(target, False, False, deleted, None, target, target, min(start, target))
    return TruncationPlan(target, False, False, deleted, below[-1], None, target, min(start, target))


@dataclass
class TruncatedSegment:
    """A segment after `truncate_segment`. It is the active segment now: its indexes have no final
    time entry (one is added when it rolls or closes, spec 2.6)."""

    base_offset: int
    log: bytes
    offset_index: OffsetIndex
    time_index: TimeIndex
    max_timestamp: int  # the index's "none" (-1 in Kafka mode) when no batch has a timestamp
    offset_of_max_timestamp: int  # shallow: last offset of the first batch carrying it; base offset if none
    next_offset: int  # = target: the log end offset
    removed: pa.Table  # records that are gone (offset, timestamp, key, value, headers, ...)
    mode: str  # KLAKE_REWRITE, KAFKA_WHOLE_BATCH or BATCH_ALIGNED
    note: str

    @property
    def index(self) -> bytes:
        return self.offset_index.to_bytes()

    @property
    def timeindex(self) -> bytes:
        return self.time_index.to_bytes()

    @property
    def lost_below_target(self) -> np.ndarray:
        """Offsets below target that were removed (only under Kafka's whole-batch rule)."""
        offsets = self.removed.column("offset").to_numpy()
        return offsets[offsets < self.next_offset]

    def state(self, created_ms: int, jitter_ms: int, now_ms: int) -> ActiveSegmentState:
        """Resume state (`SegmentWriter.resume`): Kafka's post-truncation roll state. An emptied
        segment is created anew at `now_ms`; otherwise the rolling timestamp is the first batch's
        maxTimestamp as now on disk (what a broker reloads), and bytes since the last index entry = 0."""
        headers = scan_batches(self.log, "truncated", verify_crc=False).headers
        none = self.time_index.no_timestamp
        empty = not len(headers)
        return ActiveSegmentState(
            self.base_offset, len(self.log), self.next_offset, self.offset_index, self.time_index,
            self.max_timestamp, self.offset_of_max_timestamp,
            none if empty else int(headers.max_timestamp[0]), now_ms if empty else created_ms, jitter_ms, 0)


def truncate_segment(log: bytes, base_offset: int, target: int, *, offset_index: OffsetIndex | None = None,
                     time_index: TimeIndex | None = None, min_timestamp: int,
                     index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                     source: str = "<segment>") -> TruncatedSegment:
    """Remove every record at or above `target` from the segment `log` (see the module docstring).

    Without indexes, they are rebuilt with Kafka's recovery rule first. `min_timestamp` is the
    KIP-228 opt-in (as in `engine.index.time_index`; a given `time_index` carries its own). A target beyond
    the segment removes nothing but still applies Kafka's post-truncation state (bytes since the
    last index entry = 0, max timestamp reloaded). The segment's batches are CRC-checked.
    """
    if target < base_offset:
        raise ValueError(f"target {target} is below the segment base offset {base_offset}")
    headers = scan_batches(log, source).headers
    if offset_index is None or time_index is None:
        offset_index, time_index = build_indexes(headers, base_offset, index_interval_bytes,
                                                 min_timestamp=min_timestamp)
    min_timestamp = time_index.min_timestamp
    offset_index, time_index = offset_index.truncate_to(target), time_index.truncate_to(target)
    row = int(np.searchsorted(headers.last_offset, target, side="left"))  # first batch with lastOffset >= target
    if row == len(headers):
        return _finish(log, base_offset, target, offset_index, time_index, _removed(log, headers, row, source),
                       BATCH_ALIGNED,
                       "nothing at or above target in this segment")
    cut = int(headers.position[row])
    removed = _removed(log, headers, row, source)
    kept_rows = removed.column("offset").to_numpy() < target
    head = log[:cut]
    if not kept_rows.any():
        return _finish(head, base_offset, target, offset_index, time_index, removed, BATCH_ALIGNED,
                       f"cut at byte {cut}, a batch boundary")
    if int(headers.magic[row]) != 2:
        lost = removed.column("offset").to_numpy()[kept_rows]
        return _finish(head, base_offset, target, offset_index, time_index, removed, KAFKA_WHOLE_BATCH,
                       f"the magic-{int(headers.magic[row])} batch at byte {cut} holds target {target}: legacy "
                       f"batches cannot be rewritten, so Kafka's rule drops it whole, losing offsets "
                       f"{int(lost[0])}..{int(lost[-1])} below target ({lost.shape[0]} records)")
    rewritten = _rewrite(log, headers, row, target, min_timestamp, source)
    kept = int(kept_rows.sum())
    return _finish(head + rewritten, base_offset, target, offset_index, time_index,
                   removed.filter(pa.array(~kept_rows)), KLAKE_REWRITE,
                   f"the batch at byte {cut} was rewritten keeping the {kept} record(s) below target "
                   f"(Kafka would drop the whole batch)")


def _removed(log: bytes, headers: BatchHeaders, row: int, source: str) -> pa.Table:
    tail = headers.take(slice(row, None))
    return decode_records(log, tail, source).to_arrow(tail)


def _rewrite(log: bytes, headers: BatchHeaders, row: int, target: int, min_timestamp: int, source: str) -> bytes:
    """The v2 batch at `row` with only its records below `target`, header fields preserved."""
    one = headers.take(slice(row, row + 1))
    log_append = bool(one.timestamp_type[0] == LOG_APPEND_TIME)
    raw = replace(one, attributes=one.attributes & ~np.int16(0x08))  # read producer deltas, not the LAT rule
    records = decode_records(log, raw, source)
    keep = np.flatnonzero(records.offset < target)
    records = records.take(keep)
    base = int(one.base_offset[0])
    ts = records.timestamp
    if log_append:
        max_ts = int(one.max_timestamp[0])
    else:
        max_ts = int(ts.max()) if min_timestamp < 0 else max(int(ts.max()), NO_TIMESTAMP)
    return encode_batch(
        records.key, records.value, ts, records.headers, base_offset=base, offset_deltas=records.offset - base,
        codec=int(one.codec[0]), timestamp_type=LOG_APPEND_TIME if log_append else CREATE_TIME,
        log_append_time=max_ts if log_append else None, producer_id=int(one.producer_id[0]),
        producer_epoch=int(one.producer_epoch[0]), base_sequence=int(one.base_sequence[0]),
        partition_leader_epoch=int(one.partition_leader_epoch[0]), transactional=bool(one.is_transactional[0]),
        control=bool(one.is_control[0]),
        delete_horizon=int(one.base_timestamp[0]) if bool(one.has_delete_horizon[0]) else None,
        last_offset_delta=target - 1 - base, max_timestamp=max_ts)


def _finish(log: bytes, base_offset: int, target: int, offset_index: OffsetIndex, time_index: TimeIndex,
            removed: pa.Table, mode: str, note: str) -> TruncatedSegment:
    """Recompute the segment max as `LogSegment.loadLargestTimestamp` does (spec 6 step 9): the last
    remaining time entry, then every batch from its offset-index position on; strictly greater wins."""
    headers = scan_batches(log, "truncated", verify_crc=False).headers
    max_ts, max_offset = time_index.last_entry()  # (none, base offset) when empty, as Kafka's lastEntry
    _, position = offset_index.lookup(max_offset)
    later = np.flatnonzero(headers.position >= position)
    if later.size:
        best = later[int(np.argmax(headers.max_timestamp[later]))]  # the first of equal maxima
        if int(headers.max_timestamp[best]) > max_ts:
            max_ts, max_offset = int(headers.max_timestamp[best]), int(headers.last_offset[best])
    return TruncatedSegment(base_offset, log, offset_index, time_index, max_ts, max_offset, target, removed,
                            mode, note)
