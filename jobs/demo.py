"""`klake demo`: the main job on the embedded default, end to end, with no external service.

It generates several days of a multi-topic, multi-partition stream (keyed updates and tombstones,
late and far-future timestamps, one LogAppendTime topic), writes it as a broker would (Kafka's roll
and index rules) into a log dir on an embedded S3 (a `moto_server` started and stopped here; a local
directory with `--local`), imports it into the object layout and the Delta catalog, then verifies
every segment, answers offset-for-timestamp lookups (checked against a brute-force answer from the
generated input), prunes segments by time through the catalog, scrubs, and prints a summary. A JSON
report goes to `OUT/demo-report.json`. Re-running gives the same data (fixed seed, idempotent import).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.batch import CREATE_TIME, LOG_APPEND_TIME
from engine.builder import encode_batches
from engine.catalog import Catalog
from engine.lookup import list_offsets
from engine.partitioner import partition_for_keys
from engine.segment_writer import Append, RollPolicy, SegmentWriter
from jobs.cli_inspect import load_partition_dir, verify_problems
from jobs.embedded_s3 import create_bucket, embedded_s3_environment
from jobs.importer import import_log_dir
from jobs.scrub import scrub
from layouts.kafka_layout import kafka_segment_keys
from layouts.names import TopicPartition
from layouts.storage import filesystem, join

DAY_MS = 86_400_000
START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z
BATCH_RECORDS = 50
POLICY = RollPolicy(segment_bytes=256 * 1024, segment_ms=DAY_MS, index_interval_bytes=4096)


@dataclass(frozen=True)
class DemoTopic:
    name: str
    partitions: int
    timestamp_type: int
    keys: int  # distinct keys; 0 = null keys (round-robin partitions)
    tombstone_rate: float = 0.0
    late_rate: float = 0.0
    future_rate: float = 0.0


TOPICS = (
    DemoTopic("orders", 3, CREATE_TIME, keys=500, tombstone_rate=0.04, late_rate=0.02),
    DemoTopic("clicks", 2, CREATE_TIME, keys=0, late_rate=0.05, future_rate=0.0005),
    DemoTopic("audit", 1, LOG_APPEND_TIME, keys=50),
)


@dataclass
class PartitionStream:
    tp: TopicPartition
    keys: pa.Array
    values: pa.Array
    timestamps: np.ndarray  # as the records will report them (LogAppendTime: the append time)


def generate(topic: DemoTopic, days: int, per_day: int, rng: np.random.Generator) -> list[PartitionStream]:
    """One topic's records, split by Kafka's default partitioner, in produce order per partition."""
    n = days * per_day
    arrival = START_MS + np.sort(rng.integers(0, days * DAY_MS, n))
    ts = arrival.copy()
    late = rng.random(n) < topic.late_rate
    ts[late] -= rng.integers(60_000, 6 * 3_600_000, int(late.sum()))
    future = rng.random(n) < topic.future_rate
    ts[future] += 30 * DAY_MS
    if topic.keys:
        key_ids = rng.integers(0, topic.keys, n)
        keys = pa.array([f"{topic.name}-key-{k:05d}".encode() for k in key_ids], pa.binary())
        parts = partition_for_keys(keys, topic.partitions)
    else:
        keys = pa.nulls(n, pa.binary())
        parts = np.arange(n) % topic.partitions
    tombstone = rng.random(n) < topic.tombstone_rate
    values = pa.array([None if tombstone[i] else f'{{"seq":{i},"amount":{i % 997}}}'.encode() for i in range(n)],
                      pa.binary())
    streams = []
    for p in range(topic.partitions):
        rows = np.flatnonzero(parts == p)
        reported = ts[rows]
        if topic.timestamp_type == LOG_APPEND_TIME:  # every record reports its batch's append time
            first = np.arange(0, rows.size, BATCH_RECORDS)
            reported = np.repeat(np.maximum.reduceat(arrival[rows], first), np.diff(np.append(first, rows.size)))
        streams.append(PartitionStream(TopicPartition(topic.name, p), keys.take(rows), values.take(rows), reported))
    return streams


def write_broker_log(stream: PartitionStream, topic: DemoTopic, log_dir: str) -> int:
    """Append the stream in produce requests of BATCH_RECORDS records as a broker would; returns segments."""
    n = len(stream.keys)
    lengths = [min(BATCH_RECORDS, n - s) for s in range(0, n, BATCH_RECORDS)]
    batches = []
    for start, length in zip(range(0, n, BATCH_RECORDS), lengths, strict=True):
        sl = slice(start, start + length)
        log_append = topic.timestamp_type == LOG_APPEND_TIME
        batches += encode_batches(stream.keys[sl], stream.values[sl], stream.timestamps[sl], batch_lengths=[length],
                                  base_offset=start, timestamp_type=topic.timestamp_type,
                                  log_append_time=int(stream.timestamps[sl].max()) if log_append else None)
    writer = SegmentWriter(POLICY, segment_key=str(stream.tp), now_ms=START_MS)
    for start, length, data in zip(range(0, n, BATCH_RECORDS), lengths, batches, strict=True):
        ts = stream.timestamps[start:start + length]
        writer.append(Append(data, start, start + length - 1, int(ts.max()), start + length - 1), now_ms=START_MS)
    segments = writer.finish()
    fs, _ = filesystem(log_dir)
    for seg in segments:
        keys = kafka_segment_keys(log_dir, stream.tp, seg.base_offset)
        for uri, payload in ((keys.log, seg.log), (keys.index, seg.index), (keys.timeindex, seg.timeindex)):
            _, path = filesystem(uri)
            fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            fs.pipe_file(path, payload)
    return len(segments)


def brute_force_lookup(timestamps: np.ndarray, target: int) -> tuple[int, int]:
    hits = np.flatnonzero(timestamps >= target)
    return (int(hits[0]), int(timestamps[hits[0]])) if hits.size else (-1, -1)


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    with ExitStack() as stack:
        if args.local:
            base = os.path.abspath(os.path.join(args.out, "store"))
            storage = f"local directory {base}"
        else:
            endpoint = stack.enter_context(embedded_s3_environment())
            base = create_bucket("klake-demo")
            storage = f"embedded S3 (moto_server at {endpoint})"
        log_dir, root, catalog_uri = join(base, "broker-logs"), join(base, "klake"), join(base, "catalog")
        print(f"klake demo: storage = {storage}")

        streams, records, segments = [], 0, 0
        for topic in TOPICS:
            for stream in generate(topic, args.days, args.records_per_day, rng):
                segments += write_broker_log(stream, topic, log_dir)
                records += len(stream.keys)
                streams.append(stream)
        print(f"  generated {records:,} records over {args.days} days in {len(streams)} partitions; "
              f"a broker-style log dir of {segments} segments at {log_dir}")

        catalog = Catalog.create(catalog_uri)
        imported = import_log_dir(log_dir, root, catalog, copy=True)
        print(f"  import --copy: {imported.rows_added} segments registered, {imported.already_registered} already "
              f"there (idempotent), catalog version {catalog.version()}")

        loaded_partitions = [load_partition_dir(join(log_dir, s.tp.dir_name)) for s in streams]
        problems = [line for loaded in loaded_partitions for seg in loaded for line in verify_problems(seg.source)[0]]
        print(f"  verify: {segments} segments, {len(problems)} problems")

        lookups, wrong = 0, 0
        for stream, loaded in zip(streams, loaded_partitions, strict=True):
            for target in np.linspace(START_MS - 1, START_MS + (args.days + 31) * DAY_MS, 12).astype(np.int64):
                answer = list_offsets(loaded, int(target))
                lookups += 1
                wrong += (answer.offset, answer.timestamp) != brute_force_lookup(stream.timestamps, int(target))
        print(f"  offset-for-timestamp: {lookups} lookups, {lookups - wrong} equal to a brute-force scan")

        day2 = (START_MS + DAY_MS, START_MS + DAY_MS + 3_600_000)
        live = catalog.segments()
        window = catalog.segments(from_ms=day2[0], to_ms=day2[1])
        print(f"  catalog: {live.num_rows} live segments, {sum(live['size_bytes'].to_pylist()):,} bytes; "
              f"a one-hour window on day 2 touches {window.num_rows} of them")

        scrubbed = scrub(root, catalog, grace_ms=0, dry_run=True)
        report = {
            "storage": storage, "records": records, "partitions": len(streams), "segments": segments,
            "import": imported.to_dict(), "verify_problems": problems, "lookups": lookups, "lookups_wrong": wrong,
            "live_segments": live.num_rows, "window_segments": window.num_rows, "scrub": scrubbed.to_dict(),
            "duration_s": round(time.monotonic() - started, 2),
        }
        print(f"  scrub (dry run): {len(scrubbed.orphans)} orphans, {len(scrubbed.missing)} missing objects")
    path = os.path.join(args.out, "demo-report.json")
    with open(path, "w") as handle:
        json.dump(report, handle, indent=2, default=str)
    print(f"klake demo: done in {report['duration_s']} s; report at {path}")
    return 1 if problems or wrong or imported.failed else 0


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="run the end-to-end demo on embedded storage",
                               description=__doc__.split("\n\n")[1] if __doc__ else None)
    demo.add_argument("--local", action="store_true", help="use a local directory instead of the embedded S3")
    demo.add_argument("--out", default="demo-output", help="where the report goes (default demo-output/)")
    demo.add_argument("--days", type=int, default=3, help="days of data to generate (default 3)")
    demo.add_argument("--records-per-day", type=int, default=4000, help="records per topic per day (default 4000)")
    demo.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    demo.set_defaults(handler=run_demo)


if __name__ == "__main__":
    from jobs.cli import main

    sys.exit(main(["demo", *sys.argv[1:]]))
