"""One log operation over many partitions, committed to the catalog once (README, "The jobs").

The driver side of every mutating job, with the per-partition work pluggable (`execute`): serially in
this process for the engine's single-partition functions, one Spark task per partition in `jobs/`.

1. take every partition's lease (put-if-absent object); a partition whose lease another job holds
   fails alone, the others go on; a lease of the same job id (a dead attempt) is taken over at once, and
   so is a spent one: its job committed the partition and has no work after its commit (`lease_is_spent`);
2. read every partition's catalog rows once; finish two-phase deletes an earlier crash left
   (DELETE_STARTED rows), in one bulk delete and one commit;
3. skip the partitions the job ledger says this job id already finished (an earlier attempt committed
   them): a job id names a unit of work per partition, as a producer id and sequence do in Kafka's
   idempotent producer, so a re-run finishes exactly the partitions that are missing;
4. a job that plans on the driver (`planner`: retention, roll, compaction selection) plans every
   partition at once over the live rows as one Arrow table, and each task gets its partition's slice
   of the plan and of the rows, as Arrow (no row objects are built or pickled);
5. `execute` runs the operation's `prepare` on each partition's live rows: it may write new objects,
   always under fresh segment ids, so work that never commits leaves only unreferenced objects (the
   scrub job removes them) and a re-run starts again from the catalog;
6. every partition's `CatalogChange` goes into ONE commit tagged with the job id, with the ledger
   entries of the partitions it finishes and the transaction identifiers their steps carry (an
   operation's own progress, read back into the next run's `PartitionInput.app_versions`);
7. the segments that commit retired are deleted (one DeleteObjects per 1,000 keys, several requests or
   local unlinks at once: `Store.delete_many`) and their rows removed (one more commit, checked
   against the rows the first one left when no other commit came between); then the leases are released.
   This is a run's only work after its commit, and only an operation that declares it
   (`deletes_after_commit`: retention, compaction, truncate, delete-records) may retire segments.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import (
    COLUMNS,
    LIVE_STATES,
    SegmentRow,
    SegmentState,
    empty_rows,
    owned,
    table_to_rows,
)
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import AlreadyCommittedError, AppTransaction, Catalog, CommitResult
from engine.ops.deletion import DELETE_COLUMNS, Cleanup, delete_and_forget
from engine.ops.lease import (
    DEFAULT_LEASE_TTL_MS,
    Lease,
    LeaseHeldError,
    LeaseLostError,
    acquire_lease,
    check_lease,
    release_lease,
)
from kernel.errors import KlakeError
from kernel.names import TopicPartition
from layouts.metering import metered
from layouts.store.bound import Store

PlanT = TypeVar("PlanT")
PlanT_co = TypeVar("PlanT_co", covariant=True)


@dataclass(frozen=True)
class PartitionInput(Generic[PlanT]):
    """What a partition's task needs: its live rows (base-offset order) and its topic's settings; for a
    job that plans on the driver (`Planner`), `rows` is empty and the task gets Arrow instead: `segments`,
    its live catalog rows, and `plan`, its slice of the driver's plan (None: no live segment). With them,
    `app_versions`: the versions the catalog records for the transaction identifiers the operation asked
    for (`app_ids`), read under the partition's lease with its rows."""

    tp: TopicPartition
    rows: tuple[SegmentRow, ...]
    config: TopicConfig
    segments: pa.Table | None = None
    plan: PlanT | None = None
    app_versions: Mapping[str, int] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        """Shipped to a task with its own rows only (Arrow), not the whole table they were sliced from."""
        return {**self.__dict__, "segments": None if self.segments is None else owned(self.segments)}


class DriverPlan(Protocol[PlanT_co]):
    """A plan of many partitions made on the driver in one vectorised pass, generic over each partition's
    slice of it (`RetentionPlan`: `PartitionRetention`, `RollPlan`: `PartitionRoll`, `CompactionPlan`:
    `PartitionCompaction`), which its task gets as `PartitionInput.plan`."""

    def partition(self, tp: TopicPartition) -> PlanT_co: ...


class Planner(Protocol[PlanT_co]):
    """Plans every partition at once on the driver, over their live rows in (topic, partition, offset)
    order; `columns` are the catalog columns it reads (a run that changes nothing reads only those), and
    `task_columns` those its tasks need of their rows when the run changes data (with the two-phase
    delete's, `DELETE_COLUMNS`, they are all a run that changes data reads)."""

    columns: Sequence[str]
    task_columns: Sequence[str]

    def __call__(self, live: pa.Table, configs: Mapping[TopicPartition, TopicConfig]) -> DriverPlan[PlanT_co]: ...


