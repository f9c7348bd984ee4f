"""`compact`: Kafka's log cleaner on `cleanup.policy=compact` topics (latest record per key, tombstones
until their delete horizon, transactions, small segments merged), old and new segments swapped in one
commit. Partitions run only when Kafka's trigger says so (dirty ratio, compaction lags) unless `--force`.

    spark-submit jobs/compact.py --conf conf/s3.yaml --report out/compact.json
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from engine.ops.compact import prepare_compaction
from jobs.runtime.job_runner import JobContext, JobSpec, main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="clean even when the dirty ratio / lags say not yet")


def run(ctx: JobContext) -> None:
    tps = [tp for tp in ctx.selected_partitions() if ctx.topic_config(tp.topic).compacted]
    prepare = partial(prepare_compaction, root=ctx.config.root, now_ms=ctx.now_ms, options=ctx.options,
                      job_id=ctx.job_id, force=ctx.args.force, dry_run=ctx.dry_run)
    run = ctx.run_partitions(tps, prepare)
    cleaned = read = kept = 0
    for result in run.results:
        if result.step is None:
            continue
        outcome = result.step.outcome
        cleaned += outcome.cleaned
        read += outcome.stats.get("records_read", 0)
        kept += outcome.stats.get("records_kept", 0)
        ctx.report.summary.append(f"{result.tp}: {'cleaned' if outcome.cleaned else 'not cleaned'} "
                                  f"(dirty ratio {outcome.dirty_ratio:.2f}; {', '.join(outcome.reasons) or '-'}), "
                                  f"segments {outcome.segments_before} -> {outcome.segments_after}")
    ctx.report.results.update({"partitions_cleaned": cleaned, "records_read": read, "records_kept": kept,
                               "records_removed": read - kept, "compacted_topics_partitions": len(tps)})
    ctx.report.summary.append(f"compact: cleaned {cleaned} of {len(tps)} compacted partition(s); "
                              f"records kept {kept} of {read} read")


SPEC = JobSpec("compact", "compact cleanup.policy=compact topics (Kafka's log cleaner)", run, add_arguments,
               description=__doc__)

if __name__ == "__main__":
    sys.exit(main(SPEC))
