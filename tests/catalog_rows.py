"""Synthetic catalog rows for tests."""

from __future__ import annotations

from engine.catalog.schema import SegmentRow, SegmentState


def make_row(topic: str, partition: int, base: int, next_offset: int, base_ts: int = 1_000, largest_ts: int = 2_000,
             state: SegmentState = SegmentState.ROLLED, segment_id: str | None = None, size: int = 100) -> SegmentRow:
    sid = segment_id or f"s{base:x}p{partition}"
    return SegmentRow(
        topic=topic, partition=partition, segment_id=sid, log_key=f"/r/{topic}-{partition}/{base:020d}-{sid}.log",
        index_key=f"/r/{topic}-{partition}/{base:020d}-{sid}.index",
        timeindex_key=f"/r/{topic}-{partition}/{base:020d}-{sid}.timeindex",
        base_offset=base, last_offset=next_offset - 1, next_offset=next_offset, record_count=next_offset - base,
        batch_count=1, size_bytes=size, first_batch_timestamp=base_ts, base_timestamp=base_ts,
        largest_timestamp=largest_ts, offset_of_largest_timestamp=next_offset - 1, timestamp_type="CreateTime",
        state=str(state), created_at_ms=1, job_id="test", format_version=1, layout="object", magic=2)
