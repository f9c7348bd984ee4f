"""`scrub`: reconcile the object store with the catalog (the rules are `engine.ops.scrub`'s): report
orphans, debris of killed jobs and broken rows; delete orphans and debris older than the grace period.

The referenced set is computed over the catalog's key columns as Arrow (set lookups, no row objects).
The JSON report holds counts and bytes by finding (orphans, debris by kind, missing objects and size
mismatches by object kind, deletes); every finding goes to a Parquet file next to it
(`<report>.findings.parquet`: finding, kind, segment, uri, sizes, age, deleted, delete error); stdout
prints counts and every broken row, and with `--verbose` every orphan and debris object too.

    spark-submit jobs/scrub.py --conf conf/s3.example.yaml --grace-ms 3600000 --report out/scrub.json
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from engine.ops.scrub import ScrubReport, scrub
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural
from kernel.times import format_duration


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grace-ms", type=int,
                        help="ignore unreferenced objects younger than this (default jobs.scrub_grace_ms, 1 hour): "
                             "a running job's objects are unreferenced until its commit")


def run(ctx: JobContext) -> None:
    grace = ctx.args.grace_ms if ctx.args.grace_ms is not None else ctx.config.jobs.scrub_grace_ms
    report = scrub(ctx.store, ctx.catalog, grace_ms=grace, dry_run=ctx.dry_run, now=ctx.now_ms)
    ctx.report.results["scrub"] = report.totals()
    ctx.report.side_files.update(report.side_files())
    for missing in report.missing:
        ctx.report.fail(missing.segment, f"{missing.kind} object missing: {missing.key}")
    for bad in report.size_mismatches:
        ctx.report.fail(bad.segment, f"{bad.key} is {bad.object_size} bytes, the catalog says {bad.catalog_size}")
    for uri, reason in sorted(report.delete_failed.items()):
        ctx.report.fail(uri, f"orphan not deleted: {reason}")
    ctx.report.summary += scrub_summary(report)
    if ctx.args.verbose:
        ctx.report.details += scrub_details(report)


def scrub_details(report: ScrubReport) -> list[str]:
    """One line per orphan and debris object (`--verbose`; the report's side file lists them all)."""
    verb = "would delete" if report.dry_run else "orphan"
    lines = [f"  {verb} {orphan.uri} ({plural(orphan.size, 'byte')}, {format_duration(orphan.age_ms)} old)"
             for orphan in report.orphans]
    lines += [f"  {'would delete' if report.dry_run else 'debris'} {item.kind} {item.uri} ({plural(item.size, 'byte')})"
              for item in report.debris]
    return lines


def scrub_summary(report: ScrubReport) -> list[str]:
    lines = []
    lines.append(f"scrub {report.root} against {report.catalog}: {plural(report.objects_listed, 'object')}, "
                 f"{plural(report.live_segments, 'live segment')}")
    verb = "would delete" if report.dry_run else "found"
    if report.orphans:
        lines.append(f"  {verb} {plural(len(report.orphans), 'orphan')} older than "
                     f"{format_duration(report.grace_ms, precise=True)}, "
                     f"{plural(sum(o.size for o in report.orphans), 'byte')}")
    for kind, count in sorted(Counter(item.kind for item in report.debris).items()):
        lines.append(f"  {verb} {plural(count, 'debris object')} ({kind}), "
                     f"{plural(sum(d.size for d in report.debris if d.kind == kind), 'byte')}")
    if report.orphans_within_grace:
        lines.append(f"  {plural(report.orphans_within_grace, 'unreferenced object')} younger than "
                     f"{format_duration(report.grace_ms, precise=True)}: kept")
    for missing in report.missing:
        lines.append(f"  MISSING {missing.kind} of {missing.segment}: {missing.key}")
    for bad in report.size_mismatches:
        lines.append(f"  SIZE {bad.segment}: {bad.key} is {bad.object_size} bytes, the catalog says {bad.catalog_size}")
    for uri, reason in sorted(report.delete_failed.items()):
        lines.append(f"  DELETE FAILED {uri}: {reason}")
    if not report.dry_run:
        lines.append(f"deleted {plural(len(report.deleted), 'orphan or debris object', 'orphan and debris objects')} "
                     f"in {plural(report.delete_requests, 'delete request')}")
    return lines


SPEC = JobSpec("scrub", "find unreferenced objects and broken catalog rows; delete orphans", run, add_arguments,
               example="klake scrub --conf demo-output/demo.yaml --dry-run", retires=False)

if __name__ == "__main__":
    sys.exit(main(SPEC))
