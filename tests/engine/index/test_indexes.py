"""The index layer against independent truth: a Kafka 3.4 broker's `.index` / `.timeindex` files,
golden dumps from an independent decoder, brute-force answers from batch headers, and Kafka's rules
worked out by hand (spec 1.9, 1.10, 1.12, 2.5, 2.6, 5.2, 6, 7.2)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.format.batch import BatchHeaders, scan_batches
from engine.index.append_rule import SegmentIndexer, TimeIndexAppendRule
from engine.index.checks import check_indexes
from engine.index.common import OffsetOverflowError
from engine.index.offset_index import OffsetIndex
from engine.index.rebuild import build_indexes
from engine.index.time_index import TimeIndex
from kernel.errors import InvalidIndexError
from tests.golden import golden_text
from tests.index_lookups import batch_for_offset, first_batch_at_or_after_timestamp, position_for_offset

BROKER_DIR = "broker/timeindex_test-0"
STEMS = ["00000000000000000000", "00000000000000007729", "00000000000000015363", "00000000000000022964"]
PREALLOCATED = 10 * 1024 * 1024  # segment.index.bytes default


@dataclass
class BrokerSegment:
    name: str
    base: int
    headers: BatchHeaders
    index_bytes: bytes
    time_bytes: bytes
    index: OffsetIndex
    timeindex: TimeIndex
    rebuilt: tuple[OffsetIndex, TimeIndex]
    record_offsets: np.ndarray  # golden, independent decoder
    record_timestamps: np.ndarray


def _read_golden(log: Path) -> tuple[np.ndarray, np.ndarray]:
    offsets, stamps = [], []
    for line in golden_text(log).splitlines():
        rec = json.loads(line)
        offsets.append(rec["offset"])
        stamps.append(rec["timestamp"])
    return np.asarray(offsets, np.int64), np.asarray(stamps, np.int64)


@pytest.fixture(scope="module")
def broker(kafka_fixtures: Path) -> dict[str, BrokerSegment]:
    folder = kafka_fixtures / BROKER_DIR
    segments = {}
    for stem in STEMS:
        base = int(stem)
        log = folder / f"{stem}.log"
        headers = scan_batches(log.read_bytes(), log.name).headers
        index_bytes = (folder / f"{stem}.index").read_bytes()
        time_bytes = (folder / f"{stem}.timeindex").read_bytes()
        offsets, stamps = _read_golden(log)
        segments[stem] = BrokerSegment(
            name=str(log), base=base, headers=headers, index_bytes=index_bytes, time_bytes=time_bytes,
            index=OffsetIndex.load(index_bytes, base, f"{stem}.index").index,
            timeindex=TimeIndex.load(time_bytes, base, f"{stem}.timeindex", min_timestamp=0).index,
            rebuilt=build_indexes(headers, base,
                                  min_timestamp=0), record_offsets=offsets, record_timestamps=stamps)
    return segments


def brute_first_at_least(values: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Row of the first value >= each target (-1 if none), straight from the definition."""
    out = np.full(targets.shape[0], -1, np.int64)
    if not values.shape[0]:
        return out
    for lo in range(0, targets.shape[0], 512):
        hit = values[None, :] >= targets[lo:lo + 512, None]
        out[lo:lo + 512] = np.where(hit.any(axis=1), hit.argmax(axis=1), -1)
    return out


def as_row(value: int | None) -> int:
    return -1 if value is None else value


def make_headers(sizes: list[int], base_offsets: list[int], last_offsets: list[int],
                 max_timestamps: list[int]) -> BatchHeaders:
    n = len(sizes)
    size = np.asarray(sizes, np.int64)
    minus1 = np.full(n, -1, np.int64)
    return BatchHeaders(
        position=np.concatenate(([0], np.cumsum(size)[:-1])).astype(np.int64) if n else np.zeros(0, np.int64),
        size=size, magic=np.full(n, 2, np.int8), attributes=np.zeros(n, np.int16), crc=np.zeros(n, np.uint32),
        base_offset=np.asarray(base_offsets, np.int64), last_offset=np.asarray(last_offsets, np.int64),
        partition_leader_epoch=minus1.astype(np.int32), base_timestamp=np.asarray(max_timestamps, np.int64),
        max_timestamp=np.asarray(max_timestamps, np.int64), producer_id=minus1,
        producer_epoch=minus1.astype(np.int16), base_sequence=minus1.astype(np.int32),
        records_count=(np.asarray(last_offsets, np.int64) - np.asarray(base_offsets, np.int64) + 1).astype(np.int32))


