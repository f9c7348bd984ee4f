"""The `.batchindex`: every group holds exactly the batches a search from its `.timeindex` floor entry can
reach, checked against brute force over segments written by Kafka's index rules (small batches, disordered
timestamps), and the answering batch of any target lies in the group of its floor entry."""

from __future__ import annotations

import numpy as np
import pytest

from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.index.batch_index import (
    ENTRY_SIZE,
    PINNED_GROUP,
    batch_index_bytes,
    group_from_bytes,
    group_span,
    stride_of,
)
from engine.index.time_index import TimeIndex
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.topic_config import TopicConfig


def _segment(seed: int, batches: int, per_batch: int, disorder: int, interval: int = 4096):
    rng = np.random.default_rng(seed)
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=2**30, segment_ms=10**15, index_interval_bytes=interval)),
                           min_timestamp=0)
    offset, stamps = 0, []
    for _ in range(batches):
        n = int(rng.integers(1, per_batch + 1))
        ts = 1_000_000 + offset * 10 + rng.integers(-disorder, disorder + 1, n)
        data = encode_batch([b"k"] * n, [b"v" * int(rng.integers(10, 200))] * n, ts, base_offset=offset)
        writer.append(Append(data, offset, offset + n - 1, int(ts.max()), offset + int(np.argmax(ts))), now_ms=0)
        stamps.append(ts)
        offset += n
    seg = writer.active.close(None)
    return seg, scan_batches(seg.log).headers, np.concatenate(stamps)


def _groups(data: bytes, entries: int) -> list:
    stride = stride_of(len(data), entries)
    assert stride is not None
    return [group_from_bytes(data[slice(*group_span(g, stride))]) for g in range(entries + 1)]


@pytest.mark.parametrize("seed", range(6))
def test_groups_hold_the_batches_between_time_index_entries(seed: int) -> None:
    seg, headers, _ = _segment(seed, batches=300, per_batch=8, disorder=[0, 5, 400][seed % 3])
    times = TimeIndex.load(seg.timeindex, 0, min_timestamp=0).index
    data = batch_index_bytes(len(headers), seg.timeindex, 0, lambda: headers, min_timestamp=0)
    assert data is not None and len(data) % ENTRY_SIZE == 0
    groups = _groups(data, len(times))
    bounds = [-1, *(int(o) for o in times.relative_offsets), None]
    for g, group in enumerate(groups):
        low, high = bounds[g] + 1, bounds[g + 1]
        expect = [i for i in range(len(headers))
                  if headers.last_offset[i] >= low
                  and (high is None or i == 0 or headers.last_offset[i - 1] < high)]
        assert group is not None
        assert list(group.positions) == [int(headers.position[i]) for i in expect]
        assert list(group.sizes) == [int(headers.size[i]) for i in expect]
        assert list(group.relative_offsets) == [int(headers.last_offset[i]) for i in expect]
        assert list(group.max_timestamps) == [int(headers.max_timestamp[i]) for i in expect]


@pytest.mark.parametrize("seed", range(4))
def test_the_answering_batch_of_every_target_is_in_its_floor_entrys_group(seed: int) -> None:
    seg, headers, stamps = _segment(seed, batches=200, per_batch=6, disorder=[0, 50][seed % 2])
    times = TimeIndex.load(seg.timeindex, 0, min_timestamp=0).index
    groups = _groups(batch_index_bytes(len(headers), seg.timeindex, 0, lambda: headers,
                                       min_timestamp=0), len(times))
    for target in np.unique(stamps):
        first = int(np.flatnonzero(stamps >= target)[0])  # brute force: the first record at or after target
        answer = int(np.searchsorted(headers.last_offset, first))
        group = groups[times.floor_slot(int(target) - 1) + 1]  # the last entry below the target
        assert int(headers.position[answer]) in set(group.positions.tolist())
        before = group.positions < headers.position[answer]
        assert (group.max_timestamps[before] < target).all()  # the answer is the group's first batch reaching it


def test_not_written_where_kafkas_indexes_already_pin_each_batch() -> None:
    seg, headers, _ = _segment(1, batches=60, per_batch=200, disorder=0, interval=1024)  # batches > interval
    assert len(headers) <= PINNED_GROUP * (len(seg.timeindex) // 12 + 1)
    assert batch_index_bytes(len(headers), seg.timeindex, 0, lambda: headers, min_timestamp=0) is None


def test_a_group_that_breaks_the_layout_is_refused() -> None:
    seg, headers, _ = _segment(2, batches=100, per_batch=8, disorder=0)
    data = batch_index_bytes(len(headers), seg.timeindex, 0, lambda: headers, min_timestamp=0)
    stride = stride_of(len(data), len(seg.timeindex) // 12)
    start, end = group_span(1, stride)
    group = bytearray(data[start:end])
    assert group_from_bytes(bytes(group)) is not None
    assert group_from_bytes(bytes(group[:-1])) is None  # not whole entries
    swapped = group[ENTRY_SIZE:2 * ENTRY_SIZE] + group[:ENTRY_SIZE] + group[2 * ENTRY_SIZE:]
    assert group_from_bytes(bytes(swapped)) is None  # out of order
    assert group_from_bytes(bytes(ENTRY_SIZE) + bytes(group[:-ENTRY_SIZE])) is None  # padding first
    assert stride_of(len(data) + ENTRY_SIZE, len(seg.timeindex) // 12) is None
