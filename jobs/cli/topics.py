"""`klake topics` and `klake consume`: what `kafka-topics --describe` with `kafka-log-dirs`, and `kcat -C`,
answer for a broker, answered from the catalog and the segments in this process (no Spark).

`topics` reads the catalog alone: per partition its log start offset (`engine.catalog.schema.log_start_offsets`,
KIP-107), log end offset, live segments, bytes and oldest/newest timestamps, and the topic's settings
(the configuration's, else those stored under the root). `consume` plans with the `read` job's planner
(`engine.ops.read.plan_read`) and reads its work items one after another, stopping after `-c N` records,
so it reads only the segments (and, through the indexes, the batches) those records need.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from itertools import islice

import numpy as np
import pyarrow as pa

from engine.catalog.schema import log_start_offsets
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog, CatalogNotFoundError
from engine.ops.read import ReadRange, plan_read, read_item
from engine.ops.topic_store import load_topic_config
from jobs.cli.catalog import add_catalog_arguments, add_partition_command, catalog_location
from jobs.cli.storage import check_reachable
from jobs.runtime.config import KlakeConfig
from jobs.runtime.job_runner import add_command, at_least, check_partitions
from kernel.errors import KlakeError
from kernel.names import validate_topic
from kernel.times import InvalidTimeError, format_time, parse_time
from layouts.store.bound import Store


def register(commands: argparse._SubParsersAction) -> None:
    add_partition_command(
        commands, "topics", "partitions, offsets, sizes, times and settings of each topic",
        "Describe topics as kafka-topics --describe and kafka-log-dirs do together: per partition the log start "
        "and end offsets, live segments, bytes, oldest and newest timestamps; per topic its settings (those "
        "differing from Kafka's defaults; --json: all). Reads the catalog only.", "klake topics --conf demo-output/demo.yaml --topic orders", run_topics,
        only="topic")

    consume = add_command(
        commands, "consume", "print records of a topic, as kcat -C does",
        "A topic's records, partition after partition in offset order, as kcat -C prints them: text, each value "
        "on a line; json, one object per record (topic, partition, offset, timestamp in epoch ms, key, value, "
        "headers).", "klake consume --conf demo-output/demo.yaml --topic orders --partition 0 -c 3 --format json", run_consume)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=at_least(0), metavar="P", help="only this partition")
    consume.add_argument("--from", dest="start", type=start_argument, metavar="OFFSET|TIME",
                         help="an offset, or a time (ISO-8601 or @epoch-ms): records stamped at or after it")
    consume.add_argument("-c", "--count", type=at_least(1), metavar="N", help="stop after N records")
    consume.add_argument("--format", choices=("text", "json"), default="text")
    add_catalog_arguments(consume)


def start_argument(text: str) -> tuple[str, int]:
    """`--from`: ("offset", N) for an integer, ("time", ms) for `@ms` or ISO-8601 (kcat's `-o` and `-o s@ms`)."""
    if text.isdigit():
        return "offset", int(text)
    try:
        return "time", parse_time(text[1:] if text.startswith("@") else text)
    except InvalidTimeError as exc:
        raise argparse.ArgumentTypeError(f"{text}: neither an offset nor a time ({exc})") from None


def _open(args: argparse.Namespace) -> tuple[KlakeConfig | None, Catalog, Store | None]:
    config, where, root = catalog_location(args)
    check_reachable([where.root], where)
    try:
        return config, Catalog.open(where), root
    except CatalogNotFoundError:
        raise KlakeError(f"no catalog at {where.root}: import or append to create it") from None


def _settings(config: KlakeConfig | None, root: Store | None, topic: str) -> TopicConfig:
    """The configuration's declared settings of the topic, else those stored under the root (Kafka's defaults
    without a root), as the jobs resolve them."""
    declared = config.topic(topic) if config is not None else None
    if declared is not None:
        return declared.config
    return TopicConfig() if root is None else load_topic_config(root, topic)


# ------------------------------------------------------------------------------------------ topics

def partition_summaries(table: pa.Table, floor: int) -> list[dict]:
    """One summary per partition of a topic's live rows (offset order within each partition)."""
    if table.num_rows == 0:
        return []
    partition = table["partition"].to_numpy()
    starts = np.flatnonzero(np.r_[True, partition[1:] != partition[:-1]])
    base, next_offset = table["base_offset"].to_numpy(), table["next_offset"].to_numpy()
    log_start = log_start_offsets(base, table["log_start_offset"].to_numpy(), starts)
    size, low, high = (table[c].to_numpy() for c in ("size_bytes", "base_timestamp", "largest_timestamp"))
    summaries = []
    for i, (first, end) in enumerate(zip(starts, np.r_[starts[1:], len(partition)], strict=True)):
        stamped = low[first:end] >= floor
        summaries.append({
            "partition": int(partition[first]), "log_start_offset": int(log_start[i]),
            "log_end_offset": int(next_offset[first:end].max()), "segments": int(end - first),
            "size_bytes": int(size[first:end].sum()),
            "oldest_timestamp": int(low[first:end][stamped].min()) if stamped.any() else None,
            "newest_timestamp": int(high[first:end][stamped].max()) if stamped.any() else None})
    return summaries


def run_topics(args: argparse.Namespace) -> int:
    config, catalog, root = _open(args)
    names = sorted({tp.topic for tp in catalog.partitions()})
    if args.topic is not None:
        validate_topic(args.topic)
        if args.topic not in names:
            raise KlakeError(f"topic {args.topic} is not in the catalog (topics: {', '.join(names) or 'none'})")
        names = [args.topic]
    defaults = TopicConfig().to_mapping()
    for topic in names:
        settings = _settings(config, root, topic)
        summaries = partition_summaries(catalog.segments(topic=topic), min_timestamp(settings))
        if args.json:
            for summary in summaries:
                print(json.dumps({"topic": topic, **summary, "settings": settings.to_mapping()}))
            continue
        changed = ",".join(f"{k}={v}" for k, v in settings.to_mapping().items() if v != defaults[k])
        print(f"Topic: {topic}\tPartitionCount: {len(summaries)}\tConfigs: {changed}")
        for s in summaries:
            times = "\t".join(f"{label}: {'-' if s[key] is None else format_time(s[key])}"
                              for label, key in (("Oldest", "oldest_timestamp"), ("Newest", "newest_timestamp")))
            print(f"\tTopic: {topic}\tPartition: {s['partition']}\tLogStartOffset: {s['log_start_offset']}\t"
                  f"LogEndOffset: {s['log_end_offset']}\tSegments: {s['segments']}\tSize: {s['size_bytes']}\t{times}")
    return 0


# ----------------------------------------------------------------------------------------- consume

def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "backslashreplace")


