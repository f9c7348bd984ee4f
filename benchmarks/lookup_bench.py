"""Offset-for-timestamp lookups over stored segments: bytes read against the minimum, and GETs per target
(issue 14: bytes read <= 1.5x the minimum, <= 3 GETs per target on a cold task).

Setup (untimed, no Spark): partitions of 100-byte records whose timestamps rise with some disorder, written
by klake's segment writer (Kafka's rolling and index rules, `index.interval.bytes` 4096) and stored as
segment objects (`store_segment_version`, which adds a `.batchindex` where batches are smaller than the
interval: `engine.index.batch_index`), in three shapes:
- `demo`: the demo's topics (64 KiB segments, batches up to 16 KiB): many small segments, tiny sidecars;
- `small-batches`: 1 MiB segments of 1 KiB batches (an index entry every ~4 batches);
- `big-segment`: one partition, one segment of `--big-mb` MiB of 16 KiB batches (sidecars of many pages).
Each partition is one lookup task, as in the offsets-for-times job: `--targets` random timestamps (and
-1, -2, -3, and past the end) over `engine.ops.stored_segment.stored_segment`s, sharing what they read.

Checked: every answer against brute force over the generated records. Measured: bytes and GETs of each
task (`layouts.metering`), and each target alone on a cold task (GETs). The minimum is computed from the
whole files, independently of the lookup: the distinct batches holding the answers, plus the distinct
4 KiB sidecar pages holding the entries a search must see (the time index's floor entry for the target
and the entry after it; the offset index's floor entry for the answer's offset): Kafka's sidecars, not the
`.batchindex`, whose bytes count only as read. "One-read least" is the least a search with Kafka's files
alone and one log read can read (the floor the batch index exists to get under).

Run: .venv/bin/python benchmarks/lookup_bench.py [--mb 16] [--big-mb 64] [--targets 20] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.catalog.schema import SegmentRow, SegmentState  # noqa: E402
from engine.format.batch import scan_batches  # noqa: E402
from engine.format.builder import encode_batch  # noqa: E402
from engine.index.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE  # noqa: E402
from engine.index.offset_index import OffsetIndex  # noqa: E402
from engine.index.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE  # noqa: E402
from engine.index.time_index import TimeIndex  # noqa: E402
from engine.log.lookup import EARLIEST, LATEST, MAX_TIMESTAMP, list_offsets  # noqa: E402
from engine.log.roll_rule import RollPolicy  # noqa: E402
from engine.log.segment_writer import Append, SegmentWriter  # noqa: E402
from engine.log.topic_config import KAFKA_MIN_TIMESTAMP, TopicConfig  # noqa: E402
from engine.ops.stored_segment import stored_segment  # noqa: E402
from engine.ops.versions import store_segment_version  # noqa: E402
from kernel.names import TopicPartition  # noqa: E402
from layouts.metering import metered  # noqa: E402
from layouts.store import read_bytes  # noqa: E402
from layouts.store.bound import Store

PAGE = 4096
VALUE_BYTES = 100
START_MS = 1_790_000_000_000
SHAPES = {"demo": (64 * 1024, 16 * 1024), "small-batches": (1024**2, 1024), "big-segment": (2**30, 16 * 1024)}
"""shape: (segment.bytes, batch bytes)"""


@dataclass
class Partition:
    rows: list[SegmentRow]
    offsets: np.ndarray  # every record, in offset order
    timestamps: np.ndarray


def write_partition(root: str, tp: TopicPartition, records: int, segment_bytes: int, batch_bytes: int,
                    rng: np.random.Generator) -> Partition:
    """Records with rising, slightly disordered timestamps, appended a batch at a time and stored."""
    per_batch = max(1, batch_bytes // (VALUE_BYTES + 20))
    stamps = START_MS + np.sort(rng.integers(0, 86_400_000, records)) + rng.integers(-2_000, 2_000, records)
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_bytes=segment_bytes, segment_ms=10**15)),
                           min_timestamp=KAFKA_MIN_TIMESTAMP)
    value = b"v" * VALUE_BYTES
    for first in range(0, records, per_batch):
        ts = stamps[first:first + per_batch]
        data = encode_batch([b"k%d" % i for i in range(first, first + len(ts))], [value] * len(ts), ts,
                            base_offset=first)
        last = first + len(ts) - 1
        writer.append(Append(data, first, last, int(ts.max()), last), now_ms=0)
    closed = [*writer.closed, writer.active.close(None)]
    rows = [store_segment_version(Store(root), tp, seg.base_offset, seg.log, seg.index, seg.timeindex, SegmentState.ROLLED, "bench", 0, min_timestamp=KAFKA_MIN_TIMESTAMP) for seg in closed]
    return Partition(rows, np.arange(records, dtype=np.int64), stamps)


def brute_force(part: Partition, target: int) -> tuple[int, int]:
    if target == LATEST:
        return int(part.offsets[-1]) + 1, -1
    if target == EARLIEST:
        return int(part.offsets[0]), -1
    if target == MAX_TIMESTAMP:
        i = int(np.argmax(part.timestamps))
        return int(part.offsets[i]), int(part.timestamps[i])
    hits = np.flatnonzero(part.timestamps >= target)
    return (int(part.offsets[hits[0]]), int(part.timestamps[hits[0]])) if hits.size else (-1, -1)


def minimum_bytes(part: Partition, targets: list[int], answers: list[tuple[int, int]]) -> tuple[int, int]:
    """Distinct answering batches plus distinct sidecar pages a search must see, from the whole files; and
    the least a search with ONE ranged read of the log can read: the same pages plus every batch the
    indexes and the row cannot rule out (from the batch after the time-index floor entry's offset, or the
    first one, to the batch holding the next entry's offset, the first batch if its max timestamp
    reaches the target, else the last one; the answer's batch for -3)."""
    files: dict[str, bytes] = {}

    def whole(key: str) -> bytes:
        if key not in files:
            files[key] = read_bytes(key)
        return files[key]

    batches: set[tuple[str, int]] = set()
    open_bytes: dict[str, np.ndarray] = {}  # per log: the bytes a one-read search cannot rule out
    pages: dict[tuple[str, int], int] = {}
    sizes: dict[str, int] = {}

    def touch(key: str, entry_size: int, slot: int) -> None:
        size = sizes[key]
        if slot >= 0 and slot * entry_size < size:
            page = slot * entry_size // PAGE
            pages[(key, page)] = min(PAGE, size - page * PAGE)

    for target, (offset, _) in zip(targets, answers, strict=True):
        if offset < 0 or target in (LATEST, EARLIEST):
            continue
        row = next(r for r in part.rows if r.base_offset <= offset < r.next_offset)
        headers = scan_batches(whole(row.log_key), row.log_key).headers
        b = int(np.searchsorted(headers.last_offset, offset))
        batches.add((row.log_key, int(headers.position[b])))
        span = (b, b)
        index_data, time_data = whole(row.index_key), whole(row.timeindex_key)
        sizes[row.index_key], sizes[row.timeindex_key] = len(index_data), len(time_data)
        index = OffsetIndex.load(index_data, row.base_offset).index
        slot = int(np.searchsorted(index.offsets, offset, side="right")) - 1
        touch(row.index_key, OFFSET_ENTRY_SIZE, slot)
        if target != MAX_TIMESTAMP:
            times = TimeIndex.load(time_data, row.base_offset, min_timestamp=KAFKA_MIN_TIMESTAMP).index
            slot = times.floor_slot(target)
            touch(row.timeindex_key, TIME_ENTRY_SIZE, slot)
            touch(row.timeindex_key, TIME_ENTRY_SIZE, slot + 1)
            floor, upper = times.floor_and_next(target)
            if floor is None and target <= row.first_batch_timestamp:  # the row says the first batch reaches it
                upper = row.base_offset
            first = row.base_offset if floor is None else floor[1] + int(floor[0] < target)
            span = (int(np.searchsorted(headers.last_offset, first)),
                    len(headers) - 1 if upper is None else int(np.searchsorted(headers.last_offset, upper)))
        covered = open_bytes.setdefault(row.log_key, np.zeros(len(whole(row.log_key)), bool))
        covered[int(headers.position[span[0]]):int(headers.next_position[span[1]])] = True
    batches_bytes = 0
    for key, position in batches:
        headers = scan_batches(whole(key), key).headers
        batches_bytes += int(headers.size[int(np.searchsorted(headers.position, position))])
    return batches_bytes + sum(pages.values()), sum(int(c.sum()) for c in open_bytes.values()) + sum(pages.values())


def run_shape(shape: str, workdir: Path, mb: int, partitions: int, targets_per_task: int, seed: int) -> dict:
    segment_bytes, batch_bytes = SHAPES[shape]
    segment_bytes = max(segment_bytes, 2 * batch_bytes)
    records = max(1, mb * 1024**2 // (VALUE_BYTES + 20) // partitions)
    rng = np.random.default_rng(seed)
    root = str(workdir / shape)
    config = TopicConfig()
    read, minimum, one_read, gets, cold_gets, targets_total, checked = 0, 0, 0, 0, [], 0, 0
    segments, log_bytes, batchindex_bytes = 0, 0, 0
    for p in range(partitions):
        part = write_partition(root, TopicPartition("bench", p), records, segment_bytes, batch_bytes, rng)
        log_bytes += sum(row.size_bytes for row in part.rows)
        batchindex_bytes += sum(row.batchindex_size_bytes or 0 for row in part.rows)
        segments += len(part.rows)
        low, high = int(part.timestamps.min()), int(part.timestamps.max())
        targets = [LATEST, EARLIEST, MAX_TIMESTAMP, high + 1,
                   *rng.integers(low - 1000, high + 1, targets_per_task).tolist()]
        expected = [brute_force(part, t) for t in targets]
        task = [stored_segment(row, Store(root), config) for row in part.rows]
        with metered() as meter:
            got = [list_offsets(task, t, min_timestamp=KAFKA_MIN_TIMESTAMP) for t in targets]
        for target, answer, truth in zip(targets, got, expected, strict=True):
            if (answer.offset, answer.timestamp) != truth:
                raise SystemExit(f"{shape} partition {p} target {target}: got {(answer.offset, answer.timestamp)}, "
                                 f"brute force says {truth}")
            checked += 1
        for target in targets:
            cold = [stored_segment(row, Store(root), config) for row in part.rows]
            with metered() as alone:
                list_offsets(cold, target, min_timestamp=KAFKA_MIN_TIMESTAMP)
            cold_gets.append(alone.requests["GET"] + alone.requests["HEAD"])
        read += meter.bytes["read"]
        gets += meter.requests["GET"] + meter.requests["HEAD"]
        least, least_one_read = minimum_bytes(part, targets, expected)
        minimum, one_read = minimum + least, one_read + least_one_read
        targets_total += len(targets)
    return {"shape": shape, "segments": segments, "targets": targets_total, "answers_checked": checked,
            "bytes_read": read, "minimum_bytes": minimum, "ratio": round(read / max(minimum, 1), 2),
            "one_log_read_minimum_bytes": one_read, "one_log_read_ratio": round(one_read / max(minimum, 1), 2),
            "requests_per_target": round(gets / targets_total, 2), "max_requests_per_cold_target": max(cold_gets),
            "mean_requests_per_cold_target": round(float(np.mean(cold_gets)), 2),
            "log_bytes": log_bytes, "batchindex_bytes": batchindex_bytes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=16, help="MiB of records per shape (default 16)")
    parser.add_argument("--big-mb", type=int, default=64, help="MiB of the big-segment shape's one segment")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--targets", type=int, default=20, help="random timestamp targets per task (default 20)")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="klake-lookup-bench-"))
    try:
        results = [run_shape(shape, workdir, max(args.big_mb if shape == "big-segment" else args.mb, 1),
                             1 if shape == "big-segment" else args.partitions, args.targets, seed)
                   for seed, shape in enumerate(args.shapes.split(","))]
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(results, indent=2))
    missed = False
    print(f"{'shape':14} {'segments':>8} {'targets':>7} {'bytes read':>12} {'minimum':>12} {'ratio':>6}  "
          f"{'requests/target (task)':>22} {'max cold':>8} {'one-read least':>14} {'.batchindex/.log':>16}")
    for r in results:
        ok = r["ratio"] <= 1.5 and r["max_requests_per_cold_target"] <= 3
        missed |= not ok
        print(f"{r['shape']:14} {r['segments']:8} {r['targets']:7} {r['bytes_read']:12,} {r['minimum_bytes']:12,} "
              f"{r['ratio']:5.2f}x  {r['requests_per_target']:22.2f} {r['max_requests_per_cold_target']:8} "
              f"{r['one_log_read_ratio']:13.2f}x {r['batchindex_bytes'] / max(r['log_bytes'], 1):16.2%}  "
              f"<= 1.5x, <= 3 cold: {'ok' if ok else 'MISSED'}")
    print(f"answers: all {sum(r['answers_checked'] for r in results)} equal brute force")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
