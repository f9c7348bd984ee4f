"""`append`: append a DataFrame of records to topics, in parallel across partitions, committed once.

Input: any source Spark reads (`--format parquet|json|csv|orc|delta...` with `--input PATH`, or
`--table NAME`) with Spark's Kafka sink columns: `value` (binary or string, required), `key`,
`headers` (array of struct<key string, value binary>), `topic` (or `--topic`), `partition`,
`timestamp` (timestamp or epoch ms; missing = the job's `--now`, as a producer stamps).

- A missing partition is chosen as Kafka's default producer does: murmur2 of the key for keyed
  records; null keys stick to one partition until `jobs.sticky_batch_bytes` (the producer's
  `batch.size`, 16384) of records went there, then move on (KIP-480's sticky partitioner), starting
  at a partition derived from the input split, so a re-run assigns identically.
- Input order is kept per partition: files in path order, rows in file order (`_metadata`), or
  Spark's row order for tables.
- Records Kafka would refuse (timestamp outside `message.timestamp.before/after.max.ms`, larger than
  `max.message.bytes`, negative timestamps unless KIP-228 is enabled, a partition outside the topic)
  are not appended; they are written with their reason to the rejects file (Parquet) next to the
  report, and counted in it. Accepted records are unaffected.
- Idempotent: the default job id is derived from the input (paths, sizes, modification times), the
  topic and the assignment settings; a re-run after a crash either finds that job's commit and
  appends nothing, or (no commit yet) appends everything once. One commit covers every partition.

    spark-submit jobs/append.py --conf conf/s3.yaml --input s3://landing/2026-11-22/ --format parquet --topic clicks
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import pickle
import sys
from collections.abc import Iterator, Sequence
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import KlakeError
from engine.partition_append import PartitionAppendOutcome, prepare_append
from engine.partition_job import PartitionInput, PartitionResult, PartitionStep, run_prepare
from engine.partitioner import murmur2, partition_for_keys
from jobs.job_runner import JobContext, JobSpec, main
from jobs.spark_session import run_with_progress
from layouts.names import TopicPartition
from layouts.storage import filesystem, is_s3, join, list_objects

ORDER_COLUMNS = ("_file", "_block", "_seq")
UNKNOWN_PARTITION = "UNKNOWN_PARTITION"
RESULT_SCHEMA = "topic string, partition int, result binary"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="PATH", help="input files or directory (local or s3://)")
    source.add_argument("--table", metavar="NAME", help="a table of the Spark session's catalog")
    parser.add_argument("--format", default="parquet", help="Spark source format of --input (default parquet)")
    parser.add_argument("--input-option", dest="input_options", action="append", default=[], metavar="KEY=VALUE",
                        help="option for the Spark reader, e.g. header=true for CSV (repeatable)")
    parser.add_argument("--rejects", metavar="PATH",
                        help="where rejected records go (Parquet; default beside --report, else {root}/_rejects/)")


def _read_input(ctx: JobContext):  # noqa: ANN202 - (a pyspark DataFrame, its topics if known without a scan)
    """The input with Spark's Kafka sink columns normalised and an order key per row; and its topics
    when the input has no `topic` column (then `--topic` names the only one)."""
    from pyspark.sql import functions as F

    spark, args = ctx.spark, ctx.args
    if args.table:
        df = spark.table(args.table)
        df = df.withColumn("_file", F.lit("")).withColumn("_block", F.lit(0).cast("long"))
    else:
        _is_dir(args.input, ctx)  # a missing input is an input error (exit 2) naming the path, also with --job-id
        reader = spark.read.format(args.format)
        for item in args.input_options:
            key, _, value = item.partition("=")
            reader = reader.option(key, value)
        df = reader.load(args.input)
        df = (df.withColumn("_file", F.col("_metadata.file_path"))
              .withColumn("_block", F.col("_metadata.file_block_start")))
    df = df.withColumn("_seq", F.monotonically_increasing_id())
    columns = set(df.columns)
    topics = None
    if "value" not in columns:
        raise KlakeError(f"input has no `value` column (found {sorted(columns - set(ORDER_COLUMNS))}); "
                         "it needs Spark's Kafka sink columns")
    if "topic" not in columns:
        if len(args.topics) != 1:
            raise KlakeError("the input has no `topic` column: name exactly one --topic")
        df = df.withColumn("topic", F.lit(args.topics[0]))
        topics = [args.topics[0]]
    elif args.topics:
        df = df.where(F.col("topic").isin(args.topics))
    if "partition" not in columns:
        df = df.withColumn("partition", F.lit(None).cast("int"))
    for name in ("key", "value"):
        if name in columns and dict(df.dtypes)[name] == "string":
            df = df.withColumn(name, F.col(name).cast("binary"))
    if "key" not in columns:
        df = df.withColumn("key", F.lit(None).cast("binary"))
    keep = ["topic", "partition", "key", "value"] + [c for c in ("headers", "timestamp") if c in columns]
    return df.select(*keep, *ORDER_COLUMNS), topics


def default_job_id(ctx: JobContext) -> str:
    """A job id that names the input: the same files, topic and assignment settings give the same id."""
    args = ctx.args
    digest = hashlib.sha256()
    if args.input:
        listing = sorted((o.uri, o.size, o.mtime_ms) for o in list_objects(args.input, ctx.options)) \
            if _is_dir(args.input, ctx) else [(args.input,)]
        digest.update(json.dumps([args.format, sorted(args.input_options), listing]).encode())
    else:
        digest.update(f"table:{args.table}".encode())
    digest.update(json.dumps([sorted(args.topics), args.partition_ids, ctx.config.jobs["sticky_batch_bytes"]]).encode())
    return f"append-{digest.hexdigest()[:24]}"


def _is_dir(path: str, ctx: JobContext) -> bool:
    fs, inner = filesystem(path, ctx.options)
    if not fs.exists(inner):
        raise KlakeError(f"input {path} does not exist")
    return fs.isdir(inner)


def assign_partitions(batch: pa.RecordBatch, counts: dict[str, int], sticky_bytes: int) -> pa.RecordBatch:
    """Fill missing partitions: murmur2 for keys, the sticky rule for null keys (module docstring)."""
    table = pa.Table.from_batches([batch])
    partition = table.column("partition").combine_chunks()
    if partition.null_count == 0 or table.num_rows == 0:
        return batch
    chosen = partition.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
    topics = table.column("topic").combine_chunks()
    keys = table.column("key").combine_chunks()
    sizes = pc.fill_null(pc.binary_length(table.column("value").combine_chunks()), 0).to_numpy(zero_copy_only=False)
    files = table.column("_file").combine_chunks()
    start = table.column("_block").combine_chunks().to_numpy(zero_copy_only=False)
    for topic in pc.unique(topics).to_pylist():
        n = counts[topic]
        rows = np.flatnonzero(pc.equal(topics, topic).to_numpy(zero_copy_only=False) & (chosen < 0))
        if rows.size == 0:
            continue
        by_key = partition_for_keys(keys.take(pa.array(rows)), n)
        null_rows = rows[by_key < 0]
        if null_rows.size:
            seed_input = pa.array([f"{files[int(null_rows[0])].as_py()}@{int(start[null_rows[0]])}:{topic}"], pa.binary())
            first = int(murmur2(seed_input)[0] & np.uint32(0x7FFFFFFF)) % n
            sticky = np.cumsum(sizes[null_rows]) // max(sticky_bytes, 1)
            by_key[by_key < 0] = ((first + sticky) % n).astype(np.int32)
        chosen[rows] = by_key
    index = table.schema.get_field_index("partition")
    return table.set_column(index, "partition", pa.array(chosen, pa.int32())).to_batches()[0]


def _append_group(table: pa.Table, items: dict[TopicPartition, PartitionInput], prepare_kwargs: dict) -> pa.Table:
    """One partition's records (one Spark task): sorted into input order, appended, result pickled."""
    topic, partition = table.column("topic")[0].as_py(), int(table.column("partition")[0].as_py())
    tp = TopicPartition(topic, partition)
    table = table.sort_by([(c, "ascending") for c in ORDER_COLUMNS])
    item = items.get(tp)
    if item is None:
        result = PartitionResult(tp, PartitionStep(_unknown_partition(tp, table)))
    else:
        result = run_prepare(partial(prepare_append, records=table, **prepare_kwargs), item)
    if result.step is not None:
        outcome = result.step.outcome
        outcome.rejects = _with_source(outcome.rejects, table)
    return pa.table({"topic": [topic], "partition": pa.array([partition], pa.int32()),
                     "result": pa.array([pickle.dumps(result)], pa.binary())})


