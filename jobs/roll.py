"""`roll`: roll idle active segments whose time is up, as the broker's roll at the next append would
(segment.ms with jitter from the first batch's timestamp, or a full index), so quiet partitions reach
their final segment shape and can be compacted.

The driver plans every partition at once over the catalog's rows as Arrow (`engine.log.roll_plan`); a
dry run starts no Spark task. The JSON report holds each partition's decision; the plan (one row per
partition: its active segment, the rule, the numbers) goes to a Parquet file next to it
(`<report>.partitions.parquet`); stdout prints the partitions that roll and counts by reason, and with
`--verbose` every partition's decision.

    spark-submit jobs/roll.py --conf conf/s3.example.yaml --report out/roll.json
"""

from __future__ import annotations

import sys

from engine.ops.roll import RollPlanner, prepare_roll
from jobs.runtime.job_runner import JobContext, JobSpec, main


def run(ctx: JobContext) -> None:
    tps = ctx.selected_partitions()  # bad --topic/--partition refused before Spark starts
    run = ctx.run_planned(tps, prepare_roll, RollPlanner(ctx.now_ms))
    rolled = [r for r in run.results if r.step is not None and r.step.outcome.rolled]
    for result in rolled:
        outcome = result.step.outcome
        ctx.report.summary.append(f"{result.tp}: {'would roll' if ctx.dry_run else 'rolled'} segment "
                                  f"{outcome.base_offset} ({outcome.reason}); new active segment at {outcome.next_offset}")
    if ctx.args.verbose:
        ctx.report.details += [f"{r.tp}: {r.step.outcome.decision}" for r in run.results
                               if r.step is not None and r.step.outcome.decision]
    ctx.report.results["segments_rolled"] = len(rolled)
    ctx.report.summary.append(f"roll: {len(rolled)} of {len(run.results)} partition(s) rolled")
    if run.plan is not None:
        ctx.report.add_plan(run.plan)


SPEC = JobSpec("roll", "roll idle active segments whose segment.ms has passed", run, example="klake roll --conf demo-output/demo.yaml --dry-run --now 2026-11-06T12:00:00Z")

if __name__ == "__main__":
    sys.exit(main(SPEC))
