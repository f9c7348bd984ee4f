"""Compaction of a catalogued partition: Kafka's surviving records, one swap commit, tombstone horizons."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from kafka.record.memory_records import MemoryRecords

from engine.catalog.schema import first_dirty_offset
from engine.log.topic_config import TopicConfig
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from layouts.store import read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.engine.ops.test_partition_append import _log
from tests.single_partition import append_to_partition, compact_partition

TP = TopicPartition("orders", 0)
NOW = 1_790_000_000_000
DAY = 86_400_000
CONFIG = TopicConfig.from_mapping({"cleanup.policy": "compact", "segment.bytes": 2500, "index.interval.bytes": 200,
                                   "max.message.bytes": 300, "delete.retention.ms": DAY})


def _updates(n: int, keys: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    key_ids = rng.integers(0, keys, n)
    tomb = rng.random(n) < 0.15
    return pa.table({
        "key": pa.array([b"key-%02d" % k for k in key_ids], pa.binary()),
        "value": pa.array([None if t else b"v%04d" % i for i, t in enumerate(tomb)], pa.binary()),
        "timestamp": pa.array(NOW - 10_000 + np.arange(n), pa.int64())})


def _expected(records: pa.Table, active_base: int, expired_below: int = 0) -> list[tuple]:
    """Brute force: below the active segment only the latest record per key survives; a tombstone that
    an earlier round stamped with a delete horizon (offset < `expired_below`) goes once the horizon has
    passed, a newer one stays (KIP-534); the active segment is never cleaned."""
    keys, values = records["key"].to_pylist(), records["value"].to_pylist()
    latest = {k: i for i, k in enumerate(keys[:active_base])}
    keep = [i for i in range(len(keys)) if i >= active_base or
            (latest[keys[i]] == i and (values[i] is not None or i >= expired_below))]
    return [(i, records["timestamp"][i].as_py(), keys[i], values[i]) for i in keep]


def test_compaction_keeps_latest_per_key_and_drops_tombstones_after_the_horizon(backend: Backend) -> None:
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    records = _updates(400, 25, seed=3)
    append_to_partition(catalog, backend.uri("root"), TP, records, CONFIG, NOW, backend.options)
    rows = catalog.live_segments(TP.topic, TP.partition)
    active_base = rows[-1].base_offset
    assert len(rows) >= 4 and first_dirty_offset(rows) == 0

    first = compact_partition(catalog, backend.uri("root"), TP, CONFIG, NOW, backend.options)
    assert first.cleaned and first.segments_after < first.segments_before
    _, recs, _ = _log(catalog, backend, TP)
    assert recs == _expected(records, active_base)
    rows = catalog.live_segments(TP.topic, TP.partition)
    assert first_dirty_offset(rows) == active_base == first.checkpoint
    assert catalog.segments(states=["DELETE_STARTED"]).num_rows == 0
    for row in rows:  # an independent reader sees the same records
        data = read_bytes(row.log_key, backend.options)
        mr, seen = MemoryRecords(data), []
        while mr.has_next():
            seen += [r.offset for r in mr.next_batch()]
        assert seen == [r[0] for r in recs if row.base_offset <= r[0] < row.next_offset]

    idle = compact_partition(catalog, backend.uri("root"), TP, CONFIG, NOW + DAY + 1, backend.options)
    assert not idle.cleaned  # nothing dirty: the horizon alone does not trigger a round (Kafka)
    more = _updates(300, 25, seed=4)
    append_to_partition(catalog, backend.uri("root"), TP, more, CONFIG, NOW + DAY + 1, backend.options)
    new_active = catalog.live_segments(TP.topic, TP.partition)[-1].base_offset
    second = compact_partition(catalog, backend.uri("root"), TP, CONFIG, NOW + DAY + 1, backend.options)
    assert second.cleaned and second.checkpoint == new_active
    everything = pa.concat_tables([records, more])
    assert _log(catalog, backend, TP)[1] == _expected(everything, new_active, expired_below=active_base)


def test_dry_run_and_below_ratio_change_nothing(backend: Backend) -> None:
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    append_to_partition(catalog, backend.uri("root"), TP, _updates(200, 200, seed=1), CONFIG, NOW, backend.options)
    version = catalog.version()
    dry = compact_partition(catalog, backend.uri("root"), TP, CONFIG, NOW, backend.options, dry_run=True)
    assert not dry.cleaned and dry.due and dry.dirty_ratio == 1.0 and catalog.version() == version
    strict = TopicConfig.from_mapping({**CONFIG.to_mapping(), "min.cleanable.dirty.ratio": 1.0})
    held = compact_partition(catalog, backend.uri("root"), TP, strict, NOW, backend.options)
    assert not held.cleaned and not held.due and catalog.version() == version
