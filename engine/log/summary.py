"""What one segment holds, computed from its `.log` bytes: the facts a catalog row records.

Kafka keeps a segment's largest timestamp and its offset as one pair (KAFKA-12981): the largest batch
maxTimestamp, strictly greater wins, and the "shallow" offset = last offset of the first batch that
carries it (spec 2.4). `first_batch_timestamp` is Kafka's rolling base (the first batch's
maxTimestamp, spec 3). `base_timestamp` is klake's addition: the smallest record timestamp, so that a
time-range query can prune with `base_timestamp <= to` even when timestamps are out of order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import numpy as np

from engine.catalog.schema import SegmentRow
from engine.format.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP_TYPE,
    BatchHeaders,
    scan_batches,
)
from engine.format.records import decode_records
from engine.log.timestamp_floor import has_timestamp, no_timestamp
from kernel.errors import CorruptRecordError

TIMESTAMP_TYPE_LABELS = {CREATE_TIME: "CreateTime", LOG_APPEND_TIME: "LogAppendTime",
                         NO_TIMESTAMP_TYPE: "NoTimestampType"}


@dataclass
class SegmentSummary:
    base_offset: int
    last_offset: int
    next_offset: int
    record_count: int
    batch_count: int
    size_bytes: int
    first_batch_timestamp: int
    base_timestamp: int
    largest_timestamp: int
    offset_of_largest_timestamp: int
    timestamp_type: str
    magic: int
    valid_bytes: int
    problems: list[CorruptRecordError] = field(default_factory=list)
    txn_batch_count: int | None = None
    txn_start_position: int | None = None
    txn_end_position: int | None = None
    """Transactional or control batches and their byte span (`TxnSummary`); None: unknown."""

    @property
    def transactions(self) -> TxnSummary:
        return TxnSummary(self.txn_batch_count, self.txn_start_position, self.txn_end_position)

    def facts(self) -> dict[str, int | str]:
        """What a catalog row records of the segment, under the row's column names (`SEGMENT_FACTS`)."""
        return {name: getattr(self, name) for name in SEGMENT_FACTS}

    @classmethod
    def recorded(cls, row: SegmentRow) -> SegmentSummary:
        """The summary a catalog row's facts were made from (a catalogued segment's bytes are all valid)."""
        return cls(**{name: getattr(row, name) for name in SEGMENT_FACTS}, valid_bytes=row.size_bytes)


SEGMENT_FACTS = tuple(f.name for f in fields(SegmentSummary) if f.name not in ("valid_bytes", "problems"))
"""The summary's fields a catalog row (`engine.catalog.schema.SegmentRow`) holds, under the same names."""


def largest_timestamp(headers: BatchHeaders, base_offset: int, min_timestamp: int) -> tuple[int, int]:
    """(max batch maxTimestamp, last offset of the first batch carrying it); (none, base) without any
    timestamp >= `min_timestamp` (`engine.log.topic_config.min_timestamp`), none being one below it."""
    if len(headers) == 0:
        return no_timestamp(min_timestamp), base_offset
    row = int(np.argmax(headers.max_timestamp))  # argmax returns the first of equal maxima
    ts = int(headers.max_timestamp[row])
    if not has_timestamp(ts, min_timestamp):
        return no_timestamp(min_timestamp), base_offset
    return ts, int(headers.last_offset[row])


@dataclass(frozen=True)
class TxnSummary:
    """How many batches are transactional or control batches, the ones a read_committed reader's walk of the
    partition (`engine.cleaner.txn`) looks at, and the bytes from the first of them to the end of the last
    (None without any): a segment without them adds no transaction, and of one with them only that span
    needs reading. All None: unknown."""

    txn_batch_count: int | None
    txn_start_position: int | None
    txn_end_position: int | None

    @classmethod
    def of(cls, headers: BatchHeaders) -> TxnSummary:
        rows = np.flatnonzero(headers.is_transactional | headers.is_control)
        if not rows.size:
            return cls(0, None, None)
        return cls(int(rows.size), int(headers.position[rows[0]]), int(headers.next_position[rows[-1]]))


def timestamp_type_label(headers: BatchHeaders) -> str:
    kinds = set(headers.timestamp_type.tolist())
    if not kinds:
        return TIMESTAMP_TYPE_LABELS[CREATE_TIME]
    return TIMESTAMP_TYPE_LABELS[kinds.pop()] if len(kinds) == 1 else "Mixed"


def summarize_segment(data: bytes, base_offset: int, source: str = "<segment>", *, min_timestamp: int
                      ) -> SegmentSummary:
    """Summarize the valid prefix of a segment; defects (corrupt or partial batches) go to `problems`.
    Timestamps below `min_timestamp` (`engine.log.topic_config.min_timestamp`) count as none.

    Record counts and the smallest timestamp need the records (legacy compressed wrappers hide their
    count), so the valid prefix is decoded once.
    """
    scan = scan_batches(data, source, strict=False)
    headers = scan.headers
    if scan.problems:
        headers = headers.take(headers.next_position <= scan.valid_bytes)
    records = decode_records(data, headers, source)
    ts = records.timestamp
    has_ts = ts[has_timestamp(ts, min_timestamp)]
    largest, largest_offset = largest_timestamp(headers, base_offset, min_timestamp)
    last_offset = int(headers.last_offset[-1]) if len(headers) else base_offset - 1
    return SegmentSummary(
        base_offset=base_offset,
        last_offset=last_offset,
        next_offset=last_offset + 1 if len(headers) else base_offset,
        record_count=len(records),
        batch_count=len(headers),
        size_bytes=len(data),
        first_batch_timestamp=int(headers.max_timestamp[0]) if len(headers) else no_timestamp(min_timestamp),
        base_timestamp=int(has_ts.min()) if has_ts.size else no_timestamp(min_timestamp),
        largest_timestamp=largest,
        offset_of_largest_timestamp=largest_offset,
        timestamp_type=timestamp_type_label(headers),
        magic=int(headers.magic.max()) if len(headers) else 2,
        valid_bytes=scan.valid_bytes,
        problems=scan.problems,
        **asdict(TxnSummary.of(headers)),
    )
