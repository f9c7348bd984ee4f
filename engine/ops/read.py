"""Range reads of a topic's records (the `read` job and the `klake` data source run these in tasks).

Range (all bounds optional, combined with AND):
- time: `from <= timestamp < to`, each record by its own timestamp; a time range only selects records
  with a timestamp >= the topic's smallest (`engine.log.topic_config.min_timestamp`): "no timestamp"
  has no place on the time axis, as in the catalog's `base_timestamp` bound;
- offsets: `from <= offset < to`.
Records below the log start offset (DeleteRecords) are never returned, nor are control records
(transaction markers). The isolation level is Kafka's consumer's (`isolation.level`): `read_uncommitted`,
the default as Kafka's and Spark's Kafka source's, returns the records of aborted transactions too;
`read_committed` drops them as a read_committed consumer does (`engine.cleaner.txn.AbortedTxns.covers`) and
returns nothing at or past the partition's last stable offset, the first offset of a transaction without
a marker (`engine.cleaner.txn.completed_transactions`). Those come from a scan of the batch headers (and
the control records) of each partition read, of the live segments whose catalog row does not say they hold
no transactional or control batch (`scanned_for_transactions`), only over their span of such batches, on
parallel threads: an archive holds no producer state, and its catalog stands in for Kafka's `.txnindex`.

How the work is cut:
1. prune: the catalog returns only live segments whose time and offset ranges can hold a match;
   segments wholly below the log start offset are dropped too;
2. seek: a segment read starts at the `.index` position of the greatest of the `.timeindex` floor
   offset of `from - 1`, the offset bound and the log start offset (records before it are all out of
   range);
3. split: a segment larger than the split size is cut at `.index` positions into byte ranges of
   about that size, each its own work item; its end is cut at the first `.index` position past the
   offset bound;
4. read: each work item is read with ranged GETs, decoding only the batches that can match, keeping
   the exact matches, and stopping once past the offset bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import SegmentRow, partition_log_start_offset, table_to_rows
from engine.cleaner.txn import AbortedTxns, Transactions, completed_transactions, control_types
from engine.format.batch import BatchHeaders, scan_batches
from engine.format.records import HEADERS_TYPE, RecordTable
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.log.timestamp_floor import has_timestamp
from engine.ops.catalog_table import Catalog
from engine.ops.stored_segment import StoredSegment
from kernel.errors import KlakeError
from kernel.times import format_time
from layouts.metering import Meter, add_counted, metered
from layouts.store.bound import Store

KAFKA_ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", HEADERS_TYPE)])
"""Spark's Kafka source columns as Arrow (timestamps in microseconds, as Spark's)."""
KAFKA_PARQUET_COLUMNS = {
    "use_dictionary": ["topic", "partition", "timestampType", "headers.list.element.key"],
    "write_statistics": ["partition", "offset", "timestamp", "timestampType"],
    "column_encoding": {"offset": "DELTA_BINARY_PACKED", "timestamp": "DELTA_BINARY_PACKED"}}
"""Parquet writer settings per column for these rows (`engine.ops.read_output.write_parquet`), measured on
100-byte records (benchmarks/history/2026-11-results-diary.md, issue 14): a dictionary for the columns constant per segment and for header
names only (on keys and values it is mostly a hash table that overflows and falls back to plain);
offsets and timestamps rise by small steps, so they are delta-encoded (~0 and ~2 bytes a record instead of
4-6 after snappy); min/max statistics, which readers use to skip row groups, for the integer columns only:
on keys, values and headers no reader prunes by them, and on the topic name they cost ~10% of a file's
encoding for a column that is constant in most files."""
DEFAULT_SPLIT_BYTES = 64 * 1024**2
DEFAULT_PACK_BYTES = 256 * 1024**2
"""Log bytes a task reads at most from several small segments (`pack_items`): the compiled decoder reads ~1 GB/s
per core, so 128 MiB is ~0.1-0.13 s of work, about the fixed cost of a wave of Python tasks in local Spark
(~0.05-0.1 s; benchmarks/history/2026-11-results-diary.md "Full-scan reads: tasks sized to the cores")."""
READ_WINDOW = 4 * 1024**2
TRANSACTION_SCAN_THREADS = 8
"""Segments a read_committed plan reads at once for their transactions (`partition_transactions`): a thread
mostly waits on its ranged GETs, so more threads than cores pay, and 8 bounds the driver's memory to 8
read windows."""
_TIMESTAMP = KAFKA_ARROW_SCHEMA.field("timestamp").type
_MS_LIMIT = np.iinfo(np.int64).max // 1000  # a ms timestamp beyond this has no microsecond value


class IsolationLevel(StrEnum):
    """Kafka's consumer `isolation.level` (and Spark's Kafka source's `kafka.isolation.level`)."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


