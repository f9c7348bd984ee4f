"""Truncation and DeleteRecords on a catalogued partition, against the records appended before."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from engine.catalog.schema import partition_log_start_offset
from engine.log.lookup import EARLIEST, list_offsets
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from kernel.names import TopicPartition
from layouts.store.bound import Store
from tests.catalog_rows import partition_segments
from tests.conftest import Backend
from tests.engine.ops.test_partition_append import _log
from tests.single_partition import append_to_partition, delete_records, truncate_partition

TP = TopicPartition("events", 0)
NOW = 1_790_000_000_000
CONFIG = TopicConfig.from_mapping({"segment.bytes": 3000, "index.interval.bytes": 300, "max.message.bytes": 400})


def _records(n: int) -> pa.Table:
    ts = NOW - 100_000 + np.arange(n) * 37 % 5000
    return pa.table({"key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
                     "value": pa.array([b"v%05d" % i for i in range(n)], pa.binary()),
                     "timestamp": pa.array(ts, pa.int64())})


@pytest.fixture
def appended(backend: Backend):
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    records = _records(200)
    append_to_partition(catalog, backend.uri("root"), TP, records, CONFIG, NOW, backend.options)
    return catalog, backend, records


def _expected(records: pa.Table, below: int, from_offset: int = 0) -> list[tuple]:
    return [(i, records["timestamp"][i].as_py(), records["key"][i].as_py(), records["value"][i].as_py())
            for i in range(from_offset, below)]


@pytest.mark.parametrize("target", [0, 1, 57, 120, 199, 200, 500])
def test_truncate_keeps_exactly_the_records_below_target(appended, target: int) -> None:
    catalog, backend, records = appended
    rows_before = catalog.live_segments(TP.topic, TP.partition)
    outcome = truncate_partition(catalog, backend.uri("root"), TP, target, CONFIG, NOW, backend.options)
    _, recs, _ = _log(catalog, backend)  # also checks every segment's sidecars
    assert recs == _expected(records, min(target, 200))
    rows = catalog.live_segments(TP.topic, TP.partition)
    assert rows[-1].next_offset == min(target, 200) and rows[-1].state == "ACTIVE"
    assert outcome.noop == (target >= 200) and outcome.records_removed == max(0, 200 - target)
    assert catalog.segments(states=["DELETE_STARTED"]).num_rows == 0
    if 0 < target < 200:
        assert len(rows) <= len(rows_before)
    more = append_to_partition(catalog, backend.uri("root"), TP, _records(5), CONFIG, NOW, backend.options)
    assert more.log_end_offset == min(target, 200) + 5


def test_truncate_below_the_first_segment_starts_the_log_there(appended) -> None:
    catalog, backend, _ = appended
    delete_records(catalog, backend.uri("root"), TP, 150, NOW, backend.options)
    truncate_partition(catalog, backend.uri("root"), TP, 30, CONFIG, NOW, backend.options)
    rows = catalog.live_segments(TP.topic, TP.partition)
    assert [(r.base_offset, r.next_offset) for r in rows] == [(30, 30)]
    assert partition_log_start_offset(rows) == 30


def test_delete_records_raises_the_log_start_and_retires_segments_below(appended) -> None:
    catalog, backend, records = appended
    before = catalog.live_segments(TP.topic, TP.partition)
    holder = next(r for r in reversed(before) if r.base_offset <= 101)
    outcome = delete_records(catalog, backend.uri("root"), TP, 101, NOW, backend.options)
    rows = catalog.live_segments(TP.topic, TP.partition)
    assert rows[0].base_offset == holder.base_offset and partition_log_start_offset(rows) == 101
    assert outcome.records_removed == sum(r.record_count for r in before if r.base_offset < holder.base_offset)
    segments = partition_segments(catalog, TP.topic, TP.partition)
    assert list_offsets(segments, EARLIEST, partition_log_start_offset(rows), min_timestamp=0).offset == 101
    ts = np.asarray(records["timestamp"].to_pylist())
    for target in ts[::13].tolist():
        hits = [i for i in range(101, 200) if ts[i] >= target]
        expected = (hits[0], int(ts[hits[0]])) if hits else (-1, -1)
        answer = list_offsets(segments, target, partition_log_start_offset(rows), min_timestamp=0)
        assert (answer.offset, answer.timestamp) == expected
    again = delete_records(catalog, backend.uri("root"), TP, 50, NOW, backend.options)
    assert again.noop and partition_log_start_offset(catalog.live_segments(TP.topic, TP.partition)) == 101
    with pytest.raises(Exception, match="the log ends at 200"):
        delete_records(catalog, backend.uri("root"), TP, 201, NOW, backend.options)
