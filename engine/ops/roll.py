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

Rolling writes the segment's final version with the time index's last entry (Kafka's
`onBecomeInactiveSegment`: the max timestamp, skipping the full check) as ROLLED, and a new empty
ACTIVE segment at the log end offset, in one commit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentState
from engine.log.segment_writer import ActiveSegment, Append
from engine.ops.append import resume_state
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.versions import store_segment_version
from layouts.store import StorageOptions


@dataclass
class RollOutcome:
    topic: str
    partition: int
    rolled: bool
    reason: str | None
    base_offset: int | None = None
    next_offset: int | None = None
    size_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prepare_roll(item: PartitionInput, *, root: str, now_ms: int, options: StorageOptions | None, job_id: str,
                 dry_run: bool = False) -> PartitionStep[RollOutcome]:
    """Roll `item`'s active segment if an append at `now_ms` would (see the module docstring)."""
    tp, rows, config = item.tp, list(item.rows), item.config
    active = rows[-1] if rows and rows[-1].state == SegmentState.ACTIVE else None
    if active is None or active.size_bytes == 0:
        return PartitionStep(RollOutcome(tp.topic, tp.partition, False, None))
    state, log, summary = resume_state(active, config, tp, options)
    segment = ActiveSegment.resume(state, config.roll_policy(), log)
    probe = Append(b"", active.next_offset, active.next_offset, now_ms, active.next_offset)
    reason = segment.roll_reason(probe, now_ms)
    outcome = RollOutcome(tp.topic, tp.partition, reason is not None, reason, active.base_offset,
                          active.next_offset, active.size_bytes)
    if reason is None or dry_run:
        return PartitionStep(outcome)
    closed = segment.close(reason)
    rolled = store_segment_version(root, tp, closed.base_offset, closed.log, closed.index, closed.timeindex,
                                   SegmentState.ROLLED, job_id, active.created_at_ms, options,
                                   log_start_offset=active.log_start_offset, extends=active, summary=summary)
    empty = store_segment_version(root, tp, active.next_offset, b"", b"", b"", SegmentState.ACTIVE, job_id, now_ms,
                                  options)
    return PartitionStep(outcome, CatalogChange(add=(rolled, empty), remove=(active.ref,)))
