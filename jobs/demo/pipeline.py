"""`klake demo`: the main job end to end, through the Spark jobs, on embedded storage.

It generates several days of a three-topic, six-partition stream (keyed updates and tombstones, late
and far-future timestamps, one LogAppendTime topic) as Parquet files with Spark's Kafka sink columns,
and runs the production jobs on it in one local Spark session: `append` batch by batch (each at its
window's end on a simulated clock), a retried append, then at noon after the last day `roll`,
`retention`, `compact`, `offsets-for-times`, a time-range `read`, `scrub` and `catalog-maintenance`.
Storage is an embedded S3 (a `moto_server` started and stopped by the command, a fresh bucket each
run), or a directory OUT/store with `--local`. Every figure is checked against a recomputation from
the generated input. Output: OUT/reports/*.json (one per job, with its stdout in *.log),
OUT/demo-report.json, and OUT/timeline.png (each partition's segments along time, by fate).

Idempotent: the data is a function of the seed and the clock is simulated, so a re-run writes the same
input files; each append's job id is its file's hash, so a re-run (or retry) appends nothing, and roll,
retention and compaction find nothing left to do at the same clock.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager, redirect_stdout
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from engine.catalog.schema import SegmentRow, first_dirty_offset, table_to_rows
from engine.errors import KlakeError
from engine.format.partitioner import partition_for_keys
from engine.format.records import HEADERS_TYPE
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from jobs import (
    append,
    catalog_maintenance,
    compact,
    offsets_for_times,
    read,
    retention,
    roll,
    scrub,
)
from jobs.demo.timeline import COMPACTED, KEPT, OUTPUT, RETENTION, SegmentBar, draw_timeline
from jobs.runtime import job_runner
from jobs.runtime.config import KlakeConfig, load_config
from jobs.runtime.embedded_s3 import create_bucket, embedded_s3_environment
from jobs.runtime.job_runner import JobSpec, at_least
from layouts.store import StorageOptions, filesystem, join, list_objects, write_bytes

MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
START_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z: a fixed clock, so re-runs make the same data
JOB_DELAY_MS = 5 * MINUTE_MS  # an append runs five minutes after its window closes
MAINTENANCE_AFTER_MS = 12 * HOUR_MS  # roll, retention and compaction run at noon the day after
FAR_FUTURE_MS = 30 * DAY_MS
BUCKET = "klake-demo"


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


# --- generation ----------------------------------------------------------------------------------


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


# --- the brute-force model -----------------------------------------------------------------------


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


# --- storage, configuration, Spark -----------------------------------------------------------------


@dataclass(frozen=True)
class Storage:
    base: str
    label: str
    endpoint_url: str | None = None

    @property
    def root(self) -> str:
        return join(self.base, "klake")

    @property
    def state_uri(self) -> str:
        """The demo's own record of the run (its plan and the segments' fates), beside the data it describes."""
        return join(self.base, "demo-state.json")


@contextmanager
def demo_storage(local: bool, out: Path) -> Iterator[Storage]:
    """A directory under OUT, or a moto_server with a fresh bucket (stopped on exit)."""
    if local:
        base = out / "store"
        base.mkdir(parents=True, exist_ok=True)
        yield Storage(str(base), f"local directory {base}")
        return
    with embedded_s3_environment() as endpoint:
        yield Storage(create_bucket(BUCKET), f"embedded S3 (moto_server at {endpoint}, a fresh bucket "
                                             "each run, stopped at exit)", endpoint)


LOG4J2 = """# klake demo: Spark starts at WARN (the shell's level, so it does not announce a change) and the
# jobs lower it to ERROR (KLAKE_SPARK_LOG_LEVEL); the one startup warning about native Hadoop is muted
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def write_config(path: Path, storage: Storage, master: str) -> Path:
    """The jobs' YAML configuration: storage root, local Spark (quiet), and the demo topics' settings."""
    log4j = path.with_name("log4j2.properties")
    log4j.write_text(LOG4J2)
    document = {
        "storage": {"root": storage.root, **({"endpoint_url": storage.endpoint_url} if storage.endpoint_url else {})},
        "spark": {"master": master, "app_name": "klake-demo",
                  "conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": 6,
                           "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"}},
        "topic_defaults": TOPIC_DEFAULTS,
        "topics": {t.name: {"partitions": t.partitions, **t.settings} for t in TOPICS},
    }
    header = (f"# Written by `klake demo` for {storage.label}.\n"
              f"# Run a job on it, e.g.: klake retention --conf {path} --dry-run --now <epoch ms>\n")
    path.write_text(header + yaml.safe_dump(document, sort_keys=False))
    return path


