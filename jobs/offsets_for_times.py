"""`offsets-for-times`: Kafka's ListOffsets for partitions and timestamps, one Spark task per partition, or
in the job's own process when the lookups read little (`jobs.driver_max_bytes`: an answer in a second,
without Spark's start-up; issue 26).

For each `--timestamp` (epoch ms or ISO-8601, UTC unless it names a zone, or -1 latest / -2 earliest /
-3 max timestamp) and each selected partition: the offset (and timestamp) a broker would answer,
respecting the log start offset and falling through to later segments where Kafka's lookup stops
(see README, Kafka compatibility).
Each lookup reads pages of one `.timeindex` and one `.index` and the batches of one `.log` that answer, or,
where the segment has a `.batchindex`, its group for the `.timeindex` entry and the one answering batch
(`engine.ops.stored_segment`); a task keeps what it read for its next targets.
Answers are in the report (`results.answers`), in `--output` (JSON lines), and, from Python, a
DataFrame: `offsets_for_times(spark, config, topics, timestamps)`.

    spark-submit jobs/offsets_for_times.py --conf conf/s3.example.yaml --topic orders --timestamp 2026-11-21T10:00:00Z
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from engine.catalog.schema import partition_log_start_offset
from engine.log.lookup import EARLIEST, LATEST, MAX_TIMESTAMP, list_offsets
from engine.log.topic_config import min_timestamp
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.stored_segment import lookup_window, stored_segment
from jobs.runtime.job_runner import JobContext, JobSpec, main, time_argument
from kernel.errors import KlakeError
from kernel.times import format_time
from layouts.store.bound import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.runtime.config import KlakeConfig

SPECIAL = {"latest": LATEST, "earliest": EARLIEST, "max": MAX_TIMESTAMP, "max-timestamp": MAX_TIMESTAMP}
_SPECIAL_NAMES = {LATEST: "latest", EARLIEST: "earliest", MAX_TIMESTAMP: "max timestamp"}


def parse_target(text: str) -> int:
    """An argparse type for a ListOffsets target (this job's and `klake lookup`'s): -1/-2/-3 (or latest/
    earliest/max), which keep Kafka's meaning in ListOffsets alone, else a time (epoch ms or ISO-8601, UTC
    unless it names a zone; before 1970 negative, for KIP-228 topics)."""
    if text in SPECIAL:
        return SPECIAL[text]
    if text in ("-1", "-2", "-3"):
        return int(text)
    return time_argument(text)


def _answer_line(answer: dict[str, Any]) -> str:
    """`orders-0 @ 2026-11-02T10:00:00Z: offset 42 (timestamp 2026-11-02T10:00:00.250Z)`; latest and
    earliest answer an offset alone, as ListOffsets does."""
    target = _SPECIAL_NAMES.get(answer["target"]) or format_time(answer["target"])
    if not answer["found"]:
        return f"{answer['topic']}-{answer['partition']} @ {target}: no offset (no record at or after it)"
    stamp = "" if answer["target"] in (LATEST, EARLIEST) else f" (timestamp {format_time(answer['timestamp'])})"
    return f"{answer['topic']}-{answer['partition']} @ {target}: offset {answer['offset']}{stamp}"


@dataclass
class LookupOutcome:
    answers: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"answers": self.answers}


def prepare_lookups(item: PartitionInput[None], *, targets: Sequence[int], store: Store
                    ) -> PartitionStep[LookupOutcome]:
    """Answer every target over one partition's live segments (read-only)."""
    rows = list(item.rows)
    segments = [stored_segment(row, store, item.config) for row in rows]
    start = partition_log_start_offset(rows)
    answers = []
    for target in targets:
        answer = list_offsets(segments, target, start, min_timestamp=min_timestamp(item.config))
        answers.append({"topic": item.tp.topic, "partition": item.tp.partition, "target": target,
                        "offset": answer.offset, "timestamp": answer.timestamp, "found": answer.found})
    return PartitionStep(LookupOutcome(answers=answers))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timestamp", dest="targets", action="append", type=parse_target, required=True,
                        metavar="TS", help="epoch ms or ISO-8601 (UTC unless it names a zone), or -1/latest, "
                        "-2/earliest, -3/max (repeatable)")
    parser.add_argument("--output", metavar="PATH", help="also write the answers as JSON lines here")


def planned_bytes(items: Sequence[PartitionInput[None]], targets: int) -> int:
    """At most what the lookups read: every live segment's sidecars (kept for the next targets) and, per
    target, a window of its log (`lookup_window`); the size decides where they run (`runs_in_driver`)."""
    return sum(sum(size or 0 for size in (row.index_size_bytes, row.timeindex_size_bytes, row.batchindex_size_bytes))
               + targets * lookup_window(row, item.config.index_interval_bytes)
               for item in items for row in item.rows)


def answers(ctx: JobContext, targets: Sequence[int]) -> list[dict[str, Any]]:
    tps = ctx.selected_partitions()
    prepare = partial(prepare_lookups, targets=list(targets), store=ctx.store)
    run = ctx.run_partitions_with(tps, ctx.execute_by_size(prepare, partial(planned_bytes, targets=len(targets))))
    return [a for r in run.results if r.step is not None for a in r.step.outcome.answers]


def run(ctx: JobContext) -> None:
    found = answers(ctx, ctx.args.targets)
    ctx.report.summary += [_answer_line(answer) for answer in found]
    ctx.report.results["answers"] = found
    if ctx.args.output:
        ctx.store.write(ctx.args.output, "".join(json.dumps(a) + "\n" for a in found).encode())


def offsets_for_times(spark: SparkSession, config: KlakeConfig, topics: Sequence[str], timestamps: Sequence[int],
                      ) -> DataFrame:
    """The answers as a DataFrame (topic, partition, target, offset, timestamp, found) for Python callers."""
    from jobs.runtime.job_runner import build_parser

    args = build_parser(SPEC).parse_args([*(a for t in topics for a in ("--topic", t)),
                                          *(a for ts in timestamps for a in ("--timestamp", str(ts)))])
    ctx = JobContext(SPEC, args, config, spark)
    found = answers(ctx, timestamps)
    if ctx.report.failures:
        raise KlakeError("; ".join(f"{f['partition']}: {f['error']}" for f in ctx.report.failures))
    return spark.createDataFrame(found, "topic string, partition int, target long, offset long, timestamp long, "
                                        "found boolean")


SPEC = JobSpec("offsets-for-times", "offset for a timestamp (or -1/-2/-3) per partition, as Kafka's ListOffsets",
               run, add_arguments, mutates=False, example="klake offsets-for-times --conf demo-output/demo.yaml --topic orders --timestamp 2026-11-04T18:00:00Z")

if __name__ == "__main__":
    sys.exit(main(SPEC))
