"""ListOffsets over the catalog: golden answers, and at most three object reads per timestamp lookup
(spec 5.2 path: one `.timeindex`, one `.index`, one ranged read of one `.log`)."""

from __future__ import annotations

import json

import pytest

from engine.log.lookup import list_offsets
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from engine.ops.stored_segment import DEFAULT_READ_WINDOW, StoredSegment, lookup_window, stored_segment
from layouts.metering import metered
from layouts.store import object_info
from tests.catalog_rows import partition_segments
from tests.conftest import KAFKA_FIXTURES, Backend

PARTITION = "timeindex_test-0"


@pytest.fixture
def catalogued(backend: Backend) -> tuple[Catalog, Backend]:
    source = backend.upload_tree(KAFKA_FIXTURES / "broker" / PARTITION, backend.uri("broker", PARTITION))
    catalog = Catalog.create(backend.uri("catalog"), backend.options)
    report = import_log_dir(source.rsplit("/", 1)[0], backend.uri("klake"), catalog, copy=True,
                            options=backend.options)
    assert not report.failed and report.rows_added == 4
    return catalog, backend


def test_catalog_lookups_equal_golden_with_bounded_requests(catalogued) -> None:
    catalog, backend = catalogued
    golden = [json.loads(line) for line in
              (KAFKA_FIXTURES / "broker" / f"{PARTITION}.lookups.golden.jsonl").read_text().splitlines()]
    assert [s.row for s in partition_segments(catalog, "timeindex_test", 0, backend.options)] == \
        (rows := catalog.live_segments("timeindex_test", 0))
    for expected in golden if backend.name == "local" else golden[::5]:  # moto answers slowly
        segments = [StoredSegment(row, backend.options) for row in rows]  # cold: nothing cached
        with metered() as meter:
            requests = meter.requests
            answer = list_offsets(segments, expected["target"])
        assert (answer.offset, answer.timestamp) == (expected["offset"], expected["timestamp"])
        if expected["target"] in (-1, -2):
            assert sum(requests.values()) == 0
        else:
            assert requests["GET"] <= 3 and sum(requests.values()) == requests["GET"], (expected, requests)


def test_small_read_window_still_finds_records_across_chunks(catalogued) -> None:
    catalog, backend = catalogued
    rows = catalog.live_segments("timeindex_test", 0)
    golden = [json.loads(line) for line in
              (KAFKA_FIXTURES / "broker" / f"{PARTITION}.lookups.golden.jsonl").read_text().splitlines()]
    segments = [StoredSegment(row, backend.options, read_window=100) for row in rows]
    for expected in golden[::7] if backend.name == "local" else golden[::31]:
        answer = list_offsets(segments, expected["target"])
        assert (answer.offset, answer.timestamp) == (expected["offset"], expected["timestamp"])


def test_lookup_windows_read_little_and_a_task_reads_each_range_once(catalogued) -> None:
    """`stored_segment` (the offsets-for-times job's segments): golden answers; per target a cold task
    reads the sidecars and one `lookup_window` of the log at most, and asking again costs nothing."""
    catalog, backend = catalogued
    rows = catalog.live_segments("timeindex_test", 0)
    golden = [json.loads(line) for line in
              (KAFKA_FIXTURES / "broker" / f"{PARTITION}.lookups.golden.jsonl").read_text().splitlines()]
    config = TopicConfig()
    sidecars = sum(object_info(key, backend.options).size for row in rows for key in (row.index_key, row.timeindex_key))
    window = max(lookup_window(row, config.index_interval_bytes) for row in rows)
    assert window < DEFAULT_READ_WINDOW
    warm = [stored_segment(row, backend.options, config) for row in rows]
    for expected in golden if backend.name == "local" else golden[::5]:
        cold = [stored_segment(row, backend.options, config) for row in rows]
        with metered() as meter:
            answer = list_offsets(cold, expected["target"])
        assert (answer.offset, answer.timestamp) == (expected["offset"], expected["timestamp"])
        assert meter.requests["GET"] <= 3 and meter.bytes["read"] <= sidecars + window, (expected, meter)
        list_offsets(warm, expected["target"])
        with metered() as again:
            assert list_offsets(warm, expected["target"]) == answer
        assert again.requests["GET"] == 0, expected
