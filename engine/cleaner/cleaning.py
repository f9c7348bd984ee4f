"""Kafka's log cleaner for one partition, as a pure function over its segments' bytes (spec 8).

`clean_log(segments, config, now_ms, first_dirty_offset)` runs one cleaning round (`Cleaner.doClean`):
1. selection (`cleaner_selection`): the dirty range [first dirty, round end) and whether anything is
   cleanable (`should_clean` decides whether a round is due; `clean_log` runs one whenever it can);
2. transactions and producers over the whole partition (`cleaner_txn`);
3. the key -> latest offset map over the dirty range (`cleaner_keymap`); its latest offset + 1 is the
   round's end offset and the new cleaner checkpoint;
4. every segment below the end offset is recopied: batch and record retention (`cleaner_filter`),
   unchanged batches byte-for-byte, others rebuilt like the original (`cleaner_rebuild`,
   `cleaner_legacy`);
5. the cleaned segments are regrouped and written through the append path (`cleaner_grouping`).
The result lists the new segments with their index files and summaries, the source segments they
replace, the checkpoint and counters; storage and catalog swaps are the caller's job.

Deliberate differences from Kafka (each explained where it is implemented):
- keys are compared exactly (Arrow dictionary encoding), not by MD5, so keys never collide;
- the key map is unbounded unless `max_map_entries` is given; a partial round then ends at a batch
  boundary and always maps at least one batch (Kafka may stop mid-batch, KAFKA-9826);
- aborted transactions and producer state come from the partition's batches (not `.txnindex` files
  or producer snapshots); every producer id in the log is active unless `producer_expiration_ms`;
- a transaction marker is discardable once no batch of its transaction survives *this* round (Kafka:
  once none was read, one round later), so a second round with the same clock changes nothing;
- grouping measures the cleaned segments (exact bytes and index entries) instead of summing the
  source files, and appends batch by batch instead of per 256 KiB read buffer;
- a legacy batch that would have to be kept as an empty header (only the round's last batch can) is
  kept whole, where Kafka fails the round; an unknown legacy mtime keeps tombstones;
- without an active segment (a closed log) the round may reach the log end offset;
- the KIP-228 opt-in (`klake.timestamps.allow.negative`) keeps negative maxima and time-index entries.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.cleaner.filter import (
    ABORTED,
    COPY,
    DROP,
    EMPTY,
    KEYLESS,
    MARKER_DROPPED,
    REBUILD,
    SUPERSEDED,
    TOMBSTONE_EXPIRED,
    Plan,
    RoundBatches,
    RoundRecords,
    plan_round,
)
from engine.cleaner.grouping import OutputBatches, group_segments, write_segment
from engine.cleaner.keymap import OffsetMap, build_offset_map, key_codes
from engine.cleaner.rebuild import empty_header, rebuild_legacy, rebuild_v2
from engine.cleaner.selection import CleanableRange, SegmentInfo, cleanable_range, overlapping
from engine.cleaner.txn import TxnState, control_types, transaction_state
from engine.format.batch import NO_TIMESTAMP, BatchHeaders, scan_batches
from engine.format.records import RecordTable, decode_records
from engine.log.summary import SegmentSummary, largest_timestamp, summarize_segment
from engine.log.timestamp_floor import has_timestamp, no_timestamp
from engine.log.topic_config import TopicConfig, min_timestamp

_MAX_TIMESTAMP_AT = {2: (35, ">q"), 1: (18, ">q")}


@dataclass(frozen=True)
class SourceSegment:
    """One segment of the partition: its base offset and `.log` bytes. The last segment may be the
    active one. `last_modified_ms` is the file's mtime (Kafka's fallback timestamp and the legacy
    tombstone clock); when None, the segment's largest timestamp stands in for it."""

    base_offset: int
    log: bytes
    is_active: bool = False
    last_modified_ms: int | None = None
    name: str = ""

    @property
    def source(self) -> str:
        return self.name or f"{self.base_offset:020d}.log"


@dataclass(frozen=True)
class CleanedSegment:
    """A new segment replacing the source segments whose base offsets are in `replaces`.
    `unchanged` = it replaces one segment and its `.log` bytes are identical."""

    base_offset: int
    log: bytes
    index: bytes
    timeindex: bytes
    summary: SegmentSummary
    replaces: tuple[int, ...]
    last_modified_ms: int | None
    unchanged: bool