def _unknown_partition(tp: TopicPartition, table: pa.Table) -> PartitionAppendOutcome:
    from engine.append import AppendCounters

    counters = AppendCounters(records_in=table.num_rows, records_accepted=0,
                              rejected={UNKNOWN_PARTITION: table.num_rows}, batches=0, bytes=0, segments_rolled=0)
    rejects = pa.table({"row": pa.array(np.arange(table.num_rows), pa.int64()),
                        "reason": pa.array([UNKNOWN_PARTITION] * table.num_rows, pa.string()),
                        "message": pa.array([f"{tp}: the topic has no such partition"] * table.num_rows, pa.string())})
    for name in ("key", "value", "timestamp", "headers"):
        if name in table.column_names:
            rejects = rejects.append_column(name, table.column(name))
    return PartitionAppendOutcome(tp.topic, tp.partition, "", False, counters, rejects)


def _with_source(rejects: pa.Table | None, table: pa.Table) -> pa.Table | None:
    """Rejected rows with where they came from: topic, partition, input file and position."""
    if rejects is None or rejects.num_rows == 0:
        return rejects
    rows = rejects.column("row")
    for name in ("topic", "partition", "_file", "_seq"):
        rejects = rejects.append_column(name.lstrip("_"), table.column(name).take(rows))
    return rejects.drop_columns(["row"])


