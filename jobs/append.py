"""`append`: append a DataFrame of records to topics, in parallel across partitions, committed once.

Input: any source Spark reads (`--format parquet|json|csv|orc|delta...` with `--input PATH`, or
`--table NAME`) with Spark's Kafka sink columns: `value` (binary or string, required), `key`,
`headers` (array of struct<key string, value binary>), `topic` (or `--topic`), `partition`,
`timestamp` (timestamp or epoch ms; missing = the job's `--now`, as a producer stamps).

- A missing partition is chosen as Kafka's default producer does: murmur2 of the key for keyed
  records; null keys stick to one partition until `jobs.sticky_batch_bytes` (the producer's
  `batch.size`, 16384) of records went there, then move on (KIP-480's sticky partitioner), starting
  at a partition derived from the input split (the run carries over batches within an input task), so
  a re-run with the same input and Spark settings assigns identically. An explicit partition outside
  the topic is rejected (`UNKNOWN_PARTITION`), as is one outside this run's `--partition`.
- An `offset` column (Spark's Kafka source has one; `--keep-offsets` requires it) is kept: every record is
  appended at its own offset, with its timestamp and `timestampType` as given, as a follower appends the
  leader's records (`engine.log.kept_offsets`: increasing per partition, at or after the log end, gaps
  allowed); a record breaking the rule is rejected (`OFFSETS_OUT_OF_ORDER`), never renumbered.
- Input order is kept per partition: files in path order, rows in file order, or Spark's row order for
  tables. No shuffle (issue 14): the input tasks (Parquet files read by pyarrow in the tasks, split by
  row groups as Spark splits files; other input read by Spark) assign partitions and stage their rows
  grouped by partition (`engine.ops.append_staging`); then one task per partition reads back its own
  rows in input order and streams them through the engine in chunks of `buffer_bytes`, uploading
  each segment as it closes: a task's memory is a chunk plus one open segment, whatever the partition's
  size (a chunk boundary ends a batch, as a produce request does). The staged rows are deleted when
  the attempt ends (scrub removes those of a killed one). Input whose splits are each one whole partition
  in order (the archive's Kafka source, `AppendInput.by_partition`) is appended by its input tasks
  directly, nothing staged.
- `--dry-run` writes nothing (no staged rows, segment, lease, rejects file or commit): it reads and
  appends in memory, so every record is checked and every segment encoded, and says what it would
  append and reject; its staged rows travel through the driver, so size the driver for the input.
- `s3://` input is read by the tasks with pyarrow through fsspec (Parquet, JSON lines, CSV), since
  Spark here has no S3 filesystem (hadoop-aws); other formats from S3 need a cluster that has one.
- Records Kafka would refuse (timestamp outside `message.timestamp.before/after.max.ms`, larger than
  `max.message.bytes`, negative timestamps unless KIP-228 is enabled, a partition outside the topic)
  are not appended; they are written with their reason to the rejects dataset (Parquet, one file
  per partition) next to the report, and counted in it. Accepted records are unaffected.
- Idempotent per partition: the default job id is derived from the input (paths, sizes, modification
  times), the topic and the assignment settings; the job ledger records, in the same commit as the
  segments, which partitions the job id appended, so a re-run with the same input and job id appends
  exactly the partitions no attempt committed, and nothing twice. A partition this attempt could not
  append (its lease held by another job) is "not yet appended": the run exits 1 and says so.

This module is the job's shell; its parts live in `jobs.ingest` (the input found and checked, partitions
assigned, rows staged, the append tasks) and `engine.ops.rejects` (the rejects dataset).

    spark-submit jobs/append.py --conf conf/s3.example.yaml --input s3://landing/2026-11-22/ --format parquet --topic clicks
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence

from engine.ops.append import PartitionAppendOutcome
from engine.ops.append_staging import order_pieces
from engine.ops.lease import leased_partitions
from engine.ops.rejects import drop_partition_rejects, rejects_dir
from engine.ops.run import JobRun, PartitionInput, PartitionResult
from jobs.ingest.append_task import RESULT, RESULT_SCHEMA, AppendTasks, partition_results
from jobs.ingest.assign import tp_names
from jobs.ingest.report import report_append
from jobs.ingest.source import InputSettings, input_job_id, is_dir, open_input
from jobs.ingest.stage import STAGE_FLUSH_BYTES, Stager, append_tasks, buffer_bytes, stage_input
from jobs.runtime.job_runner import JobContext, JobSpec, check_partitions, main
from jobs.runtime.report import plural
from jobs.runtime.spark_session import counted_on_the_driver, run_with_progress
from kernel.errors import KlakeError
from kernel.names import TopicPartition
from layouts.object_layout import STAGING_DIR
from layouts.store import join


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="PATH", help="input files or directory (local or s3://)")
    source.add_argument("--table", metavar="NAME", help="a table of the Spark session's catalog")
    parser.add_argument("--format", default="parquet", help="Spark source format of --input (default parquet)")
    parser.add_argument("--input-option", dest="input_options", action="append", default=[], metavar="KEY=VALUE",
                        help="option for the Spark reader, e.g. header=true for CSV (repeatable)")
    parser.add_argument("--rejects", metavar="DIR",
                        help="where rejected records go, one Parquet file per partition (default beside --report, "
                             "else {root}/_rejects/{job id}/)")
    parser.add_argument("--keep-offsets", action="store_true",
                        help="the input must have an `offset` column (as Spark's Kafka source gives it); an input "
                             "that has one keeps its offsets anyway (README: Keeping a cluster's offsets)")


def run(ctx: JobContext) -> None:
    settings = InputSettings.from_args(ctx.args)
    if settings.input:
        is_dir(settings.input, ctx.store)  # a missing input is an input error (exit 2) naming it, also with --job-id
    if ctx.args.job_id is None:
        ctx.job_id = ctx.report.job_id = input_job_id(ctx, settings)
    append_input(ctx, settings)


def append_input(ctx: JobContext, settings: InputSettings) -> None:
    """Append the input `settings` names under the run's job id (`ctx.job_id`), and report it."""
    source = open_input(ctx, settings)  # bad input fails here, before anything is written
    topics, counts = source.topics, source.counts
    check_partitions([TopicPartition(t, counts[t] - 1) for t in topics], set(topics), set(settings.partition_ids), None)
    names = tp_names(counts)
    tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])
           if not settings.partition_ids or p in settings.partition_ids]
    selected = {names.index((tp.topic, tp.partition)): tp for tp in tps}
    ctx.check_changeable(tps)
    if _appended_already(ctx, tps):
        return
    prepare_kwargs = {"store": ctx.store, "now_ms": ctx.now_ms,
                      "append_id": ctx.job_id, "batch_bytes": ctx.config.jobs.batch_bytes or None,
                      "dry_run": ctx.dry_run, "keep_offsets": source.keep_offsets}
    where = None if ctx.dry_run else rejects_dir(ctx.config.root, ctx.job_id, settings.rejects, ctx.args.report)
    rows: list[dict] = []

    def execute(items: Sequence[PartitionInput[None]]) -> list[PartitionResult[PartitionAppendOutcome]]:
        if source.by_partition:
            return append_by_partition(items)
        prefix = None if ctx.dry_run else join(ctx.config.root, STAGING_DIR, ctx.job_id, uuid.uuid4().hex)
        stager = Stager(counts, ctx.config.jobs.sticky_batch_bytes, source.order,
                        frozenset(settings.topics) if settings.topics else None, prefix, ctx.store,
                        buffer_bytes(STAGE_FLUSH_BYTES, items))
        try:
            tasks = append_tasks(order_pieces(stage_input(ctx.spark, stager, source.parquet, source.df)), selected)
            task = AppendTasks(names, {item.tp: item for item in items}, frozenset(tps), counts, where, source.order,
                               ctx.store, prepare_kwargs)
            # one Spark task per partition (a fixed number of RDD partitions: nothing coalesces them), each
            # reading its staged rows in input order and streaming them through the engine chunk by chunk
            rdd = ctx.spark.sparkContext.parallelize(list(enumerate(tasks)), max(len(tasks), 1)).flatMap(task)
            rows.extend(run_with_progress(ctx.spark, rdd.collect, len(items), ctx.progress()))
        finally:
            if prefix is not None:
                ctx.store.delete_tree(prefix)
        return counted_on_the_driver(partition_results(rows))

    def append_by_partition(items: Sequence[PartitionInput[None]]) -> list[PartitionResult[PartitionAppendOutcome]]:
        """Input whose splits are each one partition's records (`AppendInput.by_partition`): each input task
        appends its split, nothing staged; two tasks appending one partition fail the run before its commit."""
        assert source.df is not None
        task = AppendTasks(names, {item.tp: item for item in items}, frozenset(tps), counts, where, source.order,
                           ctx.store, prepare_kwargs)
        frame = source.df.mapInArrow(task.over_input, RESULT_SCHEMA)
        rows.extend(run_with_progress(ctx.spark, lambda: frame.toArrow().to_pylist(), len(items), ctx.progress()))
        appended = [(row["topic"], row["partition"]) for row in rows if row["kind"] == RESULT]
        if len(appended) != len(set(appended)):
            raise KlakeError(f"input {settings.where}: a partition's records came in several "
                             "input splits")
        return counted_on_the_driver(partition_results(rows))

    run_ = ctx.run_partitions_with(tps, execute, ledger_idle=True)
    _drop_uncommitted_rejects(ctx, run_, where)
    report_append(ctx, run_, rows, where)


