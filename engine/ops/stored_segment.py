"""A catalogued segment read lazily from object storage, for lookups and reads.

Its metadata (offsets, largest timestamp and its offset) comes from the catalog row, so choosing the
segment costs no request. A lookup reads what Kafka's own lookup touches, and little more:
- the sidecars by pages (`engine.ops.paged_index`): one no larger than a page is read whole; a larger
  one is searched page by page, a probe a page placed by interpolation. The row gives the sidecars'
  sizes (`index_size_bytes`, `timeindex_size_bytes`), so the first probe is the first read; a row of an
  older catalog does not, and the first read is then the last page (KAFKA-7283's warm section);
- the log from the batch holding the first offset that can answer (the offset index's entry for it,
  or the next entry when every batch is indexed and that batch turns out to hold it) to the batch the
  time index says reaches the target, in one ranged GET, then on by `read_window` if needed;
- where the row has a batch index (klake's `.batchindex`, written where batches are smaller than
  `index.interval.bytes`: `engine.index.batch_index`), instead of the `.index` and the span of batches
  after the time-index entry, the entry's group of the batch index (one ranged GET), then exactly the
  batch it names; a batch that is not where the group says turns it off (`index_problems`) and the
  search goes on Kafka's way.
A task keeps the pages and log ranges it has read, so its next target near the same place costs no
request. A sidecar that fails its checks (a page out of order with the others, a length that is not a
multiple of the entry size, zero padding) is read whole and, failing again, rebuilt from the whole log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from engine.catalog.schema import SegmentRow
from engine.format.batch import LOG_OVERHEAD, BatchHeaders, scan_batches
from engine.format.records import RecordTable, decode_checked
from engine.index.batch_index import BatchGroup, group_from_bytes, group_span, stride_of
from engine.index.checks import settle_indexes
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES, INT32_MAX, INT64_MAX, INT64_MIN, clamp
from engine.index.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from engine.index.time_index import TimeIndex
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.paged_index import PagedSidecar, Unpaged, offset_entries, time_entries
from kernel.errors import CorruptRecordError, TruncatedBatchError
from layouts.object_layout import batch_index_key
from layouts.store.bound import Store

DEFAULT_READ_WINDOW = 256 * 1024
MIN_LOOKUP_WINDOW = 8 * 1024
class _BatchGroups:
    """A segment's `.batchindex` (`engine.index.batch_index`) read a group at a time, each group once."""

    def __init__(self, uri: str, store: Store, stride: int) -> None:
        self.uri, self.store, self.stride = uri, store, stride
        self.groups: dict[int, BatchGroup | None] = {}

    def group(self, g: int) -> BatchGroup | None:
        """Group `g`, or None if its bytes break the layout (or the object is shorter than its row says)."""
        if g not in self.groups:
            start, end = group_span(g, self.stride)
            data = self.store.read(self.uri, start, end)
            self.groups[g] = group_from_bytes(data) if len(data) == end - start else None
        return self.groups[g]


