"""Every writer of catalog rows records the byte lengths of the sidecars its rows name, as the objects
hold them (lookups place their first ranged read of a sidecar by them): append, roll, compaction,
retention, truncation, DeleteRecords, recovery, import (copied and in place) and mirroring."""

from __future__ import annotations

from functools import partial

import numpy as np
import pyarrow as pa

from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from engine.ops.mirror import mirror_partitions
from engine.ops.recover import prepare_recovery
from engine.ops.roll import RollPlanner, prepare_roll
from engine.ops.run import run_single_partition
from kernel.names import TopicPartition
from layouts.store import object_info
from layouts.store.bound import Store
from tests.conftest import KAFKA_FIXTURES, Backend
from tests.single_partition import (
    append_to_partition,
    apply_retention,
    compact_partition,
    delete_records,
    truncate_partition,
)

TP = TopicPartition("orders", 0)
NOW = 1_790_000_000_000
DAY = 86_400_000
CONFIG = TopicConfig.from_mapping({"cleanup.policy": "compact,delete", "segment.bytes": 2500,
                                   "index.interval.bytes": 200, "segment.ms": DAY, "retention.ms": 30 * DAY})


def _updates(n: int, first_ts: int) -> pa.Table:
    rng = np.random.default_rng(n)
    return pa.table({"key": pa.array([b"key-%02d" % k for k in rng.integers(0, 20, n)], pa.binary()),
                     "value": pa.array([b"v%04d" % i for i in range(n)], pa.binary()),
                     "timestamp": pa.array(first_ts + np.arange(n), pa.int64())})


def _assert_sizes(catalog: Catalog, backend: Backend, tp: TopicPartition = TP) -> int:
    """Every live row's sidecar sizes are its objects'; the number of rows checked."""
    rows = catalog.live_segments(tp.topic, tp.partition)
    for row in rows:
        assert (row.index_size_bytes, row.timeindex_size_bytes) == (
            object_info(row.index_key, backend.options).size,
            object_info(row.timeindex_key, backend.options).size), row
    return len(rows)


def test_every_writer_records_the_sizes_of_the_sidecars_its_rows_name(backend: Backend) -> None:
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    root = backend.uri("root")
    append_to_partition(catalog, root, TP, _updates(300, NOW - 3 * DAY), CONFIG, NOW - 3 * DAY, backend.options)
    assert _assert_sizes(catalog, backend) >= 3
    before = catalog.version()
    run_single_partition(catalog, Store(root, backend.options), TP, CONFIG, partial(prepare_roll, store=Store(root, backend.options), now_ms=NOW - DAY, job_id="roll"), operation="roll", job_id="roll", planner=RollPlanner(NOW - DAY))
    assert catalog.version() == before + 1 and catalog.live_segments(TP.topic, TP.partition)[-1].size_bytes == 0
    _assert_sizes(catalog, backend)
    append_to_partition(catalog, root, TP, _updates(200, NOW - DAY), CONFIG, NOW - DAY, backend.options)
    assert compact_partition(catalog, root, TP, CONFIG, NOW, backend.options, force=True).cleaned
    _assert_sizes(catalog, backend)
    rows = catalog.live_segments(TP.topic, TP.partition)
    delete_records(catalog, root, TP, rows[1].base_offset + 1, NOW, backend.options)
    _assert_sizes(catalog, backend)
    truncate_partition(catalog, root, TP, rows[-1].next_offset - 3, CONFIG, NOW, backend.options)
    _assert_sizes(catalog, backend)
    apply_retention(catalog, root, TP, CONFIG, NOW + 28 * DAY + DAY // 2, backend.options)
    _assert_sizes(catalog, backend)
    rebuilt = run_single_partition(catalog, Store(root, backend.options), TP, CONFIG, partial(prepare_recovery, store=Store(root, backend.options), job_id="recover", now_ms=NOW, rebuild_all=True), operation="recover", job_id="recover")
    assert rebuilt.outcome(TP).repairs
    _assert_sizes(catalog, backend)

    for mode in ("preserve", "remap"):
        dest = Catalog.create(Store(backend.uri(f"{mode}-cat"), backend.options))
        run = mirror_partitions(Store(root, backend.options), catalog, Store(backend.uri(mode), backend.options), dest, [TP], mode=mode, now_ms=NOW)
        assert run.failures == {}
        assert _assert_sizes(dest, backend) > 0


def test_imports_record_the_sizes_of_the_sidecars_they_register(backend: Backend) -> None:
    source = backend.upload_tree(KAFKA_FIXTURES / "broker" / "timeindex_test-0", backend.uri("broker", "timeindex_test-0"))
    for copy in (True, False):
        catalog = Catalog.create(Store(backend.uri(f"cat-{copy}"), backend.options))
        report = import_log_dir(Store(source.rsplit("/", 1)[0], backend.options), backend.store(f"klake-{copy}"), catalog, copy=copy)
        assert not report.failed
        assert _assert_sizes(catalog, backend, TopicPartition("timeindex_test", 0)) == 4