@contextmanager
def spark_for(config: KlakeConfig) -> Iterator[None]:
    """One Spark session for every job (their getOrCreate reuses it); stopped only if made here."""
    from pyspark import SparkContext

    from jobs.runtime.spark_session import spark_session

    os.environ.setdefault("KLAKE_SPARK_LOG_LEVEL", "ERROR")
    ours = SparkContext._active_spark_context is None
    session = spark_session(config)
    try:
        yield
    finally:
        if ours:
            session.stop()


# --- running the jobs ----------------------------------------------------------------------------


@dataclass
class Step:
    name: str
    code: int
    seconds: float
    report: dict[str, Any]


@dataclass
class Pipeline:
    """Runs jobs in-process with the demo config, a report and a log per step."""

    config_path: Path
    reports: Path
    progress: Callable[[str], None]
    steps: list[Step] = field(default_factory=list)

    def run(self, name: str, spec: JobSpec, args: Sequence[str], now_ms: int | None = None) -> Step:
        self.reports.mkdir(parents=True, exist_ok=True)
        report_path = self.reports / f"{name}.json"
        argv = ["--conf", str(self.config_path), "--report", str(report_path), "--no-progress", *args]
        if now_ms is not None:
            argv += ["--now", str(now_ms)]
        started = time.monotonic()
        with open(self.reports / f"{name}.log", "w") as log, redirect_stdout(log):
            code = job_runner.main(spec, argv)
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        step = Step(name, code, round(time.monotonic() - started, 1), report)
        self.steps.append(step)
        self.progress(f"  {name:<22} exit {code}  {step.seconds:5.1f} s  {headline(report)}")
        return step

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def results(self, name: str) -> dict[str, Any]:
        return self.step(name).report.get("results", {})


def headline(report: Mapping[str, Any]) -> str:
    """The job's own one-line result (`append: ...`), else its closing status line."""
    job, lines = report.get("job", ""), str(report.get("summary", "")).splitlines()
    chosen = [x for x in lines if x.startswith(f"{job}:")] or [x for x in lines if x.startswith(f"{job} ")]
    return chosen[-1] if chosen else "(no report)"


@dataclass
class Snapshots:
    """The catalog's live segments between the steps that change them."""

    before_retention: list[SegmentRow] = field(default_factory=list)
    after_retention: list[SegmentRow] = field(default_factory=list)
    after_compaction: list[SegmentRow] = field(default_factory=list)


def live_rows(config: KlakeConfig) -> list[SegmentRow]:
    return table_to_rows(Catalog.open(config.catalog_uri, config.storage).segments())


def run_pipeline(pipeline: Pipeline, batches: Sequence[BatchFile], plan: DemoPlan, config: KlakeConfig,
                 out: Path) -> Snapshots:
    """The production jobs in order, on the simulated clock."""
    for batch in batches:
        pipeline.run(f"append-{batch.index:02d}", append.SPEC,
                     ["--input", str(batch.path), "--job-id", batch.job_id], batch.now_ms)
    first = batches[0]
    pipeline.run("append-00-retry", append.SPEC, ["--input", str(first.path), "--job-id", first.job_id],
                 first.now_ms)
    now = plan.maintenance_now
    pipeline.run("roll", roll.SPEC, [], now)
    snaps = Snapshots(before_retention=live_rows(config))
    pipeline.run("retention", retention.SPEC, [], now)
    snaps.after_retention = live_rows(config)
    pipeline.run("compact", compact.SPEC, [], now)
    snaps.after_compaction = live_rows(config)
    targets = [a for t in plan.lookup_targets() for a in ("--timestamp", {-1: "latest", -2: "earliest",
                                                                          -3: "max"}.get(t, str(t)))]
    pipeline.run("offsets-for-times", offsets_for_times.SPEC, targets, now)
    topic, start, end = plan.read_range()
    pipeline.run("read", read.SPEC, ["--topic", topic, "--from", str(start), "--to", str(end),
                                     "--output", str(out / "read" / topic), "--output-format", "parquet"], now)
    pipeline.run("scrub", scrub.SPEC, [])  # the wall clock: scrub ages real objects by their real mtimes
    pipeline.run("catalog-maintenance", catalog_maintenance.SPEC, [], now)
    return snaps


# --- checking against the model ------------------------------------------------------------------


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


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


