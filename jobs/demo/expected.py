"""Expected by brute force: the oracle the demo's checks compare the jobs' results against.

From the generated input it builds each partition's log record by record (Kafka's timestamp validation,
murmur2 partitioning, offsets); given only the segment boundaries the catalog chose and where the cleaner
stopped, it derives by plain scans what retention, compaction and ListOffsets lookups must give. Of
klake it uses the row type, the cleaner-checkpoint reader, Kafka's partitioner and the topic settings,
never the retention, cleaner or lookup rules under test (a contract in pyproject.toml holds it to that)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import SegmentRow, first_dirty_offset
from engine.format.partitioner import partition_for_keys
from engine.log.topic_config import TopicConfig
from jobs.demo.generator import CONFIGS, START_MS, TOPICS, DemoPlan


@dataclass
class PartitionLog:
    """One partition as the input says it must be: offset i is the i-th accepted record."""

    timestamps: np.ndarray  # as reads report them (LogAppendTime: the append's clock)
    keys: list[bytes | None]


@dataclass
class Model:
    logs: dict[str, PartitionLog]
    appended: list[Counter[str]]  # per append batch: records by topic
    rejected: list[Counter[str]]  # per append batch: records by reason


def build_model(table: pa.Table, plan: DemoPlan) -> Model:
    """Kafka's rules applied record by record to the input: validation, partitioning, offsets."""
    model = Model({}, [Counter() for _ in range(plan.batches)], [Counter() for _ in range(plan.batches)])
    for topic in TOPICS:
        rows = table.filter(pc.equal(table["topic"], topic.name))
        window = (rows["arrival"].to_numpy() - START_MS) // plan.batch_ms
        now = plan.batch_now(window)
        timestamps = rows["timestamp"].cast(pa.int64()).to_numpy()
        config = CONFIGS[topic.name]
        if config.message_timestamp_type == "LogAppendTime":
            accepted, shown = np.ones(len(now), bool), now
        else:
            accepted = ((timestamps - now <= config.message_timestamp_after_max_ms)
                        & (now - timestamps <= config.message_timestamp_before_max_ms))
            shown = timestamps
        for i in range(plan.batches):
            in_batch = window == i
            model.appended[i][topic.name] += int((in_batch & accepted).sum())
            model.rejected[i]["INVALID_TIMESTAMP"] += int((in_batch & ~accepted).sum())
        parts = partition_for_keys(rows["key"].combine_chunks(), topic.partitions) if topic.keys \
            else rows["partition"].to_numpy(zero_copy_only=False)
        keys = np.array(rows["key"].to_pylist(), dtype=object)
        for p in range(topic.partitions):
            chosen = accepted & (parts == p)
            model.logs[f"{topic.name}-{p}"] = PartitionLog(shown[chosen], list(keys[chosen]))
    return model


def survivors(log: PartitionLog, start: int, clean_end: int, compacted: bool) -> np.ndarray:
    """Offsets still in the log: from the log start on, and in a compacted topic's cleaned range
    [start, clean_end) only the latest record of each key (tombstones too: a first round keeps them)."""
    end = len(log.timestamps)
    if not compacted or clean_end <= start:
        return np.arange(start, end)
    latest = {log.keys[o]: o for o in range(start, clean_end)}
    kept = [o for o in range(start, clean_end) if latest[log.keys[o]] == o]
    return np.concatenate([np.asarray(kept, np.int64), np.arange(clean_end, end)])


def expected_retention(rows: Sequence[SegmentRow], config: TopicConfig, now: int
                       ) -> tuple[list[SegmentRow], list[SegmentRow]]:
    """(deleted, held back): the time pass, oldest first, stopping at the first segment that stays."""
    deleted: list[SegmentRow] = []
    if config.retention_ms < 0 or not config.deletes:
        return deleted, []
    for i, row in enumerate(rows):
        if i == len(rows) - 1 and row.size_bytes == 0:
            break
        largest = row.largest_timestamp if row.largest_timestamp >= 0 else row.created_at_ms
        if now - largest <= config.retention_ms:
            return deleted, [row] if largest > now else []
        deleted.append(row)
    return deleted, []


def brute_force_lookup(log: PartitionLog, kept: np.ndarray, start: int, target: int) -> tuple[int, int]:
    """ListOffsets by scanning every surviving record."""
    if target == -1:
        return len(log.timestamps), -1
    if target == -2:
        return start, -1
    ts = log.timestamps[kept]
    if target == -3:
        return (int(kept[np.argmax(ts)]), int(ts.max())) if kept.size else (-1, -1)
    hits = np.flatnonzero(ts >= target)
    return (int(kept[hits[0]]), int(ts[hits[0]])) if hits.size else (-1, -1)


def by_partition(rows: Sequence[SegmentRow]) -> dict[str, list[SegmentRow]]:
    out: dict[str, list[SegmentRow]] = {}
    for row in sorted(rows, key=lambda r: (r.topic, r.partition, r.base_offset)):
        out.setdefault(f"{row.topic}-{row.partition}", []).append(row)
    return out


def compacted(partition: str) -> bool:
    return CONFIGS[partition.rsplit("-", 1)[0]].compacted


@dataclass(frozen=True)
class Survivors:
    """A partition's log as the model says it stands: its log start offset and the offsets still in it."""

    start: int
    offsets: np.ndarray


def final_survivors(model: Model, rows: Sequence[SegmentRow]) -> dict[str, Survivors]:
    """Where retention (the log start) and compaction (the cleaner checkpoint) ended, applied to the model."""
    live = by_partition(rows)
    out = {}
    for name, log in model.logs.items():
        segments = live.get(name, [])
        start = segments[0].base_offset if segments else 0
        checkpoint = first_dirty_offset(segments)
        out[name] = Survivors(start, survivors(log, start, start if checkpoint is None else checkpoint,
                                               compacted(name)))
    return out
