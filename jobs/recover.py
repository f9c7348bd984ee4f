"""`recover` and `rebuild-index`: verify partitions and repair them without losing a byte.

`recover` checks every live segment (batch framing and CRCs, catalog facts, `.index`/`.timeindex`
against the log), rebuilds missing or invalid sidecars, and cuts a corrupt tail after copying the cut
bytes to a quarantine object the report names. `--dry-run` only verifies: it exits 1 if anything
needs repair. `rebuild-index` rewrites every segment's sidecars (e.g. after changing
`index.interval.bytes`). Problems recovery must not decide alone (a missing `.log`, a log that
disagrees with its catalog row) are left for the operator and make the job exit 1.

    spark-submit jobs/recover.py --conf conf/s3.example.yaml --report out/recover.json
    spark-submit jobs/recover.py --rebuild-index --conf conf/s3.example.yaml --topic orders
"""

from __future__ import annotations

import sys
from functools import partial

from engine.ops.recover import prepare_recovery
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural


def _run(ctx: JobContext, rebuild_all: bool) -> None:
    prepare = partial(prepare_recovery, store=ctx.store, job_id=ctx.job_id,
                      now_ms=ctx.now_ms, dry_run=ctx.dry_run, rebuild_all=rebuild_all)
    run = ctx.run_partitions(ctx.selected_partitions(), prepare)
    repaired = checked = 0
    for result in run.results:
        if result.step is None:
            continue
        report = result.step.outcome
        checked += report.segments_checked
        for repair in report.repairs:
            verb = "needs" if ctx.dry_run else "did"
            ctx.report.summary.append(f"{result.tp} segment {repair.base_offset}: {verb} {repair.action}: "
                                      f"{'; '.join(repair.reasons)}")
            if repair.quarantine_key:
                moved = plural(repair.quarantined_bytes, "byte")
                ctx.report.summary.append(f"  would quarantine {moved} at {repair.quarantine_key}" if ctx.dry_run
                                          else f"  {moved} quarantined at {repair.quarantine_key}")
        repaired += len(report.changes)
        for left in report.left_for_operator:
            ctx.report.fail(str(result.tp), f"segment {left.base_offset} left for the operator: {'; '.join(left.reasons)}")
        if ctx.dry_run and report.changes and not rebuild_all:
            ctx.report.fail(str(result.tp), f"{len(report.changes)} segment(s) need repair (verify only)")
    ctx.report.results.update({"segments_checked": checked, "segments_repaired": 0 if ctx.dry_run else repaired})
    ctx.report.summary.append(f"{ctx.spec.name}: checked {checked} segment(s); "
                              f"{'would repair' if ctx.dry_run else 'repaired'} {repaired}")


SPEC = JobSpec("recover", "verify partitions; rebuild bad sidecars, quarantine corrupt tails",
               lambda ctx: _run(ctx, False), example="klake recover --conf demo-output/demo.yaml --dry-run")
REBUILD_INDEX = JobSpec("rebuild-index", "rebuild every segment's .index and .timeindex",
                        lambda ctx: _run(ctx, True), example="klake rebuild-index --conf demo-output/demo.yaml --topic orders --dry-run")

if __name__ == "__main__":
    if "--rebuild-index" in sys.argv:
        sys.argv.remove("--rebuild-index")
        sys.exit(main(REBUILD_INDEX))
    sys.exit(main(SPEC))