def check_appends(model: Model, pipeline: Pipeline, final: list[SegmentRow]) -> Check:
    """Each committed batch appended (and rejected) exactly what the model says; no log is doubled."""
    wrong = []
    for i, (appended, rejected) in enumerate(zip(model.appended, model.rejected, strict=True)):
        report = pipeline.step(f"append-{i:02d}").report
        if report.get("results", {}).get("already_committed"):
            continue
        if report.get("results", {}).get("records_appended") != sum(appended.values()):
            wrong.append(f"batch {i}: {report.get('results')} appended, model {dict(appended)}")
        if report.get("rejected", {}).get("by_reason") != {k: v for k, v in rejected.items() if v}:
            wrong.append(f"batch {i}: rejected {report.get('rejected')}, model {dict(rejected)}")
    ends = {name: rows[-1].next_offset for name, rows in by_partition(final).items()}
    wrong += [f"{name}: log end offset {ends.get(name)}, model {len(log.timestamps)}"
              for name, log in model.logs.items() if ends.get(name) != len(log.timestamps)]
    return Check("appends", not wrong, "; ".join(wrong) or "every log end offset equals the model's")


def reported_holds(pipeline: Pipeline) -> set[str]:
    return {h["segment_id"] for p in pipeline.step("retention").report.get("partitions", [])
            for h in (p.get("outcome") or {}).get("plan", {}).get("held_back_by_future_timestamp", [])}


def check_retention(snaps: Snapshots, now: int, holds: set[str]) -> tuple[Check, list[SegmentRow]]:
    """The segments that left, and those held back, equal the time pass over the rows before; returns the holds."""
    expected, held = [], []
    for rows in by_partition(snaps.before_retention).values():
        gone, hold = expected_retention(rows, CONFIGS[rows[0].topic], now)
        expected += gone
        held += hold
    actual = {r.segment_id for r in snaps.before_retention} - {r.segment_id for r in snaps.after_retention}
    ok = actual == {r.segment_id for r in expected} and holds == {r.segment_id for r in held}
    return Check("retention", ok, f"{len(actual)} segments deleted and {len(holds)} held back; brute force "
                                  f"{len(expected)} and {len(held)}"), held


def check_compaction(model: Model, snaps: Snapshots, pipeline: Pipeline) -> Check:
    """Records removed = live records of compacted topics before - the model's survivors after."""
    before = sum(r.record_count for r in snaps.after_retention if compacted(f"{r.topic}-{r.partition}"))
    after = sum(s.offsets.size for name, s in final_survivors(model, snaps.after_compaction).items()
                if compacted(name))
    reported = pipeline.results("compact").get("records_removed")
    return Check("compaction", reported == before - after, f"{reported} records removed, brute force {before - after}")


def check_segments(model: Model, final: list[SegmentRow]) -> Check:
    """Every live segment holds exactly the model's surviving records of its offset range."""
    kept = final_survivors(model, final)
    wrong = []
    for name, rows in by_partition(final).items():
        offsets = kept[name].offsets
        for row in rows:
            inside = offsets[(offsets >= row.base_offset) & (offsets < row.next_offset)]
            largest = int(model.logs[name].timestamps[inside].max()) if inside.size else row.largest_timestamp
            if row.record_count != inside.size or row.largest_timestamp != largest:
                wrong.append(f"{name}@{row.base_offset}: {row.record_count} records, largest {row.largest_timestamp}; "
                             f"model {inside.size}, {largest}")
    return Check("segments", not wrong, "; ".join(wrong[:3]) or f"{len(final)} live segments equal the model")


def check_lookups(model: Model, final: list[SegmentRow], answers: Sequence[Mapping[str, Any]]) -> Check:
    kept = final_survivors(model, final)

    def expected(a: Mapping[str, Any]) -> tuple[int, int]:
        name = f"{a['topic']}-{a['partition']}"
        return brute_force_lookup(model.logs[name], kept[name].offsets, kept[name].start, a["target"])

    right = sum((a["offset"], a["timestamp"]) == expected(a) for a in answers)
    return Check("lookups", bool(answers) and right == len(answers),
                 f"{right} of {len(answers)} answers equal a brute-force scan")


