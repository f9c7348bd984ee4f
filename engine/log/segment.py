"""A segment read into memory with trustworthy indexes.

The sidecars are used as Kafka uses them, but never trusted blindly (KAFKA-10207, KAFKA-7283): each is
loaded with its longest valid prefix, checked against the log, and rebuilt with Kafka's recovery rule
(spec 7.2) when it is missing, has garbage, or disagrees with the log. What was wrong is kept in
`index_problems` so callers can report it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from engine.format.batch import BatchHeaders, BatchScan, scan_batches
from engine.index.checks import settle_indexes
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.summary import largest_timestamp


@dataclass
class InMemorySegment:
    base_offset: int
    data: bytes
    scan: BatchScan
    offset_index: OffsetIndex
    time_index: TimeIndex
    source: str
    index_problems: list[str] = field(default_factory=list)
    rebuilt: bool = False

    @classmethod
    def load(cls, base_offset: int, data: bytes, index: bytes | None, timeindex: bytes | None,
             source: str, *, min_timestamp: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
             active: bool = False) -> InMemorySegment:
        """Scan the log strictly (a corrupt batch raises, naming file and byte) and settle the indexes;
        `min_timestamp` is the topic's floor (`engine.log.topic_config.min_timestamp`)."""
        scan = scan_batches(data, source)
        offsets, times, check = settle_indexes(scan.headers, base_offset, index, timeindex, source,
                                               index_interval_bytes, active, min_timestamp=min_timestamp)
        return cls(base_offset, data, scan, offsets, times, source, check.problems, bool(check.problems))

    @property
    def headers(self) -> BatchHeaders:
        return self.scan.headers

    @property
    def next_offset(self) -> int:
        return int(self.headers.last_offset[-1]) + 1 if len(self.headers) else self.base_offset

    @cached_property
    def _largest(self) -> tuple[int, int]:
        return largest_timestamp(self.headers, self.base_offset, self.time_index.min_timestamp)

    @property
    def largest_timestamp(self) -> int:
        return self._largest[0]

    @property
    def offset_of_largest_timestamp(self) -> int:
        return self._largest[1]

    def indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        return self.offset_index, self.time_index

    def time_lookup(self, target: int) -> tuple[tuple[int, int] | None, int | None]:
        """The time-index floor entry of `target` and the offset of the entry after it (`SearchableSegment`)."""
        return self.time_index.floor_and_next(target)

    def batches_from(self, offset: int, until: int | None = None) -> Iterator[tuple[bytes, BatchHeaders]]:
        yield self.data, self.headers.take(self.headers.last_offset >= offset)
