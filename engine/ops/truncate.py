"""Truncate a catalogued partition to an offset, and raise its log start offset (DeleteRecords).

Truncation (`prepare_truncation`, spec 6, `UnifiedLog.truncateTo`): every record at or above `target`
leaves the log. Whole segments at or above it go through the two-phase delete; the segment holding
`target` gets a new version cut there (klake keeps the records of a straddling v2 batch that lie
below `target`, where Kafka drops the whole batch, see `engine.log.truncate`); a target below the first
segment empties the log and starts it at `target` (`truncateFullyAndStartAt`). The log start offset
becomes `min(log start, target)`.

DeleteRecords (`prepare_delete_records`, KIP-107): raises the log start offset (never above the log end offset, the
high watermark of a single-writer log); the segment holding it gets a new row version recording it,
and whole segments below it are retired at once, as retention's log-start-offset pass would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentRow, SegmentState, partition_log_start_offset, rows_to_table
from engine.format.batch import scan_batches
from engine.index.offset_index import OffsetIndex
from engine.index.rebuild import build_indexes
from engine.index.time_index import TimeIndex
from engine.log.topic_config import min_timestamp
from engine.log.truncate import plan_truncation, truncate_segment
from engine.ops.deletion import Cleanup
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.versions import store_segment_version
from kernel.errors import KlakeError
from kernel.names import TopicPartition
from layouts.object_layout import new_segment_id
from layouts.store.bound import Store


@dataclass
class TruncateOutcome:
    topic: str
    partition: int
    target: int
    noop: bool
    log_end_offset: int
    log_start_offset: int
    records_removed: int = 0
    cut_mode: str | None = None
    previous_log_start_offset: int | None = None
    """delete-records: the log start offset before the run (the offsets below the new one left the log)."""
    cleanup: Cleanup = field(default_factory=Cleanup)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "cleanup"} | asdict(self.cleanup)


def prepare_truncation(item: PartitionInput[None], *, targets: Mapping[TopicPartition, int], now_ms: int,
                       store: Store, job_id: str) -> PartitionStep[TruncateOutcome]:
    """Cut one partition at `targets[tp]`: the straddling segment's new version, whole segments retired."""
    tp, rows, config, target = item.tp, list(item.rows), item.config, targets[item.tp]
    start = partition_log_start_offset(rows)
    plan = plan_truncation([r.base_offset for r in rows], [r.next_offset for r in rows], target, start)
    outcome = TruncateOutcome(tp.topic, tp.partition, target, plan.noop, plan.log_end_offset, plan.log_start_offset)
    if plan.noop:
        return PartitionStep(outcome)
    doomed = tuple(r for r in rows if r.base_offset in plan.deleted)
    add: list[SegmentRow] = []
    remove = []
    min_ts = min_timestamp(config)
    if plan.truncated is not None:
        row = next(r for r in rows if r.base_offset == plan.truncated)
        cut = truncate_segment(
            store.read(row.log_key), row.base_offset, target,
            offset_index=OffsetIndex.load(store.read(row.index_key), row.base_offset).index,
            time_index=TimeIndex.load(store.read(row.timeindex_key), row.base_offset,
                                      min_timestamp=min_ts).index,
            min_timestamp=min_ts, index_interval_bytes=config.index_interval_bytes, source=row.log_key)
        start_kept = min(row.log_start_offset, target) if row.log_start_offset >= 0 else -1
        headers = scan_batches(cut.log, row.log_key, verify_crc=False).headers
        ends_at = int(headers.last_offset[-1]) + 1 if len(headers) else row.base_offset
        outcome.records_removed += cut.removed.num_rows
        outcome.cut_mode = cut.mode
        if ends_at == target:
            add.append(store_segment_version(store, tp, row.base_offset, cut.log, cut.index, cut.timeindex, SegmentState.ACTIVE, job_id, now_ms, log_start_offset=start_kept, min_timestamp=min_ts))
            remove.append(row.ref)
        else:
            # the kept records end below the target (offsets compacted away): the log end offset must
            # still be the target (Kafka's truncateTo), so the cut segment is closed and an empty active
            # segment starts at the target; an emptied segment simply goes
            if len(headers):
                offsets, times = build_indexes(headers, row.base_offset, config.index_interval_bytes,
                                               min_timestamp=min_ts)
                add.append(store_segment_version(store, tp, row.base_offset, cut.log, offsets.to_bytes(), times.to_bytes(), SegmentState.ROLLED, job_id, row.created_at_ms, log_start_offset=start_kept, min_timestamp=min_ts))
                remove.append(row.ref)
            else:
                doomed += (row,)
            add.append(store_segment_version(store, tp, target, b"", b"", b"", SegmentState.ACTIVE, job_id, now_ms, min_timestamp=min_ts))
    if plan.new_segment_base is not None:
        add.append(store_segment_version(store, tp, plan.new_segment_base, b"", b"", b"", SegmentState.ACTIVE, job_id, now_ms, min_timestamp=min_ts))
    outcome.records_removed += sum(r.record_count for r in doomed)
    change = CatalogChange(add=tuple(add), remove=tuple(remove),
                           transitions=tuple((r.ref, SegmentState.DELETE_STARTED) for r in doomed))
    return PartitionStep(outcome, change, rows_to_table(doomed))


def prepare_delete_records(item: PartitionInput[None], *, offsets: Mapping[TopicPartition, int],
                           job_id: str) -> PartitionStep[TruncateOutcome]:
    """Raise one partition's log start offset to `offsets[tp]` (KIP-107), retiring whole segments below it."""
    tp, rows, offset = item.tp, list(item.rows), offsets[item.tp]
    if not rows:
        raise KlakeError(f"{tp}: no segments")
    start, end = partition_log_start_offset(rows), rows[-1].next_offset
    if offset > end:
        raise KlakeError(f"{tp}: cannot delete records up to {offset}: the log ends at {end} (high watermark)")
    outcome = TruncateOutcome(tp.topic, tp.partition, offset, offset <= start, end, max(start, offset),
                              previous_log_start_offset=start)
    if outcome.noop:
        return PartitionStep(outcome)
    holder = next((r for r in reversed(rows) if r.base_offset <= offset), rows[0])
    doomed = tuple(rows[:rows.index(holder)])
    add = [] if holder.base_offset == offset else [replace(holder, segment_id=new_segment_id(),
                                                           log_start_offset=offset, job_id=job_id)]
    outcome.records_removed = sum(r.record_count for r in doomed)
    change = CatalogChange(add=tuple(add), remove=(holder.ref,) if add else (),
                           transitions=tuple((r.ref, SegmentState.DELETE_STARTED) for r in doomed))
    return PartitionStep(outcome, change, rows_to_table(doomed))