# ---------------------------------------------------------------- broker data


def test_broker_folder_holds_the_expected_segments(kafka_fixtures: Path) -> None:
    found = sorted(p.stem for p in (kafka_fixtures / BROKER_DIR).glob("*.log"))
    assert found == STEMS


@pytest.mark.parametrize("stem", STEMS)
def test_broker_indexes_load_entirely_and_round_trip(broker: dict[str, BrokerSegment], stem: str) -> None:
    seg = broker[stem]
    offsets = OffsetIndex.load(seg.index_bytes, seg.base, f"{stem}.index")
    times = TimeIndex.load(seg.time_bytes, seg.base, f"{stem}.timeindex", min_timestamp=0)
    assert offsets.problems == [] and times.problems == []
    assert offsets.valid_entries == offsets.file_entries == len(seg.index_bytes) // 8 > 200
    assert times.valid_entries == times.file_entries == len(seg.time_bytes) // 12 > 200
    assert offsets.index.to_bytes() == seg.index_bytes
    assert times.index.to_bytes() == seg.time_bytes


@pytest.mark.parametrize("stem", STEMS)
def test_broker_entries_match_the_readme_observations(broker: dict[str, BrokerSegment], stem: str) -> None:
    seg = broker[stem]
    h, index, times = seg.headers, seg.index, seg.timeindex
    # .index: (last offset of a batch - base, start position of that batch), positions never 0
    rows = np.searchsorted(h.position, index.positions)
    assert np.all(index.positions > 0)
    assert np.array_equal(h.position[rows], index.positions)
    assert np.array_equal(h.last_offset[rows], index.offsets)
    # one entry per > 4096 bytes: the batch before each entry is still within 4096 bytes of the last
    previous = np.concatenate(([0], index.positions[:-1])).astype(np.int64)
    assert np.all(index.positions - previous > 4096)
    assert np.all(h.position[rows - 1] - previous <= 4096)
    # .timeindex: strictly increasing max-so-far timestamps, each at or after the record carrying it
    assert np.all(np.diff(times.timestamps) > 0)
    running = np.maximum.accumulate(seg.record_timestamps)
    at = np.searchsorted(seg.record_offsets, times.offsets)
    assert np.array_equal(running[at], times.timestamps)
    carrier = seg.record_offsets[np.searchsorted(running, times.timestamps)]
    assert np.all(carrier <= times.offsets)
    assert times.last_entry() == (int(seg.record_timestamps.max()),
                                  int(seg.record_offsets[np.argmax(seg.record_timestamps)]))


@pytest.mark.parametrize("stem", STEMS)
def test_recovery_rebuild_reproduces_the_broker_files(broker: dict[str, BrokerSegment], stem: str) -> None:
    """Here every produce request held one batch, so the per-append rule (spec 2.5) and the per-batch
    recovery rule (spec 7.2) place entries alike and the rebuild is byte-identical. In general it
    need not be; the lookup tests below are what must hold everywhere."""
    seg = broker[stem]
    offsets, times = seg.rebuilt
    assert offsets.to_bytes() == seg.index_bytes
    assert times.to_bytes() == seg.time_bytes


@pytest.mark.parametrize("stem", STEMS)
def test_check_indexes_accepts_broker_and_rebuilt_indexes(broker: dict[str, BrokerSegment], stem: str) -> None:
    seg = broker[stem]
    assert check_indexes(seg.headers, seg.index, seg.timeindex, seg.name) == []
    assert check_indexes(seg.headers, *seg.rebuilt, seg.name) == []
    assert check_indexes(seg.headers, *build_indexes(seg.headers, seg.base, 1000,
                                                     min_timestamp=0), seg.name) == []


@pytest.mark.parametrize("stem", STEMS)
def test_offset_lookups_agree_with_brute_force(broker: dict[str, BrokerSegment], stem: str) -> None:
    seg = broker[stem]
    h = seg.headers
    targets = np.arange(seg.base - 1, int(h.last_offset[-1]) + 3, dtype=np.int64)
    truth = brute_first_at_least(h.last_offset, targets)
    assert np.array_equal(truth[1:-2], np.searchsorted(h.last_offset, seg.record_offsets))  # golden offsets
    for index in (seg.index, seg.rebuilt[0]):
        rows = [as_row(batch_for_offset(h, index, t)) for t in targets.tolist()]
        assert rows == truth.tolist()
        positions = [position_for_offset(h, index, t) for t in targets.tolist()]
        assert positions == [None if r < 0 else int(h.position[r]) for r in truth.tolist()]