def check_read(model: Model, final: list[SegmentRow], plan: DemoPlan, output: Path) -> Check:
    topic, start, end = plan.read_range()
    expected = set()
    for name, kept in final_survivors(model, final).items():
        ts = model.logs[name].timestamps[kept.offsets]
        if name.rsplit("-", 1)[0] == topic:
            expected |= {(int(name.rsplit("-", 1)[1]), int(o)) for o in kept.offsets[(ts >= start) & (ts < end)]}
    table = pq.read_table(output) if output.exists() else pa.table({"partition": [], "offset": []})
    actual = set(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))
    return Check("read", actual == expected and len(actual) == table.num_rows,
                 f"{table.num_rows:,} records read, brute force {len(expected):,}")


def check_scrub(pipeline: Pipeline) -> Check:
    found = pipeline.results("scrub").get("scrub", {})
    clean = bool(found) and not (found.get("missing") or found.get("size_mismatches") or found.get("orphans"))
    return Check("scrub", clean, "no orphans, missing objects or size mismatches")


def run_checks(model: Model, pipeline: Pipeline, plan: DemoPlan, snaps: Snapshots, out: Path
               ) -> tuple[list[Check], list[SegmentRow]]:
    """Every figure against the model; returns the checks and the brute force's held-back segments."""
    final = snaps.after_compaction
    retention_check, held = check_retention(snaps, plan.maintenance_now, reported_holds(pipeline))
    failed = [s.name for s in pipeline.steps if s.code != 0]
    checks = [
        Check("jobs", not failed, f"failed: {', '.join(failed)}" if failed else f"{len(pipeline.steps)} jobs exited 0"),
        check_appends(model, pipeline, final),
        Check("retry", bool(pipeline.results("append-00-retry").get("already_committed")),
              "the retried append found its commit and appended nothing"),
        retention_check,
        check_compaction(model, snaps, pipeline),
        check_segments(model, final),
        check_lookups(model, final, pipeline.results("offsets-for-times").get("answers", [])),
        check_read(model, final, plan, out / "read" / plan.read_range()[0]),
        check_scrub(pipeline),
    ]
    return checks, held


# --- the timeline --------------------------------------------------------------------------------


def segment_bars(snaps: Snapshots, held: Sequence[SegmentRow]) -> list[SegmentBar]:
    """Each segment of the log before retention by fate, plus what compaction wrote (by object key)."""
    after_retention = {r.log_key for r in snaps.after_retention}
    after_compaction = {r.log_key for r in snaps.after_compaction}
    held_keys = {r.log_key for r in held}

    def bar(row: SegmentRow, fate: str) -> SegmentBar:
        return SegmentBar(f"{row.topic}-{row.partition}", row.log_key, row.base_offset, row.next_offset,
                          row.base_timestamp, row.largest_timestamp, fate, row.log_key in held_keys)

    def fate(row: SegmentRow) -> str:
        if row.log_key not in after_retention:
            return RETENTION
        return KEPT if row.log_key in after_compaction else COMPACTED

    bars = [bar(row, fate(row)) for row in snaps.before_retention]
    known = {r.log_key for r in snaps.before_retention}
    bars += [bar(row, OUTPUT) for row in snaps.after_compaction if row.log_key not in known]
    return [b for b in bars if b.first_ms >= 0]


def merge_bars(previous: Sequence[SegmentBar], current: Sequence[SegmentBar]) -> list[SegmentBar]:
    """An earlier run's fates stay (a re-run sees only the survivors) unless this run changed them."""
    merged = {b.log_key: b for b in previous}
    for bar in current:
        if bar.log_key not in merged or bar.fate != KEPT:
            merged[bar.log_key] = bar
    return sorted(merged.values(), key=lambda b: (b.partition, b.base_offset, b.fate == OUTPUT))


def claim_store(storage: Storage, options: StorageOptions, plan: DemoPlan) -> list[SegmentBar] | None:
    """The segments an earlier run of this demo recorded (None on a fresh store), after recording this
    run's plan first, so that a run that dies half-way is re-run rather than refused; a store holding
    anything else is refused (the demo would mix its data in)."""
    fs, path = filesystem(storage.state_uri, options)
    if fs.exists(path):
        state = json.loads(fs.cat_file(path))
        if state.get("plan") != asdict(plan):
            raise KlakeError(f"{storage.base} holds a demo run with other settings {state.get('plan')}; "
                             "remove it or choose another --out")
        previous = [SegmentBar(**b) for b in state.get("bars", [])]
    elif list_objects(storage.base, options):
        raise KlakeError(f"{storage.base} holds data this demo did not write; remove it or choose another --out")
    else:
        previous = None
    save_state(storage, options, plan, previous or [])
    return previous


