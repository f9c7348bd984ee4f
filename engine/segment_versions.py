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
                          summary: SegmentSummary | None = None, extends: SegmentRow | None = None) -> SegmentRow:
    """Write the segment's objects and return its row (not committed).

    `extends` is an earlier version of the same segment whose `.log` is a byte prefix of `log` (an
    append to the ACTIVE segment): the new `.log` is then built from that object in place, so only the
    appended bytes are sent (`put_extending`).
    """
    if extends is not None:
        _check_extends(extends, tp, base_offset, log)
    segment_id = new_segment_id()
    keys = object_segment_keys(root, tp, base_offset, segment_id)
    write_segment(keys, log, index, timeindex, options,
                  log_prefix_uri=extends.log_key if extends is not None else None,
                  log_prefix_size=extends.size_bytes if extends is not None else 0)
    summary = summary or summarize_segment(log, base_offset, keys.log)
    row = segment_row(tp, segment_id, keys, Layout.OBJECT, summary, state, job_id, created_at_ms=created_at_ms)
    return replace(row, log_start_offset=log_start_offset, cleaned=cleaned)


def _check_extends(extends: SegmentRow, tp: TopicPartition, base_offset: int, log: bytes) -> None:
    """Cheap checks that `extends` is an earlier version of this segment; its bytes are the caller's word
    (comparing them would mean reading the whole object, which is what extending avoids)."""
    if (extends.topic, extends.partition, extends.base_offset) != (tp.topic, tp.partition, base_offset):
        raise ValueError(f"segment {extends.log_key} is not a version of {tp} segment {base_offset}")
    if extends.size_bytes > len(log):
        raise ValueError(f"segment {extends.log_key} has {extends.size_bytes} bytes, more than the "
                         f"{len(log)} bytes of the version extending it")
