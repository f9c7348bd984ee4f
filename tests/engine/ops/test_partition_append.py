"""Appending to a catalogued partition: one job or several give the same log; re-runs never duplicate."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from engine.format import records as records_module
from engine.format.batch import scan_batches
from engine.format.records import decode_records
from engine.index.checks import check_sidecars
from engine.log.lookup import list_offsets
from engine.log.summary import SegmentSummary, summarize_segment
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.append import prepare_append
from engine.ops.catalog_table import Catalog
from engine.ops.run import PartitionInput
from kernel.names import TopicPartition
from layouts.store import read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import partition_segments
from tests.conftest import Backend
from tests.single_partition import append_to_partition

TP = TopicPartition("events", 0)
NOW = 1_790_000_000_000
CONFIG = TopicConfig.from_mapping({"segment.bytes": 6000, "index.interval.bytes": 500, "max.message.bytes": 100,
                                   "message.timestamp.after.max.ms": 60_000})


def _records(n: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    ts = NOW - 3_600_000 + np.sort(rng.integers(0, 3_600_000, n))
    return pa.table({"key": pa.array([b"k%03d" % (i % 50) for i in range(n)], pa.binary()),
                     "value": pa.array([b"value-%05d" % i for i in range(n)], pa.binary()),
                     "timestamp": pa.array(ts, pa.int64())})


def _log(catalog: Catalog, backend: Backend, tp: TopicPartition = TP) -> tuple[list[int], list[tuple], bytes]:
    rows = catalog.live_segments(tp.topic, tp.partition)
    records, blob = [], b""
    for row in rows:
        data = read_bytes(row.log_key, backend.options)
        headers = scan_batches(data, row.log_key).headers
        check = check_sidecars(headers, row.base_offset, read_bytes(row.index_key, backend.options),
                               read_bytes(row.timeindex_key, backend.options), row.log_key,
                               active=row.state == "ACTIVE", min_timestamp=0)
        assert check.problems == []
        table = decode_records(data, headers, row.log_key).to_arrow(headers)
        records += list(zip(table["offset"].to_pylist(), table["timestamp"].to_pylist(),
                            table["key"].to_pylist(), table["value"].to_pylist(), strict=True))
        blob += data + read_bytes(row.index_key, backend.options) + read_bytes(row.timeindex_key, backend.options)
    return [r.base_offset for r in rows], records, blob


def test_one_job_or_three_give_the_same_segments_indexes_and_records(backend: Backend) -> None:
    """max.message.bytes fits one record per batch, so every split is a produce-request boundary and
    the logs must be byte-identical (Kafka's roll and index rules carried across jobs)."""
    records = _records(300)
    whole = Catalog.create(Store(backend.uri("whole"), backend.options))
    out = append_to_partition(whole, backend.uri("root-whole"), TP, records, CONFIG, NOW, backend.options)
    assert out.counters.records_accepted == 300 and out.log_end_offset == 300
    split = Catalog.create(Store(backend.uri("split"), backend.options))
    for start, stop in ((0, 70), (70, 71), (71, 300)):
        append_to_partition(split, backend.uri("root-split"), TP, records.slice(start, stop - start), CONFIG, NOW,
                            backend.options)
    bases_whole, recs_whole, blob_whole = _log(whole, backend)
    bases_split, recs_split, blob_split = _log(split, backend)
    assert len(bases_whole) > 3 and bases_whole == bases_split
    assert blob_whole == blob_split
    assert recs_whole == recs_split == [(i, records["timestamp"][i].as_py(), records["key"][i].as_py(),
                                         records["value"][i].as_py()) for i in range(300)]


def test_rejects_are_reported_and_accepted_records_unaffected(backend: Backend) -> None:
    records = _records(20)
    ts = records["timestamp"].to_pylist()
    ts[5] = NOW + 3_600_000  # beyond message.timestamp.after.max.ms
    records = records.set_column(2, "timestamp", pa.array(ts, pa.int64()))
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    out = append_to_partition(catalog, backend.uri("root"), TP, records, CONFIG, NOW, backend.options)
    assert out.counters.records_accepted == 19 and out.rejects.num_rows == 1
    assert out.rejects["row"].to_pylist() == [5] and out.rejects["reason"].to_pylist() == ["INVALID_TIMESTAMP"]
    _, recs, _ = _log(catalog, backend)
    assert [r[3] for r in recs] == [v for i, v in enumerate(records["value"].to_pylist()) if i != 5]
    assert [r[0] for r in recs] == list(range(19))


def test_rerun_of_a_committed_append_adds_nothing_and_a_crash_before_commit_loses_nothing(backend: Backend) -> None:
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    first, second = _records(40, 1), _records(40, 2)
    append_to_partition(catalog, backend.uri("root"), TP, first, CONFIG, NOW, backend.options, append_id="job-1")
    again = append_to_partition(catalog, backend.uri("root"), TP, first, CONFIG, NOW, backend.options,
                                append_id="job-1")
    assert again.already_committed and len(_log(catalog, backend)[1]) == 40
    rows = tuple(catalog.live_segments(TP.topic, TP.partition))
    prepare_append(PartitionInput(TP, rows, CONFIG), records=second, store=backend.store("root"), now_ms=NOW,
                   append_id="job-2")  # dies here, before the commit
    assert len(_log(catalog, backend)[1]) == 40
    append_to_partition(catalog, backend.uri("root"), TP, second, CONFIG, NOW, backend.options, append_id="job-2")
    _, recs, _ = _log(catalog, backend)
    assert [r[0] for r in recs] == list(range(80)) and [r[3] for r in recs[40:]] == second["value"].to_pylist()


def test_lookups_over_appended_data_equal_brute_force(backend: Backend) -> None:
    records = _records(200)
    catalog = Catalog.create(Store(backend.uri("cat"), backend.options))
    append_to_partition(catalog, backend.uri("root"), TP, records, CONFIG, NOW, backend.options)
    ts = np.asarray(records["timestamp"].to_pylist())
    segments = partition_segments(catalog, TP.topic, TP.partition)
    for target in [int(ts.min()) - 1, *ts[::17].tolist(), int(ts.max()), int(ts.max()) + 1]:
        hits = np.flatnonzero(ts >= target)
        expected = (int(hits[0]), int(ts[hits[0]])) if hits.size else (-1, -1)
        answer = list_offsets(segments, target, min_timestamp=0)
        assert (answer.offset, answer.timestamp) == expected


def test_an_append_never_decodes_what_it_wrote_and_its_rows_equal_a_decode(backend: Backend, monkeypatch) -> None:
    """The rows' facts come from the encoder's arrays (issue 13): with the decoder disabled, appends
    (fresh, resumed, rolling) still commit, and their rows equal what decoding the objects gives."""
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    root = backend.uri("root")

    def no_decoding(*_args, **_kwargs):
        raise AssertionError("the append decoded records")

    with monkeypatch.context() as patch:
        patch.setattr(records_module.codec, "decode_v2", no_decoding)
        for start, stop in ((0, 120), (120, 121), (121, 300)):
            append_to_partition(catalog, root, TP, _records(300).slice(start, stop - start), CONFIG, NOW,
                                backend.options)
    rows = catalog.live_segments(TP.topic, TP.partition)
    assert len(rows) > 3
    floor = min_timestamp(CONFIG)
    for row in rows:
        truth = summarize_segment(read_bytes(row.log_key, backend.options), row.base_offset, row.log_key,
                                  min_timestamp=floor)
        assert SegmentSummary.recorded(row) == truth


def test_a_streamed_append_keeps_records_offsets_and_rejects_of_one_append(backend: Backend) -> None:
    """`prepare_append` over a stream of chunks (issue 14): every closed segment is written as it closes;
    the records, offsets, rejects (numbered across the stream) and catalog facts are those of one
    append of the whole input; only batch boundaries may differ, at the chunk boundaries."""
    records = _records(400, seed=3)
    late = records.column("timestamp").to_numpy().copy()
    late[[5, 150, 399]] = NOW - 30 * 86_400_000  # rejected: before message.timestamp.before.max.ms
    config = TopicConfig.from_mapping({"segment.bytes": 6000, "index.interval.bytes": 500,
                                       "max.message.bytes": 400, "message.timestamp.before.max.ms": 86_400_000})
    records = records.set_column(2, "timestamp", pa.array(late, pa.int64()))
    whole = Catalog.create(Store(backend.uri("whole"), backend.options))
    one = append_to_partition(whole, backend.uri("root-whole"), TP, records, config, NOW, backend.options)
    streamed = Catalog.create(Store(backend.uri("streamed"), backend.options))
    cuts = [0, 90, 91, 250, 400]
    chunks = (records.slice(a, b - a) for a, b in zip(cuts, cuts[1:], strict=False))
    step = prepare_append(PartitionInput(TP, (), config), records=chunks, store=backend.store("root-streamed"),
                          now_ms=NOW, append_id="streamed")
    streamed.apply(step.change, operation="append", job_id="streamed")
    ours, theirs = step.outcome.counters, one.counters
    assert (ours.records_in, ours.records_accepted, ours.rejected) == (theirs.records_in, theirs.records_accepted,
                                                                       theirs.rejected) == (400, 397, ours.rejected)
    assert sum(ours.rejected.values()) == 3
    assert step.outcome.rejects.column("row").to_pylist() == one.rejects.column("row").to_pylist() == [5, 150, 399]
    assert step.outcome.log_end_offset == one.log_end_offset == 397
    assert _log(streamed, backend)[1] == _log(whole, backend)[1]
    floor = min_timestamp(config)
    for row in streamed.live_segments(TP.topic, TP.partition):
        assert SegmentSummary.recorded(row) == summarize_segment(read_bytes(row.log_key, backend.options), row.base_offset,
                                                     row.log_key, min_timestamp=floor)