class StepOutcome(Protocol):
    """What every job's per-partition outcome offers (`AppendOutcome`, `RetentionOutcome`, ...): its
    JSON form for the run report."""

    def to_dict(self) -> dict[str, Any]: ...


OutcomeT = TypeVar("OutcomeT", bound=StepOutcome)


@dataclass
class PartitionStep(Generic[OutcomeT]):
    """What `prepare` did for one partition: its job's typed outcome, the catalog change to commit,
    the rows that change moves to DELETE_STARTED (their objects are deleted after the commit), and
    transaction identifiers (app id -> version) that commit records, atomically with the change."""

    outcome: OutcomeT
    change: CatalogChange = field(default_factory=CatalogChange)
    retire: pa.Table | None = None  # catalog rows (Arrow): one object per segment neither shipped nor kept
    app_transactions: Mapping[str, AppTransaction] = field(default_factory=dict)


Prepare = Callable[[PartitionInput[Any]], PartitionStep[OutcomeT]]


@dataclass
class PartitionResult(Generic[OutcomeT]):
    """A partition's step, or why it failed; with the object-store traffic its task made."""

    tp: TopicPartition
    step: PartitionStep[OutcomeT] | None = None
    error: str | None = None
    requests: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def run_prepare(prepare: Prepare[OutcomeT], item: PartitionInput[Any], catch: bool = True,
                ) -> PartitionResult[OutcomeT]:
    """Run `prepare` on one partition, measuring its requests and bytes; an error becomes the result
    (with the exception's last frames) unless `catch` is False."""
    started = time.monotonic()
    with metered() as meter:
        try:
            step = prepare(item)
            error = None
        except Exception as exc:
            if not catch:
                raise
            step, error = None, _describe(exc)
    return PartitionResult(item.tp, step, error, dict(meter.requests), dict(meter.bytes), time.monotonic() - started)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KlakeError | OSError | ValueError):
        return f"{type(exc).__name__}: {exc}"
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} (at {os.path.basename(where.filename)}:{where.lineno})"


Execute = Callable[[Sequence[PartitionInput[Any]]], list[PartitionResult[OutcomeT]]]


def serial_execute(prepare: Prepare[OutcomeT], catch: bool = True) -> Execute[OutcomeT]:
    """Run the partitions one after another in this process."""
    return lambda items: [run_prepare(prepare, item, catch) for item in items]


@dataclass
class JobRun(Generic[OutcomeT]):
    """Everything a run did, for its report; `failures` maps "topic-partition" to the reason;
    `committed_earlier` holds the partitions an earlier attempt of the job id had finished."""

    job_id: str
    operation: str
    results: list[PartitionResult[OutcomeT]] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    cleanup: Cleanup = field(default_factory=Cleanup)
    finished_from_earlier_run: dict[str, int] = field(default_factory=dict)
    commit: CommitResult | None = None
    committed_earlier: list[TopicPartition] = field(default_factory=list)
    spent_leases: dict[str, str] = field(default_factory=dict)
    """The spent leases the run took over ("topic-partition" -> their job id; `lease_is_spent`)."""
    plan: DriverPlan[Any] | None = None  # (a job's outcome type, not its plan's, is JobRun's parameter)
    requests: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)

    def outcome(self, tp: TopicPartition) -> OutcomeT:
        """The outcome of `tp`'s step; raises its failure."""
        if str(tp) in self.failures:
            raise KlakeError(f"{tp}: {self.failures[str(tp)]}")
        return next(r.step.outcome for r in self.results if r.tp == tp and r.step is not None)


def lease_owner() -> str:
    return f"klake@{socket.gethostname()}:{os.getpid()}"


def lease_is_spent(lease: Lease, catalog: Catalog) -> bool:
    """The spent-lease rule: another job's unexpired `lease` holds nothing, and any job may take it over at
    once, when the job ledger shows its job committed the partition and its operation declared (in the lease)
    that it does no work after its commit.

    The ledger entry is committed with the partition's rows (`Catalog.committed_partitions`), and after its
    commit a run does only step 7, the deletes of what it retired, then releases. An operation that retires
    nothing (append, archive, import, mirror, roll, recover) therefore has nothing left under its lease once
    the ledger shows the commit, whether it was killed before its release (the case this rule is for: an
    archive killed there blocked the next run, another job id since it starts where that commit ended, for
    the lease's hour) or is releasing now (its release then finds the lease taken and leaves it). An operation
    that retires (`deletes_after_commit`) keeps its lease after its commit until its own re-run (same job id)
    or the TTL: its run may still be deleting, and a taker would finish the same DELETE_STARTED rows (step 2)
    under its own `--allow-external-deletes` choice instead of the holder's (removing the rows of objects
    outside the root while leaving the objects, which scrub, listing the root only, never finds again) and
    report the holder's deletes as its own. Import and mirror keep no ledger (`ledger=False`): the rule never
    frees their leases."""
    return (not lease.deletes_after_commit
            and bool(catalog.committed_partitions(lease.job_id, [TopicPartition(lease.topic, lease.partition)])))


