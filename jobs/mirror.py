"""`mirror`: copy topics from another klake root (SRC, its catalog at SRC/_catalog unless --source-catalog)
into this job's root, e.g. a local root to S3 or one bucket to another. `--offsets preserve` makes an exact
replica (same segments, indexes and catalog facts); `--offsets remap` appends the batches at the
destination's log end with its rules (a LogAppendTime destination re-stamps them) and writes the offset
map as Parquet under {root}/_mirror/; `auto` (default) preserves where the destination is empty or a
replica of the same timestamp type. A re-run copies only what the destination lacks; a killed run is
finished by re-running the same command. `--dry-run` says per partition what would be copied (mode,
segments, batches, bytes, source offsets) and writes nothing, not even the destination's catalog.

    spark-submit jobs/mirror.py /data/klake --conf conf/s3.example.yaml --topic orders --report out/mirror.json
"""

from __future__ import annotations

import argparse
import sys

import humanize

from engine.ops.catalog_table import Catalog, CatalogNotFoundError
from engine.ops.mirror import (
    MODES,
    MirrorOutcome,
    default_mirror_job_id,
    mirror_partitions,
    source_partitions,
)
from engine.ops.tiered import refuse_broker_owned
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.report import plural
from kernel.errors import KlakeError
from layouts.store import join, normalize_uri


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="SRC", help="the klake root to copy from (path or s3://)")
    parser.add_argument("--source-catalog", metavar="URI", help="the source's catalog (default SRC/_catalog)")
    parser.add_argument("--offsets", choices=MODES, default="auto",
                        help="preserve (exact replica), remap (destination offsets + offset map) or auto")


def run(ctx: JobContext) -> None:
    origin = ctx.store.at(ctx.args.source)
    source = origin.root
    origin.check_access()
    catalog_uri = normalize_uri(ctx.args.source_catalog or join(source, "_catalog"))
    try:
        source_catalog = Catalog.open(origin.at(catalog_uri))
    except CatalogNotFoundError:
        raise KlakeError(f"no catalog at {catalog_uri}: is {source} a klake root?") from None
    tps = source_partitions(source_catalog, ctx.args.topics, ctx.args.partition_ids)
    if ctx.args.job_id is None:
        ctx.job_id = ctx.report.job_id = default_mirror_job_id(source, ctx.config.root, ctx.args.offsets)
    declared = {tp.topic: ctx.topic_config(tp.topic) for tp in tps if ctx.config.topic(tp.topic) is not None}
    destination = _destination_catalog(ctx)
    if destination is not None and ctx.catalogued_partitions():
        refuse_broker_owned(destination, tps, "mirror")  # a tiered root is a mirror's source, never its destination
    run = mirror_partitions(origin, source_catalog, ctx.store, destination, tps,
                            dest_configs=declared, mode=ctx.args.offsets, now_ms=ctx.now_ms,
                            job_id=ctx.job_id, execute=ctx.execute, lease_ttl_ms=ctx.config.jobs.lease_ttl_ms,
                            dry_run=ctx.dry_run)
    ctx.report.add_run(run)
    segments = batches = 0
    for result in sorted(run.results, key=lambda r: (r.tp.topic, r.tp.partition)):
        if result.step is None:
            continue
        out = result.step.outcome
        segments += out.segments_copied
        batches += out.batches_copied
        if ctx.dry_run:
            ctx.report.summary.append(f"{result.tp}: {out.mode}: {_would(out)}")
            continue
        what = (f"{plural(out.segments_copied, 'segment')} written, {plural(out.batches_copied, 'batch', 'batches')} "
                f"copied, log end offset {out.log_end_offset} (source {out.source_log_end_offset})")
        if out.offset_map:
            what += f", offset map {out.offset_map}"
        ctx.report.summary.append(f"{result.tp}: {out.mode}: {what}")
    ctx.report.results["mirror"] = {"source": source, "source_catalog": catalog_uri, "offsets": ctx.args.offsets,
                                    "segments_written": 0 if ctx.dry_run else segments,
                                    "batches_copied": 0 if ctx.dry_run else batches}
    if ctx.dry_run:
        ctx.report.results["mirror"].update(segments_to_write=segments, batches_to_copy=batches)
    written, copied = ("would be written", "to copy") if ctx.dry_run else ("written", "copied")
    ctx.report.summary.append(f"mirror {source} -> {ctx.config.root}: {plural(segments, 'segment')} {written}, "
                              f"{plural(batches, 'batch', 'batches')} {copied} over {plural(len(tps), 'partition')}")


def _destination_catalog(ctx: JobContext) -> Catalog | None:
    """The destination's catalog, created for a run that writes; a dry run against a root without one
    plans on empty partitions and creates nothing."""
    if not ctx.dry_run:
        return ctx.catalog_or_create()
    try:
        return ctx.catalog
    except KlakeError:
        return None


def _would(out: MirrorOutcome) -> str:
    """A dry run's line for one partition: what the mirror would copy."""
    if out.source_first_offset is None:
        return f"nothing to copy, log end offset {out.log_end_offset} (source {out.source_log_end_offset})"
    replaced = f" ({out.segments_replaced} replacing older versions)" if out.segments_replaced else ""
    return (f"would write {plural(out.segments_copied, 'segment')}{replaced}, copying "
            f"{plural(out.batches_copied, 'batch', 'batches')} ({humanize.naturalsize(out.bytes_copied, binary=True)}) "
            f"of source offsets {out.source_first_offset}..{out.source_last_offset}; log end offset would be "
            f"{out.log_end_offset} (source {out.source_log_end_offset})")


SPEC = JobSpec("mirror", "copy topics from another klake root (replica or re-assigned offsets)", run, add_arguments,
               example="klake mirror demo-output/store/klake --root demo-output/replica --topic orders --dry-run", retires=False)

if __name__ == "__main__":
    sys.exit(main(SPEC))
