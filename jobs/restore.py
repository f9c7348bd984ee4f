"""`restore`: produce an archived topic (whole, or an offset range) back into a cluster (issue 30, item 4).

    klake restore --conf C --bootstrap-servers HOST:PORT --topic orders [--to-topic orders-restored]
                  [--from-offset A] [--to-offset B] [--groups-csv DIR | --apply-groups] [--at TIME]

- Online, through the Kafka protocol: every record of the range (`read` over the archive) is produced to the
  same partition of the target topic (created with the archived topic's partition count if missing),
  keeping its key, value, headers and timestamp (CreateTime), partition after partition in offset order by
  an idempotent producer on the driver. The offset map (archive offset -> new offset, from the produce
  acknowledgements) is written as Parquet (`--offset-map`, default beside `--report`, else
  `{root}/_restore/{job id}/offset-map.parquet`).
- Group positions: for each consumer group the archive snapshotted on the topic (`_groups`, the newest
  snapshot at or before `--at`, default the last), the committed offset translated through the offset map
  (`engine.log.group_position`) is either applied with Admin `alterConsumerGroupOffsets` (`--apply-groups`),
  only to groups with no active members, or written as `DIR/{group}.csv`, the `TOPIC,PARTITION,OFFSET`
  lines `kafka-consumer-groups --reset-offsets --from-file` takes (`--groups-csv DIR`).
- Offline (a broker's log dir with the cluster's topic id) is `klake export`; README: Restoring.
- A restore is not idempotent: a re-run produces the records again (the target's offsets move on).
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.log.group_position import reset_offsets_csv, translate_position
from engine.ops.groups_table import group_positions
from jobs.archive import Cluster, client_options
from jobs.read import read_records
from jobs.runtime.job_runner import JobContext, JobSpec, main, time_argument
from jobs.runtime.report import plural
from kernel.errors import KlakeError
from kernel.names import TopicPartition

MAP_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("archive_offset", pa.int64()),
                        ("new_offset", pa.int64())])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOSTS", help="the cluster to restore into")
    parser.add_argument("--to-topic", metavar="NAME", help="the target topic (default: the archived one's name)")
    parser.add_argument("--from-offset", type=int, metavar="N", help="restore records from this offset")
    parser.add_argument("--to-offset", type=int, metavar="N", help="restore records before this offset")
    parser.add_argument("--offset-map", metavar="PATH", help="where the offset map goes (Parquet)")
    groups = parser.add_mutually_exclusive_group()
    groups.add_argument("--groups-csv", metavar="DIR", help="write each group's translated positions as CSV")
    groups.add_argument("--apply-groups", action="store_true", help="commit them to groups with no members")
    parser.add_argument("--at", type=time_argument, metavar="TIME", help="group positions as of (default: last)")
    parser.add_argument("--kafka-option", dest="kafka_options", action="append", default=[], metavar="kafka.K=V",
                        help="a client setting; V env:NAME or file:PATH (secrets only so)")


def _producer(bootstrap: str, options: dict[str, str]):  # noqa: ANN202 - kafka-python's KafkaProducer
    from kafka import KafkaProducer

    known = set(KafkaProducer.DEFAULT_CONFIG)
    settings = {name: value for key, value in options.items()
                if (name := key[len("kafka."):].replace(".", "_")) in known}
    return KafkaProducer(bootstrap_servers=bootstrap.split(","), enable_idempotence=True, acks="all",
                         linger_ms=20, **settings)


def run(ctx: JobContext) -> None:
    from pyspark.sql import functions as F

    args = ctx.args
    if len(args.topics) != 1:
        raise KlakeError("name the one archived topic to restore: --topic NAME")
    source = args.topics[0]
    target = args.to_topic or source
    partitions = sorted({tp.partition for tp in ctx.catalogued_partitions() if tp.topic == source})
    if not partitions:
        raise KlakeError(f"topic {source} is not in the archive {ctx.config.catalog_uri}")
    options = client_options(args.kafka_options)
    cluster = Cluster(args.bootstrap_servers, options, "read_committed")
    try:
        _ensure_topic(cluster, target, len(partitions))
        records = read_records(ctx.spark, ctx.config, source, from_offset=args.from_offset, to_offset=args.to_offset)
        rows = records.select("partition", "offset", "key", "value", "headers",
                              F.unix_millis("timestamp").alias("ms")).orderBy("partition", "offset").toLocalIterator()
        producer = _producer(args.bootstrap_servers, options)
        sent: list[tuple[int, int, object]] = []
        for row in rows:
            headers = [(h["key"], bytes(h["value"]) if h["value"] is not None else None) for h in row["headers"] or []]
            sent.append((row["partition"], row["offset"],
                         producer.send(target, key=row["key"], value=row["value"], headers=headers,
                                       partition=row["partition"], timestamp_ms=row["ms"])))
        producer.flush()
        producer.close()
        mapped = [(p, old, future.get(timeout=60).offset) for p, old, future in sent]
        table = pa.table({"topic": pa.array([source] * len(mapped), pa.string()),
                          "partition": pa.array([m[0] for m in mapped], pa.int32()),
                          "archive_offset": pa.array([m[1] for m in mapped], pa.int64()),
                          "new_offset": pa.array([m[2] for m in mapped], pa.int64())}, schema=MAP_SCHEMA)
        where = args.offset_map or (args.report.rsplit(".", 1)[0] + ".offset-map.parquet" if args.report
                                    else ctx.store.uri("_restore", ctx.job_id, "offset-map.parquet"))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        ctx.store.write(where, sink.getvalue().to_pybytes())
        ends = cluster.offsets([TopicPartition(target, p) for p in partitions])[1]
        ctx.report.results |= {"records_restored": len(mapped), "offset_map": where}
        ctx.report.summary.append(f"restore: {plural(len(mapped), 'record')} of {source} produced to {target}; "
                                  f"offset map -> {where}")
        _restore_groups(ctx, cluster, source, target, table, ends)
    finally:
        cluster.close()


def _ensure_topic(cluster: Cluster, topic: str, partitions: int) -> None:
    """The target topic, created with `partitions` if the cluster lacks it; one with fewer is refused."""
    from kafka.admin import NewTopic

    found = cluster.consumer.partitions_for_topic(topic)
    if not found:
        cluster.admin.create_topics([NewTopic(topic, partitions, 1)])
        return
    if len(found) < partitions:
        raise KlakeError(f"topic {topic} in the cluster has {len(found)} partitions; the archive has {partitions}")


def _restore_groups(ctx: JobContext, cluster: Cluster, source: str, target: str, offset_map: pa.Table,
                    ends: dict[TopicPartition, int]) -> None:
    """Each group's archived position on `source`, translated through `offset_map`, applied or written."""
    from kafka import TopicPartition as KafkaTP
    from kafka.structs import OffsetAndMetadata

    args = ctx.args
    if not (args.groups_csv or args.apply_groups):
        return
    positions = group_positions(ctx.store, at_ms=args.at).to_pylist()
    by_group: dict[str, dict[int, int]] = {}
    for row in (r for r in positions if r["topic"] == source):
        part = offset_map.filter(pc.equal(offset_map.column("partition"), row["partition"]))
        by_group.setdefault(row["group"], {})[row["partition"]] = translate_position(
            row["offset"], part.column("archive_offset").to_numpy(), part.column("new_offset").to_numpy(),
            ends[TopicPartition(target, row["partition"])])
    applied, skipped = [], []
    for group, moved in sorted(by_group.items()):
        if args.groups_csv:
            plans = ctx.store.at(args.groups_csv)
            plans.write(plans.uri(f"{group}.csv"), reset_offsets_csv((target, p, o) for p, o in moved.items()).encode())
            applied.append(group)
            continue
        members = cluster.admin.describe_groups([group])
        if any(info.get("members") for info in (members.values() if isinstance(members, dict) else members)):
            skipped.append(group)
            continue
        cluster.admin.alter_group_offsets(group, {KafkaTP(target, p): OffsetAndMetadata(o, "", -1)
                                                  for p, o in moved.items()})
        applied.append(group)
    ctx.report.results["groups"] = {"restored": applied, "skipped_active": skipped}
    how = f"written to {args.groups_csv}" if args.groups_csv else "committed"
    ctx.report.summary.append(f"restore: positions of {plural(len(applied), 'group')} {how}"
                              + (f"; {', '.join(skipped)} skipped (active members)" if skipped else ""))
    for group in skipped:
        ctx.report.fail(group, f"group {group} has active members: its position was not changed")


SPEC = JobSpec("restore", "produce an archived topic back into a Kafka cluster", run, add_arguments,
               mutates=False, dry_run=False, retires=False,
               example="klake restore --conf demo-output/demo.yaml --bootstrap-servers localhost:9092 --topic orders")

if __name__ == "__main__":
    sys.exit(main(SPEC))
