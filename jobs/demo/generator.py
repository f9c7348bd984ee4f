"""The demo's input: its three topics and their settings, the plan (days, volume, seed, the simulated
clock of every step), and the records it generates from them, deterministically from the seed, as one
Parquet file per append window (the batch files the `append` jobs read)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.format.records import HEADERS_TYPE
from engine.log.topic_config import TopicConfig

MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z: a fixed clock, so re-runs make the same data
JOB_DELAY_MS = 5 * MINUTE_MS  # an append runs five minutes after its window closes
MAINTENANCE_AFTER_MS = 12 * HOUR_MS  # roll, retention and compaction run at noon the day after
FAR_FUTURE_MS = 30 * DAY_MS


@dataclass(frozen=True)
class DemoTopic:
    name: str
    partitions: int
    keys: int  # distinct keys; 0 = no keys, the producer picks partitions round-robin
    settings: Mapping[str, Any]
    tombstone_rate: float = 0.0
    late_rate: float = 0.0
    far_future: int = 0  # records stamped 30 days ahead: a producer with a broken clock


TOPIC_DEFAULTS: dict[str, Any] = {"segment.bytes": 64 * 1024, "segment.ms": DAY_MS, "max.message.bytes": 16 * 1024}
TOPICS = (
    DemoTopic("orders", 3, keys=300, tombstone_rate=0.03, late_rate=0.02, far_future=3,
              settings={"cleanup.policy": "compact,delete", "retention.ms": 2 * DAY_MS,
                        "max.compaction.lag.ms": DAY_MS // 2}),
    DemoTopic("clicks", 2, keys=0, late_rate=0.05, far_future=2,
              settings={"retention.ms": DAY_MS, "compression.type": "zstd",
                        "message.timestamp.after.max.ms": 60 * DAY_MS}),
    DemoTopic("audit", 1, keys=40, settings={"message.timestamp.type": "LogAppendTime", "retention.ms": 60 * HOUR_MS,
                                             "segment.bytes": 1024 * 1024}),
)


def topic_config(topic: DemoTopic) -> TopicConfig:
    return TopicConfig.from_mapping({**TOPIC_DEFAULTS, **topic.settings}, topic=topic.name)


CONFIGS = {t.name: topic_config(t) for t in TOPICS}


@dataclass(frozen=True)
class DemoPlan:
    """What is generated, and the simulated clock of every step."""

    days: int = 4
    records_per_day: int = 3000
    batches_per_day: int = 2
    seed: int = 7

    @property
    def batch_ms(self) -> int:
        return DAY_MS // self.batches_per_day

    @property
    def batches(self) -> int:
        return self.days * self.batches_per_day

    def batch_now(self, index: np.ndarray | int) -> np.ndarray | int:
        """The clock of append `index`: its window's end plus the job's delay."""
        return START_MS + (np.asarray(index) + 1) * self.batch_ms + JOB_DELAY_MS

    @property
    def maintenance_now(self) -> int:
        return START_MS + self.days * DAY_MS + MAINTENANCE_AFTER_MS

    def lookup_targets(self) -> list[int]:
        """Before the data, every half day, past the end; then latest (-1), earliest (-2), max (-3)."""
        steps = [START_MS + k * DAY_MS // 2 for k in range(2 * self.days + 1)]
        return [START_MS - HOUR_MS, *steps, self.maintenance_now + DAY_MS, -1, -2, -3]

    def read_range(self) -> tuple[str, int, int]:
        """A morning of clicks on the last day: inside the retained data."""
        day = START_MS + (self.days - 1) * DAY_MS
        return "clicks", day + 8 * HOUR_MS, day + 12 * HOUR_MS


def generate(plan: DemoPlan) -> pa.Table:
    """Every topic's records in arrival order, with Spark's Kafka sink columns and `arrival` (ms)."""
    rng = np.random.default_rng(plan.seed)
    table = pa.concat_tables([generate_topic(topic, plan, rng) for topic in TOPICS])
    return table.take(pc.sort_indices(table, [("arrival", "ascending")]))


def generate_topic(topic: DemoTopic, plan: DemoPlan, rng: np.random.Generator) -> pa.Table:
    n = plan.days * plan.records_per_day
    arrival = START_MS + np.sort(rng.integers(0, plan.days * DAY_MS, n))
    timestamps = arrival.copy()
    late = rng.random(n) < topic.late_rate
    timestamps[late] -= rng.integers(MINUTE_MS, 6 * HOUR_MS, int(late.sum()))
    if topic.keys:
        ids = rng.integers(0, topic.keys, n)
        keys = pa.array([f"{topic.name}-{k:04d}".encode() for k in ids], pa.binary())
        partitions = pa.nulls(n, pa.int32())  # the append job partitions by murmur2, as Kafka's producer
        eligible = np.arange(n)
    else:
        keys = pa.nulls(n, pa.binary())
        round_robin = np.arange(n) % topic.partitions
        partitions = pa.array(round_robin, pa.int32())
        second_day = (arrival >= START_MS + DAY_MS) & (arrival < START_MS + 2 * DAY_MS)
        eligible = np.flatnonzero((round_robin == topic.partitions - 1) & (second_day | (plan.days < 2)))
    future = rng.choice(eligible, min(topic.far_future, eligible.size), replace=False)
    timestamps[future] = arrival[future] + FAR_FUTURE_MS
    tombstone = rng.random(n) < topic.tombstone_rate
    values = [None if tombstone[i] else f'{{"{topic.name}":{i},"amount":{i * 7919 % 100_000 / 100:.2f}}}'.encode()
              for i in range(n)]
    header = [{"key": "producer", "value": f"demo-{topic.name}".encode()}]
    return pa.table({
        "topic": pa.array([topic.name] * n, pa.string()), "partition": partitions, "key": keys,
        "value": pa.array(values, pa.binary()), "headers": pa.array([header] * n, HEADERS_TYPE),
        "timestamp": pa.array(timestamps, pa.timestamp("ms", tz="UTC")), "arrival": pa.array(arrival, pa.int64())})


@dataclass(frozen=True)
class BatchFile:
    index: int
    path: Path
    now_ms: int
    job_id: str
    records: int


def write_batches(table: pa.Table, plan: DemoPlan, folder: Path) -> list[BatchFile]:
    """One Parquet file per append window, rewritten only when its bytes change (so its hash, the
    append's job id, and its modification time stay put on a re-run)."""
    folder.mkdir(parents=True, exist_ok=True)
    window = pc.divide(pc.subtract(table["arrival"], START_MS), plan.batch_ms)
    batches = []
    for i in range(plan.batches):
        part = table.filter(pc.equal(window, i)).drop_columns(["arrival"])
        buffer = io.BytesIO()
        pq.write_table(part, buffer)
        data = buffer.getvalue()
        path = folder / f"batch-{i:02d}.parquet"
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()[:20]
        batches.append(BatchFile(i, path, int(plan.batch_now(i)), f"demo-append-{digest}", part.num_rows))
    for stale in set(folder.glob("batch-*.parquet")) - {b.path for b in batches}:
        stale.unlink()
    return batches
