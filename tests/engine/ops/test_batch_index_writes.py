"""klake's `.batchindex` (issue 14) through its whole life: every writer of segment versions writes it where
it pays (batches smaller than `index.interval.bytes`) after Kafka's three files and records its length in
the row; the two-phase delete removes it; scrub flags an orphan one and one of another size than its row;
verify names a damaged or missing one and recover repairs it; export leaves it out; an older catalog gains
the column. The truth it is checked against: `engine.index.batch_index.batch_index_bytes` over the STORED
`.log` (scanned whole) and `.timeindex`."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from functools import partial

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import CATALOG_SCHEMA, PARTITION_COLUMNS, SegmentRow, rows_to_table
from engine.format.batch import scan_batches
from engine.index.batch_index import batch_index_bytes
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import TABLE_CONFIGURATION, Catalog
from engine.ops.export import ExportRange
from engine.ops.importer import import_log_dir
from engine.ops.mirror import mirror_partitions
from engine.ops.recover import prepare_recovery, recover_partition
from engine.ops.roll import RollPlanner, prepare_roll
from engine.ops.run import run_single_partition
from engine.ops.scrub import scrub
from engine.ops.verify import verify_partition
from kernel.names import TopicPartition
from layouts.object_layout import batch_index_key
from layouts.store import list_objects, object_info, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.single_partition import (
    append_to_partition,
    apply_retention,
    compact_partition,
    delete_records,
    export_log_dir,
    truncate_partition,
)

TP = TopicPartition("orders", 0)
NOW = 1_790_000_000_000
DAY = 86_400_000
_TOPIC = {"cleanup.policy": "compact,delete", "segment.bytes": 40_000, "max.message.bytes": 1100,
          "segment.ms": DAY, "retention.ms": 30 * DAY}
SMALL = TopicConfig.from_mapping({**_TOPIC, "index.interval.bytes": 4096})
"""~1 KiB batches (max.message.bytes) under a 4 KiB interval: each .timeindex span holds ~4 batches."""
BIG = TopicConfig.from_mapping({**_TOPIC, "index.interval.bytes": 512})
"""The same batches above the interval: Kafka's own indexes pin every batch, no batch index pays."""


def _records(n: int, first_ts: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"key": pa.array([b"key-%03d" % k for k in rng.integers(0, 150, n)], pa.binary()),
                     "value": pa.array([b"v%05d-" % i + b"x" * 80 for i in range(n)], pa.binary()),
                     "timestamp": pa.array(first_ts + np.arange(n) * 1000, pa.int64())})


def _truth(row: SegmentRow, backend: Backend) -> bytes | None:
    log = read_bytes(row.log_key, backend.options)
    return batch_index_bytes(row.batch_count, read_bytes(row.timeindex_key, backend.options), row.base_offset,
                             lambda: scan_batches(log, row.log_key).headers, min_timestamp=0)


def _check(catalog: Catalog, backend: Backend, tp: TopicPartition = TP) -> int:
    """Every live row has exactly the batch index its stored log and .timeindex make (none where none pays);
    the number of rows that have one."""
    have = 0
    for row in catalog.live_segments(tp.topic, tp.partition):
        want = _truth(row, backend)
        if want is None:
            assert row.batchindex_size_bytes is None, row
            continue
        assert row.batchindex_size_bytes == len(want), row
        assert read_bytes(batch_index_key(row.timeindex_key), backend.options) == want, row
        have += 1
    return have


def _deleted_together(catalog: Catalog, backend: Backend, under: str, tp: TopicPartition = TP) -> None:
    """The live rows' batch indexes exist, and every `.batchindex` left has its `.timeindex` beside it: the two-phase
    delete removed the replaced rows' with their other objects (superseded versions that were not deleted,
    such as an extended ACTIVE segment's, are scrub's, all four objects alike)."""
    names = {o.uri for o in list_objects(backend.uri(under), backend.options)}
    left = {uri for uri in names if uri.endswith(".batchindex")}
    assert _live_batch_indexes(catalog, tp) <= left
    assert {uri.removesuffix(".batchindex") + ".timeindex" for uri in left} <= names


def _live_batch_indexes(catalog: Catalog, tp: TopicPartition = TP) -> set[str]:
    return {batch_index_key(r.timeindex_key) for r in catalog.live_segments(tp.topic, tp.partition)
            if r.batchindex_size_bytes is not None}


def _appended(backend: Backend, config: TopicConfig, n: int = 1500) -> tuple[Catalog, str]:
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    root = backend.uri("root")
    append_to_partition(catalog, root, TP, _records(n, NOW - 3 * DAY), config, NOW - 3 * DAY, backend.options)
    return catalog, root