def consumed_records(catalog: Catalog, topic: str, rng: ReadRange, partition: int | None) -> Iterator[dict]:
    """The topic's records in range, partition after partition in offset order, read lazily item by item
    (through the catalog's store, which reaches the segments the rows name)."""
    plan = plan_read(catalog, topic, rng, catalog.store, None if partition is None else partition.__eq__)
    for item in plan.items:
        for batch in read_item(item, catalog.store):
            columns = batch.to_pydict()
            micros = batch.column("timestamp").cast(pa.int64()).to_numpy()
            for i in range(batch.num_rows):
                yield {"topic": topic, "partition": columns["partition"][i], "offset": columns["offset"][i],
                       "timestamp": int(micros[i]) // 1000, "key": _text(columns["key"][i]),
                       "value": _text(columns["value"][i]),
                       "headers": [[h["key"], _text(h["value"])] for h in columns["headers"][i] or ()]}


def run_consume(args: argparse.Namespace) -> int:
    validate_topic(args.topic)
    config, catalog, root = _open(args)
    found = catalog.partitions()
    if args.topic not in {tp.topic for tp in found}:
        raise KlakeError(f"topic {args.topic} is not in the catalog")
    if args.partition is not None:
        check_partitions(found, {args.topic}, {args.partition}, config)
    kind, value = args.start or ("offset", None)
    floor = min_timestamp(_settings(config, root, args.topic))
    rng = ReadRange(from_ms=value if kind == "time" else None, from_offset=value if kind == "offset" else None,
                    floor=floor)
    for record in islice(consumed_records(catalog, args.topic, rng, args.partition), args.count):
        sys.stdout.write((json.dumps(record) if args.format == "json" else record["value"] or "") + "\n")
    return 0