@pytest.mark.parametrize("stem", STEMS)
def test_timestamp_lookups_agree_with_brute_force(broker: dict[str, BrokerSegment], stem: str) -> None:
    seg = broker[stem]
    h = seg.headers
    stamps = np.unique(seg.record_timestamps)
    extra = [0, -1, int(stamps[0]) - 1000, int(stamps[-1]) + 1000, 2**63 - 1]
    targets = np.unique(np.concatenate((stamps - 1, stamps, stamps + 1, extra)))
    truth = brute_first_at_least(h.max_timestamp, targets)
    golden = brute_first_at_least(seg.record_timestamps, targets)  # first record >= target ...
    golden_rows = np.where(golden < 0, -1, np.searchsorted(h.last_offset, seg.record_offsets[golden]))
    assert np.array_equal(truth, golden_rows)  # ... lies in the first batch >= target
    for offsets, times in ((seg.index, seg.timeindex), seg.rebuilt):
        rows = [as_row(first_batch_at_or_after_timestamp(h, offsets, times, t)) for t in targets.tolist()]
        assert rows == truth.tolist()


def test_lookups_reproduce_the_partitions_golden_list_offsets(broker: dict[str, BrokerSegment],
                                                             kafka_fixtures: Path) -> None:
    """Spec 5.2/5.3 over the whole partition through the broker's indexes (single-record batches)."""
    segments = [broker[s] for s in STEMS]
    assert all(np.all(s.headers.records_count == 1) for s in segments)
    lines = (kafka_fixtures / "broker" / "timeindex_test-0.lookups.golden.jsonl").read_text().splitlines()
    checked = 0
    for query in map(json.loads, lines):
        target = query["target"]
        if target >= 0:
            seg = next((s for s in segments if s.timeindex.last_entry()[0] >= target), None)
            row = None if seg is None else first_batch_at_or_after_timestamp(
                seg.headers, seg.index, seg.timeindex, target)
        elif target == -3:
            seg = max(segments, key=lambda s: s.timeindex.last_entry()[0])
            ts, offset = seg.timeindex.last_entry()
            start = int(np.searchsorted(seg.headers.position, position_for_offset(seg.headers, seg.index, offset)))
            row = start + int(np.flatnonzero(seg.headers.max_timestamp[start:] == ts)[0])
        else:
            continue
        got = (-1, -1) if row is None else (int(seg.headers.base_offset[row]), int(seg.headers.max_timestamp[row]))
        assert got == (query["offset"], query["timestamp"]), query
        checked += 1
    assert checked > 300


# ---------------------------------------------------------------- planted defects


def _with_offset_entry(index: OffsetIndex, i: int, position: int) -> OffsetIndex:
    positions = index.positions.copy()
    positions[i] = position
    return OffsetIndex(index.base_offset, index.relative_offsets, positions)


def _with_time_entry(index: TimeIndex, i: int, timestamp: int, offset: int) -> TimeIndex:
    stamps, rel = index.timestamps.copy(), index.relative_offsets.copy()
    stamps[i], rel[i] = timestamp, offset - index.base_offset
    return TimeIndex(index.base_offset, stamps, rel, 0)


def test_check_indexes_reports_a_shifted_position(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[0]]
    bad = _with_offset_entry(seg.index, 5, int(seg.index.positions[5]) + 1)
    problems = check_indexes(seg.headers, bad, seg.timeindex, seg.name)
    assert len(problems) == 1
    assert "00000000000000000000.index: byte 40: entry 5" in problems[0]
    assert "not the start of a batch" in problems[0]
    with pytest.raises(InvalidIndexError):
        position_for_offset(seg.headers, bad, seg.index.entry(5)[0])


def test_check_indexes_reports_an_entry_that_skips_its_batch(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[0]]
    h = seg.headers
    offset, position = seg.index.entry(7)
    row = int(np.searchsorted(h.position, position))
    bad = _with_offset_entry(seg.index, 7, int(h.position[row + 1]))  # the next batch, same offset
    problems = check_indexes(h, bad, seg.timeindex, seg.name)
    assert len(problems) == 1 and "byte 56: entry 7" in problems[0] and "skip" in problems[0]
    assert position_for_offset(h, bad, offset) != position  # the lookup it breaks
    assert position_for_offset(h, seg.index, offset) == position


