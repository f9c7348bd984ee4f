"""Apply a retention plan to partitions through the catalog's two-phase delete.

Steps, each safe to crash after (a re-run finishes the work, `engine.ops.deletion`):
1. under the partitions' leases, the driver plans every partition at once with `plan_retention`
   (pure, vectorised over the live rows as Arrow, explicit `now`): `RetentionPlanner`;
2. each partition's task gets its slice of the plan; when every segment of a partition goes, it
   writes a new empty ACTIVE segment at the log end offset (Kafka rolls before deleting, so a partition
   always has a segment and its log end offset survives), added in the same commit that retires the
   old ACTIVE row;
3. one commit marks every doomed row DELETE_STARTED: from here they have left the live log;
4. delete the objects klake owns (object layout, and sidecars it wrote under the root; a Kafka-layout
   `.log` imported in place belongs to the broker copy and is left where it is, and reported);
5. one commit removes the rows. Rows left DELETE_STARTED by an earlier crash are finished first.
Step 2 is `prepare_retention` (one partition, no commit); `engine.ops.run` does the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentRef, SegmentState
from engine.log.retention import RETENTION_INPUT_COLUMNS, PartitionRetention, RetentionPlan, plan_retention
from engine.log.retention_explain import RetentionExplanation
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.deletion import DELETE_COLUMNS, Cleanup
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.versions import store_segment_version
from kernel.names import TopicPartition
from layouts.store.bound import Store


@dataclass
class RetentionOutcome:
    topic: str
    partition: int
    plan: PartitionRetention | None  # None: the partition has no live segment
    dry_run: bool
    cleanup: Cleanup = field(default_factory=Cleanup)
    finished_from_earlier_run: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "dry_run": self.dry_run,
                "plan": None if self.plan is None else RetentionExplanation(self.plan).to_dict(), "finished_from_earlier_run": self.finished_from_earlier_run,
                **asdict(self.cleanup)}


@dataclass(frozen=True)
class RetentionPlanner:
    """The driver's plan of every partition's retention at `now_ms` (a `Planner`: it reads no object key)."""

    now_ms: int
    columns: tuple[str, ...] = RETENTION_INPUT_COLUMNS
    task_columns: tuple[str, ...] = DELETE_COLUMNS  # a task hands its doomed rows to the two-phase delete

    def __call__(self, live: pa.Table, configs: Mapping[TopicPartition, TopicConfig]) -> RetentionPlan:
        return plan_retention(live, {tp.topic: config for tp, config in configs.items()}, self.now_ms)


def prepare_retention(item: PartitionInput[PartitionRetention], *, now_ms: int, store: Store,
                      job_id: str, dry_run: bool = False) -> PartitionStep[RetentionOutcome]:
    """Take one partition's slice of the retention plan and, unless `dry_run`, write the empty segment a
    full delete needs; the change moves the planned rows to DELETE_STARTED."""
    plan = item.plan
    outcome = RetentionOutcome(item.tp.topic, item.tp.partition, plan, dry_run)
    if dry_run or plan is None or not plan.delete_ids:
        return PartitionStep(outcome)
    add = ()
    if plan.roll_new_active_at is not None:
        add = (store_segment_version(store, item.tp, plan.roll_new_active_at, b"", b"", b"", SegmentState.ACTIVE, job_id, now_ms, min_timestamp=min_timestamp(item.config)),)
    assert item.segments is not None, f"{item.tp}: retention plans on the driver and ships the rows as Arrow"
    retired = item.segments.filter(pc.is_in(item.segments["segment_id"], pa.array(plan.delete_ids, pa.string())))
    change = CatalogChange(add=add, transitions=tuple((SegmentRef(item.tp.topic, item.tp.partition, segment_id),
                                                       SegmentState.DELETE_STARTED)
                                                      for segment_id in retired["segment_id"].to_pylist()))
    return PartitionStep(outcome, change, retired)
