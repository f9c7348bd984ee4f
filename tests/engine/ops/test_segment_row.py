"""A catalog row is built from its segment's summary (`segment_row`, `SegmentSummary.facts`) and gives it back
(`SegmentSummary.recorded`): the facts have one spelling, the summary's, which the row's columns carry."""

from __future__ import annotations

from dataclasses import fields

from engine.catalog.schema import COLUMNS, Layout, SegmentState
from engine.format.builder import encode_batch
from engine.log.summary import SEGMENT_FACTS, SegmentSummary, summarize_segment
from engine.ops.versions import segment_row
from kernel.names import TopicPartition
from layouts.object_layout import object_segment_keys


def test_row_holds_every_fact_of_the_summary_and_gives_it_back() -> None:
    assert set(SEGMENT_FACTS) == {f.name for f in fields(SegmentSummary)} - {"valid_bytes", "problems"}
    assert set(SEGMENT_FACTS) <= set(COLUMNS)
    tp = TopicPartition("t", 3)
    log = (encode_batch([b"a", b"b"], [b"1", b"2"], [50, 70], base_offset=40)
           + encode_batch([b"c"], [b"3"], [60], base_offset=42))
    summary = summarize_segment(log, 40, min_timestamp=0)
    row = segment_row(tp, "seg", object_segment_keys("/root", tp, 40, "seg"), Layout.OBJECT, summary,
                      SegmentState.ROLLED, "job", 123, index_size_bytes=0, timeindex_size_bytes=12)
    assert (row.base_offset, row.next_offset, row.record_count, row.batch_count, row.size_bytes) == (40, 43, 3, 2, len(log))
    assert (row.first_batch_timestamp, row.base_timestamp, row.largest_timestamp, row.offset_of_largest_timestamp) == (
        70, 50, 70, 41)
    assert SegmentSummary.recorded(row) == summary
