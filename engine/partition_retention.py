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
from engine.catalog_schema import Layout, SegmentRow, SegmentState, partition_log_start_offset
from engine.lease import held_lease
from engine.log_summary import segment_row, summarize_segment
from engine.retention import RetentionPlan, plan_retention
from engine.topic_config import TopicConfig
from layouts.names import TopicPartition
from layouts.object_layout import new_segment_id, object_segment_keys, write_segment
from layouts.storage import StorageOptions, delete_objects, normalize_uri

RETENTION_LEASE_TTL_MS = 3_600_000


@dataclass
class Cleanup:
    """What the delete phases did: objects deleted, objects left (not klake's), failures, commits."""

    deleted_objects: list[str] = field(default_factory=list)
    left_in_place: list[str] = field(default_factory=list)
    failed_deletes: dict[str, str] = field(default_factory=dict)
    commit_versions: list[int] = field(default_factory=list)

    def committed(self, version: int | None) -> None:
        if version is not None:
            self.commit_versions.append(version)


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
        earlier = _deleting_rows(catalog, tp)
        if earlier:
            _delete_and_forget(catalog, root, earlier, options, job_id, cleanup)
        rows = catalog.live_segments(tp.topic, tp.partition)
        plan = plan_retention(rows, config, now_ms, partition_log_start_offset(rows))
        outcome = RetentionOutcome(tp.topic, tp.partition, plan, False, cleanup, len(earlier))
        if not plan.to_delete:
            return outcome
        if plan.roll_new_active_at is not None:
            _roll_empty_active(catalog, root, tp, plan.roll_new_active_at, rows, options, job_id, now_ms, cleanup)
        cleanup.committed(catalog.transition([r.ref for r in plan.to_delete], SegmentState.DELETE_STARTED,
                                             job_id).version)
        _delete_and_forget(catalog, root, [r.with_state(SegmentState.DELETE_STARTED) for r in plan.to_delete],
                           options, job_id, cleanup)
        return outcome


def _deleting_rows(catalog: Catalog, tp: TopicPartition) -> list[SegmentRow]:
    return [r for r in catalog.rows_of([(tp.topic, tp.partition)]).values() if r.state == SegmentState.DELETE_STARTED]


def _roll_empty_active(catalog: Catalog, root: str, tp: TopicPartition, at: int, rows: list[SegmentRow],
                       options: StorageOptions | None, job_id: str, now_ms: int, cleanup: Cleanup) -> None:
    """Kafka's roll before deleting every segment: an empty ACTIVE segment at the log end offset."""
    segment_id = new_segment_id()
    keys = object_segment_keys(root, tp, at, segment_id)
    write_segment(keys, b"", b"", b"", options)
    empty = segment_row(tp, segment_id, keys, Layout.OBJECT, summarize_segment(b"", at, keys.log),
                        SegmentState.ACTIVE, job_id, created_at_ms=now_ms)
    active = [r.ref for r in rows if r.state == SegmentState.ACTIVE]
    if active:
        cleanup.committed(catalog.transition(active, SegmentState.ROLLED, job_id).version)
    cleanup.committed(catalog.add_segments([empty], job_id).version)


def _owned_keys(root: str, row: SegmentRow) -> tuple[list[str], list[str]]:
    """(keys klake may delete, keys it must leave): a Kafka-layout `.log` is the broker copy's."""
    keys = [row.log_key, row.index_key, row.timeindex_key]
    owned = [k for k in keys if row.layout == Layout.OBJECT or k.startswith(root + "/")]
    return owned, [k for k in keys if k not in owned]


def _delete_and_forget(catalog: Catalog, root: str, rows: list[SegmentRow], options: StorageOptions | None,
                       job_id: str, cleanup: Cleanup) -> None:
    owned, kept = [], []
    for row in rows:
        mine, theirs = _owned_keys(root, row)
        owned += mine
        kept += theirs
    result = delete_objects(sorted(set(owned)), options)
    failed = {k: why for k, why in result.failed.items() if "NoSuchKey" not in why and "No such file" not in why}
    cleanup.deleted_objects += result.deleted
    cleanup.left_in_place += kept
    cleanup.failed_deletes.update(failed)
    gone = [r.ref for r in rows if not any(k in failed for k in _owned_keys(root, r)[0])]
    if gone:
        cleanup.committed(catalog.remove_deleted(gone, job_id).version)
