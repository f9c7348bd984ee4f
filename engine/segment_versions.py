"""Write a new segment version: its objects under a fresh segment id (put-if-absent, never
overwriting), and the catalog row describing it, ready for the operation's single commit."""

from __future__ import annotations

from dataclasses import replace

from engine.catalog_schema import Layout, SegmentRow, SegmentState
from engine.log_summary import SegmentSummary, segment_row, summarize_segment
from layouts.names import TopicPartition
from layouts.object_layout import new_segment_id, object_segment_keys, write_segment
from layouts.storage import StorageOptions


def store_segment_version(root: str, tp: TopicPartition, base_offset: int, log: bytes, index: bytes,
                          timeindex: bytes, state: SegmentState, job_id: str, created_at_ms: int | None,
                          options: StorageOptions | None, *, log_start_offset: int = -1, cleaned: bool = False,
                          summary: SegmentSummary | None = None) -> SegmentRow:
    segment_id = new_segment_id()
    keys = object_segment_keys(root, tp, base_offset, segment_id)
    write_segment(keys, log, index, timeindex, options)
    summary = summary or summarize_segment(log, base_offset, keys.log)
    row = segment_row(tp, segment_id, keys, Layout.OBJECT, summary, state, job_id, created_at_ms=created_at_ms)
    return replace(row, log_start_offset=log_start_offset, cleaned=cleaned)
