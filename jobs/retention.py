"""`retention`: delete whole segments by Kafka's three passes (log start offset, retention.bytes,
retention.ms), oldest first, through the catalog's two-phase delete; `--dry-run` prints the plan.

    spark-submit jobs/retention.py --conf conf/s3.example.yaml --report out/retention.json
"""

from __future__ import annotations

import sys
from functools import partial

from engine.ops.retention import prepare_retention
from jobs.runtime.job_runner import JobContext, JobSpec, main


def run(ctx: JobContext) -> None:
    prepare = partial(prepare_retention, root=ctx.config.root, now_ms=ctx.now_ms, options=ctx.options,
                      job_id=ctx.job_id, dry_run=ctx.dry_run)
    run = ctx.run_partitions(ctx.selected_partitions(), prepare)
    deleted = kept = 0
    for result in run.results:
        if result.step is None:
            continue
        plan = result.step.outcome.plan
        deleted += len(plan.to_delete)
        kept += len(plan.decisions) - len(plan.to_delete)
        for hold in plan.held_back_by_future_timestamp:
            ctx.report.anomalies.append(f"{result.tp}: segment {hold.base_offset} is held back: {hold.describe()}")
        if ctx.dry_run:
            ctx.report.summary += [f"{result.tp} {d.base_offset:>20} {d.action.value:<6} ({d.decided_by.value}) {d.reason}"
                                   for d in plan.decisions]
    verb = "would delete" if ctx.dry_run else "deleted"
    ctx.report.summary.append(f"retention: {verb} {deleted} segment(s), kept {kept}")
    ctx.report.results["segments_deleted"] = 0 if ctx.dry_run else deleted
    ctx.report.results["segments_kept"] = kept


SPEC = JobSpec("retention", "delete old segments by retention.ms / retention.bytes / log start offset", run,
               description=__doc__)

if __name__ == "__main__":
    sys.exit(main(SPEC))
