"""Retention applied through the catalog: two-phase delete, objects removed, crash-safe, idempotent."""

from __future__ import annotations

import pytest

from engine.catalog.schema import Layout, SegmentState
from engine.format.builder import encode_batch
from engine.log.retention_explain import RetentionExplanation
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.summary import summarize_segment
from engine.log.topic_config import TopicConfig
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from engine.ops.versions import segment_row
from layouts.object_layout import new_segment_id, object_segment_keys, put_segment_objects
from layouts.store import filesystem, object_info
from layouts.store.bound import Store
from tests.catalog_rows import add_segments, all_segments, transition
from tests.conftest import Backend
from tests.single_partition import apply_retention

DAY = 86_400_000
T0 = 1_790_000_000_000
TP = TopicPartition("events", 0)


def _build(backend: Backend, catalog: Catalog, days: int = 6) -> list:
    """One segment per day (segment.ms = 1 day), 24 hourly batches each, registered in the catalog."""
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=DAY - 1)), min_timestamp=0)
    for hour in range(days * 24):
        ts = T0 + hour * 3_600_000
        data = encode_batch([b"k%d" % hour], [b"v"], [ts], base_offset=hour)
        writer.append(Append(data, hour, hour, ts, hour), now_ms=T0)
    segments = all_segments(writer)
    rows = []
    for i, seg in enumerate(segments):
        segment_id = new_segment_id()
        keys = object_segment_keys(backend.uri("root"), TP, seg.base_offset, segment_id)
        put_segment_objects(keys, seg.log, seg.index, seg.timeindex, backend.options)
        state = SegmentState.ACTIVE if i == len(segments) - 1 else SegmentState.ROLLED
        rows.append(segment_row(TP, segment_id, keys, Layout.OBJECT,
                                summarize_segment(seg.log, seg.base_offset,
                                                  min_timestamp=0), state, "build", created_at_ms=T0,
                                index_size_bytes=len(seg.index), timeindex_size_bytes=len(seg.timeindex)))
    add_segments(catalog, rows)
    return rows


@pytest.fixture
def setup(backend: Backend):
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    return backend, catalog, _build(backend, catalog)


def _exists(backend: Backend, row) -> list[bool]:
    return [object_info(k, backend.options) is not None for k in (row.log_key, row.index_key, row.timeindex_key)]


def test_time_retention_deletes_old_segments_and_their_objects(setup) -> None:
    backend, catalog, rows = setup
    config = TopicConfig.from_mapping({"retention.ms": 2 * DAY})
    now = T0 + 5 * DAY + 12 * 3_600_000  # segments whose last hour is older than 2 days go: days 0, 1, 2
    dry = apply_retention(catalog, backend.uri("root"), TP, config, now, backend.options, dry_run=True)
    assert [r.base_offset for r in RetentionExplanation(dry.plan).to_delete] == [0, 24, 48]
    assert len(catalog.live_segments("events", 0)) == 6 and all(all(_exists(backend, r)) for r in rows)

    outcome = apply_retention(catalog, backend.uri("root"), TP, config, now, backend.options)
    live = catalog.live_segments("events", 0)
    assert [r.base_offset for r in live] == [72, 96, 120]
    assert catalog.segments(states=[SegmentState.DELETE_STARTED]).num_rows == 0
    assert [_exists(backend, r) for r in rows] == [[False] * 3] * 3 + [[True] * 3] * 3
    assert len(outcome.cleanup.deleted_objects) == 9 and not outcome.cleanup.failed_deletes
    again = apply_retention(catalog, backend.uri("root"), TP, config, now, backend.options)
    assert RetentionExplanation(again.plan).to_delete == () and again.cleanup.commit_versions == []


def test_a_crash_after_delete_started_is_finished_by_the_next_run(setup) -> None:
    backend, catalog, rows = setup
    transition(catalog, [rows[0].ref], SegmentState.DELETE_STARTED)  # phase 1 committed, then the job died
    config = TopicConfig.from_mapping({"retention.ms": -1})
    outcome = apply_retention(catalog, backend.uri("root"), TP, config, T0 + 10 * DAY, backend.options)
    assert outcome.finished_from_earlier_run == 1 and _exists(backend, rows[0]) == [False] * 3
    assert catalog.rows_of([("events", 0)]).keys() == {r.ref for r in rows[1:]}


