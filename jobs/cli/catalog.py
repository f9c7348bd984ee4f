"""`klake segments`: list the catalog's live segments, pruned by time range.

The catalog and root come from `--catalog`/`--root` or a configuration (`--conf`, `--set`, as the jobs
take them); its endpoint and region apply (`--endpoint-url` overrides the endpoint), credentials come
from the environment; secrets are never printed. A missing bucket, missing credentials or an
unreachable endpoint are named in one line (exit 2), as is a `--from` after `--to`. `import` and `scrub` are jobs (`jobs/import_log.py`,
`jobs/scrub.py`) with the common job options.

`--from`/`--to` take epoch ms or ISO-8601 (UTC unless they name a zone). A topic's smallest valid
timestamp is `engine.log.topic_config.min_timestamp` of its settings, stored under the storage root
(`--root`, by default the directory holding a catalog named `_catalog`): times before 1970 only for
topics with `klake.timestamps.allow.negative` (KIP-228). The table shows times in ISO-8601 UTC ("-" for
a segment without timestamps); `--json` keeps the catalog's epoch milliseconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import pyarrow as pa

from engine.log.timestamp_floor import has_timestamp
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog, CatalogNotFoundError
from engine.ops.topic_store import load_topic_config
from jobs.cli.storage import add_storage_arguments, check_reachable, load_storage_config, storage_options
from jobs.runtime.config import KlakeConfig
from jobs.runtime.job_runner import add_command, check_partitions, check_range, time_argument
from jobs.runtime.report import plural
from kernel.errors import KlakeError
from kernel.names import validate_topic
from kernel.times import format_time
from layouts.store import join, normalize_uri
from layouts.store.bound import Store

SEGMENT_FIELDS = ("topic", "partition", "base_offset", "next_offset", "record_count", "size_bytes",
                  "base_timestamp", "largest_timestamp", "state", "log_key")
"""`--json`'s fields; the table shows them all but the object key (`log_key`) unless `--keys` asks for it."""
_TIME_FIELDS = ("base_timestamp", "largest_timestamp")


def register(subparsers: argparse._SubParsersAction) -> None:
    seg = add_command(
        subparsers, "segments", "list live segments, pruned by time range",
        "The catalog's live segments: offsets, records, bytes, smallest and largest timestamps and state; with "
        "--from/--to, those that may hold a record in that time range.", "klake segments --conf demo-output/demo.yaml --topic orders --from 2026-11-04T18:00:00Z", run_segments)
    seg.add_argument("--topic")
    seg.add_argument("--partition", type=int, metavar="P")
    seg.add_argument("--from", dest="from_ms", type=time_argument, metavar="TIME",
                     help="epoch ms or ISO-8601 (UTC unless it names a zone)")
    seg.add_argument("--to", dest="to_ms", type=time_argument, metavar="TIME", help="the same, inclusive")
    seg.add_argument("--keys", action="store_true", help="add each segment's object key to the table")
    add_json_flag(seg, "segment")
    add_catalog_arguments(seg)


def add_partition_command(commands: argparse._SubParsersAction, name: str, summary: str, description: str,
                          example: str, handler: Callable[[argparse.Namespace], int], *,
                          only: str) -> argparse.ArgumentParser:
    """A command that answers per partition from the root (`topics`, `groups`): `--ONLY` narrows it to one topic
    or group, `--json` prints an object per partition, and the catalog and root are found as every catalog
    command finds them; the caller adds its own options."""
    parser = add_command(commands, name, summary, description, example, handler)
    parser.add_argument(f"--{only}", help=f"only this {only}")
    add_json_flag(parser, "partition")
    add_catalog_arguments(parser)
    return parser


def add_json_flag(parser: argparse.ArgumentParser, row: str) -> None:
    """`--json`: one JSON object per `row` instead of a table, times as the catalog keeps them."""
    parser.add_argument("--json", action="store_true", help=f"one JSON object per {row} (times in epoch ms)")


def add_catalog_arguments(parser: argparse.ArgumentParser) -> None:
    """Where a catalog command finds the catalog and root (`catalog_location`), and the storage options."""
    parser.add_argument("--catalog", metavar="URI", help="the catalog (default: ROOT/_catalog)")
    parser.add_argument("--root", metavar="DIR", help="the klake root (default: the configuration's)")
    add_storage_arguments(parser)


def catalog_location(args: argparse.Namespace) -> tuple[KlakeConfig | None, Store, Store | None]:
    """The configuration (if any), the catalog's store and the root's (None: unknown, Kafka's defaults for the
    topics), from --catalog/--root over the configuration's, bound to the storage settings (`storage_options`)."""
    config = load_storage_config(args, root=args.root)
    options = storage_options(args, config)
    catalog = normalize_uri(args.catalog) if args.catalog else config.catalog_uri if config else (
        join(normalize_uri(args.root), "_catalog") if args.root else None)
    if catalog is None:
        raise KlakeError("name the catalog: --catalog URI, --root ROOT or --conf FILE")
    root = normalize_uri(args.root) if args.root else config.root if config else (
        catalog.rsplit("/", 1)[0] if catalog.endswith("/_catalog") else None)
    return config, Store(catalog, options), None if root is None else Store(root, options)


def run_segments(args: argparse.Namespace) -> int:
    check_range(args, end_inclusive=True)
    config, where, root = catalog_location(args)
    check_reachable([where.root], where)
    try:
        catalog = Catalog.open(where)
    except CatalogNotFoundError:
        raise KlakeError(f"no catalog at {where.root}: import or append to create it") from None
    if args.topic is not None:
        validate_topic(args.topic)
    found = catalog.partitions()
    topics = [args.topic] if args.topic else sorted({tp.topic for tp in found})
    if args.partition is not None:
        check_partitions(found, set(topics), {args.partition}, config)
    floors = {topic: min_timestamp(_topic_config(root, topic)) for topic in topics}
    for topic, floor in floors.items():
        for flag, value in (("--from", args.from_ms), ("--to", args.to_ms)):
            if value is not None and not has_timestamp(value, floor):
                raise KlakeError(f"{flag} {format_time(value)} is before topic {topic}'s earliest timestamp "
                                 f"{format_time(floor)}; times before 1970 need "
                                 "klake.timestamps.allow.negative (KIP-228)")
    tables = [catalog.segments(topic=topic, partition=args.partition, from_ms=args.from_ms, to_ms=args.to_ms,
                               min_timestamp=floor) for topic, floor in floors.items()]
    rows = pa.concat_tables(tables).select(list(SEGMENT_FIELDS)).to_pylist() if tables else []
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    fields = SEGMENT_FIELDS if args.keys else SEGMENT_FIELDS[:-1]
    shown = [{f: _show(row, f, floors[row["topic"]]) for f in fields} for row in rows]
    widths = {f: max([len(f)] + [len(r[f]) for r in shown]) for f in fields}
    print("  ".join(f.ljust(widths[f]) for f in fields).rstrip())
    for row in shown:
        print("  ".join(row[f].ljust(widths[f]) for f in fields).rstrip())
    print(plural(len(rows), "segment"), file=sys.stderr)
    return 0


def _topic_config(root: Store | None, topic: str) -> TopicConfig:
    """The topic's stored settings; Kafka's defaults when no storage root is known."""
    return TopicConfig() if root is None else load_topic_config(root, topic)


def _show(row: dict, field: str, floor: int) -> str:
    """A table cell: times in ISO-8601 UTC, "-" below the topic's floor (a segment without timestamps)."""
    if field not in _TIME_FIELDS:
        return str(row[field])
    return format_time(row[field]) if has_timestamp(row[field], floor) else "-"
