"""`compact`: Kafka's log cleaner on `cleanup.policy=compact` topics (latest record per key, tombstones
until their delete horizon, transactions, small segments merged), old and new segments swapped in one
commit. Partitions run only when Kafka's trigger says so (dirty ratio, compaction lags) unless `--force`.

The driver decides for every partition at once over the catalog's rows as Arrow
(`engine.cleaner.selection.plan_compaction`); a dry run starts no Spark task and reads no segment. The
JSON report holds each partition's decision with its reasons; the plan goes to Parquet files next to it
(`<report>.partitions.parquet`: each partition's range, ratio, verdict and reason;
`<report>.segments.parquet`: each segment's zone in the round); stdout prints one line per compacted
partition and counts by reason, and with `--verbose` each partition's cleanable range.

    spark-submit jobs/compact.py --conf conf/s3.example.yaml --report out/compact.json
"""

from __future__ import annotations

import argparse
import sys

from engine.cleaner.selection import CleanableRange
from engine.ops.compact import CompactionPlanner, CompactOutcome, prepare_compaction
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural
from kernel.names import TopicPartition


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="clean even when the dirty ratio / lags say not yet")


def run(ctx: JobContext) -> None:
    tps = [tp for tp in ctx.selected_partitions() if ctx.topic_config(tp.topic).compacted]
    run = ctx.run_planned(tps, prepare_compaction, CompactionPlanner(ctx.now_ms, ctx.args.force))
    cleaned = read = kept = 0
    for result in run.results:
        if result.step is None:
            continue
        outcome = result.step.outcome
        cleaned += outcome.cleaned or (ctx.dry_run and outcome.due)
        read += outcome.stats.get("records_read", 0)
        kept += outcome.stats.get("records_kept", 0)
        if outcome.cleaned:
            what = f"cleaned ({_why(outcome)}), segments {outcome.segments_before} -> {outcome.segments_after}"
        else:
            verb = "would clean" if ctx.dry_run and outcome.due else "not cleaned"
            what = f"{verb} ({_why(outcome)}), {plural(outcome.segments_before, 'segment')}"
        ctx.report.summary.append(f"{result.tp}: {what}")
    ctx.report.results.update({"partitions_cleaned": 0 if ctx.dry_run else cleaned,
                               "partitions_due": cleaned if ctx.dry_run else None, "records_read": read,
                               "records_kept": kept, "records_removed": read - kept,
                               "compacted_topics_partitions": len(tps)})
    if ctx.dry_run:
        ctx.report.summary.append(f"compact: would clean {cleaned} of {len(tps)} compacted partition(s)")
    else:
        ctx.report.summary.append(f"compact: cleaned {cleaned} of {len(tps)} compacted partition(s); "
                                  f"records kept {kept} of {read} read")
    if run.plan is not None:
        ctx.report.add_plan(run.plan)
        if ctx.args.verbose:
            ctx.report.details += [_range(tp, run.plan.partition(tp).range) for tp in run.plan.topic_partitions()]


def _range(tp: TopicPartition, rng: CleanableRange) -> str:
    """A partition's cleanable range with its numbers (`--verbose`)."""
    return (f"{tp}: checkpoint {rng.checkpoint}{' (reset)' if rng.checkpoint_reset else ''}, dirty "
            f"[{rng.first_dirty_offset}, {rng.round_end}) up to the {rng.uncleanable_reason} at "
            f"{rng.first_uncleanable_offset}; clean {rng.clean_bytes:,} B, cleanable {rng.cleanable_bytes:,} B, "
            f"ratio {rng.dirty_ratio:.6g}, max.compaction.lag.ms delay {rng.max_compaction_delay_ms} ms")


def _why(outcome: CompactOutcome) -> str:
    """Kafka's reasons for the decision (they state the dirty ratio against its threshold)."""
    return "; ".join(outcome.reasons) or f"dirty ratio {outcome.dirty_ratio:.6g}"


SPEC = JobSpec("compact", "compact cleanup.policy=compact topics (Kafka's log cleaner)", run, add_arguments,
               example="klake compact --conf demo-output/demo.yaml --topic orders --dry-run --now 2026-11-06T12:00:00Z",
               deletes_after_commit=True)

if __name__ == "__main__":
    sys.exit(main(SPEC))