def test_check_indexes_reports_wrong_time_entries(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[1]]
    h = seg.headers
    ts, offset = seg.timeindex.entry(5)
    higher = _with_time_entry(seg.timeindex, 5, ts + 1, offset)
    problems = check_indexes(h, seg.index, higher, seg.name)
    assert len(problems) == 1
    assert "00000000000000007729.timeindex: byte 60: entry 5" in problems[0] and "max timestamp" in problems[0]
    later = _with_time_entry(seg.timeindex, 5, ts, seg.timeindex.entry(6)[1])
    problems = check_indexes(h, seg.index, later, seg.name)
    assert problems and all("entry 5" in p for p in problems)
    assert any("earlier batch" in p for p in problems)
    # the lookup it breaks: the record carrying ts is now skipped
    assert first_batch_at_or_after_timestamp(h, seg.index, later, ts) != \
        first_batch_at_or_after_timestamp(h, seg.index, seg.timeindex, ts)


def test_check_indexes_reports_a_missing_final_time_entry(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[0]]
    times = seg.timeindex
    assert len(times) == len(seg.index) + 1  # the broker's final entry (spec 2.6) is the extra one
    cut = TimeIndex(times.base_offset, times.timestamps[:-1], times.relative_offsets[:-1], 0)
    problems = check_indexes(seg.headers, seg.index, cut, seg.name)
    assert len(problems) == 1
    assert f"byte {len(cut) * 12}: final entry missing" in problems[0]
    assert str(times.last_entry()[0]) in problems[0]
    assert check_indexes(seg.headers, seg.index, cut, seg.name, active=True) == []


