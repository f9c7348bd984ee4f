"""Roll idle active segments: the roll a broker would make at the next append, made now.

A broker only rolls when a batch arrives (`LogSegment.shouldRoll`, spec 3): an idle partition keeps
its active segment open, and the cleaner never touches the active segment, so the records of a quiet
compacted topic would never be compacted (why Kafka caps `segment.ms` by `max.compaction.lag.ms`),
and a batch job's segments would never reach their final shape. The roll job asks the same question for an append arriving at
`now`: would Kafka roll? The incoming batch's timestamp is taken as `now` (what LogAppendTime
stamps, and what a producer's CreateTime would be), so the time rule is
`now - rollingBasedTimestamp > segment.ms - jitter` (the first batch's max timestamp, or the
segment's creation time when it has none), and a full index rolls too. An empty active segment never
rolls (Kafka's `size > 0`).

The driver plans every partition at once over the catalog's columns (`RollPlanner`, `plan_roll`): a
partition whose plan keeps its segment costs its task no object read, and a dry run reads none. A
segment with so many batches that its index may be full is the one case the columns cannot settle:
the run reads its index (`ActiveSegment.roll_reason`); a dry run reports it as undecided.

Rolling writes the segment's final version with the time index's last entry (Kafka's
`onBecomeInactiveSegment`: the max timestamp, skipping the full check) as ROLLED, and a new empty
ACTIVE segment at the log end offset, in one commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import COLUMNS, SegmentState, table_to_rows
from engine.log.roll_plan import ROLL_INPUT_COLUMNS, PartitionRoll, RollAction, RollPlan, RollWhy, plan_roll
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import ActiveSegment, Append
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.active_segment import resume_state
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.versions import store_segment_version
from kernel.names import TopicPartition
from layouts.store.bound import Store


@dataclass
class RollOutcome:
    topic: str
    partition: int
    rolled: bool
    reason: str | None
    base_offset: int | None = None
    next_offset: int | None = None
    size_bytes: int = 0
    decision: str | None = None  # the roll plan's sentence: the rule and its numbers

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RollPlanner:
    """The driver's roll plan of every partition at `now_ms` (a `Planner`: it reads no object)."""

    now_ms: int
    columns: tuple[str, ...] = ROLL_INPUT_COLUMNS
    task_columns: tuple[str, ...] = COLUMNS  # a task rebuilds the active segment's row

    def __call__(self, live: pa.Table, configs: Mapping[TopicPartition, TopicConfig]) -> RollPlan:
        return plan_roll(live, {tp.topic: config for tp, config in configs.items()}, self.now_ms)


def prepare_roll(item: PartitionInput[PartitionRoll], *, now_ms: int, store: Store, job_id: str,
                 dry_run: bool = False) -> PartitionStep[RollOutcome]:
    """Roll `item`'s active segment if its slice of the roll plan says so (see the module docstring):
    the segment is resumed only to be closed, or to read an index that may be full."""
    tp, config, planned = item.tp, item.config, item.plan
    assert item.segments is not None, f"{tp}: roll plans on the driver and ships the rows as Arrow"
    if planned is None or planned.why in (RollWhy.NO_ACTIVE, RollWhy.EMPTY):
        return PartitionStep(RollOutcome(tp.topic, tp.partition, False, None))
    info = planned.info
    outcome = RollOutcome(tp.topic, tp.partition, planned.action == RollAction.ROLL, planned.rule, info["base_offset"],
                          info["next_offset"], info["size_bytes"], planned.describe())
    if planned.action == RollAction.KEEP or dry_run:
        if planned.action == RollAction.CHECK_INDEX:
            outcome.decision += "; a dry run reads no index: the run decides"
        return PartitionStep(outcome)
    (active,) = table_to_rows(item.segments.slice(item.segments.num_rows - 1))
    state, log, summary = resume_state(active, config, tp, store)
    segment = ActiveSegment.resume(state, RollPolicy(config), log)
    probe = Append(b"", active.next_offset, active.next_offset, now_ms, active.next_offset)
    reason = segment.roll_reason(probe, now_ms)
    assert planned.action == RollAction.CHECK_INDEX or reason == planned.rule, (
        f"{tp}: the roll plan says {planned.rule}, the segment says {reason}")
    outcome.rolled, outcome.reason = reason is not None, reason
    if reason is None:
        return PartitionStep(outcome)
    closed = segment.close(reason)
    rolled = store_segment_version(store, tp, closed.base_offset, closed.log, closed.index, closed.timeindex, SegmentState.ROLLED, job_id, active.created_at_ms, log_start_offset=active.log_start_offset, extends=active, summary=summary, min_timestamp=min_timestamp(config))
    empty = store_segment_version(store, tp, active.next_offset, b"", b"", b"", SegmentState.ACTIVE, job_id, now_ms, min_timestamp=min_timestamp(config))
    return PartitionStep(outcome, CatalogChange(add=(rolled, empty), remove=(active.ref,)))