@dataclass(frozen=True)
class ReadRange:
    """`from_ms <= timestamp < to_ms` and `from_offset <= offset < to_offset`; None leaves a side open.
    `floor` is the topic's smallest timestamp (`engine.log.topic_config.min_timestamp`: 0, or KIP-228's)."""

    from_ms: int | None = None
    to_ms: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    floor: int = field(kw_only=True)

    def __post_init__(self) -> None:
        for name in ("from_offset", "to_offset"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise KlakeError(f"read range: {name} must be >= 0, got {value}")
        for name in ("from_ms", "to_ms"):
            if (value := getattr(self, name)) is not None and not has_timestamp(value, self.floor):
                raise KlakeError(f"read range: {name} {format_time(value)} is before the topic's earliest "
                                 f"timestamp {format_time(self.floor)}"
                                 + ("; times before 1970 need klake.timestamps.allow.negative (KIP-228)"
                                    if self.floor == 0 else ""))

    @property
    def lowest_timestamp(self) -> int | None:
        """The lower time bound records must meet: any time bound excludes timestamps below the floor."""
        if self.from_ms is None and self.to_ms is None:
            return None
        return self.floor if self.from_ms is None else self.from_ms

    @property
    def empty(self) -> bool:
        return ((self.to_ms is not None and self.to_ms <= (self.floor if self.from_ms is None else self.from_ms))
                or (self.to_offset is not None and self.to_offset <= (self.from_offset or 0)))

    def mask(self, offsets: np.ndarray, timestamps: np.ndarray) -> np.ndarray:
        """Which records are in the range: the exact test every returned record passes."""
        keep = np.ones(offsets.shape[0], bool)
        if self.from_offset is not None:
            keep &= offsets >= self.from_offset
        if self.to_offset is not None:
            keep &= offsets < self.to_offset
        if self.lowest_timestamp is not None:
            keep &= timestamps >= self.lowest_timestamp
        if self.to_ms is not None:
            keep &= timestamps < self.to_ms
        return keep


@dataclass(frozen=True)
class WorkItem:
    """One Spark task: bytes [start, end) of one segment's `.log`; `start` None means "seek in the task".

    `bounds.from_offset` already includes the partition's log start offset, and, read_committed,
    `bounds.to_offset` its last stable offset; `aborted` (read_committed only): the partition's aborted
    transactions that overlap the segment, whose batches the read drops.
    """

    row: SegmentRow
    start: int | None
    end: int
    bounds: ReadRange
    aborted: AbortedTxns | None = None

    @property
    def log_bytes(self) -> int:
        """The log bytes the item reads at most: what packing and the choice of where to run weigh."""
        return self.end - (self.start or 0)


@dataclass
class ReadPlan:
    """What the driver decided: the work items and the pruning counts for the report."""

    items: list[WorkItem] = field(default_factory=list)
    live_segments: int = 0
    pruned_segments: int = 0
    split_segments: int = 0
    partitions: list[str] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)

    @property
    def segments_to_read(self) -> int:
        return len({(i.row.partition, i.row.segment_id) for i in self.items})


# --- planning (driver) ---------------------------------------------------------------------------


