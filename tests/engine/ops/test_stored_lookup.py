"""ListOffsets over the catalog: golden answers, and at most three object reads per timestamp lookup
(spec 5.2 path: one `.timeindex`, one `.index`, one ranged read of one `.log`)."""

from __future__ import annotations

import json
from dataclasses import astuple, replace

import numpy as np
import pytest

from engine.catalog.schema import SegmentState
from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.format.records import decode_records
from engine.log.lookup import list_offsets
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from engine.ops.paged_index import INDEX_PAGE_BYTES
from engine.ops.stored_segment import DEFAULT_READ_WINDOW, StoredSegment, lookup_window, stored_segment
from engine.ops.versions import store_segment_version
from kernel.errors import CorruptRecordError
from kernel.names import TopicPartition
from layouts.metering import metered
from layouts.object_layout import batch_index_key
from layouts.store import object_info, read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import partition_segments
from tests.conftest import KAFKA_FIXTURES, Backend

PARTITION = "timeindex_test-0"


@pytest.fixture
def catalogued(backend: Backend) -> tuple[Catalog, Backend]:
    source = backend.upload_tree(KAFKA_FIXTURES / "broker" / PARTITION, backend.uri("broker", PARTITION))
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    report = import_log_dir(Store(source.rsplit("/", 1)[0], backend.options), backend.store("klake"), catalog, copy=True)
    assert not report.failed and report.rows_added == 4
    return catalog, backend


def test_catalog_lookups_equal_golden_with_bounded_requests(catalogued) -> None:
    catalog, backend = catalogued
    golden = [json.loads(line) for line in
              (KAFKA_FIXTURES / "broker" / f"{PARTITION}.lookups.golden.jsonl").read_text().splitlines()]
    assert [s.row for s in partition_segments(catalog, "timeindex_test", 0)] == \
        (rows := catalog.live_segments("timeindex_test", 0))
    for expected in golden if backend.name == "local" else golden[::5]:  # moto answers slowly
        segments = [StoredSegment(row, backend.store(),
                                  min_timestamp=0) for row in rows]  # cold: nothing cached
        with metered() as meter:
            requests = meter.requests
            answer = list_offsets(segments, expected["target"], min_timestamp=0)
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
    segments = [StoredSegment(row, backend.store(), read_window=100, min_timestamp=0) for row in rows]
    for expected in golden[::7] if backend.name == "local" else golden[::31]:
        answer = list_offsets(segments, expected["target"], min_timestamp=0)
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
    warm = [stored_segment(row, backend.store(), config) for row in rows]
    for expected in golden if backend.name == "local" else golden[::5]:
        cold = [stored_segment(row, backend.store(), config) for row in rows]
        with metered() as meter:
            answer = list_offsets(cold, expected["target"], min_timestamp=0)
        assert (answer.offset, answer.timestamp) == (expected["offset"], expected["timestamp"])
        assert meter.requests["GET"] <= 3 and meter.bytes["read"] <= sidecars + window, (expected, meter)
        list_offsets(warm, expected["target"], min_timestamp=0)
        with metered() as again:
            assert list_offsets(warm, expected["target"], min_timestamp=0) == answer
        assert again.requests["GET"] == 0, expected


def _paged_partition(backend: Backend, tail: dict[str, bytes] | None = None) -> tuple[list, np.ndarray]:
    """One segment of 3,000 single-record batches, every one indexed: sidecars of several pages. `tail`
    appends bytes to a sidecar ("index" / "timeindex") as a broken upload would leave it."""
    rng = np.random.default_rng(7)
    stamps = 1_000_000 + np.sort(rng.integers(0, 10**7, 3000)) + rng.integers(-500, 500, 3000)
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=10**15, index_interval_bytes=1)), min_timestamp=0)
    for offset, ts in enumerate(stamps.tolist()):
        data = encode_batch([b"k"], [b"v" * 50], [ts], base_offset=offset)
        writer.append(Append(data, offset, offset, ts, offset), now_ms=0)
    seg = writer.active.close(None)
    assert len(seg.index) > 4 * INDEX_PAGE_BYTES and len(seg.timeindex) > 4 * INDEX_PAGE_BYTES
    tail = tail or {}
    row = store_segment_version(Store(backend.uri("paged"), backend.options), TopicPartition("t", 0), 0, seg.log, seg.index + tail.get("index", b""), seg.timeindex + tail.get("timeindex", b""), SegmentState.ROLLED, "test", 0, min_timestamp=0)
    return [row], stamps


