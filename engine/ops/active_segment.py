"""The ACTIVE segment as the steps that continue it resume it from its catalog row (append, roll, mirror):
its bytes, `.index`, `.timeindex` and roll state, exactly where the previous job left it, so segment
boundaries and index entries are what one broker appending the same sequence would produce (spec 2.5);
and a LogAppendTime partition's last append time, which a monotonic append time must not go below."""

from __future__ import annotations

from collections.abc import Sequence

from engine.catalog.schema import SegmentRow
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import ActiveSegmentState
from engine.log.summary import SegmentSummary
from engine.log.topic_config import TopicConfig, min_timestamp
from kernel.names import TopicPartition
from layouts.store.bound import Store


def resume_state(row: SegmentRow, config: TopicConfig, tp: TopicPartition, store: Store
                  ) -> tuple[ActiveSegmentState, bytes, SegmentSummary]:
    """The ACTIVE row's segment as `SegmentWriter.resume` needs it (spec 2.5 state of a live broker)."""
    min_ts = min_timestamp(config)
    log = store.read(row.log_key)
    offsets = OffsetIndex.load(store.read(row.index_key), row.base_offset, row.index_key)
    times = TimeIndex.load(store.read(row.timeindex_key), row.base_offset, row.timeindex_key,
                           min_timestamp=min_ts)
    none = min_ts - 1
    state = ActiveSegmentState(
        base_offset=row.base_offset, size=row.size_bytes, next_offset=row.next_offset,
        offset_index=offsets.index, time_index=times.index,
        max_timestamp=row.largest_timestamp if row.record_count else none,
        offset_of_max_timestamp=row.offset_of_largest_timestamp if row.record_count else -1,
        rolling_base_timestamp=row.first_batch_timestamp if row.size_bytes else none,
        created_ms=row.created_at_ms, jitter_ms=RollPolicy(config).jitter_for(f"{tp}:{row.base_offset}"))
    return state, log, SegmentSummary.recorded(row)


def last_log_append_time(rows: Sequence[SegmentRow], config: TopicConfig) -> int | None:
    """The last append time of a LogAppendTime partition (its largest timestamp), which a monotonic
    append time must not go below; None for CreateTime topics."""
    if config.message_timestamp_type != "LogAppendTime":
        return None
    return max((r.largest_timestamp for r in rows), default=None)