def plan_read(catalog: Catalog, topic: str, rng: ReadRange, store: Store,
              partitions: Callable[[int], bool] | None = None, split_bytes: int = DEFAULT_SPLIT_BYTES,
              index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
              isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> ReadPlan:
    """Prune by the catalog, then make work items; only segments above `split_bytes` cost index GETs here
    (read_committed: the partitions read are scanned for their transactions first)."""
    wanted = partitions or (lambda _: True)
    live = [r for r in table_to_rows(catalog.segments(topic=topic)) if wanted(r.partition)]
    plan = ReadPlan(live_segments=len(live), partitions=sorted({f"{topic}-{r.partition}" for r in live}))
    if rng.empty:
        plan.pruned_segments = len(live)
        return plan
    start_offsets = _log_start_offsets(live)
    with metered() as meter:
        candidates = _catalog_candidates(catalog, topic, rng, wanted, live)
        txns = ({} if isolation == IsolationLevel.READ_UNCOMMITTED else
                transactions_by_partition(live, store, rng.floor, {r.partition for r in candidates}))
        for row in candidates:
            bounds = replace(rng, from_offset=max(rng.from_offset or 0, start_offsets[row.partition]))
            aborted = None
            if row.partition in txns:
                bounds, aborted = _committed(bounds, row, txns[row.partition])
            if (row.next_offset <= (bounds.from_offset or 0) or row.size_bytes == 0 or bounds.empty
                    or (bounds.to_offset is not None and row.base_offset >= bounds.to_offset)):
                continue
            items = [replace(item, aborted=aborted)
                     for item in split_segment(row, bounds, store, split_bytes, index_interval_bytes)]
            plan.items += items
            plan.split_segments += len(items) > 1
    plan.requests.update(meter.requests)
    plan.bytes.update(meter.bytes)
    plan.pruned_segments = plan.live_segments - plan.segments_to_read
    return plan


def partition_transactions(rows: Sequence[SegmentRow], store: Store, floor: int
                           ) -> Transactions:
    """The transactions of a partition's live segments (`rows`), from the headers of their transactional and
    control batches and the records of the control ones (`segment_transactions`), of the segments that can
    hold any (`scanned_for_transactions`); `floor`: the topic's smallest timestamp (`ReadRange.floor`)."""
    return _completed(_scanned(sorted(scanned_for_transactions(rows), key=lambda r: r.base_offset), store, floor))


def transactions_by_partition(rows: Iterable[SegmentRow], store: Store, floor: int,
                              partitions: Iterable[int] | None = None) -> dict[int, Transactions]:
    """`partition_transactions` of each of `partitions` (default: every partition of `rows`, the live
    segments of one topic), the segments of all of them read in one pool of threads (`_scanned`)."""
    by_partition: dict[int, list[SegmentRow]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    wanted = sorted(by_partition if partitions is None else set(partitions))
    scanned = [r for p in wanted
               for r in sorted(scanned_for_transactions(by_partition.get(p, [])), key=lambda r: r.base_offset)]
    found: dict[int, list[tuple[BatchHeaders, np.ndarray]]] = {}
    for row, scan in zip(scanned, _scanned(scanned, store, floor), strict=True):
        found.setdefault(row.partition, []).append(scan)
    return {p: _completed(found.get(p, [])) for p in wanted}


def scanned_for_transactions(rows: Iterable[SegmentRow]) -> list[SegmentRow]:
    """The segments whose batches a partition's transactions need: all but those known to hold no
    transactional or control batch (`SegmentRow.txn_batch_count` 0; null is unknown, so scanned). The walk
    (`engine.cleaner.txn`) looks at no other batch, so leaving them out changes nothing: this is what
    Kafka's `.txnindex` (entries only where a transaction aborted) and producer snapshot spare a broker."""
    return [r for r in rows if r.txn_batch_count != 0]


def transaction_span(row: SegmentRow) -> tuple[int, int | None]:
    """The `.log` bytes [start, stop) holding every transactional and control batch of a segment, as its row
    records them (`SegmentRow.txn_start_position`); the whole log (0, None) where it does not. The walk
    needs no batch outside it: the others are neither transactional nor markers."""
    if row.txn_start_position is None or row.txn_end_position is None:
        return 0, None
    return row.txn_start_position, row.txn_end_position


def segment_transactions(row: SegmentRow, store: Store, floor: int) -> tuple[BatchHeaders, np.ndarray]:
    """The headers of a segment's transactional and control batches, read over `transaction_span`, and their
    control types (`engine.cleaner.txn.control_types`): all the walk needs of it, so a partition's other
    batches are not held while its segments are read."""
    start, stop = transaction_span(row)
    parts: list[BatchHeaders] = []
    kinds: list[np.ndarray] = []
    for data, headers in StoredSegment(row, store, read_window=READ_WINDOW, min_timestamp=floor).chunks_from(
            start, stop=stop):
        keep = np.flatnonzero(headers.is_transactional | headers.is_control)
        parts.append(headers.take(keep))
        kinds.append(control_types(data, headers, row.log_key)[keep])
    if not parts:
        return scan_batches(b"").headers, np.zeros(0, np.int16)
    return BatchHeaders.concat(parts), np.concatenate(kinds)


def _scanned(rows: Sequence[SegmentRow], store: Store, floor: int) -> list[tuple[BatchHeaders, np.ndarray]]:
    """`segment_transactions` of each of `rows`, in their order, read on up to `TRANSACTION_SCAN_THREADS`
    threads; their traffic is counted into the caller's meters (a thread does not share its context)."""
    if not rows:
        return []

    def scan(row: SegmentRow) -> tuple[tuple[BatchHeaders, np.ndarray], Meter]:
        with metered() as meter:
            return segment_transactions(row, store, floor), meter

    out = []
    with ThreadPoolExecutor(min(len(rows), TRANSACTION_SCAN_THREADS), thread_name_prefix="klake-txn") as pool:
        for found, meter in pool.map(scan, rows):
            add_counted(meter.requests, meter.bytes)
            out.append(found)
    return out


def _completed(scans: Sequence[tuple[BatchHeaders, np.ndarray]]) -> Transactions:
    """`completed_transactions` of a partition's scanned segments, in offset order."""
    if not scans:
        none = np.zeros(0, np.int64)
        return Transactions(AbortedTxns(none, none, none, none), None, None)
    return completed_transactions(BatchHeaders.concat([h for h, _ in scans]), np.concatenate([k for _, k in scans]))


def _committed(bounds: ReadRange, row: SegmentRow, txns: Transactions) -> tuple[ReadRange, AbortedTxns]:
    """A segment's read_committed bounds (ending at the last stable offset) and the aborted transactions
    that can hold its batches."""
    lso = txns.first_unstable_offset
    if lso is not None:
        bounds = replace(bounds, to_offset=lso if bounds.to_offset is None else min(bounds.to_offset, lso))
    return bounds, txns.aborted.overlapping(row.base_offset, row.next_offset)


def pack_items(items: Sequence[WorkItem], target_bytes: int = DEFAULT_PACK_BYTES, min_packs: int = 1
               ) -> list[list[WorkItem]]:
    """Work items grouped into tasks of at most about `target_bytes` of log bytes each, in plan order (so a
    task reads neighbouring segments of one partition): a task per small segment would cost more in Spark's
    scheduling than in reading. The task count is the smallest multiple of `min_packs` (the cores) whose
    even share of the bytes is within `target_bytes` (at most one task per item), so that no wave of tasks
    leaves a core idle; an item goes to the task where its middle byte falls in the even split, so each
    task is within one item of its share, and a task left empty beside a large item is dropped.
    """
    sizes = np.array([item.log_bytes for item in items], dtype=np.int64)
    total = int(sizes.sum())
    if not items:
        return []
    cores = max(min_packs, 1)
    count = min(len(items), -(-max(-(-total // max(target_bytes, 1)), 1) // cores) * cores)
    middles = np.cumsum(sizes) - sizes / 2
    slots = np.minimum((middles * count / max(total, 1)).astype(np.int64), count - 1)
    packs: dict[int, list[WorkItem]] = {}
    for item, slot in zip(items, slots.tolist(), strict=True):
        packs.setdefault(slot, []).append(item)
    return list(packs.values())


def _log_start_offsets(live: list[SegmentRow]) -> dict[int, int]:
    """Each partition's log start offset, from ALL its live rows (a pruned list could miss the raised one)."""
    by_partition: dict[int, list[SegmentRow]] = {}
    for row in live:
        by_partition.setdefault(row.partition, []).append(row)
    return {p: partition_log_start_offset(rows) or 0 for p, rows in by_partition.items()}


def _catalog_candidates(catalog: Catalog, topic: str, rng: ReadRange, wanted: Callable[[int], bool],
                        live: list[SegmentRow]) -> list[SegmentRow]:
    """Live segments that can hold a record in range; the catalog's bounds are inclusive, ours exclusive.
    Without any bound that is the catalog's query for `live` itself, so those rows are not read again."""
    bounds = {"from_ms": rng.lowest_timestamp, "to_ms": None if rng.to_ms is None else rng.to_ms - 1,
              "from_offset": rng.from_offset, "to_offset": None if rng.to_offset is None else rng.to_offset - 1}
    if all(bound is None for bound in bounds.values()):
        return live
    table = catalog.segments(topic=topic, **bounds, min_timestamp=rng.floor)
    return [r for r in table_to_rows(table) if wanted(r.partition)]


def split_segment(row: SegmentRow, bounds: ReadRange, store: Store, split_bytes: int,
                  index_interval_bytes: int) -> list[WorkItem]:
    """One item for a small segment (its task seeks); a big one is seeked and cut here at `.index` positions."""
    if row.size_bytes <= split_bytes:
        return [WorkItem(row, None, row.size_bytes, bounds)]
    segment = StoredSegment(row, store, index_interval_bytes, min_timestamp=bounds.floor)
    start = seek_position(segment, bounds)
    offset_index, _ = segment.indexes()
    end = _end_position(offset_index.offsets, offset_index.positions, bounds.to_offset, row.size_bytes)
    cuts = split_points(offset_index.positions, start, end, split_bytes)
    edges = [start, *cuts, end]
    return [WorkItem(row, a, b, bounds) for a, b in zip(edges, edges[1:], strict=False) if a < b]


def seek_position(segment: StoredSegment, bounds: ReadRange) -> int:
    """Where the first record in range can be: the `.index` floor of the greatest lower bound's offset.

    The `.timeindex` floor entry of `from - 1`, (T < from, O), was written when every record appended
    so far, so every record before O's batch, had a timestamp <= T: none of them is in range. (`from`
    itself would do for klake's own indexes, whose O is the first batch reaching T, but a broker's O
    may lie after that batch.) Reads no index when the segment starts inside the range anyway.
    """
    row = segment.row
    target = bounds.from_offset or 0
    by_time = bounds.lowest_timestamp is not None and row.base_timestamp < bounds.lowest_timestamp
    if target <= row.base_offset and not by_time:
        return 0
    offset_index, time_index = segment.indexes()
    if by_time:
        target = max(target, time_index.lookup(bounds.lowest_timestamp - 1)[1])
    return offset_index.lookup(target)[1]


def _end_position(offsets: np.ndarray, positions: np.ndarray, to_offset: int | None, size: int) -> int:
    """A byte position from which every batch is at or past `to_offset` (the segment size if none).

    Entry j is (an offset of the batch at positions[j], positions[j]); once offsets[j] >= to - 1,
    every batch from the next entry's position on holds only offsets >= to.
    """
    if to_offset is None:
        return size
    j = int(np.searchsorted(offsets, to_offset - 1, side="left"))
    return int(positions[j + 1]) if j + 1 < len(positions) else size


def split_points(positions: np.ndarray, start: int, end: int, split_bytes: int) -> list[int]:
    """Batch-aligned cut positions in (start, end): the first `.index` position at or after each
    multiple of `split_bytes` past `start`."""
    inside = positions[(positions > start) & (positions < end)].astype(np.int64)
    targets = np.arange(start + split_bytes, end, split_bytes, dtype=np.int64)
    if not inside.size or not targets.size:
        return []
    slots = np.searchsorted(inside, targets)
    return sorted({int(inside[s]) for s in slots.tolist() if s < inside.size})


# --- reading (tasks) -----------------------------------------------------------------------------


def read_item(item: WorkItem, store: Store, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
              ) -> Iterator[pa.RecordBatch]:
    """The records of one work item in range, as Arrow batches with `KAFKA_ARROW_SCHEMA`."""
    for records, batches, keep in _decoded_chunks(item, store, index_interval_bytes):
        selected = records if keep.all() else records.take(np.flatnonzero(keep))
        if len(selected):
            yield kafka_rows(selected, batches, item.row.topic, item.row.partition)


def count_item(item: WorkItem, store: Store,
               index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES) -> int:
    """How many records `read_item` returns, by the same reads, CRC checks, decoding and range test (a
    corrupt batch fails it alike), without building the rows: for a consumer that needs no column."""
    return sum(int(np.count_nonzero(keep)) for _, _, keep in _decoded_chunks(item, store, index_interval_bytes))


def _decoded_chunks(item: WorkItem, store: Store, index_interval_bytes: int
                    ) -> Iterator[tuple[RecordTable, BatchHeaders, np.ndarray]]:
    """Each chunk's candidate batches (`_candidate_batches`) decoded, their headers, and which records are in
    range (`ReadRange.mask`)."""
    segment = StoredSegment(item.row, store, index_interval_bytes, READ_WINDOW,
                            min_timestamp=item.bounds.floor)
    start, end = (item.start, item.end) if item.start is not None else _task_range(segment, item.bounds)
    # chunks_from reads up to row.size_bytes: a row ending at the range's end reads exactly the range
    ranged = StoredSegment(replace(item.row, size_bytes=end), store, index_interval_bytes, READ_WINDOW,
                           min_timestamp=item.bounds.floor)
    to_offset = item.bounds.to_offset
    for records, taken, headers in ranged.decoded_from(start, lambda h: _candidate_batches(h, item.bounds,
                                                                                           item.aborted)):
        yield records, taken, item.bounds.mask(records.offset, records.timestamp)
        if to_offset is not None and int(headers.last_offset[-1]) >= to_offset - 1:
            return


def _task_range(segment: StoredSegment, bounds: ReadRange) -> tuple[int, int]:
    """Seek, and end early when the offset range ends inside this segment (its indexes are small)."""
    start, end = seek_position(segment, bounds), segment.row.size_bytes
    if bounds.to_offset is not None and bounds.to_offset < segment.next_offset:
        offset_index, _ = segment.indexes()
        end = _end_position(offset_index.offsets, offset_index.positions, bounds.to_offset, end)
    return start, end


def _candidate_batches(headers: BatchHeaders, bounds: ReadRange, aborted: AbortedTxns | None) -> np.ndarray:
    """Batches that can hold a record in range: never control batches, nor (read_committed) batches of
    aborted transactions; v2 headers' max timestamp is trusted to skip decoding (as Kafka's own lookups
    do), legacy batches are always decoded."""
    last = headers.last_offset
    keep = ~headers.is_control & (last >= (bounds.from_offset or 0))
    if aborted is not None and len(aborted):
        keep &= ~aborted.covers(headers)
    if bounds.to_offset is not None:
        previous_last = np.concatenate(([np.iinfo(np.int64).min], last[:-1]))
        keep &= previous_last < bounds.to_offset - 1
    if bounds.lowest_timestamp is not None:
        keep &= (headers.magic != 2) | (headers.max_timestamp >= bounds.lowest_timestamp)
    return np.flatnonzero(keep)


def kafka_rows(records: RecordTable, batches: BatchHeaders, topic: str, partition: int) -> pa.RecordBatch:
    """Decoded records (and their batches' headers) as Spark Kafka source rows: timestamps in microseconds.
    Built from the decoder's buffers as they are (no intermediate table, no Python object per row)."""
    n = len(records)
    micros = np.clip(records.timestamp, -_MS_LIMIT, _MS_LIMIT)
    micros *= 1000
    (timestamp_type,) = records.per_record(batches.timestamp_type.astype(np.int32))
    return pa.RecordBatch.from_arrays([
        records.key, records.value, _repeated_string(topic, n), pa.array(np.full(n, partition, np.int32)),
        pa.array(records.offset), pa.TimestampArray.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(micros)]),
        pa.array(timestamp_type), _no_headers_as_null(records.headers)], schema=KAFKA_ARROW_SCHEMA)


def _no_headers_as_null(headers: pa.ListArray) -> pa.ListArray:
    """A record without headers has `headers` null, not an empty list, as Spark's Kafka source gives it
    (`KafkaRecordToRowConverter`: an array only when the record's headers iterator has a next), so that a
    query written against the Kafka source (`headers IS NULL`) reads the archive alike."""
    empty = pc.equal(pc.list_value_length(headers), 0)
    if not pc.any(empty).as_py():
        return headers
    offsets = headers.offsets  # of a slice they need not start at 0; with a mask Arrow needs them to
    return pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), headers.flatten(), type=headers.type,
                                    mask=empty)


def _repeated_string(text: str, n: int) -> pa.Array:
    """`text` n times as an Arrow string column: one buffer of the repeated bytes and its offsets (int32:
    a chunk's records times a topic name's <= 249 bytes stay far below 2 GiB)."""
    data = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


# --- Spark ---------------------------------------------------------------------------------------