@pytest.mark.parametrize("damage", ["none", "zero-padded timeindex", "index length off by 4"])
def test_paged_sidecars_answer_as_brute_force_and_fall_back_whole_when_damaged(backend: Backend, damage: str) -> None:
    """Sidecars larger than a page are searched a page at a time (far fewer bytes than whole on a cold
    task); a damaged one (KAFKA-10207 zero padding, a length that is not a multiple of the entry size)
    is read whole instead and the answers stay exact."""
    tail = {"none": {}, "zero-padded timeindex": {"timeindex": bytes(12 * 2000)},
            "index length off by 4": {"index": b"\0\0\0\1"}}[damage]
    rows, stamps = _paged_partition(backend, tail)
    sidecars = sum(object_info(key, backend.options).size for key in (rows[0].index_key, rows[0].timeindex_key))
    rng = np.random.default_rng(1)
    targets = [int(stamps.min()) - 1, int(stamps.max()), int(stamps.max()) + 1,
               *rng.integers(int(stamps.min()), int(stamps.max()), 12 if backend.name == "local" else 4).tolist()]
    task = [stored_segment(rows[0], backend.store())]
    for target in targets:
        hits = np.flatnonzero(stamps >= target)
        expected = (int(hits[0]), int(stamps[hits[0]])) if hits.size else (-1, -1)
        cold = [stored_segment(rows[0], backend.store())]
        with metered() as meter:
            answer = list_offsets(cold, target, min_timestamp=0)
        assert (answer.offset, answer.timestamp) == expected, (damage, target)
        assert astuple(list_offsets(task, target, min_timestamp=0))[:2] == expected, (damage, target)
        if damage == "none":
            assert meter.bytes["read"] < sidecars / 2, (target, meter.bytes)
    assert bool(task[0].index_problems) == (damage != "none"), task[0].index_problems
    top = int(np.argmax(stamps))
    top_answer = list_offsets(task, -3, min_timestamp=0)
    assert (top_answer.offset, top_answer.timestamp) == (top, int(stamps[top]))


def test_chunks_go_on_when_a_window_ends_exactly_on_a_batch_boundary(backend: Backend) -> None:
    """A read window that ends where a batch ends is not the end of the log (range reads and lookups
    read on from there)."""
    rows, stamps = _paged_partition(backend)
    first = scan_batches(read_bytes(rows[0].log_key, backend.options, 0, 4096), strict=False).headers
    segment = StoredSegment(rows[0], backend.store(), read_window=int(first.size[0]) * 3, min_timestamp=0)
    assert sum(len(headers) for _, headers in segment.chunks_from(0)) == rows[0].batch_count == len(stamps)


def test_rows_carry_the_sidecar_sizes_so_a_cold_lookup_gets_the_searched_pages_directly(backend: Backend) -> None:
    """With the sidecars' sizes in the row, a cold lookup on a segment whose sidecars span many pages
    makes at most 3 GETs and no HEAD (its first read of each sidecar is the interpolated page); an older
    catalog's row (sizes unknown) or a row whose sizes are wrong still answers as brute force."""
    rows, stamps = _paged_partition(backend)
    row = rows[0]
    assert (row.index_size_bytes, row.timeindex_size_bytes) == (
        object_info(row.index_key, backend.options).size, object_info(row.timeindex_key, backend.options).size)
    rng = np.random.default_rng(3)
    targets = [int(stamps.min()) - 1, int(stamps.max()), int(stamps.max()) + 1,
               *rng.integers(int(stamps.min()), int(stamps.max()), 12 if backend.name == "local" else 4).tolist()]
    variants = {"sizes": row, "older catalog": replace(row, index_size_bytes=None, timeindex_size_bytes=None),
                "sizes too large": replace(row, index_size_bytes=row.index_size_bytes + 2400,
                                           timeindex_size_bytes=row.timeindex_size_bytes + 2400),
                "sizes too small": replace(row, index_size_bytes=row.index_size_bytes - 2400,
                                           timeindex_size_bytes=row.timeindex_size_bytes - 2400),
                "sizes zero": replace(row, index_size_bytes=0, timeindex_size_bytes=0)}
    for name, variant in variants.items():
        for target in [*targets, -3]:
            hits = np.flatnonzero(stamps >= target) if target >= 0 else [int(np.argmax(stamps))]
            expected = (int(hits[0]), int(stamps[hits[0]])) if len(hits) else (-1, -1)
            with metered() as meter:
                answer = list_offsets([stored_segment(variant, backend.store())], target, min_timestamp=0)
            assert (answer.offset, answer.timestamp) == expected, (name, target)
            if name == "sizes":
                assert meter.requests["GET"] <= 3 and sum(meter.requests.values()) == meter.requests["GET"], \
                    (target, meter.requests)


