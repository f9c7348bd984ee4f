"""The Delta segment catalog on a local directory and on moto S3: commits, states, pruning, conflicts."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import fields, replace

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from engine.catalog.changes import CatalogChange, CatalogStateError
from engine.catalog.schema import (
    CATALOG_SCHEMA,
    PARTITION_COLUMNS,
    SIDECAR_SIZE_COLUMNS,
    STORED_SCHEMA,
    SegmentRow,
    SegmentState,
    rows_to_table,
    table_to_rows,
)
from engine.names import TopicPartition
from engine.ops.catalog_table import (
    TABLE_CONFIGURATION,
    AlreadyCommittedError,
    AppTransaction,
    Catalog,
    CatalogConflictError,
    CatalogNotFoundError,
)
from layouts.store import list_objects
from layouts.store.bound import Store
from tests.catalog_rows import OffsetBounds, add_segments, make_row, offset_bounds, swap, transition


@pytest.fixture
def catalog(backend) -> Catalog:
    return Catalog.create(Store(backend.uri("catalog"), backend.options))


def test_row_dataclass_follows_the_schema() -> None:
    assert [f.name for f in fields(SegmentRow)] == CATALOG_SCHEMA.names


def test_open_requires_an_existing_catalog_and_create_is_idempotent(backend) -> None:
    with pytest.raises(CatalogNotFoundError):
        Catalog.open(Store(backend.uri("nope"), backend.options))
    first = Catalog.create(Store(backend.uri("cat"), backend.options))
    add_segments(first, [make_row("t", 0, 0, 10)])
    again = Catalog.create(Store(backend.uri("cat"), backend.options))
    assert again.version() == 1
    assert [r.segment_id for r in Catalog.open(Store(backend.uri("cat"), backend.options)).live_segments("t", 0)] == ["s0p0"]


def test_racing_creators_share_one_catalog(backend) -> None:
    uri = backend.uri("catalog")
    barrier = threading.Barrier(4)
    outcomes: list[object] = []

    def create() -> None:
        barrier.wait()
        try:
            outcomes.append(Catalog.create(Store(uri, backend.options)).version())
        except Exception as exc:  # the outcome under test
            outcomes.append(exc)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [0, 0, 0, 0]
    log = [o.name for o in list_objects(backend.uri("catalog", "_delta_log"), backend.options)]
    assert [n for n in log if n.endswith(".json")] == ["00000000000000000000.json"]


def test_add_segments_is_one_commit_and_idempotent(catalog: Catalog) -> None:
    rows = [make_row("t", 0, 20, 30), make_row("t", 0, 0, 10), make_row("t", 0, 10, 20), make_row("u", 3, 5, 6)]
    result = add_segments(catalog, rows, job_id="job-1")
    assert (result.version, result.added) == (1, 4)
    assert catalog.live_segments("t", 0) == sorted(rows[:3], key=lambda r: r.base_offset)
    assert catalog.live_segments("u", 3) == [rows[3]]
    again = add_segments(catalog, rows)
    assert (again.version, again.added, again.already_done) == (None, 0, 4)
    assert catalog.version() == 1
    with pytest.raises(CatalogStateError, match="already registered"):
        add_segments(catalog, [replace(rows[0], size_bytes=999)])
    assert catalog.partitions() == [TopicPartition("t", 0), TopicPartition("u", 3)]
    assert offset_bounds(catalog, "t", 0) == OffsetBounds(0, 30)
    assert offset_bounds(catalog, "t", 1) is None


def test_overlapping_segments_are_refused(catalog: Catalog) -> None:
    add_segments(catalog, [make_row("t", 0, 0, 10), make_row("t", 0, 10, 20)])
    with pytest.raises(CatalogStateError, match="overlap"):
        add_segments(catalog, [make_row("t", 0, 15, 25, segment_id="other")])
    with pytest.raises(CatalogStateError, match="overlap"):
        add_segments(catalog, [make_row("t", 1, 0, 10, segment_id="a"), make_row("t", 1, 5, 12, segment_id="b")])
    assert catalog.version() == 1
    assert add_segments(catalog, [make_row("t", 1, 0, 10, segment_id="a")]).added == 1


def test_states_only_move_forward_and_rows_leave_after_delete_started(catalog: Catalog) -> None:
    active = make_row("t", 0, 10, 20, state=SegmentState.ACTIVE)
    rolled = make_row("t", 0, 0, 10)
    add_segments(catalog, [rolled, active])
    with pytest.raises(CatalogStateError, match="cannot move"):
        transition(catalog, [rolled.ref], SegmentState.ACTIVE)
    with pytest.raises(CatalogStateError, match="only DELETE_STARTED"):
        catalog.remove_deleted([rolled.ref])
    assert transition(catalog, [active.ref], SegmentState.ROLLED).transitioned == 1
    assert transition(catalog, [active.ref], SegmentState.ROLLED).version is None
    transition(catalog, [rolled.ref], SegmentState.DELETE_STARTED)
    with pytest.raises(CatalogStateError, match="cannot move"):
        transition(catalog, [rolled.ref], SegmentState.ROLLED)
    assert [r.segment_id for r in catalog.live_segments("t", 0)] == [active.segment_id]
    deleting = table_to_rows(catalog.segments(states=[SegmentState.DELETE_STARTED]))
    assert [r.segment_id for r in deleting] == [rolled.segment_id]
    assert offset_bounds(catalog, "t", 0) == OffsetBounds(10, 20)
    assert catalog.remove_deleted([rolled.ref]).removed == 1
    assert catalog.remove_deleted([rolled.ref]).version is None
    assert catalog.all_rows().num_rows == 1


def test_swap_removes_and_adds_in_one_commit(catalog: Catalog, backend) -> None:
    small = [make_row("t", 0, 0, 5), make_row("t", 0, 5, 10)]
    other_topic = make_row("u", 0, 0, 5)
    add_segments(catalog, small + [other_topic])
    merged = make_row("t", 0, 0, 10, segment_id="merged")
    before = catalog.version()
    result = swap(catalog, [r.ref for r in small], [merged], job_id="compaction-1")
    assert result.version == before + 1 and (result.removed, result.added) == (2, 1)
    assert catalog.live_segments("t", 0) == [merged]
    assert catalog.live_segments("u", 0) == [other_topic]
    last = DeltaTable(catalog.uri, storage_options=Catalog._storage_options(Store(catalog.uri, backend.options))).history(1)[0]
    assert (last["operation"], last["klake.operation"], last["klake.job_id"]) == ("MERGE", "swap", "compaction-1")
    assert swap(catalog, [r.ref for r in small], [merged]).version is None
    with pytest.raises(CatalogStateError, match="no longer in the catalog"):
        swap(catalog, [small[0].ref], [make_row("t", 0, 0, 5, segment_id="again")])


def test_time_range_pruning_never_misses_a_segment_with_records_in_range(catalog: Catalog) -> None:
    rng = random.Random(7)
    rows, record_times = [], {}
    for p in range(3):
        base = 0
        for _ in range(40):
            # out-of-order timestamps: records of a segment scatter around a trend, some have none (-1)
            times = [max(-1, base * 10 + rng.randint(-3_000, 3_000)) for _ in range(rng.randint(1, 6))]
            valid = [t for t in times if t >= 0]
            row = make_row("t", p, base, base + 100, base_ts=min(valid) if valid else -1,
                           largest_ts=max(times) if valid else -1)
            rows.append(row)
            record_times[row.ref] = valid
            base += 100
    add_segments(catalog, rows)
    for _ in range(25):
        lo = rng.randint(-1_000, 45_000)
        hi = lo + rng.randint(0, 8_000)
        got = {r.ref for r in table_to_rows(catalog.segments(from_ms=lo, to_ms=hi, min_timestamp=0))}
        holding = {ref for ref, times in record_times.items() if any(lo <= t <= hi for t in times)}
        bound = {r.ref for r in rows if r.largest_timestamp >= lo and 0 <= r.base_timestamp <= hi}
        assert holding <= got
        assert got == bound
    only_partition = table_to_rows(catalog.segments(topic="t", partition=1, from_ms=10_000))
    assert {r.partition for r in only_partition} == {1}
    assert [r.base_offset for r in only_partition] == sorted(r.base_offset for r in only_partition)


def test_offset_range_pruning(catalog: Catalog) -> None:
    add_segments(catalog, [make_row("t", 0, b, b + 10) for b in range(0, 100, 10)])
    got = [r.base_offset for r in table_to_rows(catalog.segments(topic="t", from_offset=25, to_offset=40))]
    assert got == [20, 30, 40]
    assert [r.base_offset for r in table_to_rows(catalog.segments(from_offset=99))] == [90]
    assert table_to_rows(catalog.segments(from_offset=100)) == []


def test_rows_table_reads_the_asked_partitions_states_and_columns_in_offset_order(catalog: Catalog) -> None:
    """Committed out of order over several commits, read back in (topic, partition, offset) order."""
    rows = [make_row(t, p, b, b + 10) for t in ("b", "a") for p in (1, 0) for b in (20, 0, 10)]
    for chunk in (rows[::2], rows[1::2]):
        add_segments(catalog, chunk)
    transition(catalog, [rows[1].ref], SegmentState.DELETE_STARTED)  # b-1 at offset 0
    every = catalog.rows_table([("a", 0), ("b", 1), ("c", 0)])
    assert [(r.topic, r.partition, r.base_offset) for r in table_to_rows(every)] == [
        ("a", 0, 0), ("a", 0, 10), ("a", 0, 20), ("b", 1, 0), ("b", 1, 10), ("b", 1, 20)]
    live = catalog.rows_table([("b", 1)], [SegmentState.ACTIVE, SegmentState.ROLLED], ["segment_id", "base_offset"])
    assert live.column_names == ["segment_id", "base_offset"] and live["base_offset"].to_pylist() == [10, 20]
    assert catalog.rows_table([]).num_rows == 0 and catalog.rows_table([("c", 0)]).num_rows == 0
    assert catalog.rows_of([("a", 0)]).keys() == {r.ref for r in rows if (r.topic, r.partition) == ("a", 0)}


def test_checkpoint_optimize_and_vacuum_keep_the_rows(catalog: Catalog, backend) -> None:
    for b in range(0, 60, 10):
        add_segments(catalog, [make_row("t", 0, b, b + 10), make_row("u", 1, b, b + 10)])
    expected = table_to_rows(catalog.all_rows())
    version = catalog.create_checkpoint()
    log = [o.name for o in list_objects(backend.uri("catalog", "_delta_log"), backend.options)]
    assert f"{version:020d}.checkpoint.parquet" in log
    reopened = Catalog.open(Store(backend.uri("catalog"), backend.options))
    assert table_to_rows(reopened.all_rows()) == expected
    catalog.optimize()
    catalog.vacuum(retention_hours=0)
    assert table_to_rows(Catalog.open(Store(backend.uri("catalog"), backend.options)).all_rows()) == expected
    data_files = [o for o in list_objects(backend.uri("catalog"), backend.options) if o.name.endswith(".parquet")
                  and "_delta_log" not in o.uri]
    assert len(data_files) == 2  # one per topic after compaction


def _race(workers: list, catalog_uri: str, options) -> list[object]:
    """Run each worker(catalog) in its own thread with its own catalog handle, all released at once."""
    barrier = threading.Barrier(len(workers))
    outcomes: list[object] = [None] * len(workers)

    def run(i: int) -> None:
        catalog = Catalog.open(Store(catalog_uri, options))
        barrier.wait()
        try:
            outcomes[i] = workers[i](catalog)
        except Exception as exc:  # the outcome under test
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_two_writers_of_the_same_rows_leave_them_once(catalog: Catalog, backend) -> None:
    rows = [make_row("t", 0, b, b + 10) for b in range(0, 50, 10)]
    outcomes = _race([lambda c: add_segments(c, rows)] * 2, catalog.uri, backend.options)
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    assert sorted(o.added for o in outcomes) == [0, 5]
    assert catalog.live_segments("t", 0) == rows


def test_two_writers_of_conflicting_segments_have_exactly_one_winner(catalog: Catalog, backend) -> None:
    mine = [make_row("t", 0, 0, 10, segment_id="aaa"), make_row("t", 0, 10, 20, segment_id="aab")]
    theirs = [make_row("t", 0, 0, 20, segment_id="bbb")]
    outcomes = _race([lambda c: add_segments(c, mine), lambda c: add_segments(c, theirs)], catalog.uri,
                     backend.options)
    failures = [o for o in outcomes if isinstance(o, Exception)]
    assert len(failures) == 1 and isinstance(failures[0], CatalogStateError), outcomes
    assert "overlap" in str(failures[0])
    winner = theirs if isinstance(outcomes[0], Exception) else mine
    assert catalog.live_segments("t", 0) == winner


def test_concurrent_writers_on_one_topic_lose_no_rows(catalog: Catalog, backend) -> None:
    batches = [[make_row("t", p, b, b + 10) for b in range(0, 30, 10)] for p in range(4)]
    outcomes = _race([lambda c, rows=rows: add_segments(c, rows) for rows in batches], catalog.uri, backend.options)
    assert not any(isinstance(o, Exception) for o in outcomes), outcomes
    assert sum(o.added for o in outcomes) == 12
    assert sorted(table_to_rows(catalog.all_rows()), key=lambda r: (r.partition, r.base_offset)) == [
        r for rows in batches for r in rows]


def _interfere_after_first_read(catalog: Catalog, interfere) -> None:
    """Make `catalog` read its plan, then let another writer commit before its own commit."""
    read = catalog.rows_of
    pending = [interfere]

    def read_then_interfere(partitions):
        current = read(partitions)
        if pending:
            pending.pop()()
        return current

    catalog.rows_of = read_then_interfere


def test_a_commit_conflict_is_retried_on_a_fresh_read(catalog: Catalog, backend) -> None:
    other = Catalog.open(Store(catalog.uri, backend.options))
    theirs = make_row("t", 0, 100, 110, segment_id="zzz")
    _interfere_after_first_read(catalog, lambda: add_segments(other, [theirs]))
    mine = make_row("t", 0, 0, 10)
    result = add_segments(catalog, [mine])
    assert (result.attempts, result.added, result.version) == (2, 1, 2)
    assert catalog.live_segments("t", 0) == [mine, theirs]


def test_a_conflict_that_invalidates_the_change_fails_clearly(catalog: Catalog, backend) -> None:
    other = Catalog.open(Store(catalog.uri, backend.options))
    _interfere_after_first_read(catalog, lambda: add_segments(other, [make_row("t", 0, 0, 20, segment_id="zzz")]))
    with pytest.raises(CatalogStateError, match="overlap live segment t-0/zzz"):
        add_segments(catalog, [make_row("t", 0, 10, 30)])
    assert [r.segment_id for r in catalog.live_segments("t", 0)] == ["zzz"]


def test_conflicts_beyond_the_retry_budget_raise(catalog: Catalog, backend) -> None:
    other = Catalog.open(Store(catalog.uri, backend.options))
    catalog.max_commit_attempts = 1
    _interfere_after_first_read(catalog, lambda: add_segments(other, [make_row("t", 0, 100, 110, segment_id="zzz")]))
    with pytest.raises(CatalogConflictError, match="still conflicted after 1 attempts"):
        add_segments(catalog, [make_row("t", 0, 0, 10)])


def test_the_job_ledger_commits_with_the_rows_and_refuses_a_second_attempt(catalog: Catalog, backend) -> None:
    """A job id's partitions enter the ledger in the same commit as their rows (or alone for a partition
    whose step changed nothing); a second attempt committing the same partition is refused."""
    orders0, orders1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    version = catalog.version()
    done = catalog.apply(CatalogChange(add=(make_row("orders", 0, 0, 10),)), job_id="job-1", finished=[orders0])
    assert done.version == version + 1 and catalog.committed_partitions("job-1", [orders0, orders1]) == {orders0}
    assert catalog.committed_partitions("job-2", [orders0]) == set()
    idle = catalog.apply(CatalogChange(), job_id="job-1", finished=[orders1])  # nothing to change, work finished
    assert idle.version == version + 2 and catalog.committed_partitions("job-1", [orders0, orders1]) == {
        orders0, orders1}
    with pytest.raises(AlreadyCommittedError, match="job 'job-1' already committed orders-0"):
        catalog.apply(CatalogChange(add=(make_row("orders", 0, 10, 20),)), job_id="job-1", finished=[orders0])
    assert [r.base_offset for r in catalog.live_segments("orders", 0)] == [0]
    assert catalog.version() == version + 2
    reopened = Catalog.open(Store(catalog.uri, backend.options))
    reopened.create_checkpoint()
    assert Catalog.open(Store(catalog.uri, backend.options)).committed_partitions("job-1", [orders0, orders1]) == {orders0, orders1}


def test_app_transactions_commit_with_the_rows_and_a_permanent_one_outlives_the_ledger_retention(backend) -> None:
    """Transaction identifiers given to `apply` are recorded by the same commit as the rows; the latest
    version written is the one read back. With the retention at 1 s, the ledger's entry expires (Delta's
    `delta.setTransactionRetentionDuration`, applied by delta-rs when reading) and a permanent one does not."""
    uri = backend.uri("short-retention")
    table = DeltaTable.create(uri, schema=STORED_SCHEMA, partition_by=PARTITION_COLUMNS,
                              configuration={**TABLE_CONFIGURATION,
                                             "delta.setTransactionRetentionDuration": "interval 1 seconds"},
                              storage_options=Catalog._storage_options(Store(uri, backend.options)))
    catalog = Catalog(table, Store(uri, backend.options))
    orders0 = TopicPartition("orders", 0)
    done = catalog.apply(CatalogChange(add=(make_row("orders", 0, 0, 10),)), job_id="job-1", finished=[orders0],
                         app_transactions={"progress": AppTransaction(11, permanent=True), "fleeting": AppTransaction(3)})
    assert done.version == 1 and done.added == 1
    assert catalog.transaction_versions(["progress", "fleeting", "nope"]) == {"progress": 11, "fleeting": 3}
    assert catalog.committed_partitions("job-1", [orders0]) == {orders0}
    time.sleep(1.5)
    reopened = Catalog.open(Store(uri, backend.options))
    assert reopened.transaction_versions(["progress", "fleeting"]) == {"progress": 11}
    assert reopened.committed_partitions("job-1", [orders0]) == set()
    again = reopened.apply(CatalogChange(), app_transactions={"progress": AppTransaction(7, permanent=True)})
    assert again.version == 2 and reopened.transaction_versions(["progress"]) == {"progress": 7}
    assert [r.base_offset for r in reopened.live_segments("orders", 0)] == [0]


def test_a_catalog_written_before_the_sidecar_size_columns_reads_them_as_unknown_and_gains_them_on_commit(
        backend) -> None:
    """A catalog created and filled by an older klake (its schema without `index_size_bytes` and
    `timeindex_size_bytes`, written here directly through delta-rs) is read with the sizes null; its next
    commit adds both columns (nullable) and leaves every other column as it was, old rows still null."""
    uri = backend.uri("old-catalog")
    old_schema = pa.schema([f for f in CATALOG_SCHEMA if f.name not in SIDECAR_SIZE_COLUMNS])
    storage = Catalog._storage_options(Store(uri, backend.options))
    DeltaTable.create(uri, schema=old_schema, partition_by=PARTITION_COLUMNS, name="klake_segments",
                      configuration=TABLE_CONFIGURATION, storage_options=storage)
    old_rows = [make_row("orders", 0, 0, 10), make_row("orders", 0, 10, 20, state=SegmentState.ACTIVE)]
    write_deltalake(uri, rows_to_table(old_rows).select(old_schema.names).cast(old_schema), mode="append",
                    storage_options=storage)
    catalog = Catalog.open(Store(uri, backend.options))
    assert catalog.live_segments("orders", 0) == old_rows
    assert catalog.rows_table([("orders", 0)], columns=["segment_id", "timeindex_size_bytes"]).to_pylist() == [
        {"segment_id": "s0p0", "timeindex_size_bytes": None}, {"segment_id": "sap0", "timeindex_size_bytes": None}]
    version = catalog.version()

    new_row = replace(make_row("orders", 0, 20, 30, state=SegmentState.ACTIVE), index_size_bytes=16,
                      timeindex_size_bytes=24)
    change = CatalogChange(add=(new_row,), transitions=((old_rows[1].ref, SegmentState.ROLLED),))
    assert catalog.apply(change, job_id="job-1", finished=[TopicPartition("orders", 0)]).added == 1
    rolled = replace(old_rows[1], state=str(SegmentState.ROLLED))
    assert Catalog.open(Store(uri, backend.options)).live_segments("orders", 0) == [old_rows[0], rolled, new_row]
    table = DeltaTable(uri, storage_options=storage)
    assert table.version() == version + 3  # the columns, the keys' migration (engine.ops.catalog_keys), the change
    stored = {f.name: f for f in table.schema().fields}
    assert set(stored) == set(STORED_SCHEMA.names)
    assert all(stored[f.name].nullable == f.nullable for f in STORED_SCHEMA)
    assert catalog.apply(CatalogChange(remove=(old_rows[0].ref,))).removed == 1
    assert catalog.live_segments("orders", 0) == [rolled, new_row] and catalog.version() == version + 4


def test_writers_racing_on_an_older_catalog_add_the_columns_once_and_all_commit(backend) -> None:
    uri = backend.uri("old-raced")
    old_schema = pa.schema([f for f in CATALOG_SCHEMA if f.name not in SIDECAR_SIZE_COLUMNS])
    DeltaTable.create(uri, schema=old_schema, partition_by=PARTITION_COLUMNS, configuration=TABLE_CONFIGURATION,
                      storage_options=Catalog._storage_options(Store(uri, backend.options)))
    catalogs = [Catalog.open(Store(uri, backend.options)) for _ in range(3)]
    barrier = threading.Barrier(len(catalogs))
    outcomes: list[object] = []

    def add(i: int) -> None:
        barrier.wait()
        row = replace(make_row("t", i, 0, 10), index_size_bytes=8 * i, timeindex_size_bytes=12 * i)
        try:
            outcomes.append(catalogs[i].apply(CatalogChange(add=(row,))).added)
        except Exception as exc:  # the outcome under test
            outcomes.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(len(catalogs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [1] * len(catalogs)
    table = Catalog.open(Store(uri, backend.options)).all_rows()
    assert table["timeindex_size_bytes"].to_pylist() == [12 * i for i in range(len(catalogs))]
    operations = [h["operation"] for h in DeltaTable(uri, storage_options=Catalog._storage_options(Store(uri, backend.options))).history()]
    assert operations.count("ADD COLUMN") == 1 and operations.count("MERGE") == len(catalogs)


def _counting(obj: object, name: str) -> list[int]:
    """Count the calls of `obj.name` (an instance attribute shadowing the method)."""
    calls: list[int] = []
    real = getattr(obj, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    setattr(obj, name, counted)
    return calls


def test_a_commit_looks_the_ledger_up_once_and_sees_another_attempts_commit(catalog: Catalog, backend) -> None:
    """Once a handle has looked up a job id's partitions, a commit re-checks them by reading the commits
    made since (one history read): no lookup per partition while none of them is tagged with the job id;
    another attempt of the job committing a partition in between is still seen and refused."""
    tps = [TopicPartition("orders", p) for p in range(6)]
    other = Catalog.open(Store(catalog.uri, backend.options))
    assert catalog.committed_partitions("job-1", tps) == set()
    add_segments(other, [make_row("audit", 0, 0, 10)], job_id="job-2")  # another job's commit meanwhile
    lookups = _counting(catalog._table, "transaction_version")
    done = catalog.apply(CatalogChange(add=(make_row("orders", 0, 0, 10),)), job_id="job-1", finished=tps[:1])
    assert done.added == 1 and lookups == []
    other.apply(CatalogChange(add=(make_row("orders", 1, 0, 10),)), job_id="job-1", finished=tps[1:2])
    with pytest.raises(AlreadyCommittedError, match="job 'job-1' already committed orders-1"):
        catalog.apply(CatalogChange(add=(make_row("orders", 1, 10, 20),)), job_id="job-1", finished=tps[1:2])
    assert len(lookups) == 1  # the other attempt's commit is tagged job-1: looked up again, once per partition
    assert catalog.committed_partitions("job-1", tps) == set(tps[:2])
    assert [r.base_offset for r in catalog.live_segments("orders", 1)] == [0]


def test_the_second_commit_of_a_two_phase_delete_reads_no_row_unless_another_commit_came_between(
        catalog: Catalog, backend) -> None:
    """Right after a commit, the rows it left are what a fresh read would give: removing the rows it moved
    to DELETE_STARTED reads nothing; once another handle has committed, the catalog is read again."""
    rows = [make_row("t", 0, b, b + 10) for b in range(0, 50, 10)] + [make_row("u", 0, 0, 10)]
    add_segments(catalog, rows)
    transition(catalog, [r.ref for r in rows[:3]], SegmentState.DELETE_STARTED)
    reads = _counting(catalog, "rows_table")
    assert catalog.remove_deleted([rows[0].ref, rows[1].ref]).removed == 2 and reads == []
    assert catalog.rows_of([("t", 0)]).keys() == {r.ref for r in rows[2:5]} and reads == []
    with pytest.raises(CatalogStateError, match="t-0/.* is ROLLED; only DELETE_STARTED rows may be removed"):
        catalog.remove_deleted([rows[3].ref])
    assert reads == []
    add_segments(Catalog.open(Store(catalog.uri, backend.options)), [make_row("u", 0, 10, 20)])
    assert catalog.remove_deleted([rows[2].ref]).removed == 1 and reads == [1]
    assert sorted(r.base_offset for r in catalog.live_segments("t", 0)) == [30, 40]
    assert [(r.topic, r.base_offset) for r in table_to_rows(catalog.all_rows())] == [
        ("t", 30), ("t", 40), ("u", 0), ("u", 10)]
