"""`read`: the records of a topic in a timestamp and/or offset range, with Spark's Kafka source schema.

Rows have the columns of Spark's Kafka source (`KAFKA_SCHEMA`: key, value, topic, partition, offset,
timestamp, timestampType, headers), so code written against a live Kafka source runs unchanged on the
archive. They go to `--output` or, from Python, come back as a DataFrame:
`read_records(spark, config, topic, from_ms=..., to_ms=..., from_offset=..., to_offset=..., isolation=...)`.

What the job's tasks do with the records depends on what it is asked for; every task reads, CRC-checks
and range-filters every batch the same way (`engine.ops.read.read_item`):
- no `--output`: the answer is counts, so the tasks count and return their counts; no row is shipped
  to Spark's JVM (as Spark itself prunes every column for a `count()` over Parquet);
- `--output` in Parquet (the default) on a local path or `s3://`: each task writes its records' Parquet
  file itself with pyarrow through klake's store, and the driver commits the files once every task
  succeeded (`engine.ops.read_output`: staging per task attempt, moved into place, `_SUCCESS` last; a
  re-run replaces the output). Snappy, as Spark writes by default; the settings per column are
  `engine.ops.read.KAFKA_PARQUET_COLUMNS` (offsets and timestamps delta-encoded; min/max statistics on
  partition, offset, timestamp and timestampType only: readers skip row groups by those, not by topic);
- `--output-format json`, or another filesystem (`hdfs://`, ...): rows go through Spark's own writer,
  which needs the cluster's filesystem for that scheme.
A task that meets a corrupt batch fails its topic-partition with the error naming segment and offset;
nothing is committed then.

Range (all bounds optional, combined with AND): `--from`/`--to` (epoch ms or ISO-8601, before 1970
on KIP-228 topics): `from <= timestamp < to`, each record by its own timestamp (Spark's Kafka source
instead turns `startingTimestamp` into an offset and returns everything after it, out-of-order
timestamps included; here such records are left out); `--from-offset`/`--to-offset`:
`from <= offset < to`. `--isolation-level read_committed` leaves out the records of aborted
transactions and stops at each partition's last stable offset, as a read_committed consumer (default
read_uncommitted, as Kafka's). The rules and how the work is cut (prune, seek, split, pack small segments
into tasks of ~256 MiB, read) are `engine.ops.read`'s.
The report counts live, pruned and read segments, work items, bytes read, GET requests and records.
A read whose work items hold at most `jobs.driver_max_bytes` of log runs its packs in the job's own
process, without starting Spark (issue 26); JSON output always goes through Spark's writer.

    spark-submit jobs/read.py --conf conf/s3.example.yaml --topic orders --from 2026-11-21T10:00:00Z \\
        --to 2026-11-21T11:00:00Z --output out/orders --output-format parquet
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.log.topic_config import min_timestamp
from engine.ops.catalog_table import Catalog, CatalogNotFoundError
from engine.ops.read import (
    DEFAULT_PACK_BYTES,
    DEFAULT_SPLIT_BYTES,
    KAFKA_ARROW_SCHEMA,
    KAFKA_PARQUET_COLUMNS,
    IsolationLevel,
    ReadPlan,
    ReadRange,
    WorkItem,
    count_item,
    pack_items,
    plan_read,
    read_item,
)
from engine.ops.read_output import StagedOutput, write_parquet
from engine.ops.topic_store import load_topic_config
from jobs.runtime.config import KlakeConfig
from jobs.runtime.job_runner import JobContext, JobSpec, at_least, main, time_argument
from jobs.runtime.spark_session import run_with_progress
from jobs.source_options import KAFKA_SCHEMA
from kernel.errors import KlakeError
from layouts.metering import Meter, add_counted, metered
from layouts.store import is_local, is_s3
from layouts.store.bound import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

OUTPUT_FORMATS = ("parquet", "json")


class CounterParam:
    """Spark accumulator parameter summing `Counter`s (task traffic and record counts)."""

    def zero(self, value: Counter[str]) -> Counter[str]:
        return Counter()

    def addInPlace(self, total: Counter[str], more: Counter[str]) -> Counter[str]:  # noqa: N802 - Spark's name
        total.update(more)
        return total


def records_frame(spark: SparkSession, items: list[WorkItem], store: Store,
                  index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, counters: Any = None,
                  pack_bytes: int = DEFAULT_PACK_BYTES) -> DataFrame:
    """One Spark task per pack of work items (`engine.ops.read.pack_items`, at least one per core):
    `spark.range` gives task i the id i, and the packs travel as a broadcast (unpickled once per Python
    worker, not once per task). Task traffic and record counts go to the `counters` accumulator."""
    if not items:
        return spark.createDataFrame([], KAFKA_SCHEMA)
    packs = pack_items(items, pack_bytes, spark.sparkContext.defaultParallelism)
    shared = spark.sparkContext.broadcast(packs)

    def read_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                for item in shared.value[index]:
                    tally: Counter[str] = Counter()
                    yield from _read_tallied(item, store, index_interval_bytes, tally)
                    if counters is not None:
                        counters.add(tally)

    return spark.range(0, len(packs), 1, len(packs)).mapInArrow(read_batches, KAFKA_SCHEMA)


def _read_tallied(item: WorkItem, store: Store, index_interval_bytes: int,
                  tally: Counter[str]) -> Iterator[pa.RecordBatch]:
    """`read_item`, adding its GETs, bytes read and records (by topic-partition) to `tally`."""
    records = 0
    with metered() as meter:
        for batch in read_item(item, store, index_interval_bytes):
            records += batch.num_rows
            yield batch
    _add_item(tally, item, meter, records)


def _add_item(tally: Counter[str], item: WorkItem, meter: Meter, records: int) -> None:
    tally.update({"GET": meter.requests["GET"], "bytes_read": meter.bytes["read"],
                  f"records:{item.row.topic}-{item.row.partition}": records})


@dataclass
class PackResult:
    """What one task of the count or Parquet scan returns: its tally, the file it staged, or the error
    that failed it (a typed klake error or a storage error) and the topic-partition it was reading."""

    pack: int
    tally: Counter[str]
    staged: str | None = None
    error: str | None = None
    where: str | None = None


def _scan_pack(pack: int, items: list[WorkItem], store: Store, index_interval_bytes: int,
               output: StagedOutput | None, attempt: int) -> PackResult:
    """One task: read every item of the pack and count its records or, with `output`, write them to this
    attempt's staged Parquet file."""
    result = PackResult(pack, Counter())
    current: list[WorkItem] = []

    def batches() -> Iterator[pa.RecordBatch]:
        for item in items:
            current[:] = [item]
            yield from _read_tallied(item, store, index_interval_bytes, result.tally)

    try:
        if output is None:
            for item in items:
                current[:] = [item]
                with metered() as meter:
                    records = count_item(item, store, index_interval_bytes)
                _add_item(result.tally, item, meter, records)
        else:
            uri = output.attempt_uri(pack, attempt)
            with metered() as meter:
                if write_parquet(batches(), uri, KAFKA_ARROW_SCHEMA, output.store, KAFKA_PARQUET_COLUMNS):
                    result.staged = uri
            result.tally.update({"PUT": meter.requests["PUT"], "bytes_written": meter.bytes["written"]})
    except (KlakeError, OSError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        result.where = f"{current[0].row.topic}-{current[0].row.partition}" if current else "*"
    return result


def scan_packs(spark: SparkSession, items: list[WorkItem], store: Store,
               index_interval_bytes: int, pack_bytes: int, output: StagedOutput | None,
               progress: Any = None) -> list[PackResult]:
    """Count (or, with `output`, stage as Parquet) the records of every work item, one Spark task per pack
    (`pack_items`, at least one per core); only small results travel back, no row goes through the JVM."""
    packs = pack_items(items, pack_bytes, spark.sparkContext.defaultParallelism)
    if not packs:
        return []

    def task(numbered: tuple[int, list[WorkItem]]) -> PackResult:
        from pyspark import TaskContext

        attempt = TaskContext.get().taskAttemptId()  # type: ignore[union-attr]  # always set in a task
        return _scan_pack(numbered[0], numbered[1], store, index_interval_bytes, output, attempt)

    rdd = spark.sparkContext.parallelize(list(enumerate(packs)), len(packs)).map(task)
    return run_with_progress(spark, rdd.collect, len(packs), progress)


def read_records(spark: SparkSession, config: KlakeConfig, topic: str, from_ms: int | None = None,
                 to_ms: int | None = None, from_offset: int | None = None, to_offset: int | None = None,
                 partitions: Iterable[int] | None = None, split_bytes: int = DEFAULT_SPLIT_BYTES,
                 isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> DataFrame:
    """The topic's records in range as a DataFrame with `KAFKA_SCHEMA` (see the module docstring)."""
    try:
        catalog = Catalog.open(Store(config.catalog_uri, config.storage))
    except CatalogNotFoundError:
        raise KlakeError(f"no catalog at {config.catalog_uri}") from None
    chosen = None if partitions is None else set(partitions).__contains__
    interval = config.jobs.index_interval_bytes
    store = Store(config.root, config.storage)
    floor = min_timestamp(load_topic_config(store, topic))
    plan = plan_read(catalog, topic, ReadRange(from_ms, to_ms, from_offset, to_offset, floor=floor), store,
                     chosen, split_bytes, interval, isolation)
    return records_frame(spark, plan.items, store, interval)


# --- the job -------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="from_ms", type=time_argument, metavar="TIME",
                        help="first timestamp, inclusive (epoch ms or ISO-8601)")
    parser.add_argument("--to", dest="to_ms", type=time_argument, metavar="TIME",
                        help="end timestamp, exclusive")
    parser.add_argument("--from-offset", type=at_least(0), metavar="N", help="first offset, inclusive")
    parser.add_argument("--to-offset", type=at_least(0), metavar="N", help="end offset, exclusive")
    parser.add_argument("--isolation-level", type=IsolationLevel, choices=list(IsolationLevel), metavar="LEVEL",
                        default=IsolationLevel.READ_UNCOMMITTED,
                        help="read_committed: as a read_committed consumer (default read_uncommitted)")
    parser.add_argument("--output", metavar="PATH", help="write the records here, replacing what is there "
                        "(default: only count them)")
    parser.add_argument("--output-format", metavar="FORMAT", choices=OUTPUT_FORMATS, default="parquet",
                        help="parquet (default) or json")
    parser.add_argument("--split-bytes", type=at_least(1), default=DEFAULT_SPLIT_BYTES, metavar="N",
                        help="split larger segments between tasks")
    parser.add_argument("--pack-bytes", type=at_least(1), default=DEFAULT_PACK_BYTES, metavar="N",
                        help="log bytes a task reads at most (default 256 MiB)")


def run(ctx: JobContext) -> None:
    args = ctx.args
    if not args.topics:
        raise KlakeError("read needs --topic")
    chosen = {(tp.topic, tp.partition) for tp in ctx.selected_partitions()}
    interval = ctx.config.jobs.index_interval_bytes
    ranges = {topic: ReadRange(args.from_ms, args.to_ms, args.from_offset, args.to_offset,
                               floor=min_timestamp(ctx.topic_config(topic))) for topic in dict.fromkeys(args.topics)}
    rng = next(iter(ranges.values()))
    plans = [plan_read(ctx.catalog, topic, topic_range, ctx.store, lambda p, t=topic: (t, p) in chosen,
                       args.split_bytes, interval, args.isolation_level) for topic, topic_range in ranges.items()]
    items = [item for plan in plans for item in plan.items]
    if args.output and (args.output_format != "parquet" or not (is_local(args.output) or is_s3(args.output))):
        counters = ctx.spark.sparkContext.accumulator(Counter(), CounterParam())
        frame = records_frame(ctx.spark, items, ctx.store, interval, counters, args.pack_bytes)
        tasks = frame.rdd.getNumPartitions() if items else 0
        writer = frame.write.mode("overwrite").format(args.output_format)
        run_with_progress(ctx.spark, lambda: writer.save(args.output), tasks, ctx.progress())
        _report(ctx, rng, plans, len(items), tasks, counters.value)
        ctx.report.results["executed_in"] = "spark"
        return
    output = StagedOutput(ctx.store.at(args.output), ctx.job_id) if args.output else None
    in_driver = ctx.runs_in_driver(sum(item.log_bytes for item in items))
    ctx.report.results["executed_in"] = "driver" if in_driver else "spark"
    try:
        if in_driver:  # a small read: in this process, no Spark start-up (issue 26)
            results = [_scan_pack(pack, work, ctx.store, interval, output, attempt=0)
                       for pack, work in enumerate(pack_items(items, args.pack_bytes))]
        else:
            results = scan_packs(ctx.spark, items, ctx.store, interval, args.pack_bytes, output, ctx.progress())
    except BaseException:
        if output is not None:
            output.abort()
        raise
    tally: Counter[str] = Counter()
    for result in results:
        tally.update(result.tally)
    failed = [result for result in results if result.error]
    if output is not None:
        if failed:
            output.abort()
        else:
            output.commit({r.pack: r.staged for r in results if r.staged}, KAFKA_ARROW_SCHEMA)
    _report(ctx, rng, plans, len(items), len(results), tally, counted=in_driver)
    for result in failed:
        ctx.report.fail(result.where or "*", result.error or "")
    if failed and output is not None:
        ctx.report.summary.append(f"read: nothing written to {args.output}: a task failed (the output is as it was)")


def _report(ctx: JobContext, rng: ReadRange, plans: list[ReadPlan], work_items: int, task_count: int,
            tasks: Counter[str], counted: bool = False) -> None:
    """The run's figures; `counted`: the tasks ran in this process, whose meters saw their traffic already."""
    by_partition = {name: tasks.get(f"records:{name}", 0) for plan in plans for name in plan.partitions}
    records = sum(by_partition.values())
    for name, count in by_partition.items():
        ctx.report.partitions.append({"partition": name, "status": "succeeded", "error": None,
                                      "outcome": {"records": count}})
    if not counted:
        add_counted({"GET": tasks["GET"], "PUT": tasks["PUT"]},  # the tasks' traffic, into the job's totals
                    {"read": tasks["bytes_read"], "written": tasks["bytes_written"]})
    get_requests = sum(plan.requests["GET"] for plan in plans) + tasks["GET"]
    bytes_read = sum(plan.bytes["read"] for plan in plans) + tasks["bytes_read"]
    segments = {"live": sum(p.live_segments for p in plans), "pruned": sum(p.pruned_segments for p in plans),
                "read": sum(p.segments_to_read for p in plans), "split": sum(p.split_segments for p in plans)}
    ctx.report.results["read"] = {
        "topics": list(dict.fromkeys(ctx.args.topics)), "range": asdict(rng),
        "isolation_level": str(ctx.args.isolation_level), "segments": segments, "work_items": work_items, "tasks": task_count,
        "records": records, "records_by_partition": by_partition, "get_requests": get_requests,
        "bytes_read": bytes_read, "output": ctx.args.output,
        "output_format": ctx.args.output_format if ctx.args.output else None}
    ctx.report.summary.append(
        f"read: {records} record(s) from {segments['read']} of {segments['live']} live segment(s) "
        f"({segments['pruned']} pruned, {work_items} work item(s) in {task_count} task(s))"
        + (f" -> {ctx.args.output} ({ctx.args.output_format})" if ctx.args.output else ""))


SPEC = JobSpec("read", "records of a topic between timestamps and/or offsets, as Spark's Kafka source rows",
               run, add_arguments, mutates=False, example="klake read --conf demo-output/demo.yaml --topic clicks --from 2026-11-04T10:00:00Z --to 2026-11-04T11:00:00Z")

if __name__ == "__main__":
    sys.exit(main(SPEC))
