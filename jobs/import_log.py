"""`import`: register a broker's log dirs (Kafka layout: `<topic>-<partition>/<offset>.log|.index|.timeindex`)
in the catalog, in place or copied (`--copy`) into the object layout; invalid or missing sidecars are
rebuilt under the root; a corrupt segment is named in the report and its partition fails. A source
holding directories that are no partition of a valid topic (`..-0`, `a b-0`, `lost+found`) is bad
input: exit 2 naming them, nothing written (a broker refuses that log dir too; the user moves them
out and re-runs, where a partial import would leave them to be forgotten).

`--layout kafka-rsm` reads a tiered-storage bucket of Kafka's `LocalTieredStorage` instead (`engine.ops.tiered`):
the uploads are catalogued in place, read-only, in a root outside the bucket; duplicate uploads of a start
offset are set aside and listed. `--layout aiven` reads a bucket of Aiven's tiered-storage plugin the same
way, through each upload's manifest (`engine.ops.tiered`).

    spark-submit jobs/import_log.py /mnt/kafka-data --copy --conf conf/s3.example.yaml --report out/import.json
"""

from __future__ import annotations

import argparse
import sys

from engine.ops.importer import (
    KAFKA_SOURCE,
    ImportReport,
    default_import_job_id,
    import_log_dir,
)
from engine.ops.tiered import AIVEN_SOURCE, KAFKA_RSM_SOURCE, check_outside
from jobs.runtime.job_runner import JobContext, JobSpec, main
from layouts.store import normalize_uri

LAYOUTS = {layout.name: layout for layout in (KAFKA_SOURCE, KAFKA_RSM_SOURCE, AIVEN_SOURCE)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SRC", help="log dir holding <topic>-<partition> directories (path or s3://)")
    parser.add_argument("--copy", action="store_true", help="copy segments into the object layout under the root")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="kafka",
                        help="kafka: a broker's log dir (default); kafka-rsm: Kafka's LocalTieredStorage bucket; "
                             "aiven: Aiven's tiered-storage bucket with its key.prefix (key ring: "
                             "KLAKE_AIVEN_KEY_RING). Buckets are read in place")
    parser.add_argument("--index-interval-bytes", type=int,
                        help="index.interval.bytes for rebuilt indexes (default jobs.index_interval_bytes, 4096)")


def run(ctx: JobContext) -> None:
    interval = ctx.args.index_interval_bytes or ctx.config.jobs.index_interval_bytes
    if ctx.args.job_id is None:
        ctx.job_id = ctx.report.job_id = default_import_job_id(normalize_uri(ctx.args.source), ctx.config.root,
                                                               ctx.args.copy)
    layout = LAYOUTS[ctx.args.layout]
    if layout is not KAFKA_SOURCE:
        check_outside(ctx.args.source, ctx.config.root, ctx.config.catalog_uri)
    log_dir = layout.scan(ctx.args.source, ctx.options)  # bad input fails before the catalog is created
    log_starts = layout.log_start_offsets(ctx.args.source, ctx.options)
    report = import_log_dir(ctx.args.source, ctx.config.root, ctx.catalog_or_create(), copy=ctx.args.copy,
                            index_interval_bytes=interval, options=ctx.options, job_id=ctx.job_id,
                            lease_ttl_ms=ctx.config.jobs.lease_ttl_ms, log_dir=log_dir,
                            log_start_offsets=log_starts, layout=layout)
    ctx.report.results["import"] = report.to_dict()
    for part in report.partitions:
        ctx.report.partitions.append({"partition": f"{part.topic}-{part.partition}",
                                      "status": "failed" if part.error else "succeeded", "error": part.error,
                                      "segments": len(part.segments)})
        if part.error:
            ctx.report.fail(f"{part.topic}-{part.partition}", part.error)
    ctx.report.summary += import_summary(report)


def import_summary(report: ImportReport) -> list[str]:
    lines = []
    lines.append(f"import {report.source} -> {report.catalog} ({'copy to ' + report.root if report.copy else 'in place'})")
    for part in report.partitions:
        counts: dict[str, int] = {}
        for s in part.segments:
            counts[s.status] = counts.get(s.status, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no segments"
        lines.append(f"  {part.topic}-{part.partition}: {summary}")
        for uri, why in sorted(part.set_aside.items()):
            lines.append(f"    set aside {uri}: {why}")
        for uri in part.forgotten:
            lines.append(f"    forgotten {uri}: gone from the bucket (the broker's remote retention)")
        for s in part.segments:
            if s.sidecars == "rebuilt":
                lines.append(f"    rebuilt indexes of {s.source}: {'; '.join(s.sidecar_problems)}")
        if part.error:
            lines.append(f"    ERROR: {part.error}")
    for name, reason in sorted(report.skipped_dirs.items()):
        lines.append(f"  skipped {name}: {reason}")
    lines.append(f"rows added: {report.rows_added}, already registered: {report.already_registered}, "
          f"indexes rebuilt: {report.sidecars_rebuilt}, catalog version: {report.commit_version}")
    return lines


SPEC = JobSpec("import", "register a broker log dir (Kafka layout) in the catalog", run, add_arguments,
               example="klake import tests/fixtures/kafka/broker --root demo-output/broker-copy", dry_run=False, retires=False)

if __name__ == "__main__":
    sys.exit(main(SPEC))
