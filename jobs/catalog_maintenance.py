"""`catalog-maintenance`: keep the Delta catalog fast to read and bounded in size.

Checkpoint (delta-rs writes one only every 100 commits; loading drops from ~320 ms to ~40 ms after
one), optimize (compact the many small files that MERGE commits leave; `--z-order` clusters them by
the time columns), and vacuum: delete data files no version younger than the retention still needs.
The retention defaults to 168 hours (`jobs.vacuum_retention_hours`), like Delta's own default, so
readers running on an older snapshot and time travel over the last week keep working; going below
24 hours needs `--allow-short-vacuum`. `--dry-run` lists what vacuum would delete.

    spark-submit jobs/catalog_maintenance.py --conf conf/s3.example.yaml --report out/maintenance.json
"""

from __future__ import annotations

import argparse
import sys

from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural
from kernel.errors import KlakeError

MIN_SAFE_VACUUM_HOURS = 24


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--z-order", action="store_true", help="optimize with Z-order on the time columns")
    parser.add_argument("--vacuum-retention-hours", type=int,
                        help="keep files younger than this (default jobs.vacuum_retention_hours, 168)")
    parser.add_argument("--allow-short-vacuum", action="store_true",
                        help=f"allow a vacuum retention under {MIN_SAFE_VACUUM_HOURS} hours")
    parser.add_argument("--skip", action="append", default=[], choices=["checkpoint", "optimize", "vacuum"],
                        help="leave out a step (repeatable)")


def run(ctx: JobContext) -> None:
    args, catalog = ctx.args, ctx.catalog
    hours = args.vacuum_retention_hours if args.vacuum_retention_hours is not None \
        else ctx.config.jobs.vacuum_retention_hours
    if hours < MIN_SAFE_VACUUM_HOURS and not args.allow_short_vacuum:
        raise KlakeError(f"vacuum retention {hours} h is below {MIN_SAFE_VACUUM_HOURS} h: readers of older "
                         "catalog versions would lose files; pass --allow-short-vacuum if that is intended")
    results = ctx.report.results
    before = catalog.version()
    if "optimize" not in args.skip and not ctx.dry_run:
        metrics = catalog.optimize(z_order=args.z_order)
        results["optimize"] = {k: metrics.get(k) for k in ("numFilesAdded", "numFilesRemoved", "totalConsideredFiles")}
        ctx.report.summary.append(f"optimize: {plural(metrics.get('numFilesRemoved', 0), 'file')} rewritten into "
                                  f"{metrics.get('numFilesAdded', 0)}")
    if "checkpoint" not in args.skip and not ctx.dry_run:
        results["checkpoint_version"] = catalog.create_checkpoint()
        ctx.report.summary.append(f"checkpoint at version {results['checkpoint_version']}")
    if "vacuum" not in args.skip:
        removed = catalog.vacuum(retention_hours=hours, dry_run=ctx.dry_run)
        results["vacuum"] = {"retention_hours": hours, "files": len(removed), "dry_run": ctx.dry_run}
        ctx.report.summary.append(f"vacuum ({hours} h): {'would delete' if ctx.dry_run else 'deleted'} "
                                  f"{len(removed)} file(s)")
    results["versions"] = {"before": before, "after": catalog.version()}


SPEC = JobSpec("catalog-maintenance", "checkpoint, optimize and vacuum the catalog", run, add_arguments,
               example="klake catalog-maintenance --conf demo-output/demo.yaml --dry-run", retires=False)

if __name__ == "__main__":
    sys.exit(main(SPEC))
