"""Which idle active segments a roll job rolls at `now`: Kafka's `LogSegment.shouldRoll` (spec 3) for an
empty append arriving at `now`, planned for every partition at once over the catalog's columns.

`plan_roll` reads nothing and writes nothing: given the live rows of any number of partitions (Arrow,
the catalog's columns), each topic's config and an explicit `now_ms`, it says per partition whether
its ACTIVE segment rolls, by which rule and with the numbers behind it. The rule is
`engine.log.roll_rule.should_roll`, the one the writer asks per append (`ActiveSegment.roll_reason`, which
the task applies to the segment it closes), here for a probe append of no bytes whose max timestamp is
`now` and whose last offset is the segment's next offset: size > segment.bytes; time waited since the
first batch's max timestamp (`first_batch_timestamp`), or since `created_at_ms` when it has none
(KAFKA-4099), > segment.ms - jitter (`RollPolicy.jitter_for` the segment's identity, segment.ms capped by
max.compaction.lag.ms on compacted topics); index full; offset overflow. The catalog holds no index
size, but an append adds at most one entry of each kind per batch, so the batch count bounds the entry
counts: a segment the index-full rule (`engine.index.full_rule`) cannot call full at that bound is not
full, and only the others (`CHECK_INDEX`) need their index read, by the task.
An empty active segment never rolls (Kafka rolls only on `size > 0`), and a partition without an ACTIVE
row (a closed log) has nothing to roll.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import SegmentState
from engine.index.full_rule import IndexFullRule
from engine.log.plan_columns import PartitionRows, dictionary, group_partitions, int64
from engine.log.roll_rule import (
    ROLL_INDEX_FULL,
    ROLL_OFFSET_OVERFLOW,
    ROLL_RULES,
    ROLL_SIZE,
    ROLL_TIME,
    RollPolicy,
    should_roll,
    time_waited_for_roll,
)
from engine.log.timestamp_floor import has_timestamp
from engine.log.topic_config import TopicConfig, min_timestamp
from kernel.names import TopicPartition
from kernel.times import format_time


class RollAction(StrEnum):
    KEEP = "keep"
    ROLL = "roll"
    CHECK_INDEX = "check-index"  # the task reads the index: only it can tell whether it is full


class RollWhy(StrEnum):
    """The words of the plan's `reason` column, one dictionary entry each."""

    NO_ACTIVE = "no active segment: the log is closed"
    EMPTY = "the active segment is empty: Kafka rolls only a non-empty one (size > 0)"
    SIZE = "size > segment.bytes"
    TIME = "now - first batch timestamp > segment.ms - jitter"
    TIME_CREATED = "now - created_at_ms > segment.ms - jitter (no timestamp, KAFKA-4099)"
    INDEX = "as many batches as index entries fit: the index may be full (the task reads it)"
    OVERFLOW = "next offset - base offset outside [0, Int.MaxValue]"
    NOT_DUE = "not due: segment.ms - jitter has not passed since the rolling base timestamp"


_WHYS = list(RollWhy)
_ACTIONS = list(RollAction)
_RULE_WHYS = np.array([_WHYS.index(w) for w in (RollWhy.SIZE, RollWhy.TIME, RollWhy.INDEX, RollWhy.OVERFLOW,
                                                 RollWhy.NOT_DUE)])  # by `should_roll`'s answer (NO_ROLL: last)
_RULES = {RollWhy.SIZE: ROLL_SIZE, RollWhy.TIME: ROLL_TIME, RollWhy.TIME_CREATED: ROLL_TIME,
          RollWhy.OVERFLOW: ROLL_OFFSET_OVERFLOW, RollWhy.INDEX: ROLL_INDEX_FULL}
ROLL_INPUT_COLUMNS = ("topic", "partition", "segment_id", "base_offset", "next_offset", "size_bytes", "batch_count",
                      "state", "first_batch_timestamp", "created_at_ms")