def partition_counts(ctx: JobContext, topics: Sequence[str]) -> dict[str, int]:
    """Each topic's partition count: declared (`topics.<t>.partitions`), else what the catalog holds."""
    catalogued: dict[str, int] = {}
    for tp in ctx.catalog_or_create().partitions():
        catalogued[tp.topic] = max(catalogued.get(tp.topic, 0), tp.partition + 1)
    counts = {}
    for topic in topics:
        declared = ctx.config.topic(topic)
        if declared is not None and declared.partitions is not None:
            if declared.partitions < catalogued.get(topic, 0):
                raise KlakeError(f"topic {topic}: declares {declared.partitions} partitions but the catalog "
                                 f"holds {catalogued[topic]}; partitions can only be added")
            counts[topic] = declared.partitions
        elif topic in catalogued:
            counts[topic] = catalogued[topic]
        else:
            raise KlakeError(f"topic {topic} is new: declare its partition count (topics.{topic}.partitions in "
                             f"the config, or --set topics.{topic}.partitions=N)")
    return counts


def run(ctx: JobContext) -> None:
    if ctx.args.job_id is None:
        ctx.job_id = ctx.report.job_id = default_job_id(ctx)
    df, topics = _read_input(ctx)
    if topics is None:
        topics = sorted(r["topic"] for r in df.select("topic").distinct().collect() if r["topic"] is not None)
    counts = partition_counts(ctx, topics)
    sticky = int(ctx.config.jobs["sticky_batch_bytes"])
    assigned = df.mapInArrow(lambda batches: (assign_partitions(b, counts, sticky) for b in batches), df.schema)
    tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])
           if not ctx.args.partition_ids or p in ctx.args.partition_ids]
    prepare_kwargs = {"root": ctx.config.root, "now_ms": ctx.now_ms, "options": ctx.options,
                      "append_id": ctx.job_id, "batch_bytes": int(ctx.config.jobs["batch_bytes"]) or None}

    def execute(items: Sequence[PartitionInput]) -> list[PartitionResult]:
        by_tp = {item.tp: item for item in items}
        grouped = assigned.groupBy("topic", "partition").applyInArrow(
            lambda table: _append_group(table, by_tp, prepare_kwargs), RESULT_SCHEMA)
        rows = run_with_progress(ctx.spark, grouped.collect, len(items), ctx.progress())
        results = [pickle.loads(row["result"]) for row in rows]
        seen = {r.tp for r in results}
        idle = [PartitionResult(item.tp, PartitionStep(PartitionAppendOutcome(item.tp.topic, item.tp.partition,
                                                                              ctx.job_id, False)))
                for item in items if item.tp not in seen]
        return results + idle

    run_ = ctx.run_partitions_with(tps, execute, once_per_job_id=True)
    _report(ctx, run_.results, run_.already_committed)


def _report(ctx: JobContext, results: list[PartitionResult], already: bool) -> None:
    if already:
        ctx.report.summary.append(f"append: job {ctx.job_id} was already committed; nothing appended again")
        ctx.report.results["already_committed"] = True
        return
    appended = received = 0
    by_reason: dict[str, int] = {}
    rejects = []
    for result in results:
        if result.step is None:
            continue
        outcome = result.step.outcome
        counters = outcome.counters
        if counters is not None:
            received += counters.records_in
            appended += counters.records_accepted
            for reason, n in counters.rejected.items():
                if n:
                    by_reason[reason] = by_reason.get(reason, 0) + n
        if outcome.rejects is not None and outcome.rejects.num_rows:
            rejects.append(outcome.rejects)
        outcome.rejects = None
    count = sum(by_reason.values())
    path = _write_rejects(ctx, rejects) if rejects else None
    ctx.report.rejected = {"count": count, "by_reason": by_reason, "path": path}
    ctx.report.results.update({"records_in": received, "records_appended": appended})
    ctx.report.summary.append(f"append: {appended} of {received} record(s) appended"
                              + (f"; {count} rejected ({', '.join(f'{k} {v}' for k, v in sorted(by_reason.items()))}) "
                                 f"-> {path}" if count else ""))


def _write_rejects(ctx: JobContext, tables: list[pa.Table]) -> str:
    table = pa.concat_tables(tables, promote_options="permissive")
    if ctx.args.rejects:
        uri = ctx.args.rejects
    elif ctx.args.report:
        uri = ctx.args.report.rsplit(".", 1)[0] + ".rejects.parquet"
    else:
        uri = join(ctx.config.root, "_rejects", f"{ctx.job_id}.parquet")
    fs, path = filesystem(uri, ctx.options)
    if not is_s3(uri):
        fs.makedirs(fs._parent(path), exist_ok=True)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    fs.pipe_file(path, buffer.getvalue())
    return uri


def records_in(results: Iterator[PartitionResult]) -> int:
    return sum(r.step.outcome.counters.records_in for r in results if r.step and r.step.outcome.counters)


SPEC = JobSpec("append", "append records (Spark's Kafka sink columns) to topics", run, add_arguments,
               description=__doc__)

if __name__ == "__main__":
    sys.exit(main(SPEC))
