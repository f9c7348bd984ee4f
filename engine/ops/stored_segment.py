"""A catalogued segment read lazily from object storage, for lookups and reads.

Its metadata (offsets, largest timestamp and its offset) comes from the catalog row, so choosing the
segment costs no request. Then, as Kafka reads a segment: the `.timeindex` and the `.index` in one GET
each, and the `.log` from the indexed position by ranged GETs of `read_window` bytes (grown to fit a
batch larger than the window). A lookup's window is what Kafka's index guarantees: the answer's batch
starts within `index.interval.bytes` of the indexed position, so one ranged read of that much plus two
average batches usually holds it (`lookup_window`). Ranges already read are kept, so the next target
of the same task near the same place costs no request. Sidecars that fail their checks are rebuilt
from the whole log.
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.catalog.schema import SegmentRow
from engine.errors import CorruptRecordError, TruncatedBatchError
from engine.format.batch import LOG_OVERHEAD, BatchHeaders, scan_batches
from engine.index.checks import settle_indexes
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.topic_config import TopicConfig, min_timestamp
from layouts.store import StorageOptions, read_bytes

DEFAULT_READ_WINDOW = 256 * 1024
MIN_LOOKUP_WINDOW = 8 * 1024


class StoredSegment:
    def __init__(self, row: SegmentRow, options: StorageOptions | None = None,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 read_window: int = DEFAULT_READ_WINDOW, min_timestamp: int = 0, keep_ranges: bool = False) -> None:
        """`min_timestamp`: the topic's (`engine.log.topic_config.min_timestamp`), for its time index;
        `keep_ranges`: keep the log ranges read for later reads (lookups; a scan must not keep them)."""
        self.row = row
        self.min_timestamp = min_timestamp
        self.options = options
        self.index_interval_bytes = index_interval_bytes
        self.read_window = read_window
        self.base_offset = row.base_offset
        self.source = row.log_key
        self._indexes: tuple[OffsetIndex, TimeIndex] | None = None
        self._ranges: list[tuple[int, bytes]] | None = [] if keep_ranges else None
        self.index_problems: list[str] = []

    @property
    def next_offset(self) -> int:
        return self.row.next_offset

    @property
    def largest_timestamp(self) -> int:
        return self.row.largest_timestamp

    @property
    def offset_of_largest_timestamp(self) -> int:
        return self.row.offset_of_largest_timestamp

    def indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """The sidecars (one GET each); rebuilt from the full log only if they fail their checks."""
        if self._indexes is None:
            index = read_bytes(self.row.index_key, self.options)
            timeindex = read_bytes(self.row.timeindex_key, self.options)
            loaded = (OffsetIndex.load(index, self.base_offset),
                      TimeIndex.load(timeindex, self.base_offset, min_timestamp=self.min_timestamp))
            if loaded[0].ok and loaded[1].ok:
                self._indexes = (loaded[0].index, loaded[1].index)
            else:
                data = read_bytes(self.row.log_key, self.options)
                offsets, times, check = settle_indexes(scan_batches(data, self.source).headers, self.base_offset,
                                                       index, timeindex, self.source, self.index_interval_bytes,
                                                       active=self.row.state == "ACTIVE",
                                                       min_timestamp=self.min_timestamp)
                self.index_problems = check.problems
                self._indexes = (offsets, times)
        return self._indexes

    def chunks_from(self, position: int) -> Iterator[tuple[bytes, BatchHeaders]]:
        """Batches from `position` to the end of the log, one ranged read per chunk.

        Header positions index into each yielded chunk; a batch cut by the window's end is read again
        at the start of the next chunk.
        """
        size = self.row.size_bytes
        window = self.read_window
        while position < size:
            end = min(size, position + window)
            data = self._read(position, end)
            scan = scan_batches(data, self.source, strict=False)
            cut = next((p for p in scan.problems if isinstance(p, TruncatedBatchError) and end < size), None)
            others = [p for p in scan.problems if p is not cut]
            if others:
                first = others[0]
                raise CorruptRecordError(self.source, position + first.position, first.field, first.message)
            if len(scan.headers):
                yield data, scan.headers
            if cut is None:
                return
            if cut.position == 0:  # one batch larger than the window: widen to its declared size
                declared = int.from_bytes(data[8:12], "big", signed=True) + LOG_OVERHEAD if len(data) >= 12 else 0
                window = max(2 * window, declared)
            position += cut.position


    def _read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the log: from a range this segment already read, else one ranged GET
        (kept for the next target)."""
        for at, data in self._ranges or ():
            if at <= start and end <= at + len(data):
                return data[start - at:end - at]
        data = read_bytes(self.row.log_key, self.options, start, end)
        if self._ranges is not None:
            self._ranges.append((start, data))
        return data


def lookup_window(row: SegmentRow, index_interval_bytes: int) -> int:
    """Log bytes one lookup reads after the indexed position: the index interval (the answer's batch
    starts within it, spec 2.5) plus two of the segment's average batches, between 8 KiB and the
    default window."""
    average_batch = row.size_bytes // max(row.batch_count, 1)
    return min(DEFAULT_READ_WINDOW, max(MIN_LOOKUP_WINDOW, index_interval_bytes + 2 * average_batch))


def stored_segment(row: SegmentRow, options: StorageOptions | None, config: TopicConfig | None = None) -> StoredSegment:
    """A `StoredSegment` for lookups, read with its topic's index settings (interval, KIP-228 minimum
    timestamp) and a `lookup_window` sized read of the log."""
    config = config or TopicConfig()
    return StoredSegment(row, options, config.index_interval_bytes,
                         lookup_window(row, config.index_interval_bytes), min_timestamp(config), keep_ranges=True)