def test_every_writer_writes_the_batch_index_where_it_pays(backend: Backend) -> None:
    catalog, root = _appended(backend, SMALL)
    assert _check(catalog, backend) >= 3
    active = catalog.live_segments(TP.topic, TP.partition)[-1]
    append_to_partition(catalog, root, TP, _records(40, NOW - 2 * DAY, seed=1), SMALL, NOW - 2 * DAY,
                        backend.options)  # extends the ACTIVE segment's .log in place
    extended = [r for r in catalog.live_segments(TP.topic, TP.partition) if r.base_offset == active.base_offset]
    assert extended[0].size_bytes > active.size_bytes and extended[0].batchindex_size_bytes is not None
    _check(catalog, backend)
    run_single_partition(catalog, Store(root, backend.options), TP, SMALL, partial(prepare_roll, store=Store(root, backend.options), now_ms=NOW - DAY, job_id="roll"), operation="roll", job_id="roll", planner=RollPlanner(NOW - DAY))
    _check(catalog, backend)
    append_to_partition(catalog, root, TP, _records(600, NOW - DAY, seed=2), SMALL, NOW - DAY, backend.options)
    assert compact_partition(catalog, root, TP, SMALL, NOW, backend.options, force=True).cleaned
    assert _check(catalog, backend) >= 2
    _deleted_together(catalog, backend, "root")
    rebuilt = run_single_partition(catalog, Store(root, backend.options), TP, SMALL, partial(prepare_recovery, store=Store(root, backend.options), job_id="recover", now_ms=NOW, rebuild_all=True), operation="recover", job_id="recover")
    repairs = rebuilt.outcome(TP).repairs
    assert repairs
    # the .log stays in place; the rebuilt sidecars are new objects, each .batchindex beside its .timeindex
    assert _check(catalog, backend) >= 1
    rows = catalog.live_segments(TP.topic, TP.partition)
    delete_records(catalog, root, TP, rows[1].base_offset + 1, NOW, backend.options)
    _check(catalog, backend)
    truncate_partition(catalog, root, TP, rows[-1].next_offset - 3, SMALL, NOW, backend.options)
    _check(catalog, backend)
    apply_retention(catalog, root, TP, SMALL, NOW + 28 * DAY, backend.options)
    _check(catalog, backend)
    _deleted_together(catalog, backend, "root")
    for mode in ("preserve", "remap"):
        dest = Catalog.create(Store(backend.uri(f"{mode}-cat"), backend.options))
        run = mirror_partitions(Store(root, backend.options), catalog, Store(backend.uri(mode), backend.options), dest, [TP], mode=mode, now_ms=NOW,
                                dest_configs={TP.topic: SMALL})
        assert run.failures == {}
        assert _check(dest, backend) >= 1
        _deleted_together(dest, backend, mode)


def test_no_batch_index_where_every_batch_is_above_the_interval(backend: Backend) -> None:
    catalog, root = _appended(backend, BIG)
    assert len(catalog.live_segments(TP.topic, TP.partition)) >= 3
    assert _check(catalog, backend) == 0
    assert not [o for o in list_objects(root, backend.options) if o.uri.endswith(".batchindex")]


def test_imports_get_a_batch_index_in_place_ones_beside_copied_sidecars_and_export_leaves_it_out(
        backend: Backend, tmp_path) -> None:
    """Export writes Kafka's files alone; an import copies a batch index with the segments, and an in-place
    import (the `.log` stays the broker's) gets one beside sidecars copied under klake's root, never in the
    broker's dir."""
    catalog, root = _appended(backend, SMALL)
    out = str(tmp_path / "broker")
    report = export_log_dir(catalog, root, {TP: SMALL}, out, ExportRange(), options=backend.options)
    assert not report.failures
    exported = sorted(os.listdir(os.path.join(out, TP.dir_name)))
    assert exported and not [name for name in exported if name.endswith(".batchindex")]
    for copy in (True, False):
        imported = Catalog.create(Store(backend.uri(f"cat-{copy}"), backend.options))
        done = import_log_dir(Store(out, backend.options), backend.store(f"klake-{copy}"), imported, copy=copy)
        assert not done.failed
        assert _check(imported, backend) >= 3
        if not copy:
            rows = imported.live_segments(TP.topic, TP.partition)
            owned = [r for r in rows if r.batchindex_size_bytes is not None]
            assert all(r.log_key.startswith(out) and r.timeindex_key.startswith(backend.uri("klake-False"))
                       for r in owned)
            assert not [n for n in os.listdir(os.path.join(out, TP.dir_name)) if n.endswith(".batchindex")]


