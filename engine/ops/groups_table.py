"""Consumer-group positions beside the catalog (issue 30, item 3): the Delta table `{root}/_groups`.

Each archive run appends one snapshot of the committed offsets (Admin `listConsumerGroupOffsets`) of the
groups on the archived topics: group, topic, partition, offset, leader epoch, metadata and the snapshot
time. Snapshots are only appended, so "where did group G stand at time T" is the newest snapshot row per
(group, topic, partition) at or before T, and a restore can translate it through an offset map.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from layouts.store import join
from layouts.store.bound import Store

GROUPS_DIR = "_groups"
SCHEMA = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                    ("offset", pa.int64()), ("leader_epoch", pa.int32()), ("metadata", pa.string()),
                    ("snapshot_ms", pa.int64())])


@dataclass(frozen=True)
class GroupOffset:
    """One group's committed offset of one partition (the next record it reads), as the cluster holds it."""

    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str | None


def groups_uri(root: str) -> str:
    return join(root, GROUPS_DIR)


def snapshot_groups(store: Store, offsets: list[GroupOffset], snapshot_ms: int) -> int:
    """Append one snapshot (every row stamped `snapshot_ms`) to the table under the store's root; the rows
    written."""
    if not offsets:
        return 0
    table = pa.Table.from_pylist([{"group": o.group, "topic": o.topic, "partition": o.partition, "offset": o.offset,
                                   "leader_epoch": o.leader_epoch, "metadata": o.metadata,
                                   "snapshot_ms": snapshot_ms} for o in offsets], schema=SCHEMA)
    write_deltalake(groups_uri(store.root), table, mode="append", storage_options=store.delta_storage_options())
    return table.num_rows


def group_positions(store: Store, group: str | None = None, at_ms: int | None = None) -> pa.Table:
    """Where each group stood: per (group, topic, partition) the newest snapshot row at or before `at_ms`
    (None: the last snapshot), of `group` only if named; sorted. Empty when no snapshot was taken."""
    try:
        table = DeltaTable(groups_uri(store.root), storage_options=store.delta_storage_options()).to_pyarrow_table()
    except TableNotFoundError:
        return SCHEMA.empty_table()
    if group is not None:
        table = table.filter(pc.equal(table.column("group"), group))
    if at_ms is not None:
        table = table.filter(pc.less_equal(table.column("snapshot_ms"), at_ms))
    table = table.sort_by([("group", "ascending"), ("topic", "ascending"), ("partition", "ascending"),
                           ("snapshot_ms", "descending")])
    keys = list(zip(*(table.column(c).to_pylist() for c in ("group", "topic", "partition")), strict=True))
    newest = [i for i, key in enumerate(keys) if i == 0 or keys[i - 1] != key]
    return table.take(pa.array(newest, pa.int64())).select(SCHEMA.names).cast(SCHEMA)