def test_check_indexes_reports_entries_beyond_a_truncated_log(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[2]]
    half = seg.headers.take(slice(0, len(seg.headers) // 2))
    problems = check_indexes(half, seg.index, seg.timeindex, seg.name)
    beyond_offsets = int(np.sum(seg.index.offsets > half.last_offset[-1]))
    beyond_times = int(np.sum(seg.timeindex.offsets > half.last_offset[-1]))
    assert len(problems) == beyond_offsets + beyond_times > 200
    assert all("beyond the log" in p for p in problems)


def test_check_indexes_reports_a_time_entry_below_an_earlier_batch() -> None:
    """(20, 2) is carried by batch 2, but batch 1 already reached 30: lookups for 25 would skip it."""
    h = make_headers([100] * 4, [0, 1, 2, 3], [0, 1, 2, 3], [10, 30, 20, 40])
    offsets, good = build_indexes(h, 0, 0, min_timestamp=0)
    assert list(zip(good.timestamps.tolist(), good.offsets.tolist(), strict=True)) == [(30, 1), (40, 3)]
    bad = TimeIndex(0, np.array([20, 40], np.int64), np.array([2, 3], np.int32), 0)
    problems = check_indexes(h, offsets, bad, "n.log")
    assert problems == ["n.timeindex: byte 0: entry 0 (20, 2): an earlier batch already has max timestamp 30 >= 20, "
                        "so timestamp lookups from 20 would skip it"]
    assert first_batch_at_or_after_timestamp(h, offsets, good, 25) == 1
    assert first_batch_at_or_after_timestamp(h, offsets, bad, 25) == 3


def test_check_indexes_reports_in_memory_garbage() -> None:
    h = make_headers([100, 100, 100], [0, 1, 2], [0, 1, 2], [10, 20, 30])
    offsets, times = build_indexes(h, 0, 50, min_timestamp=0)
    assert check_indexes(h, offsets, times, "s.log") == []
    zero_tail = TimeIndex(0, np.append(times.timestamps, 0), np.append(times.relative_offsets, 0), 0)
    problems = check_indexes(h, offsets, zero_tail, "s.log")
    assert len(times) == 2
    assert problems[0] == "s.timeindex: byte 24: entry 2: timestamp 0 does not increase over the previous entry's 30"


# ---------------------------------------------------------------- loading (KAFKA-10207)


def test_zero_padded_time_index_keeps_only_its_valid_prefix(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[0]]
    preallocated = PREALLOCATED // 12 * 12
    padded = seg.time_bytes + bytes(preallocated - len(seg.time_bytes))
    kafka_view = np.frombuffer(padded, dtype=[("t", ">i8"), ("o", ">i4")])
    assert (int(kafka_view[-1]["t"]), int(kafka_view[-1]["o"])) == (0, 0)  # what Kafka would trust
    loaded = TimeIndex.load(padded, seg.base, "0.timeindex", min_timestamp=0)
    assert loaded.file_entries == 873_813
    assert loaded.valid_entries == len(seg.time_bytes) // 12
    assert loaded.index == seg.timeindex
    assert loaded.index.last_entry() == seg.timeindex.last_entry()
    assert len(loaded.problems) == 1
    assert loaded.problems[0].startswith(f"0.timeindex: byte {len(seg.time_bytes)}:")
    assert "KAFKA-10207" in loaded.problems[0]


def test_zero_padded_offset_index_keeps_only_its_valid_prefix(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[1]]
    padded = seg.index_bytes + bytes(PREALLOCATED - len(seg.index_bytes))
    loaded = OffsetIndex.load(padded, seg.base, "1.index")
    assert (loaded.file_entries, loaded.valid_entries) == (1_310_720, len(seg.index_bytes) // 8)
    assert loaded.index == seg.index
    assert len(loaded.problems) == 1 and "byte 2016" in loaded.problems[0] and "zero" in loaded.problems[0]


def test_garbage_inside_an_index_ends_the_valid_prefix(broker: dict[str, BrokerSegment]) -> None:
    seg = broker[STEMS[0]]
    data = bytearray(seg.index_bytes)
    data[10 * 8 + 4:10 * 8 + 8] = (100).to_bytes(4, "big")  # entry 10's position goes backwards
    loaded = OffsetIndex.load(bytes(data), seg.base, "x.index")
    assert loaded.valid_entries == 10 and loaded.file_entries == len(seg.index) == 249
    assert loaded.problems == [
        f"x.index: byte 80: entry 10: position 100 does not increase over the previous entry's "
        f"{int(seg.index.positions[9])}; it and the 238 entries after it are ignored (valid prefix: 10 of 249 entries)"]
    times = bytearray(seg.time_bytes)
    times[7 * 12:7 * 12 + 8] = seg.time_bytes[6 * 12:6 * 12 + 8]  # entry 7 repeats entry 6's timestamp
    loaded_times = TimeIndex.load(bytes(times), seg.base, "x.timeindex", min_timestamp=0)
    assert loaded_times.valid_entries == 7
    assert loaded_times.problems[0].startswith("x.timeindex: byte 84: entry 7: timestamp")


@pytest.mark.parametrize("extra", [1, 3, 7])
def test_index_length_not_a_multiple_of_the_entry_size(broker: dict[str, BrokerSegment], extra: int) -> None:
    seg = broker[STEMS[3]]
    offsets = OffsetIndex.load(seg.index_bytes + b"\x01" * extra, seg.base, "y.index")
    assert offsets.index == seg.index and offsets.valid_entries == offsets.file_entries
    assert offsets.problems == [f"y.index: byte {len(seg.index_bytes)}: file length {len(seg.index_bytes) + extra} "
                                f"is not a multiple of the 8-byte entry size; {extra} trailing bytes ignored"]
    times = TimeIndex.load(seg.time_bytes + b"\x01" * (extra + 4), seg.base, "y.timeindex", min_timestamp=0)
    assert times.index == seg.timeindex
    assert len(times.problems) == 1 and "12-byte entry size" in times.problems[0]


def test_load_rejects_invalid_first_entries() -> None:
    zero = OffsetIndex.load(bytes(8), 0)
    assert zero.valid_entries == 0 and "KAFKA-10207" in zero.problems[0]
    at_zero = OffsetIndex.load((3).to_bytes(4, "big") + bytes(4), 0)
    assert at_zero.valid_entries == 0 and "position 0 is not > 0" in at_zero.problems[0]
    negative_rel = OffsetIndex.load((-1).to_bytes(4, "big", signed=True) + (5).to_bytes(4, "big"), 0)
    assert negative_rel.valid_entries == 0 and "negative" in negative_rel.problems[0]
    negative_ts = (-5).to_bytes(8, "big", signed=True) + (3).to_bytes(4, "big")
    assert TimeIndex.load(negative_ts, 0, min_timestamp=0).valid_entries == 0
    kip228 = TimeIndex.load(negative_ts, 0, min_timestamp=-1000)  # opt-in negative timestamps
    assert kip228.ok and kip228.index.entry(0) == (-5, 3)
    assert kip228.index.lookup(-6) == (-1001, 0)  # the "no entry" sentinel sits below the minimum
    decreasing = (10).to_bytes(8, "big") + (5).to_bytes(4, "big") + (11).to_bytes(8, "big") + (4).to_bytes(4, "big")
    loaded = TimeIndex.load(decreasing, 0, min_timestamp=0)
    assert loaded.valid_entries == 1 and "relative offset 4 is below" in loaded.problems[0]
    assert OffsetIndex.load(b"", 7).index.last_entry() == (7, 0)
    assert TimeIndex.load(b"", 7, min_timestamp=0).index.last_entry() == (-1, 7)


# ---------------------------------------------------------------- lookups and truncation of index objects


def test_index_lookups_follow_kafka_floor_rules() -> None:
    offsets = OffsetIndex(100, np.array([10, 20, 30], np.int32), np.array([1000, 2000, 3000], np.int32))
    assert [offsets.lookup(t) for t in (5, 100, 109, 110, 119, 120, 10**12)] == [
        (100, 0), (100, 0), (100, 0), (110, 1000), (110, 1000), (120, 2000), (130, 3000)]
    assert offsets.last_entry() == (130, 3000)
    times = TimeIndex(100, np.array([50, 60, 70], np.int64), np.array([10, 20, 20], np.int32), 0)
    assert [times.lookup(t) for t in (-5, 49, 50, 65, 70, 2**70)] == [
        (-1, 100), (-1, 100), (50, 110), (60, 120), (70, 120), (70, 120)]
    assert OffsetIndex.empty(9).lookup(50) == (9, 0)
    assert TimeIndex.empty(9, 0).lookup(50) == (-1, 9)


def test_truncate_to_drops_entries_at_or_after_the_offset() -> None:
    """Spec 6 step 2/3: an entry exactly at the target goes with everything after it."""
    offsets = OffsetIndex(100, np.array([10, 20, 30], np.int32), np.array([1000, 2000, 3000], np.int32))
    assert offsets.truncate_to(120).offsets.tolist() == [110]
    assert offsets.truncate_to(121).offsets.tolist() == [110, 120]
    assert offsets.truncate_to(111).positions.tolist() == [1000]
    assert len(offsets.truncate_to(100)) == len(offsets.truncate_to(3)) == 0
    assert offsets.truncate_to(131) == offsets == offsets.truncate_to(2**40)
    times = TimeIndex(100, np.array([50, 60, 70], np.int64), np.array([10, 20, 20], np.int32), 0)
    assert times.truncate_to(120).timestamps.tolist() == [50]
    assert times.truncate_to(121) == times
    assert times.truncate_to(110).last_entry() == (-1, 100)


@pytest.mark.parametrize("stem", STEMS[:2])
def test_truncating_broker_indexes_with_the_log(broker: dict[str, BrokerSegment], stem: str) -> None:
    seg = broker[stem]
    h = seg.headers
    behind_rows = 0
    for row in (0, 1, 31, 32, 33, len(h) // 2, len(h) - 1):
        target = int(h.base_offset[row])  # batch-aligned, as replication truncates
        kept = h.take(slice(0, row))
        offsets, times = seg.index.truncate_to(target), seg.timeindex.truncate_to(target)
        assert offsets == build_indexes(kept, seg.base, min_timestamp=0)[0]
        assert check_indexes(kept, offsets, times, seg.name, active=True) == []
        # the recomputed segment max (spec 6 step 9) reaches the index only at roll/close (spec 2.6)
        behind = len(kept) > 0 and int(kept.max_timestamp.max()) > times.last_entry()[0]
        problems = check_indexes(kept, offsets, times, seg.name)
        assert [("final entry missing" in p) for p in problems] == ([True] if behind else [])
        behind_rows += behind
    assert behind_rows >= 3


# ---------------------------------------------------------------- SegmentIndexer (spec 2.5, 2.6)


def test_segment_indexer_hand_computed_scenario() -> None:
    """interval 100; appends (position, size, last offset, max ts, shallow offset of max ts)."""
    appends = [
        (0, 150, 4, 1000, 4),  # first append: never indexed
        (150, 50, 9, 900, 9),  # 150 > 100: entry (9, 150), time (1000, 4); clock went backwards
        (200, 50, 12, 1200, 11),  # 50: no entry; new max (1200, 11)
        (250, 10, 13, 1100, 13),  # exactly 100 is not > 100: no entry
        (260, 5, 14, 1150, 14),  # 110 > 100: entry (14, 260), time (1200, 11)
        (265, 200, 20, 1300, 20),  # new max (1300, 20)
        (465, 10, 31, 1300, 31),  # tie keeps (1300, 20); entry (31, 465), time (1300, 20)
        (475, 200, 35, 1250, 35),
        (675, 10, 36, 1300, 36),  # entry (36, 675); time max 1300 not > 1300: no time entry
        (685, 300, 40, 1400, 38),  # new max (1400, 38), no entry
    ]
    indexer = SegmentIndexer(0, index_interval_bytes=100, min_timestamp=0)
    assert indexer.max_timestamp == -1 and indexer.offset_of_max_timestamp == -1
    for append in appends:
        indexer.append(*append)
    assert (indexer.max_timestamp, indexer.offset_of_max_timestamp) == (1400, 38)
    assert indexer.size == 985 and indexer.bytes_since_last_index_entry == 310
    offsets, times = indexer.snapshot()
    assert list(zip(offsets.offsets.tolist(), offsets.positions.tolist(), strict=True)) == [
        (9, 150), (14, 260), (31, 465), (36, 675)]
    assert list(zip(times.timestamps.tolist(), times.offsets.tolist(), strict=True)) == [
        (1000, 4), (1200, 11), (1300, 20)]
    offsets, times = indexer.close()
    assert times.last_entry() == (1400, 38) and len(times) == 4 and len(offsets) == 4
    assert indexer.close()[1] == times  # closing twice adds nothing


def test_segment_indexer_without_timestamps_and_index_full() -> None:
    v0 = SegmentIndexer(10, index_interval_bytes=0, min_timestamp=0)
    for i in range(4):
        v0.append(i * 50, 50, 10 + i, -1, 10 + i)
    offsets, times = v0.close()
    assert offsets.offsets.tolist() == [11, 12, 13] and len(times) == 0  # v0 never gets time entries
    assert v0.is_full(24) and not v0.is_full(32)  # 24 bytes hold 3 offset entries
    timed = SegmentIndexer(0, index_interval_bytes=0, min_timestamp=0)
    timed.append(0, 50, 0, 5, 0)
    assert not timed.is_full(24)
    timed.append(50, 50, 1, 6, 1)
    assert timed.is_full(24)  # 24 bytes hold 2 time entries; one is reserved for the final entry


def test_segment_indexer_rejects_what_kafka_rejects() -> None:
    indexer = SegmentIndexer(1000, min_timestamp=0)
    with pytest.raises(OffsetOverflowError):
        indexer.append(0, 100, 999, 5, 999)
    with pytest.raises(OffsetOverflowError):
        indexer.append(0, 100, 1000 + 2**31, 5, 1000)
    indexer.append(0, 100, 1005, 5, 1005)
    with pytest.raises(ValueError, match="segment ends at 100"):
        indexer.append(120, 100, 1010, 5, 1010)
    with pytest.raises(ValueError, match="does not increase"):
        indexer.append(100, 100, 1005, 5, 1005)
    with pytest.raises(OffsetOverflowError):
        build_indexes(make_headers([100], [0], [0], [1]), 1, min_timestamp=0)
    gap = make_headers([100, 100], [0, 1], [0, 1], [1, 2])
    gap.position[1] += 5
    with pytest.raises(ValueError, match="back to back"):
        build_indexes(gap, 0, min_timestamp=0)


# ---------------------------------------------------------------- properties


@st.composite
def segments(draw: st.DrawFn) -> tuple[BatchHeaders, int, int, list[bool]]:
    n = draw(st.integers(0, 40))
    base = draw(st.integers(0, 10**6))
    sizes = draw(st.lists(st.integers(61, 700), min_size=n, max_size=n))
    counts = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))  # compaction leaves offset gaps
    stamps = draw(st.lists(st.one_of(st.just(-1), st.integers(0, 40)), min_size=n, max_size=n))
    interval = draw(st.sampled_from([0, 1, 61, 200, 500, 1000, 4096]))
    chunk_starts = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    firsts, lasts, next_offset = [], [], base
    for count, gap in zip(counts, gaps, strict=True):
        firsts.append(next_offset + gap)
        lasts.append(next_offset + gap + count - 1)
        next_offset = lasts[-1] + 1
    return make_headers(sizes, firsts, lasts, stamps), base, interval, chunk_starts


def index_per_batch(h: BatchHeaders, base: int, interval: int) -> tuple[OffsetIndex, TimeIndex]:
    indexer = SegmentIndexer(base, interval, min_timestamp=0)
    for p, s, last, ts in zip(h.position.tolist(), h.size.tolist(), h.last_offset.tolist(),
                              h.max_timestamp.tolist(), strict=True):
        indexer.append(p, s, last, ts, last)
    return indexer.close()


def index_per_chunk(h: BatchHeaders, base: int, interval: int, starts: list[bool]) -> tuple[OffsetIndex, TimeIndex]:
    """Multi-batch appends (follower path): shallow offset = last offset of the first batch with the max."""
    cuts = [i for i, s in enumerate(starts) if s or i == 0] + [len(h)]
    indexer = SegmentIndexer(base, interval, min_timestamp=0)
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        ts = h.max_timestamp[lo:hi]
        first_max = lo + int(np.argmax(ts))
        indexer.append(int(h.position[lo]), int(h.size[lo:hi].sum()), int(h.last_offset[hi - 1]),
                       int(ts.max()), int(h.last_offset[first_max]))
    return indexer.close()


def assert_lookups_are_brute_force(h: BatchHeaders, offsets: OffsetIndex, times: TimeIndex, base: int) -> None:
    top = int(h.last_offset[-1]) if len(h) else base
    offset_targets = np.arange(base - 1, top + 3, dtype=np.int64)
    truth = brute_first_at_least(h.last_offset, offset_targets).tolist()
    assert [as_row(batch_for_offset(h, offsets, t)) for t in offset_targets.tolist()] == truth
    ts_targets = np.arange(-2, 43, dtype=np.int64)
    truth = brute_first_at_least(h.max_timestamp, ts_targets).tolist()
    assert [as_row(first_batch_at_or_after_timestamp(h, offsets, times, t)) for t in ts_targets.tolist()] == truth


def assert_invariants(offsets: OffsetIndex, times: TimeIndex) -> None:
    reload_offsets = OffsetIndex.load(offsets.to_bytes(), offsets.base_offset)
    reload_times = TimeIndex.load(times.to_bytes(), times.base_offset, min_timestamp=0)
    assert reload_offsets.ok and reload_offsets.index == offsets
    assert reload_times.ok and reload_times.index == times


@settings(max_examples=150, deadline=None)
@given(segments())
def test_per_batch_appends_build_the_recovery_indexes(segment: tuple[BatchHeaders, int, int, list[bool]]) -> None:
    h, base, interval, _ = segment
    rebuilt = build_indexes(h, base, interval, min_timestamp=0)
    live = index_per_batch(h, base, interval)
    assert live[0] == rebuilt[0] and live[1] == rebuilt[1]
    assert_invariants(*rebuilt)
    assert check_indexes(h, *rebuilt, "p.log") == []
    assert_lookups_are_brute_force(h, *rebuilt, base)
    if len(h):
        max_ts = int(h.max_timestamp.max())
        assert rebuilt[1].last_entry()[0] == (max_ts if max_ts >= 0 else -1)


@settings(max_examples=150, deadline=None)
@given(segments())
def test_chunked_appends_give_valid_indexes(segment: tuple[BatchHeaders, int, int, list[bool]]) -> None:
    h, base, interval, starts = segment
    offsets, times = index_per_chunk(h, base, interval, starts)
    assert_invariants(offsets, times)
    assert check_indexes(h, offsets, times, "c.log") == []
    assert_lookups_are_brute_force(h, offsets, times, base)


@settings(max_examples=100, deadline=None)
@given(segments(), st.data())
def test_truncated_indexes_stay_consistent(segment: tuple[BatchHeaders, int, int, list[bool]],
                                           data: st.DataObject) -> None:
    h, base, interval, starts = segment
    row = data.draw(st.integers(0, len(h)))
    target = int(h.base_offset[row]) if row < len(h) else (int(h.last_offset[-1]) + 1 if len(h) else base)
    kept = h.take(slice(0, row))
    for offsets, times in (build_indexes(h, base, interval,
                                         min_timestamp=0), index_per_chunk(h, base, interval, starts)):
        cut_offsets, cut_times = offsets.truncate_to(target), times.truncate_to(target)
        assert np.all(cut_offsets.offsets < target) and np.all(cut_times.offsets < target)
        assert len(cut_offsets) == int(np.sum(offsets.offsets < target))
        assert len(cut_times) == int(np.sum(times.offsets < target))
        assert check_indexes(kept, cut_offsets, cut_times, "t.log", active=True) == []
        assert_lookups_are_brute_force(kept, cut_offsets, cut_times, base)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63) + 1, 2**63 - 1) | st.integers(-5, 5), max_size=40),
       st.sampled_from([0, -(2**63) + 1]))
def test_the_time_index_append_rule_admits_exactly_what_maybe_append_would(candidates, min_timestamp) -> None:
    """`TimeIndexAppendRule`, the one home of "an entry only above the last one's" (spec 2.6), shared by
    live appends, recovery's rebuild and the cleaner's sizing: its vectorized form against a loop."""
    rule = TimeIndexAppendRule(min_timestamp)
    last, expected = rule.none, []
    for ts in candidates:
        expected.append(ts > last)
        last = ts if ts > last else last
    assert rule.admitted(np.asarray(candidates, np.int64)).tolist() == expected
    assert [rule.admits(ts, rule.none) for ts in candidates] == [ts >= min_timestamp for ts in candidates]
