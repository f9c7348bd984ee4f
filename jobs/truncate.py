"""`truncate` and `delete-records`: cut partitions at an offset, or raise their log start offset.

`truncate --offset N` removes every record at or above N (records below N inside a straddling batch
are kept, where Kafka drops the whole batch); `delete-records --offset N` is Kafka's DeleteRecords
(KIP-107): the log start offset rises to N and whole segments below it are retired. Both need the
partitions named: `--topic` and `--partition`, or `--all-partitions`.

    spark-submit jobs/truncate.py --conf conf/s3.example.yaml --topic orders --partition 3 --offset 1200
    spark-submit jobs/truncate.py --delete-records --conf conf/s3.example.yaml --topic orders --all-partitions --offset 500
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from engine.catalog.schema import LIVE_STATES
from engine.ops.run import JobRun
from engine.ops.truncate import TruncateOutcome, prepare_delete_records, prepare_truncation
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural
from kernel.errors import KlakeError
from kernel.names import TopicPartition


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--offset", type=int, required=True, help="the offset to cut at / the new log start offset")
    parser.add_argument("--all-partitions", action="store_true",
                        help="apply to every partition of the --topic(s) (otherwise --partition is required)")


def add_truncate_arguments(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser)
    parser.add_argument("--allow-beyond-end", action="store_true",
                        help="accept an --offset above a partition's log end (a no-op there, as Kafka's truncateTo)")


def _targets(ctx: JobContext) -> dict:
    if not ctx.args.topics or not (ctx.args.partition_ids or ctx.args.all_partitions):
        raise KlakeError(f"{ctx.spec.name} changes data irreversibly: name --topic and --partition "
                         "(or --all-partitions)")
    if ctx.args.offset < 0:
        raise KlakeError(f"--offset must be >= 0, got {ctx.args.offset}")
    tps = ctx.selected_partitions()
    if not tps:
        raise KlakeError("no catalogued partition matches --topic/--partition")
    _refuse_beyond_end(ctx, tps)
    return {tp: ctx.args.offset for tp in tps}


def _refuse_beyond_end(ctx: JobContext, tps: list[TopicPartition]) -> None:
    """An --offset above a partition's log end is a typo, refused before any work (issue 26): Kafka's
    DeleteRecords answers OFFSET_OUT_OF_RANGE there; `truncate` accepts it with --allow-beyond-end (then a
    no-op, as `UnifiedLog.truncateTo`)."""
    if getattr(ctx.args, "allow_beyond_end", False):
        return
    live = ctx.catalog.rows_table([(tp.topic, tp.partition) for tp in tps], LIVE_STATES,
                                  ["topic", "partition", "next_offset"])
    ends = live.group_by(["topic", "partition"], use_threads=False).aggregate([("next_offset", "max")]).to_pylist()
    beyond = [f"{row['topic']}-{row['partition']} ends at {row['next_offset_max']}" for row in ends
              if row["next_offset_max"] < ctx.args.offset]
    if beyond:
        hint = "; --allow-beyond-end accepts it" if ctx.spec.name == "truncate" else ""
        raise KlakeError(f"--offset {ctx.args.offset} is beyond the log end: {', '.join(beyond)}{hint}")


def _what_left(outcome: TruncateOutcome) -> str:
    """What left the log: truncate counts the records it removed; delete-records moves the log start offset
    (KIP-107), so every offset below the new start left the log, the whole segments below it deleted."""
    if outcome.noop:
        return "nothing to do"
    if outcome.previous_log_start_offset is None:
        return f"{plural(outcome.records_removed, 'record')} removed"
    left = outcome.log_start_offset - outcome.previous_log_start_offset
    return (f"log start offset {outcome.previous_log_start_offset} -> {outcome.log_start_offset}: "
            f"{plural(left, 'offset')} left the log ({plural(outcome.records_removed, 'record')} in whole "
            "segments, deleted)")


def _summarize(ctx: JobContext, run: JobRun[TruncateOutcome]) -> None:
    removed = 0
    for result in run.results:
        if result.step is None:
            continue
        outcome = result.step.outcome
        removed += outcome.records_removed
        ctx.report.summary.append(f"{result.tp}: {_what_left(outcome)}; log {outcome.log_start_offset}.."
                                  f"{outcome.log_end_offset}")
    ctx.report.results["records_removed"] = removed


def run_truncate(ctx: JobContext) -> None:
    targets = _targets(ctx)
    prepare = partial(prepare_truncation, store=ctx.store, targets=targets, now_ms=ctx.now_ms, job_id=ctx.job_id)
    _summarize(ctx, ctx.run_partitions(targets, prepare))


def run_delete_records(ctx: JobContext) -> None:
    targets = _targets(ctx)
    prepare = partial(prepare_delete_records, offsets=targets, job_id=ctx.job_id)
    _summarize(ctx, ctx.run_partitions(targets, prepare))


SPEC = JobSpec("truncate", "remove every record at or above an offset", run_truncate, add_truncate_arguments,
               example="klake truncate --conf demo-output/demo.yaml --topic orders --partition 0 --offset 3800", dry_run=False,
               deletes_after_commit=True)
DELETE_RECORDS = JobSpec("delete-records", "raise the log start offset (Kafka DeleteRecords)", run_delete_records,
                         add_arguments, example="klake delete-records --conf demo-output/demo.yaml --topic orders --partition 0 --offset 2000", dry_run=False,
                         deletes_after_commit=True)

if __name__ == "__main__":
    if "--delete-records" in sys.argv:
        sys.argv.remove("--delete-records")
        sys.exit(main(DELETE_RECORDS))
    sys.exit(main(SPEC))