def _batch_groups(row: SegmentRow, store: Store) -> _BatchGroups | None:
    """The row's batch index, if it has one whose length fits its `.timeindex`'s."""
    if (row.batchindex_size_bytes is None or row.timeindex_size_bytes is None
            or not row.timeindex_key.endswith(".timeindex")):
        return None
    stride = stride_of(row.batchindex_size_bytes, row.timeindex_size_bytes // TIME_ENTRY_SIZE)
    return None if stride is None else _BatchGroups(batch_index_key(row.timeindex_key), store, stride)


@dataclass(frozen=True)
class _PinnedBatch:
    """The batch the batch index names as a target's answer: offsets `first`..`last` lead to it (a search
    from any of them starts there); `kafka_first` is where Kafka's search would start, if it does not check."""

    first: int
    last: int
    position: int
    size: int
    max_timestamp: int
    kafka_first: int


class StoredSegment:
    def __init__(self, row: SegmentRow, store: Store,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                 read_window: int = DEFAULT_READ_WINDOW, *, min_timestamp: int, keep_ranges: bool = False) -> None:
        """`min_timestamp`: the topic's (`engine.log.topic_config.min_timestamp`), for its time index;
        `keep_ranges`: keep the log ranges read for later reads (lookups; a scan must not keep them)."""
        self.row = row
        self.min_timestamp = min_timestamp
        self.store = store
        self.index_interval_bytes = index_interval_bytes
        self.read_window = read_window
        self.base_offset = row.base_offset
        self.source = row.log_key
        self._indexes: tuple[OffsetIndex, TimeIndex] | None = None
        self._offsets = PagedSidecar(row.index_key, store, OFFSET_ENTRY_SIZE, offset_entries,
                                      row.index_size_bytes, 0, row.next_offset - row.base_offset)
        self._times = PagedSidecar(row.timeindex_key, store, TIME_ENTRY_SIZE, time_entries(min_timestamp),
                                    row.timeindex_size_bytes, min(row.base_timestamp, row.largest_timestamp),
                                    row.largest_timestamp + 1)
        self._ranges: list[tuple[int, bytes]] | None = [] if keep_ranges else None
        self._groups = _batch_groups(row, store)
        self._pinned: list[_PinnedBatch] = []
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
            index = self.store.read(self.row.index_key)
            timeindex = self.store.read(self.row.timeindex_key)
            loaded = (OffsetIndex.load(index, self.base_offset),
                      TimeIndex.load(timeindex, self.base_offset, min_timestamp=self.min_timestamp))
            if loaded[0].ok and loaded[1].ok:
                self._indexes = (loaded[0].index, loaded[1].index)
            else:
                data = self.store.read(self.row.log_key)
                offsets, times, check = settle_indexes(scan_batches(data, self.source).headers, self.base_offset,
                                                       index, timeindex, self.source, self.index_interval_bytes,
                                                       active=self.row.state == "ACTIVE",
                                                       min_timestamp=self.min_timestamp)
                self.index_problems = check.problems
                self._indexes = (offsets, times)
        return self._indexes

    def time_lookup(self, target: int) -> tuple[tuple[int, int] | None, int | None]:
        """The `.timeindex` floor entry of `target` and an offset whose batch reaches it: the next entry's,
        or the first batch's (`SegmentRow.first_batch_timestamp`) when no entry is below the target
        (`engine.log.lookup.SearchableSegment`); from the pages that hold them. With a batch index, the
        floor and reach of the answering batch itself (`_pin`)."""
        pinned = self._pin(target) if self._groups is not None else None
        if pinned is not None:
            return pinned
        floor, reach = self._time_floor_and_next(target)
        if floor is None and target <= self.row.first_batch_timestamp:  # the first batch (never indexed) reaches it
            reach = self.base_offset
        return floor, reach

    def _pin(self, target: int) -> tuple[tuple[int, int] | None, int] | None:
        """From the `.timeindex` entry below `target` and its group in the batch index, the first batch
        reaching `target` (spec 5.2's forward scan, which starts after that entry, stops there): the floor
        `(T, O)` of the batch before it (every record up to O is at most T < target) and its last offset.
        None where the batch index cannot say (a group that breaks the layout; sidecars rebuilt)."""
        slot, floor = self._time_floor_below(target)
        group = self._groups.group(slot + 1) if self._groups is not None else None
        floor_last = floor[1] - self.base_offset if floor else -1
        if not group or int(group.relative_offsets[0]) <= floor_last:
            return None
        hits = np.flatnonzero(group.max_timestamps >= target)
        if not hits.size:
            return None
        s = int(hits[0])
        tight = floor
        if s:
            highest = int(group.max_timestamps[:s].max())
            tight = (max(highest, floor[0]) if floor else highest, self.base_offset + int(group.relative_offsets[s - 1]))
        last = self.base_offset + int(group.relative_offsets[s])
        kafka_first = floor[1] + 1 if floor else self.base_offset
        self._pinned.append(_PinnedBatch(tight[1] + 1 if tight else self.base_offset, last, int(group.positions[s]),
                                         int(group.sizes[s]), int(group.max_timestamps[s]), kafka_first))
        return tight, last

    def _time_floor_below(self, target: int) -> tuple[int, tuple[int, int] | None]:
        """The slot of the last `.timeindex` entry below `target` (-1 if none) and the entry, as (timestamp,
        absolute offset); rebuilt sidecars (which the batch index was not written for) turn it off."""
        key = clamp(target - 1, INT64_MIN + 1, INT64_MAX)
        if self._indexes is None:
            try:
                slot, floor, _ = self._times.locate(key, 0)
            except Unpaged:
                self.indexes()
            else:
                return slot, ((floor[0], self.base_offset + floor[1]) if floor else None)
        if self.index_problems:
            self._groups = None
            return -1, None
        times = self.indexes()[1]
        slot = times.floor_slot(key)
        return slot, (times.entry(slot) if slot >= 0 else None)

    def _time_floor_and_next(self, target: int) -> tuple[tuple[int, int] | None, int | None]:
        if self._indexes is None:
            try:
                floor, following = self._times.around(clamp(target, INT64_MIN + 1, INT64_MAX), 1)
            except Unpaged:
                self.indexes()
            else:
                return ((floor[0], self.base_offset + floor[1]) if floor else None,
                        self.base_offset + following[0][1] if following else None)
        return self.indexes()[1].floor_and_next(target)

    def batches_from(self, offset: int, until: int | None = None) -> Iterator[tuple[bytes, BatchHeaders]]:
        """The log's batches from the one holding `offset` on (`SearchableSegment`); the first ranged read
        ends with the batch holding `until` when the offset index places it, or is exactly the batch the
        batch index pinned for it."""
        pinned = next((p for p in self._pinned if p.first <= offset <= p.last), None)
        if pinned is not None:
            yield from self._from_pinned(pinned)
            return
        start, fallback = self._start_of(offset)
        end = self._end_of(until, start) if until is not None else None
        chunks = self.chunks_from(start, None if end is None else min(end, start + 4 * self.read_window))
        if fallback is not None:
            first = next(chunks, None)
            if first is None or int(first[1].base_offset[0]) > offset:  # an unindexed batch lies between
                yield from self.chunks_from(fallback, stop=start)
            if first is not None:
                yield first
        yield from chunks

    def _from_pinned(self, pin: _PinnedBatch) -> Iterator[tuple[bytes, BatchHeaders]]:
        """The pinned batch alone (one ranged GET), then on; if the log there is not that batch, the batch
        index is set aside (noted in `index_problems`) and the search goes on from Kafka's start."""
        chunks = self.chunks_from(pin.position, pin.position + pin.size)
        try:
            first = next(chunks, None)
        except CorruptRecordError:
            first = None
        h = first[1] if first is not None else None
        if h is None or len(h) != 1 or (int(h.size[0]), int(h.last_offset[0]), int(h.max_timestamp[0])) != (
                pin.size, pin.last, pin.max_timestamp):
            self.index_problems.append(f"{batch_index_key(self.row.timeindex_key)}: the batch it places at position "
                                       f"{pin.position} (last offset {pin.last}) is not in the log there")
            self._groups, self._pinned = None, []
            yield from self.batches_from(pin.kafka_first)
            return
        yield first
        yield from chunks

    def _offset_around(self, offset: int, after: int) -> tuple[tuple[int, int] | None, list[tuple[int, int]]]:
        """`.index` entries as (absolute offset, position): the floor entry of `offset` and `after` more."""
        key = clamp(offset - self.base_offset, -1, INT32_MAX)
        if self._indexes is None:
            try:
                floor, following = self._offsets.around(key, after)
            except Unpaged:
                self.indexes()
            else:
                return ((self.base_offset + floor[0], floor[1]) if floor else None,
                        [(self.base_offset + k, p) for k, p in following])
        index = self.indexes()[0]
        slot = int(np.searchsorted(index.relative_offsets, key, side="right")) - 1
        return (index.entry(slot) if slot >= 0 else None), [index.entry(i) for i in range(slot + 1,
                                                                                           min(slot + 1 + after, len(index)))]

    def _start_of(self, offset: int) -> tuple[int, int | None]:
        """Where the batch holding `offset` can start: the position of the offset index's floor entry (Kafka's
        lookup) when that entry's batch ends at `offset` or nothing follows it; else, when every batch is
        indexed (each above `index.interval.bytes`, spec 2.5), the next entry's position, with the floor's as
        the fallback if the batch read there starts above `offset`."""
        floor, following = self._offset_around(offset, 1)
        if floor is None or floor[0] == offset or not following:  # the first batch is never indexed
            return (floor[1] if floor else 0), None
        if self._average_batch() > self.index_interval_bytes:
            return following[0][1], floor[1]
        return floor[1], None

    def _average_batch(self) -> int:
        return self.row.size_bytes // max(self.row.batch_count, 1)

    def _end_of(self, offset: int, start: int) -> int | None:
        """Where the batch holding `offset` ends, or a position after it: the entry after the first entry at
        or past `offset` (None when the index ends first); when that first entry's batch ends at `offset`,
        two average batches past its position, if that is sooner (a longer batch costs one more read); the
        first indexed position for the segment's first batch."""
        floor, following = self._offset_around(offset, 2)
        rest = following if floor is None or floor[0] < offset else [floor, *following]
        if offset == self.base_offset and rest:  # the first batch, at 0, ends by the first indexed one
            return rest[0][1]
        if len(rest) < 2 or rest[1][1] <= start:
            return None
        if rest[0][0] == offset:
            return max(start + 1, min(rest[1][1], rest[0][1] + 2 * self._average_batch()))
        return rest[1][1]

    def chunks_from(self, position: int, first_end: int | None = None, stop: int | None = None
                    ) -> Iterator[tuple[bytes, BatchHeaders]]:
        """Batches from `position` to the end of the log (or to `stop`, a batch boundary), one ranged read
        per chunk: the first up to `first_end` (if given), the next ones `read_window` long.

        Header positions index into each yielded chunk; a batch cut by the window's end is read again
        at the start of the next chunk.
        """
        for _, data, headers in self._chunks(position, first_end, stop, verify_crc=True):
            yield data, headers

    def decoded_from(self, position: int, select: Callable[[BatchHeaders], np.ndarray]
                     ) -> Iterator[tuple[RecordTable, BatchHeaders, BatchHeaders]]:
        """`chunks_from(position)`'s chunks with the batches `select` picks decoded (`decode_checked`: each
        CRC checked in the decoder's pass, not by a scan before it): (records, picked headers, all headers).
        Fails as `chunks_from` then `decode_records` would, at the same absolute byte of the log."""
        for at, data, headers in self._chunks(position, None, None, verify_crc=False):
            rows = select(headers)
            try:
                records = decode_checked(data, headers, rows, self.source)
            except CorruptRecordError as exc:
                raise CorruptRecordError(self.source, at + exc.position, exc.field, exc.message) from None
            yield records, headers.take(rows), headers

    def _chunks(self, position: int, first_end: int | None, stop: int | None, verify_crc: bool
                ) -> Iterator[tuple[int, bytes, BatchHeaders]]:
        """`chunks_from`'s chunks and where each starts in the log; `verify_crc=False` leaves the CRCs of
        a chunk without other problems to its reader (a chunk with one is scanned again with them, so that
        the first problem by position is raised, a bad CRC included)."""
        size = self.row.size_bytes if stop is None else min(stop, self.row.size_bytes)
        window = self.read_window
        while position < size:
            end = min(size, first_end if first_end is not None and first_end > position else position + window)
            first_end = None
            data = self._read(position, end)
            scan = scan_batches(data, self.source, verify_crc=verify_crc, strict=False)
            cut = next((p for p in scan.problems if isinstance(p, TruncatedBatchError) and end < size), None)
            if not verify_crc and any(p is not cut for p in scan.problems):
                scan = scan_batches(data, self.source, strict=False)
                cut = next((p for p in scan.problems if isinstance(p, TruncatedBatchError) and end < size), None)
            others = [p for p in scan.problems if p is not cut]
            if others:
                first = others[0]
                raise CorruptRecordError(self.source, position + first.position, first.field, first.message)
            if len(scan.headers):
                yield position, data, scan.headers
            if cut is None:
                position = end
                continue
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
        data = self.store.read(self.row.log_key, start, end)
        if self._ranges is not None:
            self._ranges.append((start, data))
        return data


def lookup_window(row: SegmentRow, index_interval_bytes: int) -> int:
    """Log bytes a lookup reads per ranged GET where the index does not bound the read: the index
    interval (the answer's batch starts within it, spec 2.5) plus two of the segment's average batches,
    between 8 KiB and the default window."""
    average_batch = row.size_bytes // max(row.batch_count, 1)
    return min(DEFAULT_READ_WINDOW, max(MIN_LOOKUP_WINDOW, index_interval_bytes + 2 * average_batch))


def stored_segment(row: SegmentRow, store: Store, config: TopicConfig | None = None) -> StoredSegment:
    """A `StoredSegment` for lookups, read with its topic's index settings (interval, KIP-228 minimum
    timestamp), keeping the pages and ranges it reads for the task's next targets."""
    config = config or TopicConfig()
    return StoredSegment(row, store, config.index_interval_bytes,
                         lookup_window(row, config.index_interval_bytes), min_timestamp=min_timestamp(config),
                         keep_ranges=True)