def _crc_flipped(log: bytes, position: int) -> bytes:
    changed = bytearray(log)
    changed[position + 17] ^= 0x01  # the stored CRC only: the batch's records are intact
    return bytes(changed)


@pytest.mark.parametrize("broken", [None, 0, 7, 8, 20, 39])
@pytest.mark.parametrize("step", [1, 2])
def test_decoded_chunks_check_every_crc_and_name_the_absolute_byte(backend: Backend, broken: int | None,
                                                                  step: int) -> None:
    """`decoded_from` (the read job's path: CRCs checked in the decoder's pass) gives the records of the
    batches it picks, as a whole-file CRC-checked scan and `decode_records` do; a batch with a bad CRC,
    picked or skipped, in any window, fails it naming the batch's byte in the segment."""
    log = b"".join(encode_batch([b"k"] * 5, [b"v" * 80] * 5, [10 * i] * 5, base_offset=5 * i) for i in range(40))
    truth = scan_batches(log).headers
    if broken is not None:
        log = _crc_flipped(log, int(truth.position[broken]))
    row = store_segment_version(Store(backend.uri("crcs"), backend.options), TopicPartition("t", 0), 0, log, b"", b"", SegmentState.ROLLED, "test", 0, min_timestamp=0)
    segment = StoredSegment(row, backend.store(), read_window=int(truth.size[0]) * 3 + 10, min_timestamp=0)
    pick = lambda h: np.arange(0, len(h), step)  # noqa: E731
    if broken is None:
        offsets = np.concatenate([r.offset for r, _, _ in segment.decoded_from(0, pick)])
        chunked = [decode_records(d, h.take(pick(h))).offset for d, h in segment.chunks_from(0)]
        assert offsets.tolist() == np.concatenate(chunked).tolist()
        return
    with pytest.raises(CorruptRecordError) as err:
        for _ in segment.decoded_from(0, pick):
            pass
    assert (err.value.position, err.value.field) == (int(truth.position[broken]), "crc")
    assert err.value.source == row.log_key


def _small_batch_partition(backend: Backend) -> tuple[list, np.ndarray]:
    """Segments of batches well below `index.interval.bytes` (an index entry every ~5-10 batches), with
    disordered timestamps: each stored with a `.batchindex`."""
    rng = np.random.default_rng(11)
    count = 6000
    stamps = 1_000_000 + np.sort(rng.integers(0, 10**7, count)) + rng.integers(-3_000, 3_000, count)
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=128 * 1024, segment_ms=10**15)), min_timestamp=0)
    first = 0
    while first < count:
        ts = stamps[first:first + int(rng.integers(1, 7))]
        data = encode_batch([b"k"] * len(ts), [b"v" * 60] * len(ts), ts, base_offset=first)
        last = first + len(ts) - 1
        writer.append(Append(data, first, last, int(ts.max()), first + int(np.argmax(ts))), now_ms=0)
        first = last + 1
    closed = [*writer.closed, writer.active.close(None)]
    rows = [store_segment_version(Store(backend.uri("small"), backend.options), TopicPartition("t", 0), seg.base_offset, seg.log, seg.index, seg.timeindex, SegmentState.ROLLED, "test", 0, min_timestamp=0) for seg in closed]
    return rows, stamps