@dataclass
class CleanStats:
    """Counters of one round: records by outcome (kept or the reason they went), batches by outcome,
    delete horizons set, `.log` bytes of the replaced segments and of the new ones, map size."""

    records_read: int = 0
    records_kept: int = 0
    superseded: int = 0
    tombstones_expired: int = 0
    keyless: int = 0
    aborted: int = 0
    markers_dropped: int = 0
    batches_read: int = 0
    batches_copied: int = 0
    batches_rebuilt: int = 0
    batches_emptied: int = 0
    batches_dropped: int = 0
    horizons_set: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    map_entries: int = 0


@dataclass
class CleanResult:
    """One round's outcome. Nothing was cleaned when `segments` is empty (`checkpoint` is then the
    first dirty offset, which may have been reset)."""

    range: CleanableRange
    end_offset: int
    checkpoint: int
    partial: bool
    segments: list[CleanedSegment] = field(default_factory=list)
    replaced: tuple[int, ...] = ()
    stats: CleanStats = field(default_factory=CleanStats)


def segment_info(segment: SourceSegment, headers: BatchHeaders, floor: int) -> SegmentInfo:
    """Selection facts of a segment from its batches (`log_summary` definitions), timestamps below the
    topic's `floor` (`min_timestamp`) counting as none."""
    largest, _ = largest_timestamp(headers, segment.base_offset, floor)
    return SegmentInfo(
        base_offset=segment.base_offset,
        next_offset=int(headers.last_offset[-1]) + 1 if len(headers) else segment.base_offset,
        size_bytes=len(segment.log), largest_timestamp=largest,
        first_batch_timestamp=int(headers.max_timestamp[0]) if len(headers) else no_timestamp(floor),
        is_active=segment.is_active, last_modified_ms=segment.last_modified_ms)


@dataclass
class _Round:
    """Decoded state of the segments a round may touch (a prefix of the partition's segments)."""

    segments: Sequence[SourceSegment]
    headers: list[BatchHeaders]
    records: list[RecordTable]
    batch_start: np.ndarray   # global row of each segment's first batch (length segments + 1)
    record_start: np.ndarray  # global row of each segment's first record (length segments + 1)


def clean_log(segments: Sequence[SourceSegment], config: TopicConfig, now_ms: int,
              first_dirty_offset: int | None = None, *, log_start_offset: int | None = None,
              last_stable_offset: int | None = None, high_watermark: int | None = None,
              max_map_entries: int | None = None, producer_expiration_ms: int | None = None) -> CleanResult:
    """One cleaning round over a partition's segments (all of them, in offset order)."""
    scans = [scan_batches(s.log, s.source).headers for s in segments]
    floor = min_timestamp(config)
    infos = [segment_info(s, h, floor) for s, h in zip(segments, scans, strict=True)]
    rng = cleanable_range(infos, config, now_ms, first_dirty_offset, log_start_offset=log_start_offset,
                          last_stable_offset=last_stable_offset, high_watermark=high_watermark)
    if rng.cleanable_bytes == 0:
        return CleanResult(rng, rng.first_dirty_offset, rng.first_dirty_offset, False)
    all_headers = BatchHeaders.concat(scans)
    ctype = np.concatenate([control_types(s.log, h, s.source) for s, h in zip(segments, scans, strict=True)])
    txn = transaction_state(all_headers, ctype, now_ms, producer_expiration_ms)
    reach = [i for i, info in enumerate(infos) if info.base_offset < rng.round_end]
    rnd = _decode(segments[:len(reach)], scans[:len(reach)])
    codes = key_codes([t.key for t in rnd.records])
    offsets = np.concatenate([t.offset for t in rnd.records])
    record_batch = np.concatenate([t.batch_index + rnd.batch_start[i] for i, t in enumerate(rnd.records)])
    n_batches = int(rnd.batch_start[-1])
    batch_segment = np.repeat(np.arange(len(reach)), np.diff(rnd.batch_start))
    heads = all_headers.take(slice(0, n_batches))
    omap = build_offset_map(
        codes, offsets, record_batch, heads.last_offset, batch_segment,
        ~heads.is_control & ~txn.aborted[:n_batches],
        overlapping(infos, rng.first_dirty_offset, rng.round_end), [i.base_offset for i in infos],
        rng.first_dirty_offset, rng.round_end, max_map_entries)
    end_offset = omap.latest_offset + 1
    n_seg = sum(1 for i in reach if infos[i].base_offset < end_offset)
    n_b, n_r = int(rnd.batch_start[n_seg]), int(rnd.record_start[n_seg])
    plan = _plan(rnd, n_seg, heads.take(slice(0, n_b)), txn, ctype[:n_b], infos, rng, omap, codes[:n_r],
                 offsets[:n_r], record_batch[:n_r], config, now_ms)
    outputs = _outputs(rnd, n_seg, plan, config.allow_negative_timestamps)
    return _finish(rng, end_offset, omap, segments[:n_seg], infos, outputs, plan, config)


