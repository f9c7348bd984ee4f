"""A segment read into memory with trustworthy indexes.

The sidecars are used as Kafka uses them, but never trusted blindly (KAFKA-10207, KAFKA-7283): each is
loaded with its longest valid prefix, checked against the log, and rebuilt with Kafka's recovery rule
(spec 7.2) when it is missing, has garbage, or disagrees with the log. What was wrong is kept in
`index_problems` so callers can report it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.batch import BatchHeaders, BatchScan, scan_batches
from engine.index_builder import build_indexes, check_indexes
from engine.index_common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.log_summary import largest_timestamp
from engine.offset_index import OffsetIndex
from engine.time_index import TimeIndex


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
             source: str, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> InMemorySegment:
        """Scan the log strictly (a corrupt batch raises, naming file and byte) and settle the indexes."""
        scan = scan_batches(data, source)
        problems: list[str] = []
        offset_index = time_index = None
        if index is None:
            problems.append(f"{source}: offset index missing")
        else:
            loaded = OffsetIndex.load(index, base_offset, source.removesuffix(".log") + ".index")
            problems += loaded.problems
            offset_index = loaded.index
        if timeindex is None:
            problems.append(f"{source}: time index missing")
        else:
            loaded_t = TimeIndex.load(timeindex, base_offset, source.removesuffix(".log") + ".timeindex")
            problems += loaded_t.problems
            time_index = loaded_t.index
        if offset_index is not None and time_index is not None and not problems:
            problems += check_indexes(scan.headers, offset_index, time_index, source)
        rebuilt = bool(problems)
        if rebuilt:
            offset_index, time_index = build_indexes(scan.headers, base_offset, index_interval_bytes)
        return cls(base_offset, data, scan, offset_index, time_index, source, problems, rebuilt)

    @property
    def headers(self) -> BatchHeaders:
        return self.scan.headers

    @property
    def next_offset(self) -> int:
        return int(self.headers.last_offset[-1]) + 1 if len(self.headers) else self.base_offset

    @property
    def largest_timestamp(self) -> int:
        return largest_timestamp(self.headers, self.base_offset)[0]

    @property
    def offset_of_largest_timestamp(self) -> int:
        return largest_timestamp(self.headers, self.base_offset)[1]

    def indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        return self.offset_index, self.time_index

    def batches_from(self, position: int) -> tuple[bytes, BatchHeaders]:
        return self.data, self.headers.take(self.headers.position >= position)
