"""Compact one catalogued partition: Kafka's cleaner over the catalog, old and new segments swapped
in ONE commit.

The decision (dirty ratio, min/max compaction lag; spec 8.1) is made on the driver from the catalog's
columns alone, for every partition at once (`CompactionPlanner`, `plan_compaction`), so a partition that
needs nothing costs no object read and a dry run reads none. A round reads the partition's segments, runs
`engine.cleaner.cleaning.clean_log`, writes every changed group as a new segment version (`cleaned = true`,
its "mtime" that of the last source segment, as Kafka's cleaner sets it) and commits in one swap
(`prepare_compaction` writes, `engine.ops.run` commits for every partition of a job at once):
the new rows appear, the replaced rows become DELETE_STARTED (they leave the live log together),
and unchanged segments below the checkpoint get a row version marked cleaned (same objects). Then
the replaced objects are deleted and their rows removed (two-phase delete).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pyarrow as pa

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import COLUMNS, SegmentRow, SegmentState, rows_to_table, table_to_rows
from engine.cleaner.cleaning import SourceSegment, clean_log
from engine.cleaner.selection import (
    COMPACTION_INPUT_COLUMNS,
    CompactionPlan,
    PartitionCompaction,
    plan_compaction,
    should_clean,
)
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.deletion import Cleanup
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.versions import store_segment_version
from kernel.names import TopicPartition
from layouts.object_layout import new_segment_id
from layouts.store.bound import Store


@dataclass
class CompactOutcome:
    """One partition's round: `due` when Kafka's trigger (or `force`) picks it and it has cleanable
    bytes, which is what a dry run reports; `cleaned` when a round was written."""

    topic: str
    partition: int
    cleaned: bool
    reasons: tuple[str, ...]
    dirty_ratio: float
    due: bool = False
    checkpoint: int | None = None
    segments_before: int = 0
    segments_after: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    cleanup: Cleanup = field(default_factory=Cleanup)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "cleanup"} | asdict(self.cleanup)


@dataclass(frozen=True)
class CompactionPlanner:
    """The driver's cleaner selection of every partition at `now_ms` (a `Planner`: it reads no object);
    `force` makes every partition with cleanable bytes due."""

    now_ms: int
    force: bool = False
    columns: tuple[str, ...] = COMPACTION_INPUT_COLUMNS
    task_columns: tuple[str, ...] = COLUMNS  # a task reads and rewrites its segments' rows

    def __call__(self, live: pa.Table, configs: Mapping[TopicPartition, TopicConfig]) -> CompactionPlan:
        return plan_compaction(live, {tp.topic: config for tp, config in configs.items()}, self.now_ms, self.force)


def prepare_compaction(item: PartitionInput[PartitionCompaction], *, now_ms: int, store: Store,
                       job_id: str, dry_run: bool = False) -> PartitionStep[CompactOutcome]:
    """One cleaning round on a partition if its slice of the plan says it is due: write the cleaned
    segments and return the swap (new rows in, replaced rows DELETE_STARTED)."""
    tp, config = item.tp, item.config
    assert item.segments is not None, f"{tp}: compaction plans on the driver and ships the rows as Arrow"
    plan = item.plan
    decision = should_clean([], config, now_ms) if plan is None else plan.decision  # no live segment
    count = item.segments.num_rows
    outcome = CompactOutcome(tp.topic, tp.partition, False, decision.reasons, decision.range.dirty_ratio,
                             due=plan is not None and plan.due, segments_before=count, segments_after=count)
    if not outcome.due or dry_run:
        return PartitionStep(outcome)
    rows = table_to_rows(item.segments)
    start, dirty = decision.range.log_start_offset, decision.range.checkpoint
    sources = [SourceSegment(r.base_offset, store.read(r.log_key), r.state == SegmentState.ACTIVE,
                             r.created_at_ms, r.log_key) for r in rows]
    result = clean_log(sources, config, now_ms, dirty, log_start_offset=start)
    by_base = {r.base_offset: r for r in rows}
    add: list[SegmentRow] = []
    remove, doomed = [], []
    for seg in result.segments:
        old = [by_base[b] for b in seg.replaces]
        carried = max((r.log_start_offset for r in old), default=-1)
        if seg.unchanged:
            add.append(replace(old[0], segment_id=new_segment_id(), cleaned=True, job_id=job_id))
            remove.append(old[0].ref)
            continue
        add.append(store_segment_version(store, tp, seg.base_offset, seg.log, seg.index, seg.timeindex, SegmentState.ROLLED, job_id, seg.last_modified_ms, log_start_offset=carried, cleaned=True, summary=seg.summary, min_timestamp=min_timestamp(config)))
        doomed += old
    change = CatalogChange(add=tuple(add), remove=tuple(remove),
                           transitions=tuple((r.ref, SegmentState.DELETE_STARTED) for r in doomed))
    outcome.cleaned = True
    outcome.checkpoint = result.checkpoint
    outcome.segments_after = len(rows) - len(doomed) - len(remove) + len(add)
    outcome.stats = asdict(result.stats)
    return PartitionStep(outcome, change, rows_to_table(doomed))
