"""A root owns its objects (issue 26): a copied root (`cp -r`, an S3 copy of every object) is independent of
its original, an external object (imported in place) is never deleted without the run's opt-in, and a catalog
written with absolute keys migrates on its first write, keeping its data.

Truth: the original's objects byte for byte and its catalog's answers, listed before and after the jobs run
on the copy; kafka-python decodes the copy's records; a brute-force compaction (`test_partition_compact`).
"""

from __future__ import annotations

import shutil
import uuid

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, write_deltalake

from engine.catalog.schema import CATALOG_SCHEMA, KEY_COLUMNS, PARTITION_COLUMNS, STORED_SCHEMA
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import TABLE_CONFIGURATION, Catalog
from engine.ops.importer import import_log_dir
from engine.ops.scrub import scrub
from jobs.runtime.embedded_s3 import create_bucket
from kernel.names import TopicPartition
from layouts.store import filesystem, join, list_objects, object_info, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.engine.ops.test_partition_compact import CONFIG as COMPACT
from tests.engine.ops.test_partition_compact import _expected, _updates
from tests.oracles.kafka_python import read_with_kafka_python
from tests.single_partition import append_to_partition, apply_retention, compact_partition, truncate_partition

NOW = 1_790_000_000_000
DAY = 86_400_000
ORDERS, EVENTS, IMPORTED = TopicPartition("orders", 0), TopicPartition("events", 0), TopicPartition("timeindex_test", 0)
RETAIN = TopicConfig.from_mapping({"segment.bytes": 2000, "retention.ms": DAY, "index.interval.bytes": 200})
FOREVER = TopicConfig.from_mapping({"retention.ms": 1})
LATER = NOW + 400 * DAY  # past every fixture timestamp and every object's scrub grace period


