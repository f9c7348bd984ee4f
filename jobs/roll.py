"""`roll`: roll idle active segments whose time is up, as the broker's roll at the next append would
(segment.ms with jitter from the first batch's timestamp, or a full index), so quiet partitions reach
their final segment shape and can be compacted.

    spark-submit jobs/roll.py --conf conf/s3.example.yaml --report out/roll.json
"""

from __future__ import annotations

import sys
from functools import partial

from engine.ops.roll import prepare_roll
from jobs.runtime.job_runner import JobContext, JobSpec, main


def run(ctx: JobContext) -> None:
    prepare = partial(prepare_roll, root=ctx.config.root, now_ms=ctx.now_ms, options=ctx.options,
                      job_id=ctx.job_id, dry_run=ctx.dry_run)
    run = ctx.run_partitions(ctx.selected_partitions(), prepare)
    rolled = [r for r in run.results if r.step is not None and r.step.outcome.rolled]
    for result in rolled:
        outcome = result.step.outcome
        ctx.report.summary.append(f"{result.tp}: {'would roll' if ctx.dry_run else 'rolled'} segment "
                                  f"{outcome.base_offset} ({outcome.reason}); new active segment at {outcome.next_offset}")
    ctx.report.results["segments_rolled"] = len(rolled)
    ctx.report.summary.append(f"roll: {len(rolled)} of {len(run.results)} partition(s) rolled")


SPEC = JobSpec("roll", "roll idle active segments whose segment.ms has passed", run, description=__doc__)

if __name__ == "__main__":
    sys.exit(main(SPEC))
