"""Apply a retention plan to partitions through the catalog's two-phase delete.

Steps, each safe to crash after (a re-run finishes the work, `engine.ops.deletion`):
1. under the partitions' leases, plan each with `plan_retention` (pure, explicit `now`);
2. when every segment of a partition goes, a new empty ACTIVE segment is written at the log end
   offset (Kafka rolls before deleting, so a partition always has a segment and its log end offset
   survives); it is added in the same commit that retires the old ACTIVE row;
3. one commit marks every doomed row DELETE_STARTED: from here they have left the live log;
4. delete the objects klake owns (object layout, and sidecars it wrote under the root; a Kafka-layout
   `.log` imported in place belongs to the broker copy and is left where it is, and reported);
5. one commit removes the rows. Rows left DELETE_STARTED by an earlier crash are finished first.
Steps 1-2 are `prepare_retention` (one partition, no commit); `engine.ops.run` does the rest.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentState, partition_log_start_offset
from engine.log.retention import RetentionPlan, plan_retention
from engine.log.topic_config import TopicConfig
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from engine.ops.deletion import Cleanup
from engine.ops.run import PartitionInput, PartitionStep, run_single_partition
from engine.ops.versions import store_segment_version
from layouts.store import StorageOptions, normalize_uri


@dataclass
class RetentionOutcome:
    topic: str
    partition: int
    plan: RetentionPlan
    dry_run: bool
    cleanup: Cleanup = field(default_factory=Cleanup)
    finished_from_earlier_run: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "dry_run": self.dry_run,
                "plan": self.plan.to_dict(), "finished_from_earlier_run": self.finished_from_earlier_run,
                **asdict(self.cleanup)}


def prepare_retention(item: PartitionInput, *, root: str, now_ms: int, options: StorageOptions | None,
                      job_id: str, dry_run: bool = False) -> PartitionStep[RetentionOutcome]:
    """Plan one partition's retention and, unless `dry_run`, write the empty segment a full delete needs."""
    rows = list(item.rows)
    plan = plan_retention(rows, item.config, now_ms, partition_log_start_offset(rows))
    outcome = RetentionOutcome(item.tp.topic, item.tp.partition, plan, dry_run)
    if dry_run or not plan.to_delete:
        return PartitionStep(outcome)
    add = ()
    if plan.roll_new_active_at is not None:
        add = (store_segment_version(root, item.tp, plan.roll_new_active_at, b"", b"", b"", SegmentState.ACTIVE,
                                     job_id, now_ms, options),)
    retired = tuple(plan.to_delete)
    change = CatalogChange(add=add, transitions=tuple((r.ref, SegmentState.DELETE_STARTED) for r in retired))
    return PartitionStep(outcome, change, retired)


def apply_retention(catalog: Catalog, root: str, tp: TopicPartition, config: TopicConfig, now_ms: int,
                    options: StorageOptions | None = None, dry_run: bool = False,
                    job_id: str | None = None) -> RetentionOutcome:
    """Plan and (unless `dry_run`) apply retention to one partition."""
    job_id = job_id or uuid.uuid4().hex
    root = normalize_uri(root)
    prepare = partial(prepare_retention, root=root, now_ms=now_ms, options=options, job_id=job_id, dry_run=dry_run)
    run = run_single_partition(catalog, root, tp, config, prepare, operation="retention", job_id=job_id,
                               options=options, mutate=not dry_run)
    outcome: RetentionOutcome = run.outcome(tp)
    outcome.cleanup = run.cleanup
    outcome.finished_from_earlier_run = run.finished_from_earlier_run.get(str(tp), 0)
    return outcome