def _events(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({"key": pa.array([b"k%02d" % k for k in rng.integers(0, 9, n)], pa.binary()),
                     "value": pa.array([b"e%05d" % i + b"x" * int(rng.integers(10, 40)) for i in range(n)], pa.binary()),
                     "timestamp": pa.array(NOW - 3 * DAY + np.arange(n), pa.int64())})


def _build(backend: Backend, root: str, broker: str) -> Catalog:
    """A root with appended partitions (compacted and time-retained topics) and a partition imported in place
    from a broker's log dir outside it (external rows), its catalog at its default place."""
    catalog = Catalog.create(Store(join(root, "_catalog"), backend.options))
    append_to_partition(catalog, root, ORDERS, ORDER_UPDATES, COMPACT, NOW, backend.options)
    append_to_partition(catalog, root, EVENTS, _events(300), RETAIN, NOW - 3 * DAY, backend.options)
    import_log_dir(Store(broker, backend.options), Store(root, backend.options), catalog)
    return catalog


ORDER_UPDATES = _updates(400, 25, seed=3)


@pytest.fixture
def broker(backend: Backend, kafka_fixtures) -> str:
    """A broker's log dir (one partition of the fixtures) outside every root."""
    backend.upload_tree(kafka_fixtures / "broker" / "timeindex_test-0", backend.uri("broker", "timeindex_test-0"))
    return backend.uri("broker")


def _other_place(backend: Backend, name: str) -> str:
    """Where a copy goes: a sibling directory locally, another bucket on S3 (as `aws s3 sync` to it)."""
    return backend.uri(name) if backend.name == "local" else join(create_bucket(f"copy-{uuid.uuid4().hex[:12]}"), name)


def _copy_root(backend: Backend, source: str, dest: str) -> None:
    """`cp -r source dest`, or every object copied to the other prefix on S3."""
    if backend.name == "local":
        shutil.copytree(source, dest)
        return
    fs, _ = filesystem(source, backend.options)
    for info in list_objects(source, backend.options):
        fs.copy(filesystem(info.uri, backend.options)[1], filesystem(dest + info.uri[len(source):], backend.options)[1])


def _snapshot(uri: str, backend: Backend) -> dict[str, bytes]:
    """Every object under `uri` with its bytes."""
    return {info.uri: read_bytes(info.uri, backend.options) for info in list_objects(uri, backend.options)}


def _answers(root: str, backend: Backend) -> list[dict]:
    """Every row of the root's catalog, read afresh."""
    return Catalog.open(Store(join(root, "_catalog"), backend.options)).all_rows().to_pylist()


def _records(catalog: Catalog, tp: TopicPartition, backend: Backend) -> list[tuple]:
    """(offset, timestamp, key, value) of the partition's live records from its log start, by kafka-python."""
    rows = catalog.live_segments(tp.topic, tp.partition)
    start = max([rows[0].base_offset, *(r.log_start_offset for r in rows)]) if rows else 0
    found = [r for row in rows for r in read_with_kafka_python(read_bytes(row.log_key, backend.options))[0]]
    return [r[:4] for r in found if r[0] >= start]


def _stored(catalog_uri: str, backend: Backend) -> list[dict]:
    """The catalog's rows as stored (what DuckDB or Polars see), by delta-rs."""
    storage = Catalog._storage_options(Store(catalog_uri, backend.options))
    return DeltaTable(catalog_uri, storage_options=storage).to_pyarrow_table().to_pylist()


def test_jobs_on_a_copied_root_never_touch_the_original(backend: Backend, broker: str) -> None:
    a, b = backend.uri("A"), _other_place(backend, "B")
    _build(backend, a, broker)
    _copy_root(backend, a, b)
    objects, answers, broker_objects = _snapshot(a, backend), _answers(a, backend), _snapshot(broker, backend)
    copy = Catalog.open(Store(join(b, "_catalog"), backend.options))
    assert all(r[k].startswith(b + "/") for r in copy.all_rows().to_pylist() for k in KEY_COLUMNS
               if not r[k].startswith(broker))  # the copy reads its own objects
    assert {r["log_key"].startswith(broker) for r in copy.all_rows().to_pylist() if r["topic"] == IMPORTED.topic} \
        == {True}
    events_before = copy.live_segments(EVENTS.topic, EVENTS.partition)

    retained = apply_retention(copy, b, EVENTS, RETAIN, NOW, backend.options)
    compacted = compact_partition(copy, b, ORDERS, COMPACT, NOW, backend.options)
    target = copy.live_segments(IMPORTED.topic, IMPORTED.partition)[1].base_offset + 5
    truncated = truncate_partition(copy, b, IMPORTED, target, TopicConfig(), NOW, backend.options)
    scrubbed = scrub(Store(b, backend.options), copy, grace_ms=0, now=LATER)

    assert _snapshot(a, backend) == objects and _answers(a, backend) == answers  # the original, byte for byte
    assert _snapshot(broker, backend) == broker_objects  # the broker's files: external, left in place
    deleted = set(retained.cleanup.deleted_objects + compacted.cleanup.deleted_objects
                  + truncated.cleanup.deleted_objects + scrubbed.deleted)
    assert deleted and all(uri.startswith(b + "/") for uri in deleted)
    assert {r.log_key for r in events_before} <= set(retained.cleanup.deleted_objects)
    assert _records(copy, EVENTS, backend) == []  # every event was older than retention.ms
    active_base = [r for r in copy.live_segments(ORDERS.topic, ORDERS.partition)][-1].base_offset
    assert compacted.cleaned
    assert _records(copy, ORDERS, backend) == [r[:4] for r in _expected(ORDER_UPDATES, active_base)]
    assert truncated.cleanup.left_in_place and all(k.startswith(broker) for k in truncated.cleanup.left_in_place)
    imported = _records(copy, IMPORTED, backend)
    assert imported and max(r[0] for r in imported) == target - 1
    live = {o.uri for o in list_objects(b, backend.options)}
    for row in copy.all_rows().to_pylist():
        assert all(row[k] in live or row[k].startswith(broker) for k in KEY_COLUMNS)


def _write_legacy_catalog(catalog_uri: str, rows: pa.Table, backend: Backend) -> None:
    """Rewrite a catalog the way klake wrote it before keys were relative: absolute keys, no `external`."""
    backend.store().delete_tree(catalog_uri)
    storage = Catalog._storage_options(Store(catalog_uri, backend.options))
    DeltaTable.create(catalog_uri, schema=CATALOG_SCHEMA, partition_by=PARTITION_COLUMNS, name="klake_segments",
                      configuration=TABLE_CONFIGURATION, storage_options=storage)
    write_deltalake(catalog_uri, rows.cast(CATALOG_SCHEMA), mode="append", storage_options=storage)


def test_an_absolute_key_catalog_migrates_on_its_first_write_keeping_its_answers(backend: Backend,
                                                                                broker: str) -> None:
    a = backend.uri("A")
    catalog_uri = join(a, "_catalog")
    rows = _build(backend, a, broker).all_rows()
    _write_legacy_catalog(catalog_uri, rows, backend)
    legacy = Catalog.open(Store(catalog_uri, backend.options))
    assert legacy.all_rows() == rows  # read as written: absolute keys resolve to themselves
    version = legacy.version()
    DeltaTable(catalog_uri, storage_options=Catalog._storage_options(Store(catalog_uri, backend.options))).alter.add_columns(
        [Field.from_arrow(STORED_SCHEMA.field("external"))])  # a migration killed after its first commit

    assert legacy.migrate_keys().version == version + 2  # the `external` column, then the keys
    assert Catalog.open(Store(catalog_uri, backend.options)).all_rows() == rows  # the same answers
    stored, objects = _stored(catalog_uri, backend), _snapshot(a, backend)
    for row in stored:
        assert row["external"] == (row["topic"] == IMPORTED.topic)
        if row["external"]:
            assert row["log_key"] == next(r["log_key"] for r in rows.to_pylist() if r["segment_id"] == row["segment_id"])
        else:
            assert all(not row[k].startswith(("/", "s3://")) and join(a, row[k]) in objects for k in KEY_COLUMNS)
    again = Catalog.open(Store(catalog_uri, backend.options))  # a re-run (or one after a crash) finds nothing to do
    assert again.migrate_keys().version is None and again.version() == version + 2
    assert _stored(catalog_uri, backend) == stored


def test_a_copied_root_with_an_absolute_key_catalog_re_anchors_only_what_it_holds(backend: Backend,
                                                                                 broker: str) -> None:
    """The copy's legacy catalog names the original's objects: its first write re-anchors every key whose copy
    it holds; one whose copy is missing stays the original's (external), and the copy's jobs never delete it."""
    a, b = backend.uri("A"), _other_place(backend, "B")
    rows = _build(backend, a, broker).all_rows()
    _write_legacy_catalog(join(a, "_catalog"), rows, backend)
    _copy_root(backend, a, b)
    copy = Catalog.open(Store(join(b, "_catalog"), backend.options))
    events = copy.live_segments(EVENTS.topic, EVENTS.partition)
    lost = events[0].log_key  # the original's key; its copy under B goes missing (a partial sync)
    assert lost.startswith(a + "/")
    backend.store().delete(b + lost[len(a):])
    objects, answers = _snapshot(a, backend), _answers(a, backend)

    scrubbed = scrub(Store(b, backend.options), copy, grace_ms=0, now=LATER)  # its first write: the migration
    assert not scrubbed.orphans and not scrubbed.deleted  # the copy's objects are its rows'
    assert not scrubbed.missing  # the row whose copy is missing reads the original: external
    retained = apply_retention(copy, b, EVENTS, RETAIN, NOW, backend.options)
    assert retained.cleanup.left_in_place == [lost]
    assert _snapshot(a, backend) == objects and _answers(a, backend) == answers
    assert object_info(lost, backend.options) is not None
    assert all(uri.startswith(b + "/") for uri in retained.cleanup.deleted_objects)
    stored = {(r["topic"], r["segment_id"]): r for r in _stored(join(b, "_catalog"), backend)}
    for row in copy.all_rows().to_pylist():
        mine = stored[row["topic"], row["segment_id"]]
        if row["topic"] == IMPORTED.topic:
            assert mine["external"] and row["log_key"].startswith(broker)
        else:
            assert not mine["external"] and all(row[k].startswith(b + "/") for k in KEY_COLUMNS)
    original = Catalog.open(Store(join(a, "_catalog"), backend.options))
    assert _records(copy, ORDERS, backend) == _records(original, ORDERS, backend)  # now read from the copy's objects


def test_an_external_object_is_deleted_only_with_the_runs_opt_in(backend: Backend, broker: str,
                                                                 kafka_fixtures) -> None:
    root = backend.uri("R")
    backend.upload_tree(kafka_fixtures / "broker" / "docker-connect-status-0",
                        backend.uri("broker", "docker-connect-status-0"))
    catalog = Catalog.create(Store(join(root, "_catalog"), backend.options))
    import_log_dir(Store(broker, backend.options), Store(root, backend.options), catalog)
    kept_logs = [r.log_key for r in catalog.live_segments(IMPORTED.topic, IMPORTED.partition)]
    gone_logs = [r.log_key for r in catalog.live_segments("docker-connect-status", 0)]
    assert kept_logs and gone_logs and all(k.startswith(broker) for k in kept_logs)

    kept = apply_retention(catalog, root, IMPORTED, FOREVER, LATER, backend.options)
    assert catalog.live_segments(IMPORTED.topic, IMPORTED.partition)[0].record_count == 0  # it left the log
    assert set(kept.cleanup.left_in_place) >= set(kept_logs) and not kept.cleanup.external_deleted
    assert all(object_info(k, backend.options) is not None for k in kept_logs)

    gone = apply_retention(catalog, root, TopicPartition("docker-connect-status", 0), FOREVER, LATER,
                           backend.options, allow_external_deletes=True)
    assert set(gone.cleanup.external_deleted) >= set(gone_logs) and not gone.cleanup.left_in_place
    assert all(object_info(k, backend.options) is None for k in gone_logs)