class _Leases:
    """The leases a run holds, released on exit; a partition whose lease is held elsewhere is a failure,
    unless that lease is spent (`lease_is_spent`)."""

    def __init__(self, store: Store, catalog: Catalog | None, job_id: str, ttl_ms: int, strict: bool,
                 deletes_after_commit: bool) -> None:
        self.store, self.catalog, self.job_id, self.ttl_ms, self.strict = store, catalog, job_id, ttl_ms, strict
        self.deletes_after_commit = deletes_after_commit
        self.held: dict[TopicPartition, Lease] = {}
        self.spent: dict[TopicPartition, Lease] = {}

    def take(self, tps: Sequence[TopicPartition], run: JobRun[Any], stack: ExitStack) -> list[TopicPartition]:
        owner = lease_owner()
        for tp in tps:
            try:
                lease = acquire_lease(self.store, tp, owner, self.job_id, self.ttl_ms,
                                      deletes_after_commit=self.deletes_after_commit,
                                      spent=self._is_spent)
            except LeaseHeldError as exc:
                if self.strict:
                    raise
                run.failures[str(tp)] = str(exc)
                continue
            if tp in self.spent:
                run.spent_leases[str(tp)] = self.spent[tp].job_id
            self.held[tp] = lease
            stack.callback(self._release, lease)
        return list(self.held)

    def _is_spent(self, lease: Lease) -> bool:
        """`lease_is_spent`, remembering the spent leases found (the run reports those it took over)."""
        if self.catalog is None or not lease_is_spent(lease, self.catalog):
            return False
        self.spent[TopicPartition(lease.topic, lease.partition)] = lease
        return True

    def _release(self, lease: Lease) -> None:
        """Release at the end of the run; a lease lost meanwhile is the taker's now, and its partition
        is already reported as not committed."""
        with suppress(LeaseLostError):
            release_lease(self.store, lease)

    def still_ours(self, tp: TopicPartition) -> str | None:
        try:
            check_lease(self.store, self.held[tp])
        except KlakeError as exc:
            return str(exc)
        return None