def test_a_batch_index_leads_a_cold_lookup_to_the_answering_batch_alone(backend: Backend) -> None:
    """With a `.batchindex` a cold timestamp lookup reads the `.timeindex`, the entry's group and exactly the
    answering batch (3 GETs, no `.index`), and answers as brute force over every record."""
    rows, stamps = _small_batch_partition(backend)
    assert len(rows) > 3 and all(r.batchindex_size_bytes for r in rows)
    rng = np.random.default_rng(5)
    targets = [int(stamps.min()) - 1, int(stamps.min()), int(stamps.max()), int(stamps.max()) + 1,
               *rng.choice(stamps, 40 if backend.name == "local" else 8).tolist(),
               *rng.integers(int(stamps.min()), int(stamps.max()), 40 if backend.name == "local" else 8).tolist()]
    task = [stored_segment(row, backend.store()) for row in rows]
    for target in targets:
        hits = np.flatnonzero(stamps >= target)
        expected = (int(hits[0]), int(stamps[hits[0]])) if hits.size else (-1, -1)
        cold = [stored_segment(row, backend.store()) for row in rows]
        with metered() as meter:
            answer = list_offsets(cold, target, min_timestamp=0)
        assert (answer.offset, answer.timestamp) == expected, target
        assert astuple(list_offsets(task, target, min_timestamp=0))[:2] == expected, target
        if not hits.size:
            continue
        row = next(r for r in rows if r.base_offset <= expected[0] < r.next_offset)
        headers = scan_batches(read_bytes(row.log_key, backend.options)).headers
        batch = int(headers.size[int(np.searchsorted(headers.last_offset, expected[0]))])
        stride = row.batchindex_size_bytes // (row.timeindex_size_bytes // 12 + 1)
        assert meter.requests["GET"] == 3 and sum(meter.requests.values()) == 3, (target, meter.requests)
        assert meter.bytes["read"] == row.timeindex_size_bytes + stride + batch, (target, meter.bytes)
    assert not any(s.index_problems for s in task)


def test_a_batch_index_that_places_batches_wrongly_is_set_aside_and_answers_stay_exact(backend: Backend) -> None:
    """A `.batchindex` whose positions name the next batch each time (a layout that checks out, but not
    this log's): every lookup still answers as brute force, Kafka's way, and the segment says why."""
    rows, stamps = _small_batch_partition(backend)
    entry = np.dtype([("ts", ">i8"), ("offset", ">i4"), ("position", ">i4"), ("size", ">i4")])
    for row in rows:
        headers = scan_batches(read_bytes(row.log_key, backend.options)).headers
        key = batch_index_key(row.timeindex_key)
        entries = np.frombuffer(read_bytes(key, backend.options), dtype=entry).copy()
        used = entries["size"] > 0
        nxt = np.minimum(np.searchsorted(headers.position, entries["position"][used]) + 1, len(headers) - 1)
        entries["position"][used], entries["size"][used] = headers.position[nxt], headers.size[nxt]
        backend.put(key, entries.tobytes())
    rng = np.random.default_rng(8)
    task = [stored_segment(row, backend.store()) for row in rows]
    for target in rng.choice(stamps, 30 if backend.name == "local" else 6).tolist():
        hits = np.flatnonzero(stamps >= target)
        answer = list_offsets(task, target, min_timestamp=0)
        assert astuple(answer)[:2] == (int(hits[0]), int(stamps[hits[0]])), target
    assert any("is not in the log there" in p for s in task for p in s.index_problems)


def test_max_timestamp_of_a_stored_pre_1970_partition_with_an_empty_active_segment(backend: Backend) -> None:
    """offsets-for-times' segments (`stored_segment` over catalog rows) of a KIP-228 topic whose records are
    all before 1970, ending in the empty ACTIVE segment a roll or a full retention leaves: -3 answers the
    first record with the largest timestamp (brute force), and the empty segment's row says "no timestamp"
    (one below the floor), not -1, which is a time on this topic."""
    config = TopicConfig(allow_negative_timestamps=True)
    floor = min_timestamp(config)
    stamps = [-9_000, -5_000, -7_000, -5_000, -8_000, -6_000]
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=200, segment_ms=10**15)), min_timestamp=floor)
    for offset, ts in enumerate(stamps):  # KIP-228 batches keep their true (negative) max timestamp
        data = encode_batch([b"k"], [b"v" * 50], [ts], base_offset=offset, max_timestamp=ts)
        writer.append(Append(data, offset, offset, ts, offset), now_ms=0)
    closed = [*writer.closed, writer.active.close(None)]
    tp, root = TopicPartition("old", 0), backend.uri("old")
    rows = [store_segment_version(Store(root, backend.options), tp, s.base_offset, s.log, s.index, s.timeindex, SegmentState.ROLLED, "test", 0, min_timestamp=floor) for s in closed]
    empty = store_segment_version(Store(root, backend.options), tp, len(stamps), b"", b"", b"", SegmentState.ACTIVE, "test", 0, min_timestamp=floor)
    assert len(rows) > 1 and empty.largest_timestamp == empty.first_batch_timestamp == floor - 1
    segments = [stored_segment(row, backend.store(), config) for row in [*rows, empty]]
    top = max(stamps)
    answer = list_offsets(segments, -3, min_timestamp=floor)
    assert (answer.offset, answer.timestamp) == (stamps.index(top), top) == (1, -5_000)