def _appended_already(ctx: JobContext, tps: Sequence[TopicPartition]) -> bool:
    """Whether the job ledger holds this job id's append for every partition: a re-run of an append that
    finished. Then it says so and stops before staging any row (a run that finished some partitions only
    goes on, and finishes the others)."""
    if not tps or not ctx.catalogued_partitions() or ctx.catalog.committed_partitions(ctx.job_id, tps) != set(tps):
        return False
    if leased_partitions(ctx.store, tps):  # an attempt killed after its commit left its
        return False  # leases: the partitions' run takes them over and releases them, as every re-run does
    ctx.report.results.update({"records_appended": 0, "already_committed": True}
                              | ({"records_to_append": 0} if ctx.dry_run else {}))
    ctx.report.summary.append(f"append: already done: job {ctx.job_id} appended this input to "
                              f"{plural(len(tps), 'partition')} (the job ledger says so); nothing appended again")
    return True


def _drop_uncommitted_rejects(ctx: JobContext, run_: JobRun[PartitionAppendOutcome], where: str | None) -> None:
    """A partition that did not commit will be appended (and its records rejected) by a later attempt:
    its rejects file is not true yet (scrub reclaims it if this attempt dies before getting here). A dry
    run (`where` None) wrote none."""
    for result in [] if where is None else run_.results:
        counters = result.step.outcome.counters if result.step is not None else None
        if str(result.tp) in run_.failures and counters is not None and sum(counters.rejected.values()):
            drop_partition_rejects(where, result.tp, ctx.store)


SPEC = JobSpec("append", "append records (Spark's Kafka sink columns) to topics", run, add_arguments,
               example="klake append --conf demo-output/demo.yaml --input demo-output/hour --format json --dry-run")

if __name__ == "__main__":
    sys.exit(main(SPEC))