def test_deleting_everything_rolls_an_empty_active_segment_at_the_log_end(setup) -> None:
    backend, catalog, rows = setup
    config = TopicConfig.from_mapping({"retention.ms": DAY})
    outcome = apply_retention(catalog, backend.uri("root"), TP, config, T0 + 30 * DAY, backend.options)
    assert outcome.plan.roll_new_active_at == 144
    live = catalog.live_segments("events", 0)
    assert [(r.base_offset, r.next_offset, r.size_bytes, r.state) for r in live] == [(144, 144, 0, "ACTIVE")]
    assert all(_exists(backend, live[0])) and not any(any(_exists(backend, r)) for r in rows)


def test_size_retention_keeps_at_least_retention_bytes(setup) -> None:
    backend, catalog, rows = setup
    limit = sum(r.size_bytes for r in rows[2:])
    config = TopicConfig.from_mapping({"retention.bytes": limit, "retention.ms": -1})
    apply_retention(catalog, backend.uri("root"), TP, config, T0, backend.options)
    assert [r.base_offset for r in catalog.live_segments("events", 0)] == [r.base_offset for r in rows[2:]]


@pytest.mark.s3
def test_a_key_s3_refuses_in_a_bulk_delete_keeps_its_row_delete_started(s3_backend) -> None:
    """S3's DeleteObjects answers per key: the key it refuses is reported and its row stays DELETE_STARTED,
    the others' rows go; the next run deletes it and removes the row. moto refuses no key of a plain
    DeleteObjects (an object-locked version is refused only when the request names its version id, and
    klake names none), so the refusal is put into moto's answer, as S3 returns it (`Errors`)."""
    backend = s3_backend
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    rows = _build(backend, catalog)
    refused = rows[1].index_key
    fs, _ = filesystem(backend.base, backend.options)
    real_call = fs.call_s3
    requests: list[int] = []

    def refusing_call(method: str, *args, **kwargs):
        if method != "delete_objects":
            return real_call(method, *args, **kwargs)
        asked = kwargs["Delete"]["Objects"]
        requests.append(len(asked))
        refused_key = refused.split("/", 3)[3]
        kwargs["Delete"] = {**kwargs["Delete"], "Objects": [o for o in asked if o["Key"] != refused_key]}
        response = real_call(method, *args, **kwargs)
        if len(kwargs["Delete"]["Objects"]) < len(asked):
            response["Errors"] = [*response.get("Errors", []),
                                  {"Key": refused_key, "Code": "AccessDenied", "Message": "Access Denied"}]
        return response

    config = TopicConfig.from_mapping({"retention.ms": 2 * DAY})
    now = T0 + 5 * DAY + 12 * 3_600_000  # days 0, 1, 2 go
    fs.call_s3 = refusing_call
    try:
        outcome = apply_retention(catalog, backend.uri("root"), TP, config, now, backend.options)
    finally:
        del fs.call_s3
    assert requests == [9]  # one DeleteObjects for the nine objects
    assert outcome.cleanup.failed_deletes == {refused: "AccessDenied: Access Denied"}
    assert sorted(outcome.cleanup.deleted_objects) == sorted(
        k for r in rows[:3] for k in (r.log_key, r.index_key, r.timeindex_key) if k != refused)
    assert catalog.segments(states=[SegmentState.DELETE_STARTED])["segment_id"].to_pylist() == [rows[1].segment_id]
    assert catalog.rows_of([("events", 0)]).keys() == {r.ref for r in rows[1:2] + rows[3:]}
    assert [_exists(backend, r) for r in rows[:3]] == [[False] * 3, [False, True, False], [False] * 3]

    again = apply_retention(catalog, backend.uri("root"), TP, config, now, backend.options)
    assert again.finished_from_earlier_run == 1 and not again.cleanup.failed_deletes
    assert _exists(backend, rows[1]) == [False] * 3
    assert catalog.rows_of([("events", 0)]).keys() == {r.ref for r in rows[3:]}