def save_state(storage: Storage, options: StorageOptions, plan: DemoPlan, bars: Sequence[SegmentBar]) -> None:
    write_bytes(storage.state_uri, json.dumps({"plan": asdict(plan), "bars": [asdict(b) for b in bars]},
                                              indent=1).encode(), options)


def draw(bars: Sequence[SegmentBar], plan: DemoPlan, path: Path) -> Path:
    cutoffs = {t.name: plan.maintenance_now - CONFIGS[t.name].retention_ms for t in TOPICS
               if CONFIGS[t.name].retention_ms >= 0}
    names = [f"{t.name}-{p}" for t in TOPICS for p in range(t.partitions)]
    labels = {t.name: f"{t.name}: {_duration(CONFIGS[t.name].retention_ms)} retention" for t in TOPICS}
    return draw_timeline(bars, names, cutoffs, plan.maintenance_now, path, labels)


# --- summary -------------------------------------------------------------------------------------


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def _duration(ms: int) -> str:
    return "unlimited" if ms < 0 else f"{ms // DAY_MS}d" if ms % DAY_MS == 0 else f"{ms / HOUR_MS:g}h"


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _segments(rows: Sequence[SegmentRow]) -> str:
    data = [r for r in rows if r.size_bytes]
    return (f"{len(data)} segments, {_size(sum(r.size_bytes for r in data))}, "
            f"{sum(r.record_count for r in data):,} records")


def append_lines(plan: DemoPlan, batches: Sequence[BatchFile], pipeline: Pipeline) -> list[str]:
    reports = [pipeline.step(f"append-{b.index:02d}").report for b in batches]
    committed = [r for r in reports if not r.get("results", {}).get("already_committed")]
    rejected: Counter[str] = Counter()
    for report in committed:
        rejected.update(report.get("rejected", {}).get("by_reason", {}))
    retried = pipeline.results("append-00-retry").get("already_committed")
    return [
        f"generated  {plan.days} days from {_iso(START_MS)} UTC: {len(TOPICS)} topics, "
        f"{sum(t.partitions for t in TOPICS)} partitions, {sum(b.records for b in batches):,} records in "
        f"{len(batches)} Parquet batches (keys, tombstones, late and far-future timestamps)",
        f"append     {len(committed)} of {len(batches)} batches committed, "
        f"{sum(r.get('results', {}).get('records_appended', 0) for r in committed):,} records appended, "
        f"{sum(rejected.values())} rejected ({', '.join(f'{k} {v}' for k, v in rejected.items()) or 'none'})"
        + ("" if committed else ": a re-run, every batch was already committed, nothing doubled"),
        "retry      batch 0 again with its job id: " + ("already committed, nothing appended" if retried else "FAILED"),
    ]


def retention_lines(plan: DemoPlan, pipeline: Pipeline, snaps: Snapshots, held: Sequence[SegmentRow]) -> list[str]:
    now = plan.maintenance_now
    gone = {r.segment_id for r in snaps.before_retention} - {r.segment_id for r in snaps.after_retention}
    deleted = [r for r in snaps.before_retention if r.segment_id in gone]
    by_topic = Counter(r.topic for r in deleted)
    return [
        f"roll       {pipeline.results('roll').get('segments_rolled', 0)} idle active segments rolled at {_iso(now)} "
        "(the simulated clock of every maintenance job)",
        f"log        {_segments(snaps.before_retention)} before retention",
        f"retention  deleted {len(deleted)} segments, {_size(sum(r.size_bytes for r in deleted))}, "
        f"{sum(r.record_count for r in deleted):,} records ("
        + ", ".join(f"{t.name} {by_topic[t.name]} past {_duration(CONFIGS[t.name].retention_ms)}" for t in TOPICS) + ")",
        *(held_line(row, now) for row in held),
    ]


def held_line(row: SegmentRow, now: int) -> str:
    until = row.largest_timestamp + CONFIGS[row.topic].retention_ms + 1
    return (f"held back  {row.topic}-{row.partition} @{row.base_offset}: {row.record_count:,} records since "
            f"{_iso(row.base_timestamp)} share a segment with one stamped {_iso(row.largest_timestamp)} "
            f"({(row.largest_timestamp - now) // DAY_MS} days ahead): kept until {_iso(until)} (KAFKA-4340)")


