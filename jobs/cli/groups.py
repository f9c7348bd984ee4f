"""`klake groups`: where each consumer group stood, as `kafka-consumer-groups --describe` answers for a cluster,
answered from the snapshots `klake archive` takes into `_groups` (`engine.ops.groups_table`), no Spark."""

from __future__ import annotations

import argparse
import json

from engine.ops.groups_table import group_positions, groups_uri
from jobs.cli.catalog import add_partition_command, catalog_location
from jobs.runtime.job_runner import time_argument
from kernel.errors import KlakeError
from kernel.times import format_time


def register(commands: argparse._SubParsersAction) -> None:
    groups = add_partition_command(
        commands, "groups", "consumer groups' committed offsets, as archive snapshotted them",
        "Where each consumer group stood on the archived topics: per group, topic and partition the committed "
        "offset (the next record it reads), leader epoch and metadata of the newest snapshot at or before --at "
        "(default: the last one).", "klake groups --conf demo-output/demo.yaml --group billing --at 2026-11-28T05:00:00Z", run_groups,
        only="group")
    groups.add_argument("--at", type=time_argument, metavar="TIME", help="as of this time (default: the last snapshot)")


def run_groups(args: argparse.Namespace) -> int:
    _, _, root = catalog_location(args)
    if root is None:
        raise KlakeError("name the klake root: --root ROOT or --conf FILE")
    table = group_positions(root, args.group, args.at)
    if table.num_rows == 0:
        what = f"group {args.group}" if args.group else "any group"
        when = f" at or before {format_time(args.at)}" if args.at is not None else ""
        raise KlakeError(f"no snapshot of {what}{when} in {groups_uri(root.root)} (klake archive takes them)")
    for row in table.to_pylist():
        if args.json:
            print(json.dumps(row))
        else:
            print(f"GROUP: {row['group']}\tTOPIC: {row['topic']}\tPARTITION: {row['partition']}\t"
                  f"CURRENT-OFFSET: {row['offset']}\tLEADER-EPOCH: {'-' if row['leader_epoch'] is None else row['leader_epoch']}"
                  f"\tSNAPSHOT: {format_time(row['snapshot_ms'])}")
    return 0