ROLL_PLAN_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("segments", pa.int64()), ("segment_id", pa.string()),
    ("base_offset", pa.int64()), ("next_offset", pa.int64()), ("size_bytes", pa.int64()),
    ("batch_count", pa.int64()), ("action", pa.dictionary(pa.int32(), pa.string())),
    ("reason", pa.dictionary(pa.int32(), pa.string())), ("rolling_base_timestamp", pa.int64()),
    ("from_created_at", pa.bool_()), ("waited_ms", pa.int64()), ("segment_ms", pa.int64()), ("jitter_ms", pa.int64()),
    ("rolls_from_ms", pa.int64()),
])


@dataclass(frozen=True)
class PartitionRoll:
    """One partition's row of the roll plan (`info`): what its task does and why."""

    tp: TopicPartition
    now_ms: int
    info: Mapping[str, Any]

    @property
    def action(self) -> RollAction:
        return RollAction(self.info["action"])

    @property
    def why(self) -> RollWhy:
        return RollWhy(self.info["reason"])

    @property
    def rule(self) -> str | None:
        """`ActiveSegment.roll_reason`'s word for a planned roll (None for KEEP)."""
        return _RULES[self.why] if self.action == RollAction.ROLL else None

    def describe(self) -> str:
        """The decision as a sentence with its numbers."""
        i = self.info
        if self.why in (RollWhy.NO_ACTIVE, RollWhy.EMPTY):
            return str(self.why)
        if self.why in (RollWhy.TIME, RollWhy.TIME_CREATED, RollWhy.NOT_DUE):
            base = ("created_at_ms (no timestamp, KAFKA-4099)" if i["from_created_at"] else "first batch timestamp")
            rolls = self.action == RollAction.ROLL
            return (f"{'time' if rolls else 'not due'}: now - {base} {format_time(i['rolling_base_timestamp'])} = "
                    f"{i['waited_ms']} ms {'>' if rolls else '<='} segment.ms {i['segment_ms']} - jitter "
                    f"{i['jitter_ms']}" + ("" if rolls else f"; due from {format_time(i['rolls_from_ms'])}"))
        if self.why == RollWhy.SIZE:
            return f"{self.why}: {i['size_bytes']} B"
        if self.why == RollWhy.INDEX:
            return f"{self.why}: {i['batch_count']} batches"
        return f"{self.why}: [{i['base_offset']}, {i['next_offset']})"

    def to_dict(self) -> dict[str, Any]:
        return {**self.info, "describe": self.describe()}


@dataclass(frozen=True)
class RollPlan(PartitionRows):
    """`plan_roll`'s outcome: `partitions`, one row per partition (its last live segment's numbers)."""

    now_ms: int
    partitions: pa.Table

    def partition(self, tp: TopicPartition) -> PartitionRoll:
        """One partition's row (KeyError if it had no live segment)."""
        return PartitionRoll(tp, self.now_ms, self._rows[self._index[tp]])

    def side_files(self) -> dict[str, pa.Table]:
        return {"partitions": self.partitions}

    def totals(self) -> dict[str, Any]:
        p = self.partitions
        actions = p["action"].value_counts().to_pylist() if p.num_rows else []
        reasons = p["reason"].value_counts().to_pylist() if p.num_rows else []
        return {"partitions": p.num_rows, "by_action": {a["values"]: a["counts"] for a in actions},
                "by_reason": {r["values"]: r["counts"] for r in sorted(reasons, key=lambda r: -r["counts"])}}