def result_lines(plan: DemoPlan, pipeline: Pipeline, snaps: Snapshots, checks: Sequence[Check]) -> list[str]:
    cleaned = pipeline.results("compact")
    read_results = pipeline.results("read").get("read", {})
    topic, start, end = plan.read_range()
    scrubbed = pipeline.results("scrub").get("scrub", {})
    by_name = {c.name: c for c in checks}
    failed = [c for c in checks if not c.ok]
    return [
        f"compact    {cleaned.get('partitions_cleaned', 0)} of {cleaned.get('compacted_topics_partitions', 0)} "
        f"compacted partitions cleaned: {cleaned.get('records_read', 0):,} records read, "
        f"{cleaned.get('records_kept', 0):,} kept (the latest per key), {cleaned.get('records_removed', 0):,} removed",
        f"log        {_segments(snaps.after_compaction)} live now",
        f"lookups    offsets-for-times: {by_name['lookups'].detail}",
        f"read       {topic} [{_iso(start)}, {_iso(end)}): {read_results.get('segments', {}).get('read', 0)} of "
        f"{read_results.get('segments', {}).get('live', 0)} segments read, {by_name['read'].detail}",
        f"scrub      {scrubbed.get('objects_listed', 0)} objects: {len(scrubbed.get('orphans', []))} orphans, "
        f"{len(scrubbed.get('missing', []))} missing, {len(scrubbed.get('size_mismatches', []))} size mismatches",
        "checks     " + ("every figure equals a recomputation from the generated input" if not failed
                         else "FAILED: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)),
    ]


# --- the command ---------------------------------------------------------------------------------


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    plan = DemoPlan(args.days, args.records_per_day, args.batches_per_day, args.seed)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with ExitStack() as stack:
        storage = stack.enter_context(demo_storage(args.local, out))
        config = load_config(write_config(out / "demo.yaml", storage, args.master))
        previous = claim_store(storage, config.storage, plan)
        progress(f"klake demo: storage {storage.label}" + ("; it holds this demo already: a re-run" if previous
                                                            is not None else ""))
        table = generate(plan)
        batches = write_batches(table, plan, out / "input")
        model = build_model(table, plan)
        stack.enter_context(spark_for(config))
        pipeline = Pipeline(out / "demo.yaml", out / "reports", progress)
        snaps = run_pipeline(pipeline, batches, plan, config, out)
        checks, held = run_checks(model, pipeline, plan, snaps, out)
        bars = merge_bars(previous or [], segment_bars(snaps, held))
        save_state(storage, config.storage, plan, bars)
    picture = draw(bars, plan, out / "timeline.png")
    lines = [*append_lines(plan, batches, pipeline), *retention_lines(plan, pipeline, snaps, held),
             *result_lines(plan, pipeline, snaps, checks)]
    elapsed = round(time.monotonic() - started, 1)
    lines += [f"output     {out / 'reports'}/*.json, {out / 'demo-report.json'}, timeline {picture}",
              f"done in {elapsed} s; storage: {storage.label}"]
    write_report(out / "demo-report.json", plan, storage, pipeline, checks, lines, elapsed)
    print("\n".join(["", "klake demo summary", *lines]))
    return 0 if all(c.ok for c in checks) else 1


def write_report(path: Path, plan: DemoPlan, storage: Storage, pipeline: Pipeline, checks: Sequence[Check],
                 lines: Sequence[str], elapsed: float) -> None:
    report = {"plan": asdict(plan), "storage": storage.label, "now_ms": plan.maintenance_now,
              "steps": [{"name": s.name, "exit_code": s.code, "seconds": s.seconds,
                         "report": str(pipeline.reports / f"{s.name}.json")} for s in pipeline.steps],
              "checks": [asdict(c) for c in checks], "summary": list(lines), "duration_s": elapsed}
    path.write_text(json.dumps(report, indent=2))


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser("demo", help="run the main job end to end on embedded storage (no external services)",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--local", action="store_true",
                      help="keep the data in OUT/store (kept between runs) instead of an embedded S3 (moto_server)")
    demo.add_argument("--out", default="demo-output", metavar="DIR",
                      help="input files, config, reports, timeline.png (default demo-output/)")
    demo.add_argument("--days", type=at_least(2), default=4, help="days of data to generate (default 4)")
    demo.add_argument("--records-per-day", type=at_least(10), default=3000,
                      help="records per topic per day (default 3000)")
    demo.add_argument("--batches-per-day", type=int, default=2, choices=(1, 2, 3, 4, 6, 8, 12, 24),
                      help="append jobs per day of data (default 2)")
    demo.add_argument("--seed", type=int, default=7, help="random seed of the generated data (default 7)")
    demo.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    demo.set_defaults(handler=run_demo)

