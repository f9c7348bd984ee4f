"""Apply a retention plan to one partition through the catalog's two-phase delete.

Steps, each safe to crash after (a re-run finishes the work, ARCHITECTURE "The catalog"):
1. under the partition's lease, plan with `plan_retention` (pure, explicit `now`);
2. when every segment goes, register a new empty ACTIVE segment at the log end offset and roll the
   old ACTIVE row to ROLLED first (Kafka rolls before deleting, so a partition always has a segment
   and its log end offset survives);
3. one commit marks every doomed row DELETE_STARTED: from here they have left the live log;
4. delete the objects klake owns (object layout, and sidecars it wrote under the root; a Kafka-layout
   `.log` imported in place belongs to the broker copy and is left where it is, and reported);
5. one commit removes the rows. Rows left DELETE_STARTED by an earlier crash are finished first.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.catalog import Catalog
from engine.catalog_schema import SegmentState, partition_log_start_offset
from engine.lease import held_lease
from engine.retention import RetentionPlan, plan_retention
from engine.segment_deletion import Cleanup, delete_and_forget, deleting_rows, roll_empty_active
from engine.topic_config import TopicConfig
from layouts.names import TopicPartition
from layouts.storage import StorageOptions, normalize_uri

RETENTION_LEASE_TTL_MS = 3_600_000


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


def apply_retention(catalog: Catalog, root: str, tp: TopicPartition, config: TopicConfig, now_ms: int,
                    options: StorageOptions | None = None, dry_run: bool = False, owner: str = "klake",
                    job_id: str | None = None) -> RetentionOutcome:
    """Plan and (unless `dry_run`) apply retention to one partition."""
    job_id = job_id or uuid.uuid4().hex
    root = normalize_uri(root)
    if dry_run:
        rows = catalog.live_segments(tp.topic, tp.partition)
        plan = plan_retention(rows, config, now_ms, partition_log_start_offset(rows))
        return RetentionOutcome(tp.topic, tp.partition, plan, dry_run=True)
    with held_lease(root, tp, owner, job_id, RETENTION_LEASE_TTL_MS, options):
        cleanup = Cleanup()
        earlier = deleting_rows(catalog, tp)
        if earlier:
            delete_and_forget(catalog, root, earlier, options, job_id, cleanup)
        rows = catalog.live_segments(tp.topic, tp.partition)
        plan = plan_retention(rows, config, now_ms, partition_log_start_offset(rows))
        outcome = RetentionOutcome(tp.topic, tp.partition, plan, False, cleanup, len(earlier))
        if not plan.to_delete:
            return outcome
        if plan.roll_new_active_at is not None:
            roll_empty_active(catalog, root, tp, plan.roll_new_active_at, rows, options, job_id, now_ms, cleanup)
        cleanup.committed(catalog.transition([r.ref for r in plan.to_delete], SegmentState.DELETE_STARTED,
                                             job_id).version)
        delete_and_forget(catalog, root, [r.with_state(SegmentState.DELETE_STARTED) for r in plan.to_delete],
                           options, job_id, cleanup)
        return outcome