def test_scrub_flags_an_orphan_batch_index_a_missing_one_and_one_of_another_size(backend: Backend) -> None:
    catalog, root = _appended(backend, SMALL)
    rows = catalog.live_segments(TP.topic, TP.partition)
    first = next(r for r in rows if r.batchindex_size_bytes is not None)
    orphan = backend.uri("root", TP.dir_name, f"{999:020d}-0123456789abcdef.batchindex")
    backend.put(orphan, b"\0" * 40)
    now = time.time_ns() // 1_000_000 + 7_200_000
    catalog.apply(CatalogChange(add=(replace(first, segment_id="c0ffee0000000000",
                                             batchindex_size_bytes=first.batchindex_size_bytes + 20),),
                                remove=(first.ref,)))
    report = scrub(Store(root, backend.options), catalog, grace_ms=3_600_000, dry_run=True, now=now)
    assert [o.uri for o in report.orphans] == [orphan]
    assert [(m.kind, m.key, m.catalog_size, m.object_size) for m in report.size_mismatches] == [
        ("batchindex", batch_index_key(first.timeindex_key), first.batchindex_size_bytes + 20,
         first.batchindex_size_bytes)]
    assert report.missing == []
    cleaned = scrub(Store(root, backend.options), catalog, grace_ms=3_600_000, now=now)
    assert cleaned.deleted == [orphan] and object_info(orphan, backend.options) is None
    assert object_info(batch_index_key(first.timeindex_key), backend.options) is not None
    second = next(r for r in rows[1:] if r.batchindex_size_bytes is not None)
    assert backend.store().delete(batch_index_key(second.timeindex_key))
    gone = scrub(Store(root, backend.options), catalog, grace_ms=3_600_000, dry_run=True, now=now)
    assert [(m.kind, m.key) for m in gone.missing] == [("batchindex", batch_index_key(second.timeindex_key))]


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_verify_names_a_broken_batch_index_and_recover_repairs_the_row(backend: Backend, damage: str) -> None:
    catalog, root = _appended(backend, SMALL)
    rows = catalog.live_segments(TP.topic, TP.partition)
    row = next(r for r in rows if r.batchindex_size_bytes is not None)
    key = batch_index_key(row.timeindex_key)
    good = read_bytes(key, backend.options)
    assert backend.store().delete(key)
    if damage == "damaged":  # one batch's position moved: the layout still holds, the answer would not
        broken = bytearray(good)
        broken[12:16] = (int.from_bytes(good[12:16], "big") + 1).to_bytes(4, "big")
        backend.put(key, bytes(broken))
    check = verify_partition(catalog, TP, SMALL)
    problems = [p for p in check.all_problems if p.kind == "batchindex"]
    assert [p.object for p in problems] == [key] and len(check.all_problems) == 1
    assert problems[0].what.startswith("missing" if damage == "missing" else "batchindex")
    report = recover_partition(catalog, Store(root, backend.options), TP, now_ms=NOW, config=SMALL)
    assert [r.segment_id for r in report.repairs] == [row.segment_id]
    assert verify_partition(catalog, TP, SMALL).ok
    repaired = next(r for r in catalog.live_segments(TP.topic, TP.partition) if r.base_offset == row.base_offset)
    # written anew beside the rebuilt .timeindex (a new object: the broken one is left to scrub)
    assert repaired.timeindex_key != row.timeindex_key and repaired.batchindex_size_bytes == len(good)
    assert read_bytes(batch_index_key(repaired.timeindex_key), backend.options) == good
    assert recover_partition(catalog, Store(root, backend.options), TP, now_ms=NOW, config=SMALL).nothing_to_do


def test_an_older_catalog_without_the_column_gains_it(backend: Backend) -> None:
    """A catalog written with the sidecar sizes but before `batchindex_size_bytes` reads it as null; its next
    commit adds the column, and the new rows carry it."""
    uri = backend.uri("old-cat")
    old_schema = pa.schema([f for f in CATALOG_SCHEMA if f.name != "batchindex_size_bytes"])
    storage = Catalog._storage_options(Store(uri, backend.options))
    DeltaTable.create(uri, schema=old_schema, partition_by=PARTITION_COLUMNS, name="klake_segments",
                      configuration=TABLE_CONFIGURATION, storage_options=storage)
    seed, root = _appended(backend, SMALL, n=400)
    rows = seed.live_segments(TP.topic, TP.partition)
    assert any(r.batchindex_size_bytes is not None for r in rows)
    write_deltalake(uri, rows_to_table(rows).select(old_schema.names).cast(old_schema), mode="append",
                    storage_options=storage)
    catalog = Catalog.open(Store(uri, backend.options))
    assert {r.batchindex_size_bytes for r in catalog.live_segments(TP.topic, TP.partition)} == {None}
    append_to_partition(catalog, root, TP, _records(800, NOW - 2 * DAY, seed=3), SMALL, NOW - 2 * DAY,
                        backend.options)
    reopened = Catalog.open(Store(uri, backend.options))
    assert "batchindex_size_bytes" in {f.name for f in DeltaTable(uri, storage_options=storage).schema().fields}
    assert any(r.batchindex_size_bytes is not None for r in reopened.live_segments(TP.topic, TP.partition))