def run_partition_job(catalog: Catalog | None, store: Store, configs: Mapping[TopicPartition, TopicConfig],
                      execute: Execute[OutcomeT], *, operation: str, job_id: str,
                      mutate: bool = True, strict: bool = False, ledger: bool = True, ledger_idle: bool = False,
                      lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS, planner: Planner[Any] | None = None,
                      app_ids: Callable[[TopicPartition], Sequence[str]] | None = None,
                      allow_external_deletes: bool = False, deletes_after_commit: bool = False) -> JobRun[OutcomeT]:
    """Run one operation over the partitions in `configs` of the root `store` (see the module docstring).

    `mutate=False` (dry runs, read-only checks) takes no lease and commits nothing; it may run without a
    catalog (`catalog=None`: a root that has none yet, every partition empty); it skips the partitions the
    ledger says the job id finished, as the run would, so a dry run says what the run would do. `strict` raises the
    first partition failure instead of recording it (the engine's single-partition functions).
    `ledger_idle` (appends): a partition whose step changed nothing (every record rejected) is finished
    all the same, so a re-run does not redo it; other jobs enter only the partitions they changed, since
    their steps are idempotent and the ledger must not grow with every idle run. `ledger=False` (import)
    neither skips nor enters partitions: a job idempotent by content that must redo its work whenever its
    source has grown. `planner` plans every partition on the driver over the live rows as Arrow (step 4).
    `app_ids`: the transaction identifiers whose recorded versions each partition's task gets
    (`PartitionInput.app_versions`), read after its lease is taken. `allow_external_deletes`: the run's
    opt-in to delete retired objects outside the root too (`engine.ops.deletion`). A run that commits
    migrates a catalog written before keys were relative first (`Catalog.migrate_keys`), so that it plans
    on the root's own objects. `deletes_after_commit`: the operation's declaration that its steps may retire
    segments, whose objects the run deletes after its commit (step 7); it is written into the run's leases
    (`lease_is_spent`), and a step that retires under an operation that did not declare it fails the run
    before its commit.
    """
    if catalog is None and mutate:
        raise ValueError("a run that commits needs a catalog")
    run: JobRun[OutcomeT] = JobRun(job_id, operation)
    if mutate:
        catalog.migrate_keys()
    with ExitStack() as stack:
        leases = _Leases(store, catalog, job_id, lease_ttl_ms, strict, deletes_after_commit)
        with _driver_io(run):
            tps = leases.take(list(configs), run, stack) if mutate else list(configs)
            columns = COLUMNS if planner is None else (
                list(dict.fromkeys([*planner.columns, *planner.task_columns, *DELETE_COLUMNS])) if mutate
                else planner.columns)
            if catalog is None:
                live = empty_rows(columns)
            elif mutate:  # one read under the leases: the earlier run's unfinished deletes and the live rows
                live = _live_after_earlier_deletes(catalog, store, tps, columns, run, allow_external_deletes)
                if ledger and (done := catalog.committed_partitions(job_id, tps)):
                    run.committed_earlier = sorted(done)
                    tps = [tp for tp in tps if tp not in done]
            else:
                live = catalog.rows_table([(tp.topic, tp.partition) for tp in tps], LIVE_STATES, columns)
                if ledger and (done := catalog.committed_partitions(job_id, tps)):  # a dry run skips them too
                    run.committed_earlier = sorted(done)
                    tps = [tp for tp in tps if tp not in done]
            wanted_ids = {tp: list(app_ids(tp)) if app_ids else [] for tp in tps}
            recorded = {} if catalog is None else catalog.transaction_versions(
                app_id for ids in wanted_ids.values() for app_id in ids)
        versions = {tp: {app_id: recorded[app_id] for app_id in wanted_ids[tp] if app_id in recorded} for tp in tps}
        if planner is None:
            rows = _rows_by_partition(live)
            items = [PartitionInput(tp, tuple(rows.get(tp, [])), configs[tp], app_versions=versions[tp])
                     for tp in tps]
        else:
            slices = _partition_slices(live)
            wanted = [tp for tp in tps if tp in slices]
            live = pa.concat_tables([slices[tp] for tp in wanted]) if wanted else live.slice(0, 0)
            run.plan = planner(live, {tp: configs[tp] for tp in wanted})
            items = [PartitionInput(tp, (), configs[tp], slices.get(tp, live.slice(0, 0)),
                                    run.plan.partition(tp) if tp in slices else None, versions[tp]) for tp in tps]
        run.results = execute(items)
        for result in run.results:
            if result.error is not None:
                if strict:
                    raise KlakeError(f"{result.tp}: {result.error}")
                run.failures[str(result.tp)] = result.error
            run.requests.update(result.requests)
            run.bytes.update(result.bytes)
        if mutate:
            with _driver_io(run):
                _commit(catalog, store, run, leases, ledger, ledger_idle, allow_external_deletes, deletes_after_commit)
    return run


def run_single_partition(catalog: Catalog, store: Store, tp: TopicPartition, config: TopicConfig, prepare: Prepare[OutcomeT],
                         *, operation: str, job_id: str, mutate: bool = True,
                         ledger_idle: bool = False, planner: Planner[Any] | None = None,
                         allow_external_deletes: bool = False, deletes_after_commit: bool = False) -> JobRun[OutcomeT]:
    """The engine's one single-partition entry (library use and tests): the same protocol as a job over
    many partitions, run in this process, raising the partition's failure instead of reporting it."""
    return run_partition_job(catalog, store, {tp: config}, serial_execute(prepare, catch=False), operation=operation,
                             job_id=job_id, mutate=mutate, strict=True, ledger_idle=ledger_idle, planner=planner,
                             allow_external_deletes=allow_external_deletes, deletes_after_commit=deletes_after_commit)


@contextmanager
def _driver_io(run: JobRun[Any]) -> Iterator[None]:
    """Count the driver's own object-store traffic into `run` (the tasks report theirs in their results,
    so the execution itself is left out: serial tasks run in this process)."""
    with metered() as meter:
        yield
    run.requests.update(meter.requests)
    run.bytes.update(meter.bytes)


def rows_by_partition(catalog: Catalog, tps: Sequence[TopicPartition]) -> dict[TopicPartition, list[SegmentRow]]:
    """Every row of `tps` (any state), per partition in base-offset order, from one catalog read."""
    return _rows_by_partition(catalog.rows_table([(tp.topic, tp.partition) for tp in tps]))


