"""The catalog's row: one segment version: its objects, offsets, counts, size, timestamps and state.

Times are int64 ms since the epoch. `base_timestamp` is the smallest record timestamp >= 0 in the
segment (-1 if none), so that `base_timestamp <= to` is a correct pruning bound even when timestamps
are out of order; `largest_timestamp >= from` is the other bound. The table is partitioned by topic.

Two columns carry partition state, so that it commits atomically with the segments it describes:
- `log_start_offset`: set (>= base_offset) on the row of the segment holding a log start offset that
  DeleteRecords raised inside it (KIP-107); -1 otherwise. The partition's log start offset is the
  larger of its first live segment's base offset and any live row's value (Kafka keeps it in
  `log-start-offset-checkpoint`).
- `cleaned`: the segment was written by the cleaner, so all of it lies below the cleaner checkpoint
  (Kafka's `cleaner-offset-checkpoint`): the first dirty offset is the next offset of the last
  segment of the leading run of cleaned segments.

Two columns carry the sidecars' byte lengths (`index_size_bytes`, `timeindex_size_bytes`; `size_bytes` is
the `.log`'s), so that a lookup's first ranged GET of a sidecar larger than a page is the page its
search needs, with no request for the size first (`engine.ops.stored_segment`). Rows of a catalog
written before these columns existed read them as null: unknown, and the size is found as before.
A third, `batchindex_size_bytes`, is the length of klake's own `.batchindex` beside the `.timeindex`
(`engine.index.batch_index`); null: the segment has none (it did not pay, or the row is older).

`txn_batch_count` is how many of the segment's batches are transactional or control batches (spec 1.6), and
`txn_start_position`/`txn_end_position` the `.log` bytes from the first of them to the end of the last:
what read_committed planning needs of a segment (`engine.ops.read.partition_transactions`). Kafka
answers it from the `.txnindex` and the producer state snapshot; an archive has neither, so a segment
without such batches is known to add no transaction and is not read, and of one with them only that
span is. Null: unknown (a row of an older catalog, or one built without its headers), and the whole
segment is read as before; the span is null too where the count is 0.

The key columns (`log_key`, `index_key`, `timeindex_key`) are stored relative to the root for objects
under it, and absolute for an object outside it (a segment imported in place), so that a copied root is
independent of its original (issue 26, `layouts.root_keys`); rows in memory always carry URIs. The stored
table has one more column, `external` (`STORED_SCHEMA`): true where a row references an object outside
the root, which no job deletes unless its run opts in; null on rows of a catalog written before keys
were relative, until its first write migrates them (`engine.ops.catalog_keys`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass
from enum import StrEnum

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FORMAT_VERSION = 1
PARTITION_COLUMNS = ["topic"]


class SegmentState(StrEnum):
    """Life of a segment row: ACTIVE (may still grow, as new versions), ROLLED, DELETE_STARTED.

    DELETE_STARTED rows have left the live log; their objects are being deleted (two-phase delete).
    """

    ACTIVE = "ACTIVE"
    ROLLED = "ROLLED"
    DELETE_STARTED = "DELETE_STARTED"


LIVE_STATES = (SegmentState.ACTIVE, SegmentState.ROLLED)
ALLOWED_TRANSITIONS = {
    SegmentState.ACTIVE: frozenset({SegmentState.ROLLED, SegmentState.DELETE_STARTED}),
    SegmentState.ROLLED: frozenset({SegmentState.DELETE_STARTED}),
    SegmentState.DELETE_STARTED: frozenset(),
}


class Layout(StrEnum):
    """Which layout the `.log` object of a row lives in."""

    OBJECT = "object"
    KAFKA = "kafka"
    KAFKA_RSM = "kafka-rsm"
    """A segment a broker's tiered storage uploaded (KIP-405), read in place: the broker owns it, so no job
    changes its partition (`engine.ops.tiered`)."""
    AIVEN = "aiven"
    """An upload of Aiven's tiered-storage plugin, read in place through its manifest's chunk index (`aiven+`
    keys, `layouts.store.aiven_file_io`); broker-owned like `KAFKA_RSM`."""


CATALOG_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("segment_id", pa.string(), nullable=False),
    pa.field("log_key", pa.string(), nullable=False),
    pa.field("index_key", pa.string(), nullable=False),
    pa.field("timeindex_key", pa.string(), nullable=False),
    pa.field("base_offset", pa.int64(), nullable=False),
    pa.field("last_offset", pa.int64(), nullable=False),
    pa.field("next_offset", pa.int64(), nullable=False),
    pa.field("record_count", pa.int64(), nullable=False),
    pa.field("batch_count", pa.int64(), nullable=False),
    pa.field("size_bytes", pa.int64(), nullable=False),
    pa.field("first_batch_timestamp", pa.int64(), nullable=False),
    pa.field("base_timestamp", pa.int64(), nullable=False),
    pa.field("largest_timestamp", pa.int64(), nullable=False),
    pa.field("offset_of_largest_timestamp", pa.int64(), nullable=False),
    pa.field("timestamp_type", pa.string(), nullable=False),
    pa.field("state", pa.string(), nullable=False),
    pa.field("created_at_ms", pa.int64(), nullable=False),
    pa.field("job_id", pa.string(), nullable=False),
    pa.field("format_version", pa.int32(), nullable=False),
    pa.field("layout", pa.string(), nullable=False),
    pa.field("magic", pa.int8(), nullable=False),
    pa.field("log_start_offset", pa.int64(), nullable=False),
    pa.field("cleaned", pa.bool_(), nullable=False),
    pa.field("index_size_bytes", pa.int64(), nullable=True),
    pa.field("timeindex_size_bytes", pa.int64(), nullable=True),
    pa.field("batchindex_size_bytes", pa.int64(), nullable=True),
    pa.field("txn_batch_count", pa.int64(), nullable=True),
    pa.field("txn_start_position", pa.int64(), nullable=True),
    pa.field("txn_end_position", pa.int64(), nullable=True),
])
SIDECAR_SIZE_COLUMNS = ("index_size_bytes", "timeindex_size_bytes", "batchindex_size_bytes")
"""Added after the first catalogs were written: nullable, and added to an older catalog's schema by its
next commit (`engine.ops.catalog_table`)."""
COLUMNS = tuple(CATALOG_SCHEMA.names)
KEY_COLUMNS = ("log_key", "index_key", "timeindex_key")
"""The object keys of a row: stored relative to the root where the object is under it."""
EXTERNAL_COLUMN = "external"
STORED_SCHEMA = CATALOG_SCHEMA.append(pa.field(EXTERNAL_COLUMN, pa.bool_(), nullable=True))
"""The catalog table's schema: the rows' columns and `external`, derived from the keys when a row is written
(not a field of `SegmentRow`: in memory it is `layouts.root_keys.within_root` of the row's URIs)."""
TXN_COLUMNS = ("txn_batch_count", "txn_start_position", "txn_end_position")
"""Added after the sidecar sizes: nullable, null read as unknown (the module docstring)."""
ADDED_COLUMNS = (*SIDECAR_SIZE_COLUMNS, *TXN_COLUMNS, EXTERNAL_COLUMN)
"""Every nullable column added after the first catalogs were written (`engine.ops.catalog_table`)."""


def empty_rows(columns: Sequence[str] = COLUMNS) -> pa.Table:
    """No rows, with the catalog's types for `columns`: a partition or root the catalog holds nothing of."""
    return pa.Table.from_batches([], pa.schema([CATALOG_SCHEMA.field(c) for c in columns]))  # imports no pandas


@dataclass(frozen=True)
class SegmentRef:
    """Identifies one segment version: (topic, partition, segment_id)."""

    topic: str
    partition: int
    segment_id: str


@dataclass(frozen=True)
class SegmentRow:
    """One catalog row. Field order and names are `CATALOG_SCHEMA`'s."""

    topic: str
    partition: int
    segment_id: str
    log_key: str
    index_key: str
    timeindex_key: str
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
    state: str
    created_at_ms: int
    job_id: str
    format_version: int
    layout: str
    magic: int
    log_start_offset: int = -1
    cleaned: bool = False
    index_size_bytes: int | None = None
    timeindex_size_bytes: int | None = None
    batchindex_size_bytes: int | None = None
    txn_batch_count: int | None = None
    txn_start_position: int | None = None
    txn_end_position: int | None = None

    @property
    def ref(self) -> SegmentRef:
        return SegmentRef(self.topic, self.partition, self.segment_id)


def rows_to_table(rows: Iterable[SegmentRow]) -> pa.Table:
    """An Arrow table with `CATALOG_SCHEMA` holding `rows`."""
    columns = list(zip(*(astuple(r) for r in rows), strict=True)) or [()] * len(COLUMNS)
    return pa.table([pa.array(col, type=f.type) for col, f in zip(columns, CATALOG_SCHEMA, strict=True)],
                    schema=CATALOG_SCHEMA)


def table_to_rows(table: pa.Table) -> list[SegmentRow]:
    """The rows of an Arrow table that has (at least) the catalog's columns."""
    return [SegmentRow(**{name: row[name] for name in COLUMNS}) for row in table.select(list(COLUMNS)).to_pylist()]


IDENTITY_COLUMNS = ("log_key", "size_bytes", "base_offset", "next_offset")
"""What makes a registered segment id the same object: a row added again under that id must have these
values, or the change conflicts (`engine.catalog.changes.plan_change`)."""
CHECKED_COLUMNS = ("topic", "partition", "segment_id", "state", *IDENTITY_COLUMNS)
"""The columns a change is checked against: the reference, the state (transitions, removals, liveness) and
the identity, whose offsets are also what the overlap check needs (spec 1.1). A commit reads only these."""


@dataclass(frozen=True)
class CheckedRow:
    """The `CHECKED_COLUMNS` of one catalog row: what a change's check, and its error messages, use of it."""

    topic: str
    partition: int
    segment_id: str
    state: str
    log_key: str
    size_bytes: int
    base_offset: int
    next_offset: int

    @property
    def ref(self) -> SegmentRef:
        return SegmentRef(self.topic, self.partition, self.segment_id)


class CatalogRows(Mapping[SegmentRef, CheckedRow]):
    """Catalog rows held as Arrow (their `CHECKED_COLUMNS`), read as a mapping by reference: a row object is
    built only for a row asked for, so checking a change against every row of its partitions
    (`engine.catalog.changes.plan_change`) costs a few columns, not one object per row of the partitions."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table.select(list(CHECKED_COLUMNS)).combine_chunks()

    @classmethod
    def of(cls, rows: Iterable[SegmentRow]) -> CatalogRows:
        return cls(rows_to_table(rows))

    def positions(self, refs: Sequence[SegmentRef]) -> np.ndarray:
        """Each reference's row index, -1 where it has none (one hash join; the last of equal rows wins,
        as in a dict built in row order)."""
        found = np.full(len(refs), -1, np.int64)
        if not refs or not self.table.num_rows:
            return found
        key = ["topic", "partition", "segment_id"]
        wanted = pa.table([pa.array([r.topic for r in refs], pa.string()), pa.array([r.partition for r in refs],
                           pa.int32()), pa.array([r.segment_id for r in refs], pa.string()),
                           pa.array(np.arange(len(refs)))], names=[*key, "_wanted"])
        have = self.table.select(key).append_column("_row", pa.array(np.arange(self.table.num_rows)))
        joined = wanted.join(have, keys=key, join_type="inner")
        at, row = joined["_wanted"].to_numpy(), joined["_row"].to_numpy()
        order = np.argsort(row, kind="stable")
        found[at[order]] = row[order]
        return found

    def of_partitions(self, partitions: Iterable[tuple[str, int]]) -> CatalogRows:
        """The rows of `partitions` only, in the order they come."""
        wanted = set(partitions)
        topic = pc.dictionary_encode(self.table["topic"].chunk(0) if self.table.num_rows else pa.array([], pa.string()))
        names = topic.dictionary.to_pylist()
        keys = topic.indices.to_numpy(zero_copy_only=False).astype(np.int64) << 32 | self.table[
            "partition"].to_numpy().astype(np.int64)
        wanted_keys = [names.index(t) << 32 | p for t, p in wanted if t in names]
        return CatalogRows(self.table.filter(pa.array(np.isin(keys, wanted_keys))))

    def row(self, i: int) -> CheckedRow:
        return CheckedRow(**self.table.slice(int(i), 1).to_pylist()[0])

    def __getitem__(self, ref: SegmentRef) -> CheckedRow:
        i = self.positions([ref])[0]
        if i < 0:
            raise KeyError(ref)
        return self.row(i)

    def __iter__(self) -> Iterator[SegmentRef]:
        columns = (self.table[c].to_pylist() for c in ("topic", "partition", "segment_id"))
        return (SegmentRef(*key) for key in zip(*columns, strict=True))

    def __len__(self) -> int:
        return self.table.num_rows


def owned(table: pa.Table) -> pa.Table:
    """A copy of a (sliced) table holding only its own rows: a pickled slice (a Spark task's input)
    otherwise carries the whole buffers it was cut from."""
    return table.take(np.arange(table.num_rows))


def log_start_offsets(base_offset: np.ndarray, log_start_offset: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The log start offset of every partition from the columns of its live rows, grouped by partition in
    offset order (`starts`: each partition's first row): the larger of its first base offset and any
    row's `log_start_offset` (KIP-107's DeleteRecords raises it inside a segment)."""
    return np.maximum(base_offset[starts], np.maximum.reduceat(log_start_offset, starts))


def partition_log_start_offset(rows: Iterable[SegmentRow]) -> int | None:
    """The log start offset of a partition from its live rows (offset order); None without rows."""
    rows = list(rows)
    if not rows:
        return None
    columns = np.array([(r.base_offset, r.log_start_offset) for r in rows], np.int64)
    return int(log_start_offsets(columns[:, 0], columns[:, 1], np.zeros(1, np.int64))[0])


def first_dirty_offsets(base_offset: np.ndarray, next_offset: np.ndarray, cleaned: np.ndarray,
                        log_start: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The cleaner checkpoint of every partition from the columns of its live rows, grouped by partition in
    offset order (`starts`/`ends`, each partition non-empty; `log_start`: `log_start_offsets`): the next
    offset of the last segment of its leading run of cleaned segments (its first base offset without
    one), never below its log start offset."""
    dirty_rows = np.r_[np.flatnonzero(~cleaned), len(cleaned)]
    first_dirty_row = np.minimum(dirty_rows[np.searchsorted(dirty_rows, starts)], ends)
    dirty = np.where(first_dirty_row > starts, next_offset[np.maximum(first_dirty_row - 1, 0)], base_offset[starts])
    return np.maximum(dirty, log_start)


def first_dirty_offset(rows: Iterable[SegmentRow]) -> int | None:
    """The cleaner checkpoint of a partition: the end of its leading run of cleaned segments."""
    rows = list(rows)
    if not rows:
        return None
    columns = np.array([(r.base_offset, r.next_offset, r.log_start_offset, r.cleaned) for r in rows], np.int64)
    starts, ends = np.zeros(1, np.int64), np.array([len(rows)], np.int64)
    start = log_start_offsets(columns[:, 0], columns[:, 2], starts)
    return int(first_dirty_offsets(columns[:, 0], columns[:, 1], columns[:, 3].astype(bool), start, starts, ends)[0])
