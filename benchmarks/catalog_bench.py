"""Catalog time-range query over synthetic segment rows, with and without a Delta checkpoint.

The catalog grows the way klake writes it: each commit adds the next time slice of segments for every
partition (so data files are naturally clustered by time, and delta-rs' per-file min/max statistics
prune them). Queries go through `Catalog.segments` (delta-rs -> DataFusion -> Arrow). Figures are the
median of `--repeat` runs:

- cold: open the catalog (read the Delta log) and run the query;
- warm: query through an open handle (refreshes the log incrementally, then scans).

Run: .venv/bin/python benchmarks/catalog_bench.py [--rows 1000000] [--commits 50]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import PostCommitHookProperties, write_deltalake

from engine.catalog.schema import CATALOG_SCHEMA, EXTERNAL_COLUMN, KEY_COLUMNS, STORED_SCHEMA
from engine.log.topic_config import KAFKA_MIN_TIMESTAMP
from engine.ops.catalog_table import Catalog, default_root
from layouts.root_keys import external, stored_keys
from layouts.store.bound import Store

SEGMENT_MS = 60_000
EPOCH_MS = 1_700_000_000_000


def synthetic_slice(start_seq: int, count: int, partitions: list[tuple[str, int]],
                    rng: np.random.Generator, root: str = "s3://bucket/root") -> pa.Table:
    """`count` consecutive segments (by sequence number) of every partition, as catalog rows whose keys
    are under `root`."""
    n = count * len(partitions)
    seq = np.repeat(np.arange(start_seq, start_seq + count), len(partitions))
    which = np.tile(np.arange(len(partitions)), count)
    topics = np.array([t for t, _ in partitions])[which]
    parts = np.array([p for _, p in partitions], dtype=np.int32)[which]
    base_offset = seq * 1_000
    base_ts = EPOCH_MS + seq * SEGMENT_MS - rng.integers(0, 5_000, n)  # a few out-of-order records
    largest_ts = EPOCH_MS + (seq + 1) * SEGMENT_MS - 1
    ids = np.char.add(np.char.zfill(seq.astype(str), 12), np.char.zfill(which.astype(str), 4))
    keys = np.char.add(np.char.add(np.char.add(topics, "-"), parts.astype(str)), "/")
    stem = np.char.add(np.char.add(root + "/", keys), ids)
    columns = {
        "topic": topics, "partition": parts, "segment_id": ids,
        "log_key": np.char.add(stem, ".log"), "index_key": np.char.add(stem, ".index"),
        "timeindex_key": np.char.add(stem, ".timeindex"),
        "base_offset": base_offset, "last_offset": base_offset + 999, "next_offset": base_offset + 1_000,
        "record_count": np.full(n, 1_000), "batch_count": np.full(n, 100), "size_bytes": np.full(n, 1 << 20),
        "first_batch_timestamp": base_ts, "base_timestamp": base_ts, "largest_timestamp": largest_ts,
        "offset_of_largest_timestamp": base_offset + 999, "timestamp_type": np.full(n, "CreateTime"),
        "state": np.full(n, "ROLLED"), "created_at_ms": np.full(n, EPOCH_MS), "job_id": np.full(n, "bench"),
        "format_version": np.full(n, 1, np.int32), "layout": np.full(n, "object"), "magic": np.full(n, 2, np.int8),
        "log_start_offset": np.full(n, -1), "cleaned": np.zeros(n, bool),
        "index_size_bytes": np.full(n, 2_048), "timeindex_size_bytes": np.full(n, 3_072),
        "batchindex_size_bytes": np.full(n, None),  # 10 KiB batches, above the interval: none
        "txn_batch_count": np.zeros(n, np.int64),  # no transactions: read_committed planning reads none
        "txn_start_position": np.full(n, None), "txn_end_position": np.full(n, None),
    }
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in CATALOG_SCHEMA}, schema=CATALOG_SCHEMA)


def build(uri: str, rows: int, topics: int, partitions: int, commits: int, root: str = "s3://bucket/root") -> int:
    """Create the catalog and load `rows` rows (keys under `root`) in `commits` commits without automatic
    checkpoints."""
    Catalog.create(Store(uri))
    tps = [(f"topic-{t:03d}", p) for t in range(topics) for p in range(partitions)]
    per_partition = rows // len(tps)
    per_commit = max(1, per_partition // commits)
    rng = np.random.default_rng(42)
    no_checkpoint = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
    for start in range(0, per_partition, per_commit):
        chunk = synthetic_slice(start, min(per_commit, per_partition - start), tps, rng, root)
        write_deltalake(uri, _as_stored(chunk, uri), mode="append", post_commithook_properties=no_checkpoint)
    return per_partition


def _as_stored(rows: pa.Table, uri: str) -> pa.Table:
    """Rows as the catalog at `uri` stores them: keys relative to its directory, `external` (issue 26)."""
    home = default_root(uri)
    stored = rows.append_column(EXTERNAL_COLUMN, external(home, *(rows[c] for c in KEY_COLUMNS)))
    for column in KEY_COLUMNS:
        stored = stored.set_column(stored.schema.get_field_index(column), column, stored_keys(home, rows[column]))
    return stored.cast(STORED_SCHEMA)


def median_ms(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        found = run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), found


def measure(uri: str, label: str, window: tuple[int, int], repeat: int) -> None:
    frm, to = window

    def cold() -> int:
        return Catalog.open(Store(uri)).segments(from_ms=frm, to_ms=to, min_timestamp=KAFKA_MIN_TIMESTAMP).num_rows

    handle = Catalog.open(Store(uri))

    def warm() -> int:
        return handle.segments(from_ms=frm, to_ms=to, min_timestamp=KAFKA_MIN_TIMESTAMP).num_rows

    def one_partition() -> int:
        return handle.segments(topic="topic-007", partition=3, from_ms=frm, to_ms=to,
                               min_timestamp=KAFKA_MIN_TIMESTAMP).num_rows

    for name, run in (("cold (open + query)", cold), ("warm (open handle)", warm),
                      ("warm, one partition", one_partition)):
        ms, found = median_ms(run, repeat)
        print(f"  {label:<22} {name:<22} {ms:8.1f} ms  ({found} segments)")


def add_catalog_shape(parser: argparse.ArgumentParser) -> None:
    """The synthetic catalog's shape, the options every catalog benchmark takes (`build`'s arguments)."""
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--commits", type=int, default=50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_catalog_shape(parser)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", help="where to build the catalog (default: a temporary directory)")
    args = parser.parse_args()
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="klake-catalog-bench-"))
    uri = str(workdir / "catalog")
    shutil.rmtree(uri, ignore_errors=True)
    start = time.perf_counter()
    per_partition = build(uri, args.rows, args.topics, args.partitions, args.commits)
    catalog = Catalog.open(Store(uri))
    total = catalog.all_rows().num_rows
    print(f"catalog: {total} rows, {args.topics} topics x {args.partitions} partitions x {per_partition} segments, "
          f"{catalog.version() + 1} versions, built in {time.perf_counter() - start:.1f} s")
    middle = EPOCH_MS + per_partition // 2 * SEGMENT_MS
    window = (middle, middle + 3_600_000)
    print(f"query: segments with a record in a 1-hour window [{window[0]}, {window[1]}]")
    measure(uri, "no checkpoint", window, args.repeat)
    catalog.create_checkpoint()
    measure(uri, "after checkpoint", window, args.repeat)
    catalog.optimize()
    catalog.create_checkpoint()
    measure(uri, "optimized (compacted)", window, args.repeat)
    catalog.optimize(z_order=True)
    catalog.create_checkpoint()
    measure(uri, "optimized (z-order)", window, args.repeat)
    if not args.dir:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