def _decode(segments: Sequence[SourceSegment], headers: Sequence[BatchHeaders]) -> _Round:
    records = [decode_records(s.log, h, s.source) for s, h in zip(segments, headers, strict=True)]
    batch_start = np.concatenate(([0], np.cumsum([len(h) for h in headers]))).astype(np.int64)
    record_start = np.concatenate(([0], np.cumsum([len(t) for t in records]))).astype(np.int64)
    return _Round(segments, list(headers), records, batch_start, record_start)


def _legacy_retains_deletes(infos: Sequence[SegmentInfo], n_seg: int, first_dirty: int,
                            delete_retention_ms: int, floor: int) -> np.ndarray:
    """Per source segment, Kafka's `retainLegacyDeletesAndTxnMarkers`: its mtime > mtime of the last
    segment below the first dirty offset - delete.retention.ms (0 when there is none). An unknown mtime
    (no `last_modified_ms` and no timestamp above the topic's `floor`) keeps the tombstones."""
    below = overlapping(infos, 0, first_dirty)
    horizon = 0
    if below:
        last_clean = _mtime(infos[below[-1]], floor)
        if last_clean is None:
            return np.ones(n_seg, bool)
        horizon = last_clean - delete_retention_ms
    return np.array([(m := _mtime(infos[i], floor)) is None or m > horizon for i in range(n_seg)], bool)


def _mtime(info: SegmentInfo, floor: int) -> int | None:
    """The segment's mtime, Kafka's legacy tombstone clock (`LogSegment.lastModified`); when unknown its
    largest timestamp stands in for it (`SourceSegment`), if it has one."""
    if info.last_modified_ms is not None:
        return info.last_modified_ms
    return info.largest_timestamp if has_timestamp(info.largest_timestamp, floor) else None


def _plan(rnd: _Round, n_seg: int, heads: BatchHeaders, txn: TxnState, ctype: np.ndarray, infos: Sequence[SegmentInfo],
          rng: CleanableRange, omap: OffsetMap, codes: np.ndarray, offsets: np.ndarray,
          record_batch: np.ndarray, config: TopicConfig, now_ms: int) -> Plan:
    n = len(heads)
    seg_retains = _legacy_retains_deletes(infos, n_seg, rng.first_dirty_offset, config.delete_retention_ms,
                                          min_timestamp(config))
    batch_segment = np.repeat(np.arange(n_seg), np.diff(rnd.batch_start[:n_seg + 1]))
    has_value = np.concatenate([t.value.is_valid().to_numpy(zero_copy_only=False)
                                for t in rnd.records[:n_seg]]) if n_seg else np.zeros(0, bool)
    batches = RoundBatches(
        magic=heads.magic, control=heads.is_control, control_type=ctype, producer_id=heads.producer_id,
        last_offset=heads.last_offset, has_horizon=heads.has_delete_horizon, base_timestamp=heads.base_timestamp,
        records_count=heads.records_count, aborted=txn.aborted[:n], marker=txn.marker[:n], txn=txn.txn[:n],
        last_of_producer=txn.last_of_producer[:n], retain_legacy_deletes=seg_retains[batch_segment])
    records = RoundRecords(batch=record_batch, offset=offsets, has_key=codes >= 0, has_value=has_value,
                           map_offset=omap.lookup(codes))
    return plan_round(batches, records, omap.latest_offset, rng.round_end, now_ms, config.delete_retention_ms)