def plan_roll(segments: pa.Table, configs: Mapping[str, TopicConfig], now_ms: int) -> RollPlan:
    """Plan the roll of every partition's ACTIVE segment in `segments` (live catalog rows of any number of
    partitions, each one's rows in offset order) for an append arriving at `now_ms` (module docstring)."""
    table = segments.select(list(ROLL_INPUT_COLUMNS))
    if not table.num_rows:
        return RollPlan(now_ms, ROLL_PLAN_SCHEMA.empty_table())
    table, groups = group_partitions(table)
    try:
        cfgs = [configs[t] for t in groups.topics]
    except KeyError as exc:
        raise ValueError(f"no topic config for {exc.args[0]}") from None
    tail = table.take(pa.array(groups.ends - 1))  # a partition's active segment is its last
    col = {name: int64(tail[name]) for name in ("base_offset", "next_offset", "size_bytes", "batch_count",
                                                "first_batch_timestamp", "created_at_ms")}
    active = np.asarray(pc.equal(tail["state"], str(SegmentState.ACTIVE)).to_numpy(zero_copy_only=False))
    policies = [RollPolicy(c) for c in cfgs]
    per_topic = groups.topic_of
    segment_bytes = np.array([p.segment_bytes for p in policies], np.int64)[per_topic]
    segment_ms = np.array([p.segment_ms for p in policies], np.int64)[per_topic]
    index_bytes = np.array([p.segment_index_bytes for p in policies], np.int64)[per_topic]
    floor = np.array([min_timestamp(c) for c in cfgs], np.int64)[per_topic]
    jitter = np.zeros(tail.num_rows, np.int64)
    ids = tail["segment_id"]
    for g in np.flatnonzero(np.array([p.segment_jitter_ms > 0 for p in policies], bool)[per_topic] & active):
        tp = TopicPartition(groups.topics[per_topic[g]], int(groups.partitions[g]))
        jitter[g] = policies[per_topic[g]].jitter_for(f"{tp}:{col['base_offset'][g]}")

    size, base, nxt = col["size_bytes"], col["base_offset"], col["next_offset"]
    from_created = ~has_timestamp(col["first_batch_timestamp"], floor)
    rolling_base = np.where(from_created, col["created_at_ms"], col["first_batch_timestamp"])
    waited = time_waited_for_roll(col["first_batch_timestamp"], now_ms, col["created_at_ms"], now_ms, floor)
    # an append adds at most one entry of each kind per batch: the batch count bounds both indexes' entries
    may_be_full = IndexFullRule(index_bytes).is_full(col["batch_count"], col["batch_count"])
    rule = should_roll(size, 0, segment_bytes, waited, segment_ms, jitter, may_be_full, nxt - base)
    time_why = np.where(from_created, _code(RollWhy.TIME_CREATED), _code(RollWhy.TIME))
    why = np.select([~active, size == 0, rule == ROLL_RULES.index(ROLL_TIME)],
                    [_code(RollWhy.NO_ACTIVE), _code(RollWhy.EMPTY), time_why], _RULE_WHYS[rule])
    action = np.select([np.isin(why, [_code(w) for w in (RollWhy.SIZE, RollWhy.TIME_CREATED, RollWhy.TIME,
                                                         RollWhy.OVERFLOW)]), why == _code(RollWhy.INDEX)],
                       [_ACTIONS.index(RollAction.ROLL), _ACTIONS.index(RollAction.CHECK_INDEX)],
                       _ACTIONS.index(RollAction.KEEP))
    partitions = pa.Table.from_pydict({
        "topic": pa.array([groups.topics[t] for t in per_topic.tolist()], pa.string()),
        "partition": pa.array(groups.partitions, pa.int32()), "segments": pa.array(groups.ends - groups.starts),
        "segment_id": ids, "base_offset": pa.array(base), "next_offset": pa.array(nxt), "size_bytes": pa.array(size),
        "batch_count": pa.array(col["batch_count"]),
        "action": dictionary(action, [str(a) for a in _ACTIONS]), "reason": dictionary(why, [str(w) for w in _WHYS]),
        "rolling_base_timestamp": pa.array(rolling_base), "from_created_at": pa.array(from_created),
        "waited_ms": pa.array(waited), "segment_ms": pa.array(segment_ms), "jitter_ms": pa.array(jitter),
        "rolls_from_ms": pa.array(rolling_base + segment_ms - jitter + 1),
    }, schema=ROLL_PLAN_SCHEMA)
    return RollPlan(now_ms, partitions)


def _code(why: RollWhy) -> int:
    return _WHYS.index(why)
