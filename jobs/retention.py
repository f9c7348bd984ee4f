"""`retention`: delete whole segments by Kafka's three passes (log start offset, retention.bytes,
retention.ms), oldest first, through the catalog's two-phase delete; `--dry-run` plans and reports.

The driver plans every partition at once over the catalog's live rows as Arrow (a dry run starts no
Spark task: it reads no segment object). The JSON report holds one summary per partition (counts, bytes,
first and last segment deleted, passes, holds, counts by reason); every segment's decision goes to a
Parquet file next to it (`<report>.segments.parquet`); stdout prints totals and counts by reason, and
with `--verbose` every segment's decision with its reason.

    spark-submit jobs/retention.py --conf conf/s3.example.yaml --report out/retention.json
"""

from __future__ import annotations

import sys

from engine.log.retention_explain import RetentionExplanation, describe_hold
from engine.ops.retention import RetentionOutcome, RetentionPlanner, prepare_retention
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural


def run(ctx: JobContext) -> None:
    tps = ctx.selected_partitions()  # bad --topic/--partition refused before Spark starts
    run = ctx.run_planned(tps, prepare_retention, RetentionPlanner(ctx.now_ms))
    deleted = kept = size = records = 0
    verbose: list[str] = []
    for result in run.results:
        outcome: RetentionOutcome | None = result.step.outcome if result.step is not None else None
        if outcome is None or outcome.plan is None:
            continue
        plan = outcome.plan
        deleted += plan.info["delete_segments"]
        kept += plan.info["segments"] - plan.info["delete_segments"]
        size += plan.bytes_to_delete
        records += plan.records_to_delete
        for hold in plan.held_back_by_future_timestamp:
            ctx.report.anomalies.append(f"{result.tp}: segment {hold.base_offset} is held back: {describe_hold(hold)}")
        if ctx.args.verbose:
            verbose += [f"{result.tp} {d.base_offset:>20} {d.action.value:<6} ({d.decided_by.value}) {d.reason}"
                        for d in RetentionExplanation(plan).decisions]
    verb = "would delete" if ctx.dry_run else "deleted"
    ctx.report.summary.append(f"retention: {verb} {deleted} segment(s), kept {kept}; {size:,} B, "
                              f"{plural(records, 'record')}")
    if run.plan is not None:
        ctx.report.add_plan(run.plan)
    ctx.report.details += verbose
    ctx.report.results["segments_deleted"] = 0 if ctx.dry_run else deleted
    ctx.report.results["segments_kept"] = kept


SPEC = JobSpec("retention", "delete old segments by retention.ms / retention.bytes / log start offset", run,
               example="klake retention --conf demo-output/demo.yaml --dry-run --now 2026-11-06T12:00:00Z",
               deletes_after_commit=True)

if __name__ == "__main__":
    sys.exit(main(SPEC))
