"""The segment catalog: a Delta table written and read with delta-rs (`deltalake`), never Delta jars.

It is the source of truth for which segments are live (only import and scrub list storage). Every
mutation is ONE Delta commit made with MERGE, so that concurrent writers on a partition conflict
(delta-rs raises `CommitFailedError`) instead of silently duplicating rows as blind appends would;
on a conflict the change is re-planned from a fresh read and retried. Reads go through delta-rs'
DataFusion engine, which prunes by the topic partition column and by per-file min/max statistics.

Keys are stored relative to the directory holding the catalog, as Delta Lake stores its files relative to
the table: the root, for a catalog at its default place `{root}/_catalog`. They are resolved on every read
(`layouts.root_keys`, issue 26), so rows in memory carry URIs, any reader resolves them alike, and a copied
root reads its own objects. A catalog written before keys were relative migrates on its first write
(`migrate_keys`, `engine.ops.catalog_keys`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Field, QueryBuilder, Transaction, WriterProperties
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from engine.catalog.changes import CatalogChange, PlannedChange, plan_change
from engine.catalog.schema import (
    ADDED_COLUMNS,
    CHECKED_COLUMNS,
    COLUMNS,
    EXTERNAL_COLUMN,
    KEY_COLUMNS,
    LIVE_STATES,
    PARTITION_COLUMNS,
    STORED_SCHEMA,
    CatalogRows,
    SegmentRef,
    SegmentRow,
    SegmentState,
    empty_rows,
    rows_to_table,
    table_to_rows,
)
from engine.ops.catalog_keys import MIGRATION_COLUMNS, migrated_keys
from kernel.errors import KlakeError
from kernel.names import TopicPartition, validate_partition, validate_topic
from layouts.root_keys import external, resolved_keys, stored_keys
from layouts.store import normalize_uri
from layouts.store.bound import Store

JOB_LEDGER_RETENTION_DAYS = 30
"""How long the job ledger remembers that a job id finished a partition: a re-run within this window
never repeats the work (Kafka's idempotent producer forgets a producer id after `producer.id.expiration.ms`
for the same reason: the state must not grow forever)."""
TABLE_CONFIGURATION = {"delta.checkpointInterval": "10",
                       "delta.setTransactionRetentionDuration": f"interval {JOB_LEDGER_RETENTION_DAYS} days"}
OPTIMIZE_ROW_GROUP_ROWS = 16_384
DEFAULT_VACUUM_RETENTION_HOURS = 168  # Delta's own default, 7 days
COMMIT_CONFLICT_BACKOFF = wait_exponential_jitter(multiplier=0.02, max=1.0, jitter=0.08)
"""The wait before re-planning a conflicting commit: 20 ms doubling up to 1 s, plus up to 80 ms of random
jitter so that writers racing for one partition do not collide again in lockstep."""
_ACTION = "_klake_action"
_NEW_STATE = "_klake_new_state"
_NULLABLE_STORED_SCHEMA = pa.schema([f.with_nullable(True) for f in STORED_SCHEMA])
_MERGE_SOURCE_SCHEMA = _NULLABLE_STORED_SCHEMA.append(pa.field(_ACTION, pa.string())).append(
    pa.field(_NEW_STATE, pa.string()))


class CatalogNotFoundError(KlakeError):
    """No catalog (Delta table) exists at the given URI."""


class CatalogConflictError(KlakeError):
    """Concurrent commits kept conflicting with this one after every retry."""


class AlreadyCommittedError(KlakeError):
    """Another attempt of the same job id committed a partition of this change first."""


def ledger_app_id(job_id: str, tp: TopicPartition) -> str:
    """The job ledger's key: Delta's transaction identifier (`txn` action, the protocol's own tool for
    idempotent writes) of one job id on one partition."""
    return f"klake:{job_id}:{tp}"


@dataclass(frozen=True)
class AppTransaction:
    """A transaction identifier to record with a commit: its version, and whether it must outlive the
    ledger's retention. A `permanent` one is written without `lastUpdated`, which delta-rs'
    `delta.setTransactionRetentionDuration` never expires (delta-kernel-rs keeps such entries forever;
    Delta Lake's Spark log replay would drop them, one more reason the catalog is delta-rs' alone):
    right for state bounded by the partitions (one entry each), never for per-job entries."""

    version: int
    permanent: bool = False


@dataclass
class CommitResult:
    """Outcome of one change: the table version it produced (None if nothing needed committing)."""

    version: int | None
    added: int = 0
    removed: int = 0
    transitioned: int = 0
    already_done: int = 0
    attempts: int = 1
    metrics: dict = field(default_factory=dict)


def default_root(catalog_uri: str) -> str:
    """The directory holding a catalog, which its keys are stored relative to: the root of a catalog at its
    default place, `{root}/_catalog` (a catalog elsewhere stores the keys of objects outside that directory
    absolute, and external)."""
    return normalize_uri(catalog_uri).rsplit("/", 1)[0]


def _quoted(column: str) -> str:
    return f'"{column}"'


_ORDER = f" ORDER BY topic, {_quoted('partition')}, base_offset, segment_id"


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@dataclass
class _KnownLedger:
    """What this handle looked up of one job id's ledger: at table `version`, the partitions `checked`, of
    which `done` were committed."""

    version: int
    checked: set[TopicPartition]
    done: set[TopicPartition]


@dataclass(frozen=True)
class _CommittedRows:
    """The checked rows of the partitions this handle's last commit changed, as of the version it produced
    (its read was the version just before: no other commit came between)."""

    version: int
    partitions: frozenset[tuple[str, int]]
    rows: CatalogRows


class Catalog:
    """A handle on the catalog table. Not shared between threads: open one per thread or process. `root`: the
    directory holding it, which its keys are relative to (`default_root`); `store`: bound at the table's URI."""

    def __init__(self, table: DeltaTable, store: Store, max_commit_attempts: int = 8) -> None:
        self._table = table
        self.store = store
        self.uri = store.root
        self.root = default_root(self.uri)
        self.max_commit_attempts = max_commit_attempts
        self._ledgers: dict[str, _KnownLedger] = {}
        self._committed: _CommittedRows | None = None
        self._keys_migrated = False

    # --- opening -------------------------------------------------------------------------------

    @staticmethod
    def _storage_options(store: Store) -> dict[str, str] | None:
        return store.delta_storage_options()

    @classmethod
    def create(cls, store: Store) -> Catalog:
        """Create the catalog at `store`'s root unless it exists (idempotent).

        Creation is a single put-if-absent of log version 0 (no commit retries, which would stack
        a second metadata commit on a racing creator's); losing that race opens the winner's table.
        """
        storage_options = cls._storage_options(store)
        try:
            table = DeltaTable.create(store.root, schema=STORED_SCHEMA, mode="ignore", partition_by=PARTITION_COLUMNS,
                                      name="klake_segments", configuration=TABLE_CONFIGURATION,
                                      storage_options=storage_options,
                                      commit_properties=CommitProperties(max_commit_retries=0))
        except CommitFailedError:
            return cls.open(store)
        return cls(table, store)

    @classmethod
    def open(cls, store: Store) -> Catalog:
        """Open an existing catalog at `store`'s root; `CatalogNotFoundError` if there is none."""
        try:
            table = DeltaTable(store.root, storage_options=cls._storage_options(store))
        except TableNotFoundError:
            raise CatalogNotFoundError(f"no catalog at {store.root}") from None
        return cls(table, store)

    def version(self) -> int:
        self._table.update_incremental()
        return self._table.version()

    def committed_partitions(self, job_id: str, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The partitions of `tps` whose work for `job_id` is in the catalog (the job ledger).

        The ledger is committed in the same Delta commit as the partition's rows, so a partition is
        either in both or in neither: a re-run with the same job id finishes exactly the others.
        """
        tps = set(tps)
        if not tps:
            return set()
        self._table.update_incremental()
        version = self._table.version()
        known = self._ledgers.get(job_id)
        if known is None or not tps <= known.checked or not self._untouched_by(job_id, known.version, version):
            recorded = self.transaction_versions([ledger_app_id(job_id, tp) for tp in tps])
            known = _KnownLedger(version, tps, {tp for tp in tps if ledger_app_id(job_id, tp) in recorded})
        self._ledgers[job_id] = _KnownLedger(version, known.checked, known.done)
        return known.done & tps

    def _untouched_by(self, job_id: str, since: int, until: int) -> bool:
        """Whether no commit after version `since` up to `until` is tagged with `job_id`: only such a
        commit writes that job's ledger entries (`_commit_properties`), so what was looked up at `since`
        still holds, and a commit checks the ledger with one read of the new commits' infos instead of
        one lookup per partition. A commit untagged, or not found in the history, counts as touching it."""
        if until == since:
            return True
        tags = {info.get("version"): info.get("klake.job_id", job_id) for info in self._table.history(until - since)}
        return all(tags.get(v, job_id) != job_id for v in range(since + 1, until + 1))

    def transaction_versions(self, app_ids: Iterable[str]) -> dict[str, int]:
        """The latest version Delta's transaction identifiers (`txn` actions) record for `app_ids`, for those
        that have one: progress committed atomically with the rows (`apply(app_transactions=...)`)."""
        app_ids = list(app_ids)
        if not app_ids:
            return {}
        self._table.update_incremental()
        found = {app_id: self._table.transaction_version(app_id) for app_id in app_ids}
        return {app_id: version for app_id, version in found.items() if version is not None}

    # --- reading -------------------------------------------------------------------------------

    def _read(self, sql: str) -> pa.Table:
        """The answer of `sql` over the table (`catalog`) as stored, at its latest version."""
        self._table.update_incremental()
        reader = QueryBuilder().register("catalog", self._table).execute(sql)
        return pa.RecordBatchReader.from_stream(reader).read_all()

    def _query(self, where: Sequence[str], order_by: str = "", columns: Sequence[str] = COLUMNS) -> pa.Table:
        """Rows' `columns` as `SegmentRow`s have them: keys resolved to URIs, columns the catalog does not
        have yet null."""
        self._table.update_incremental()
        absent = self._absent_columns()
        stored = [c for c in columns if c not in absent]
        table = self._read(f"SELECT {', '.join(_quoted(c) for c in stored)} FROM catalog"
                           f"{' WHERE ' + ' AND '.join(where) if where else ''}{order_by}")
        for column in (c for c in columns if c in absent):  # an older catalog's rows: unknown (null)
            table = table.append_column(column, pa.nulls(table.num_rows, STORED_SCHEMA.field(column).type))
        table = table.select(list(columns)).cast(empty_rows(columns).schema)
        for column in (c for c in KEY_COLUMNS if c in columns):
            at = table.schema.get_field_index(column)
            table = table.set_column(at, table.schema.field(at), resolved_keys(self.root, table[column]))
        return table

    def _absent_columns(self) -> set[str]:
        """The nullable columns added after this catalog was created (`ADDED_COLUMNS`) that its schema does
        not have yet."""
        names = {f.name for f in self._table.schema().fields}
        return {c for c in ADDED_COLUMNS if c not in names}

    def segments(self, topic: str | None = None, partition: int | None = None, from_ms: int | None = None,
                 to_ms: int | None = None, from_offset: int | None = None, to_offset: int | None = None,
                 states: Iterable[SegmentState] = LIVE_STATES, min_timestamp: int | None = None) -> pa.Table:
        """Rows in `states` (live by default), pruned by time and offset ranges, in (topic, partition, offset) order.

        A segment can hold a record in [from_ms, to_ms] only if `largest_timestamp >= from_ms` and
        `base_timestamp <= to_ms` (base_timestamp is the smallest timestamp >= the topic's `min_timestamp`,
        so this holds with out-of-order timestamps; a segment without timestamps, base_timestamp one below
        it, never matches a time bound); it overlaps offsets [from_offset, to_offset] if
        `next_offset > from_offset` and `base_offset <= to_offset`. A `to_ms` needs the topic's
        `min_timestamp` (no default: a forgotten floor would drop a KIP-228 topic's pre-1970 segments).
        """
        where = [f"state IN ({', '.join(_sql_string(str(s)) for s in states)})"]
        if topic is not None:
            where.append(f"topic = {_sql_string(validate_topic(topic))}")
        if partition is not None:
            where.append(f"{_quoted('partition')} = {validate_partition(partition)}")
        if from_ms is not None:
            where.append(f"largest_timestamp >= {int(from_ms)}")
        if to_ms is not None:
            if min_timestamp is None:
                raise ValueError("segments(to_ms=...) needs the topic's min_timestamp")
            where.append(f"base_timestamp <= {int(to_ms)} AND base_timestamp >= {int(min_timestamp)}")
        if from_offset is not None:
            where.append(f"next_offset > {int(from_offset)}")
        if to_offset is not None:
            where.append(f"base_offset <= {int(to_offset)}")
        return self._query(where, _ORDER)

    def live_segments(self, topic: str, partition: int) -> list[SegmentRow]:
        """The live segments (ACTIVE and ROLLED) of one partition in offset order."""
        return table_to_rows(self.segments(topic=topic, partition=partition))

    def all_rows(self) -> pa.Table:
        """Every row in every state, in (topic, partition, offset) order."""
        return self._query([], _ORDER)

    def rows_of(self, partitions: Iterable[tuple[str, int]]) -> CatalogRows:
        """Every row (any state) of the given partitions, by reference: their `CHECKED_COLUMNS` as Arrow.

        Read with only those columns; or, when the table is still at the version this handle's last
        commit produced and that commit covered the partitions, taken from what that commit left (the
        two-phase delete's second commit reads nothing)."""
        wanted = set(partitions)
        self._table.update_incremental()
        if (last := self._committed) is not None and last.version == self._table.version() \
                and wanted <= last.partitions:
            return last.rows.of_partitions(wanted)
        return CatalogRows(self.rows_table(wanted, columns=CHECKED_COLUMNS))

    def rows_table(self, partitions: Iterable[tuple[str, int]], states: Iterable[SegmentState] | None = None,
                   columns: Sequence[str] = COLUMNS) -> pa.Table:
        """The rows of the given partitions (in `states`, default any) as Arrow, in (topic, partition,
        offset) order; only `columns` (default all) are read, so a plan that needs no object key reads none."""
        wanted = sorted(set(partitions))
        if not wanted:
            return empty_rows(columns)
        topics = sorted({validate_topic(t) for t, _ in wanted})
        where = [f"topic IN ({', '.join(_sql_string(t) for t in topics)})"]
        if states is not None:
            where.append(f"state IN ({', '.join(_sql_string(str(s)) for s in states)})")
        table = self._query(where, columns=list(dict.fromkeys([*columns, "topic", "partition", "base_offset"])))
        table = table.combine_chunks()
        # order and select in numpy: DataFusion's ORDER BY of a million rows costs seconds
        topic = pc.dictionary_encode(table["topic"].chunk(0) if table.num_rows else pa.array([], pa.string()))
        rank = np.empty(len(topic.dictionary), np.int64)
        rank[pc.array_sort_indices(topic.dictionary).to_numpy()] = np.arange(len(topic.dictionary))
        keys = rank[topic.indices.to_numpy(zero_copy_only=False)] << 32 | _numbers(table, "partition")
        names = topic.dictionary.to_pylist()
        wanted_keys = [int(rank[names.index(t)]) << 32 | p for t, p in wanted if t in names]
        order = np.lexsort((_numbers(table, "base_offset"), keys))
        order = order[np.isin(keys[order], wanted_keys)]
        return table.take(order).select(list(columns))

    def partitions(self) -> list[TopicPartition]:
        """Every partition with at least one live segment."""
        where = f"state IN ({', '.join(_sql_string(str(s)) for s in LIVE_STATES)})"
        sql = f"SELECT DISTINCT topic, {_quoted('partition')} FROM catalog WHERE {where}"
        table = self._read(sql)
        pairs = zip(table["topic"].to_pylist(), table["partition"].to_pylist(), strict=True)
        return sorted(TopicPartition(t, p) for t, p in pairs)

    # --- writing -------------------------------------------------------------------------------

    def remove_deleted(self, refs: Sequence[SegmentRef], job_id: str = "") -> CommitResult:
        """Last step of a two-phase delete: drop DELETE_STARTED rows whose objects are gone."""
        change = CatalogChange(remove=tuple(refs), remove_states=frozenset({SegmentState.DELETE_STARTED}))
        return self.apply(change, operation="remove-deleted", job_id=job_id)

    def apply(self, change: CatalogChange, operation: str = "change", job_id: str = "",
              finished: Sequence[TopicPartition] = (),
              app_transactions: Mapping[str, AppTransaction] | None = None) -> CommitResult:
        """Plan `change` on a fresh read and commit it; on a commit conflict re-read, re-plan and retry.

        `finished`: the partitions whose work for `job_id` this commit completes; they enter the job
        ledger in the same commit (a ledger-only commit if the change is empty). If another attempt of
        the job committed one of them first, `AlreadyCommittedError`: the work must not be done twice.
        `app_transactions`: more transaction identifiers (app id -> version) recorded by the same commit,
        e.g. an operation's progress on a partition (`transaction_versions` reads them back).
        """
        app_transactions = dict(app_transactions or {})
        self.migrate_keys()
        return self._retrying(operation, lambda attempt: self._apply_once(change, operation, job_id, finished,
                                                                          app_transactions, attempt))

    def _retrying(self, operation: str, commit: Callable[[int], CommitResult]) -> CommitResult:
        """`commit(attempt number)` until it does not conflict, re-planned after a backoff, at most
        `max_commit_attempts` times."""
        retrying = Retrying(stop=stop_after_attempt(self.max_commit_attempts), wait=COMMIT_CONFLICT_BACKOFF,
                            retry=retry_if_exception_type(CommitFailedError))
        try:
            for attempt in retrying:
                with attempt:
                    return commit(attempt.retry_state.attempt_number)
        except RetryError as exc:
            raise CatalogConflictError(f"catalog {self.uri}: {operation} still conflicted after "
                                       f"{self.max_commit_attempts} attempts: {exc.last_attempt.exception()}") from None

    def migrate_keys(self) -> CommitResult:
        """Store the keys of rows written before keys were relative (`external` null) as this version does:
        relative where the object is the root's, absolute and external otherwise (the rule and why:
        `engine.ops.catalog_keys`). One commit, idempotent: a re-run, or a run after a crash, finds nothing
        left to migrate. Every write does it first (`apply`); a job before it plans (`engine.ops.run`), so
        that it plans on its own root's objects. Once per handle: no writer stores a legacy row."""
        if self._keys_migrated:
            return CommitResult(version=None)
        result = self._retrying("migrate-keys", self._migrate_keys_once)
        self._keys_migrated = True
        return result

    def _migrate_keys_once(self, attempt: int) -> CommitResult:
        """One attempt of `migrate_keys`: the newest columns, then one MERGE of every legacy row's keys."""
        self._table.update_incremental()
        self._add_absent_columns()
        legacy = self._read(f"SELECT {', '.join(_quoted(c) for c in MIGRATION_COLUMNS)} FROM catalog "
                            f"WHERE {EXTERNAL_COLUMN} IS NULL").cast(empty_rows(MIGRATION_COLUMNS).schema)
        if not legacy.num_rows:
            return CommitResult(version=None, attempts=attempt)
        source = migrated_keys(legacy, self.store.at(self.root))
        predicate = (f"t.topic = s.topic AND t.{_quoted('partition')} = s.{_quoted('partition')} "
                     f"AND t.segment_id = s.segment_id AND t.{EXTERNAL_COLUMN} IS NULL")
        updates = {_quoted(c): f"s.{_quoted(c)}" for c in (*KEY_COLUMNS, EXTERNAL_COLUMN)}
        metrics = self._table.merge(source, predicate=predicate, source_alias="s", target_alias="t",
                                    commit_properties=CommitProperties(custom_metadata={
                                        "klake.operation": "migrate-keys"})).when_matched_update(updates).execute()
        self._committed = None
        return CommitResult(version=self._table.version(), attempts=attempt, metrics=metrics)

    def _apply_once(self, change: CatalogChange, operation: str, job_id: str, finished: Sequence[TopicPartition],
                    app_transactions: Mapping[str, AppTransaction], attempt: int) -> CommitResult:
        """One attempt of `apply`: check the ledger, plan on a fresh read, commit (or raise the conflict)."""
        if twice := self.committed_partitions(job_id, finished):
            raise AlreadyCommittedError(f"job {job_id!r} already committed {', '.join(map(str, sorted(twice)))} "
                                        "in another attempt; this attempt's work for it is dropped")
        partitions = change.partitions()
        planned = plan_change(change, self.rows_of(partitions))
        read_at = self._table.version()
        done = planned.already_added + planned.already_removed + planned.already_transitioned
        if planned.is_empty and not finished and not app_transactions:
            return CommitResult(version=None, already_done=done, attempts=attempt)
        properties = self._commit_properties(operation, job_id, finished, app_transactions)
        self._committed = None
        metrics = self._commit(planned, partitions, properties)
        if self._table.version() == read_at + 1 and planned.after is not None:
            self._committed = _CommittedRows(read_at + 1, frozenset(partitions), planned.after)
        return CommitResult(version=self._table.version(), added=len(planned.add), removed=len(planned.remove),
                            transitioned=len(planned.transitions), already_done=done, attempts=attempt,
                            metrics=metrics)

    @staticmethod
    def _commit_properties(operation: str, job_id: str, finished: Sequence[TopicPartition],
                           app_transactions: Mapping[str, AppTransaction]) -> CommitProperties:
        now = time.time_ns() // 1_000_000
        ledger = [Transaction(ledger_app_id(job_id, tp), 1, now) for tp in finished]
        more = [Transaction(app_id, t.version, None if t.permanent else now) for app_id, t in app_transactions.items()]
        return CommitProperties(custom_metadata={"klake.operation": operation, "klake.job_id": job_id},
                                app_transactions=ledger + more)

    def _commit(self, planned: PlannedChange, partitions: set[tuple[str, int]], properties: CommitProperties) -> dict:
        """One Delta commit: a MERGE that deletes removed rows, updates states and inserts added rows; or,
        for an empty change, the job ledger's entries alone. A catalog created before the newest
        (nullable) columns gains them first, in a commit of its own (delta-rs' `add_columns`: a MERGE
        with `merge_schema` would also make every source column nullable in the table); a writer racing
        it conflicts and re-plans as on any conflict."""
        self._add_absent_columns()
        if planned.is_empty:
            self._table.create_write_transaction([], mode="append", schema=STORED_SCHEMA,
                                                 partition_by=PARTITION_COLUMNS, commit_properties=properties)
            self._table.update_incremental()
            return {}
        source = _merge_source(planned, self.root)
        topics = ", ".join(sorted(_sql_string(t) for t in {t for t, _ in partitions}))
        predicate = (f"t.topic = s.topic AND t.{_quoted('partition')} = s.{_quoted('partition')} "
                     f"AND t.segment_id = s.segment_id AND t.topic IN ({topics})")
        merger = self._table.merge(source, predicate=predicate, source_alias="s", target_alias="t",
                                   commit_properties=properties)
        if planned.remove:
            merger = merger.when_matched_delete(predicate=f"s.{_ACTION} = 'remove'")
        if planned.transitions:
            merger = merger.when_matched_update(updates={"state": f"s.{_NEW_STATE}"},
                                                predicate=f"s.{_ACTION} = 'transition'")
        if planned.add:
            merger = merger.when_not_matched_insert(
                updates={_quoted(c): f"s.{_quoted(c)}" for c in STORED_SCHEMA.names}, predicate=f"s.{_ACTION} = 'add'")
        return merger.execute()

    def _add_absent_columns(self) -> None:
        """An older catalog's schema (at the version read) gains the newest columns (`ADDED_COLUMNS`, nullable)
        in a commit of its own."""
        if absent := self._absent_columns():
            self._table.alter.add_columns([Field.from_arrow(STORED_SCHEMA.field(c)) for c in STORED_SCHEMA.names
                                           if c in absent],
                                          commit_properties=CommitProperties(custom_metadata={
                                              "klake.operation": "add-columns"}))

    # --- maintenance ---------------------------------------------------------------------------

    def create_checkpoint(self) -> int:
        """Write a checkpoint at the current version (delta-rs only does so every 10 commits here)."""
        self._table.update_incremental()
        self._table.create_checkpoint()
        return self._table.version()

    def optimize(self, z_order: bool = False) -> dict:
        """Compact small files (merges leave many), optionally Z-ordered by the time columns.

        Row groups are kept small (`OPTIMIZE_ROW_GROUP_ROWS`) so that min/max statistics still prune
        inside the larger files; plain compaction keeps the time clustering that commits create
        (benchmarks/history/2026-11-results-diary.md compares both).
        """
        self._table.update_incremental()
        properties = WriterProperties(max_row_group_size=OPTIMIZE_ROW_GROUP_ROWS)
        if z_order:
            return self._table.optimize.z_order(["largest_timestamp", "base_timestamp"],
                                                writer_properties=properties)
        return self._table.optimize.compact(writer_properties=properties)

    def vacuum(self, retention_hours: int = DEFAULT_VACUUM_RETENTION_HOURS, dry_run: bool = False) -> list[str]:
        """Delete data files no longer referenced by versions younger than `retention_hours`."""
        self._table.update_incremental()
        return self._table.vacuum(retention_hours=retention_hours, dry_run=dry_run,
                                  enforce_retention_duration=False)


def _numbers(table: pa.Table, column: str) -> np.ndarray:
    """An integer column of a one-chunk table as int64 numpy (no pandas on the way)."""
    values = table[column]
    return values.chunk(0).to_numpy().astype(np.int64) if values.num_chunks else np.zeros(0, np.int64)


def _merge_source(planned: PlannedChange, root: str) -> pa.Table:
    """The MERGE source: full rows to add (their keys as stored under `root`, `external` where one lies
    outside it), and key-only rows to remove or move, tagged by action."""
    added = rows_to_table(planned.add)
    added = added.append_column(EXTERNAL_COLUMN, external(root, *(added[c] for c in KEY_COLUMNS)))
    for column in KEY_COLUMNS:
        added = added.set_column(added.schema.get_field_index(column), column, stored_keys(root, added[column]))
    added = added.cast(_NULLABLE_STORED_SCHEMA)
    added = added.append_column(_ACTION, pa.array(["add"] * added.num_rows, pa.string()))
    added = added.append_column(_NEW_STATE, pa.nulls(added.num_rows, pa.string()))
    keyed = [(ref, "remove", None) for ref in planned.remove] + [
        (ref, "transition", str(state)) for ref, state in planned.transitions]
    given = {
        "topic": [ref.topic for ref, _, _ in keyed],
        "partition": [ref.partition for ref, _, _ in keyed],
        "segment_id": [ref.segment_id for ref, _, _ in keyed],
        _ACTION: [action for _, action, _ in keyed],
        _NEW_STATE: [state for _, _, state in keyed],
    }
    keyed_rows = pa.table([pa.array(given[f.name], f.type) if f.name in given else pa.nulls(len(keyed), f.type)
                           for f in _MERGE_SOURCE_SCHEMA], schema=_MERGE_SOURCE_SCHEMA)
    return pa.concat_tables([added, keyed_rows])
