"""Synthetic catalog rows for tests, and the one-line catalog changes tests make with them (the product
changes the catalog through `Catalog.apply` alone)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentRef, SegmentRow, SegmentState
from engine.log.segment_writer import ClosedSegment, SegmentWriter
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog, CommitResult
from engine.ops.stored_segment import StoredSegment, stored_segment


@dataclass(frozen=True)
class OffsetBounds:
    """Log start offset (first live base offset) and log end offset (last live next offset)."""

    log_start_offset: int
    log_end_offset: int


def add_segments(catalog: Catalog, rows: Sequence[SegmentRow], job_id: str = "") -> CommitResult:
    return catalog.apply(CatalogChange(add=tuple(rows)), operation="add", job_id=job_id)


def swap(catalog: Catalog, remove: Sequence[SegmentRef], add: Sequence[SegmentRow], job_id: str = "") -> CommitResult:
    return catalog.apply(CatalogChange(add=tuple(add), remove=tuple(remove)), operation="swap", job_id=job_id)


def transition(catalog: Catalog, refs: Sequence[SegmentRef], state: SegmentState, job_id: str = "") -> CommitResult:
    change = CatalogChange(transitions=tuple((ref, SegmentState(state)) for ref in refs))
    return catalog.apply(change, operation=f"transition-{state}", job_id=job_id)


def offset_bounds(catalog: Catalog, topic: str, partition: int) -> OffsetBounds | None:
    live = catalog.live_segments(topic, partition)
    return OffsetBounds(live[0].base_offset, live[-1].next_offset) if live else None


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


def all_segments(writer: SegmentWriter) -> list[ClosedSegment]:
    """All of a writer's segments, the active one last (closed with its final entry, as at broker shutdown)."""
    segments = list(writer.closed)
    if writer.active.size:
        segments.append(writer.active.close(None))
    return segments


def partition_segments(catalog: Catalog, topic: str, partition: int,
                       config: TopicConfig | None = None) -> list[StoredSegment]:
    """The live segments of one partition, in offset order, as lazily read `StoredSegment`s."""
    return [stored_segment(row, catalog.store, config) for row in catalog.live_segments(topic, partition)]


def kafka_time_retention(rows: list[SegmentRow], now_ms: int, retention_ms: int) -> list[SegmentRow]:
    """Kafka's retention.ms pass, by brute force: oldest first, delete while now - largest timestamp >
    retention.ms (the oracle the retention jobs are held to)."""
    doomed = []
    for row in rows:
        if now_ms - row.largest_timestamp <= retention_ms:
            break
        doomed.append(row)
    return doomed