def _outputs(rnd: _Round, n_seg: int, plan: Plan, negative_timestamps: bool) -> list[OutputBatches]:
    """The surviving batches of each source segment: copied, emptied or rebuilt (`cleaner_rebuild`)."""
    outputs = []
    for s in range(n_seg):
        seg, h, table = rnd.segments[s], rnd.headers[s], rnd.records[s]
        b0, r0 = int(rnd.batch_start[s]), int(rnd.record_start[s])
        outcome = plan.outcome[b0:b0 + len(h)]
        kept = plan.kept[r0:r0 + len(table)]
        blobs: dict[int, bytes] = {}
        v2_rows = np.flatnonzero((outcome == REBUILD) & (h.magic == 2))
        v2_kept = table.take(np.flatnonzero(kept & np.isin(table.batch_index, v2_rows)))
        rebuilt = rebuild_v2(h, v2_rows, v2_kept, plan.delete_horizon[b0 + v2_rows], negative_timestamps)
        blobs.update(zip(v2_rows.tolist(), rebuilt, strict=True))
        for row in np.flatnonzero((outcome == REBUILD) & (h.magic < 2)).tolist():
            blobs[row] = rebuild_legacy(h, row, table.take(np.flatnonzero(kept & (table.batch_index == row))))
        for row in np.flatnonzero(outcome == EMPTY).tolist():
            blobs[row] = empty_header(h, row)
        rows = np.flatnonzero(outcome != DROP)
        data = [blobs[row] if row in blobs else seg.log[pos:pos + size] for row, pos, size in
                zip(rows.tolist(), h.position[rows].tolist(), h.size[rows].tolist(), strict=True)]
        max_ts = [_max_timestamp(blob, magic) for blob, magic in zip(data, h.magic[rows].tolist(), strict=True)]
        outputs.append(OutputBatches(data, h.last_offset[rows].astype(np.int64), np.asarray(max_ts, np.int64)))
    return outputs


def _max_timestamp(blob: bytes, magic: int) -> int:
    if magic == 0:
        return NO_TIMESTAMP
    at, fmt = _MAX_TIMESTAMP_AT[magic]
    return struct.unpack_from(fmt, blob, at)[0]


def _finish(rng: CleanableRange, end_offset: int, omap: OffsetMap, sources: Sequence[SourceSegment],
            infos: Sequence[SegmentInfo], outputs: list[OutputBatches], plan: Plan,
            config: TopicConfig) -> CleanResult:
    n = len(sources)
    bases = [s.base_offset for s in sources]
    estimated_last = [(infos[i + 1].base_offset if i + 1 < len(infos)
                       else max(infos[i].next_offset, rng.round_end)) - 1 for i in range(n)]
    min_ts = min_timestamp(config)
    groups = group_segments(bases, estimated_last, outputs, config.segment_bytes, config.segment_index_bytes,
                            config.index_interval_bytes, min_timestamp=min_ts)
    cleaned = []
    for group in groups:
        written = write_segment(bases[group[0]], [outputs[k] for k in group], config.index_interval_bytes,
                                min_timestamp=min_ts)
        last = sources[group[-1]]
        cleaned.append(CleanedSegment(
            base_offset=written.base_offset, log=written.log, index=written.index, timeindex=written.timeindex,
            summary=summarize_segment(written.log, written.base_offset, f"{written.base_offset:020d}.log.cleaned",
                                      min_timestamp=min_ts),
            replaces=tuple(bases[k] for k in group),
            last_modified_ms=last.last_modified_ms,
            unchanged=len(group) == 1 and written.log == sources[group[0]].log))
    stats = _stats(plan, sources, cleaned, omap)
    return CleanResult(rng, end_offset, end_offset, omap.full, cleaned, tuple(bases), stats)


def _stats(plan: Plan, sources: Sequence[SourceSegment], cleaned: list[CleanedSegment], omap: OffsetMap) -> CleanStats:
    reasons = np.bincount(plan.reason, minlength=6)
    outcomes = np.bincount(plan.outcome, minlength=4)
    return CleanStats(
        records_read=int(plan.reason.shape[0]), records_kept=int(reasons[0]), superseded=int(reasons[SUPERSEDED]),
        tombstones_expired=int(reasons[TOMBSTONE_EXPIRED]), keyless=int(reasons[KEYLESS]),
        aborted=int(reasons[ABORTED]), markers_dropped=int(reasons[MARKER_DROPPED]),
        batches_read=int(plan.outcome.shape[0]), batches_copied=int(outcomes[COPY]),
        batches_rebuilt=int(outcomes[REBUILD]), batches_emptied=int(outcomes[EMPTY]),
        batches_dropped=int(outcomes[DROP]), horizons_set=int(np.count_nonzero(plan.horizon_set)),
        bytes_before=sum(len(s.log) for s in sources), bytes_after=sum(len(c.log) for c in cleaned),
        map_entries=omap.entries)