def _rows_by_partition(table: pa.Table) -> dict[TopicPartition, list[SegmentRow]]:
    """The rows of a table in (topic, partition, offset) order as row objects, per partition."""
    by_tp: dict[TopicPartition, list[SegmentRow]] = {}
    for row in table_to_rows(table):
        by_tp.setdefault(TopicPartition(row.topic, row.partition), []).append(row)
    return by_tp


def _partition_slices(live: pa.Table) -> dict[TopicPartition, pa.Table]:
    """Each partition's rows of a table in (topic, partition, offset) order, as zero-copy slices."""
    if not live.num_rows:
        return {}
    topic = pc.dictionary_encode(live["topic"].combine_chunks()).indices.to_numpy().astype(np.int64)
    key = (topic << 32) | live["partition"].combine_chunks().to_numpy().astype(np.int64)
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], live.num_rows]
    topics, partitions = live["topic"].take(starts).to_pylist(), live["partition"].take(starts).to_pylist()
    return {TopicPartition(t, p): live.slice(int(a), int(b - a))
            for t, p, a, b in zip(topics, partitions, starts, ends, strict=True)}


def _live_after_earlier_deletes(catalog: Catalog, store: Store, tps: Sequence[TopicPartition], columns: Sequence[str],
                                run: JobRun[Any], allow_external: bool) -> pa.Table:
    """Read every row of `tps`, finish the deletes an earlier run left (DELETE_STARTED rows) and return the
    live rows: only they outlive this read (the table of every row is a copy the run must not keep)."""
    every = catalog.rows_table([(tp.topic, tp.partition) for tp in tps], columns=columns)
    state = every["state"]
    _finish_earlier_deletes(catalog, store, every.filter(pc.equal(state, str(SegmentState.DELETE_STARTED))), run,
                            allow_external)
    return every.filter(pc.is_in(state, pa.array([str(s) for s in LIVE_STATES])))


def _finish_earlier_deletes(catalog: Catalog, store: Store, table: pa.Table, run: JobRun[Any],
                            allow_external: bool) -> None:
    if table.num_rows:
        delete_and_forget(catalog, store, table, run.job_id, run.cleanup, allow_external)
        counts = table.group_by(["topic", "partition"], use_threads=False).aggregate([("segment_id", "count")])
        run.finished_from_earlier_run = {
            f"{t}-{p}": n for t, p, n in zip(*(counts[c].to_pylist() for c in ("topic", "partition", "segment_id_count")),
                                            strict=True)}


def _commit(catalog: Catalog, store: Store, run: JobRun[Any], leases: _Leases, ledger: bool, ledger_idle: bool,
            allow_external: bool, deletes_after_commit: bool) -> None:
    """One commit for every partition that prepared a change (or transaction identifiers) and still holds
    its lease, entering the partitions it finishes in the job ledger; then the deletes."""
    adds, removes, transitions, retire, finished = [], [], [], [], []
    app_transactions: dict[str, AppTransaction] = {}
    for result in run.results:
        if result.step is None:
            continue
        change = result.step.change
        changed = bool(change.add or change.remove or change.transitions or result.step.app_transactions)
        if not (changed or ledger_idle):
            continue
        if (lost := leases.still_ours(result.tp)) is not None:
            run.failures[str(result.tp)] = f"not committed: {lost}"
            continue
        finished.append(result.tp)
        adds += change.add
        removes += change.remove
        transitions += change.transitions
        if result.step.retire is not None and result.step.retire.num_rows:
            if not deletes_after_commit:
                raise ValueError(f"{run.operation}: {result.tp} retires segments, but the operation did not declare "
                                 "deletes_after_commit: its leases would be taken over while it deletes them")
            retire.append(result.step.retire)
        app_transactions.update(result.step.app_transactions)
    if not finished:
        return
    try:
        run.commit = catalog.apply(CatalogChange(add=tuple(adds), remove=tuple(removes),
                                                 transitions=tuple(transitions)),
                                   operation=run.operation, job_id=run.job_id, finished=finished if ledger else (),
                                   app_transactions=app_transactions)
    except AlreadyCommittedError as exc:
        run.failures.update({str(tp): f"not committed: {exc}" for tp in finished})
        return
    run.cleanup.committed(run.commit.version)
    if retire:
        delete_and_forget(catalog, store, pa.concat_tables(retire), run.job_id, run.cleanup, allow_external)
