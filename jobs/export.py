"""`export`: write topics (or chosen partitions, or an offset/time range cut at batch boundaries) as a
broker's log dir, Kafka's layout: `<topic>-<partition>/<base_offset:020d>.log|.index|.timeindex` with
`leader-epoch-checkpoint` and `partition.metadata` beside them, and the log dir's
`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and `replication-offset-checkpoint`
(`engine.ops.export` has the rules). One Spark task per partition; the driver writes the checkpoints
last. The klake root is only read. Re-running is idempotent and finishes an interrupted export.
`--groups-csv DIR` also writes the archived consumer groups' positions on the exported partitions for
`kafka-consumer-groups --reset-offsets --from-file` (the offline restore of issue 30, item 4).

    spark-submit jobs/export.py --conf conf/s3.example.yaml --topic orders --output s3://handover/kafka-logs
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from engine.log.group_position import kept_position, reset_offsets_csv
from engine.log.kafka_files import KafkaFileError, parse_topic_id
from engine.ops.export import (
    ExportRange,
    ExportReport,
    PartitionExport,
    check_output,
    check_times,
    prepare_export,
    report_of,
    write_checkpoints,
)
from engine.ops.groups_table import group_positions
from engine.ops.read import IsolationLevel
from jobs.runtime.job_runner import JobContext, JobSpec, at_least, main, time_argument
from jobs.runtime.report import plural
from kernel.errors import KlakeError
from kernel.names import TopicPartition, validate_topic


def topic_id_argument(text: str) -> tuple[str, str]:
    """An argparse type for `--topic-id TOPIC=ID` (ID as Kafka prints it: 22 URL-safe base64 characters)."""
    topic, sep, topic_id = text.partition("=")
    try:
        if not sep:
            raise KlakeError(f"expected TOPIC=ID, got {text!r}")
        return validate_topic(topic), parse_topic_id(topic_id)
    except (KlakeError, KafkaFileError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="log dir to write (local or s3://), outside the root")
    parser.add_argument("--from-offset", type=at_least(0), metavar="N", help="first offset, inclusive")
    parser.add_argument("--to-offset", type=at_least(0), metavar="N", help="end offset, exclusive")
    parser.add_argument("--from", dest="from_ms", type=time_argument, metavar="TIME",
                        help="first offset with timestamp >= TIME")
    parser.add_argument("--to", dest="to_ms", type=time_argument, metavar="TIME",
                        help="before the first offset with timestamp >= TIME")
    parser.add_argument("--isolation-level", type=IsolationLevel, choices=list(IsolationLevel), metavar="LEVEL",
                        default=IsolationLevel.READ_UNCOMMITTED,
                        help="read_committed: end each partition where no transaction is left open "
                        "(default read_uncommitted)")
    parser.add_argument("--topic-id", dest="topic_ids", action="append", default=[], type=topic_id_argument,
                        metavar="TOPIC=ID", help="the cluster's topic id (kafka-topics --describe) for "
                        "partition.metadata; default: derived from the name")
    parser.add_argument("--groups-csv", metavar="DIR",
                        help="archived groups' positions to DIR/{group}.csv "
                        "(for kafka-consumer-groups --from-file)")
    parser.add_argument("--groups-at", type=time_argument, metavar="TIME",
                        help="group positions as of TIME (default: last snapshot)")


def run(ctx: JobContext) -> None:
    args = ctx.args
    output = check_output(args.output, ctx.config.root, ctx.config.catalog_uri)
    destination = ctx.store.at(output)
    destination.check_access(write=True)
    rng = ExportRange(args.from_offset, args.to_offset, args.from_ms, args.to_ms, args.isolation_level)
    tps = ctx.selected_partitions()
    for topic in sorted({tp.topic for tp in tps}):  # bad input: exit 2 before any work
        check_times(rng, ctx.topic_config(topic), f"topic {topic}")
    prepare = partial(prepare_export, source=ctx.store, output=destination, rng=rng, topic_ids=dict(args.topic_ids))
    report = report_of(output, ctx.run_partitions(tps, prepare))
    report.checkpoints_written = write_checkpoints(destination, report.partitions)
    exported = [p for p in report.partitions if p.log_end_offset is not None]
    ctx.report.results["export"] = {"output": output, "partitions": len(exported),
                                    "segments": sum(len(p.segments) for p in exported),
                                    "checkpoints_written": report.checkpoints_written}
    ctx.report.summary += export_summary(report)
    if args.groups_csv:
        _write_group_positions(ctx, exported)


def _write_group_positions(ctx: JobContext, exported: list[PartitionExport]) -> None:
    """Each group's archived committed offsets (`_groups`, the newest snapshot at or before --groups-at) on
    the exported partitions, as `DIR/{group}.csv`: the export keeps every record's offset, so a group's
    position is its own, held inside the exported range (`kept_position`). A broker cannot take them from
    its log dir (they live in `__consumer_offsets`): `kafka-consumer-groups --reset-offsets --from-file
    DIR/{group}.csv --execute` commits them once the broker runs (README: Restoring)."""
    ranges = {p.tp: (p.log_start_offset, p.log_end_offset) for p in exported}
    by_group: dict[str, list[tuple[str, int, int]]] = {}
    for row in group_positions(ctx.store, at_ms=ctx.args.groups_at).to_pylist():
        if (bounds := ranges.get(TopicPartition(row["topic"], row["partition"]))) is not None:
            by_group.setdefault(row["group"], []).append(
                (row["topic"], row["partition"], kept_position(row["offset"], *bounds)))
    plans = ctx.store.at(ctx.args.groups_csv)
    for group, positions in sorted(by_group.items()):
        plans.write(plans.uri(f"{group}.csv"), reset_offsets_csv(positions).encode())
    ctx.report.results["groups"] = sorted(by_group)
    ctx.report.summary.append(f"export: positions of {plural(len(by_group), 'group')} written to "
                              f"{ctx.args.groups_csv} (kafka-consumer-groups --reset-offsets --from-file)")


def export_summary(report: ExportReport) -> list[str]:
    lines = []
    for part in report.partitions:
        if part.log_end_offset is None:
            lines.append(f"{part.topic}-{part.partition}: nothing in range")
            continue
        rebuilt = sum(s.indexes == "rebuilt" for s in part.segments)
        lines.append(f"{part.topic}-{part.partition}: {len(part.segments)} segment(s), offsets "
                     f"{part.log_start_offset}..{part.log_end_offset}, {len(part.written)} file(s) written, "
                     f"{part.unchanged} unchanged, {len(part.deleted)} stale deleted"
                     + (f", {rebuilt} with rebuilt indexes" if rebuilt else ""))
    exported = [p for p in report.partitions if p.log_end_offset is not None]
    lines.append(f"export: {len(exported)} partition(s), {sum(len(p.segments) for p in exported)} segment(s) "
                 f"-> {report.output} (Kafka log dir; {len(report.checkpoints_written)} checkpoint file(s) written)")
    return lines


SPEC = JobSpec("export", "write topics as a broker's log dir (Kafka layout with its checkpoint files)", run,
               add_arguments, mutates=False, example="klake export --conf demo-output/demo.yaml --topic orders --output demo-output/kafka-logs")

if __name__ == "__main__":
    sys.exit(main(SPEC))
