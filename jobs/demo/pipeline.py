"""What the demo does: its storage (an embedded S3 or a local directory), the jobs' configuration, one
Spark session, and the production jobs run in-process in order on the simulated clock, with a report
and a log per step and the catalog's live segments between the steps that change them."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from engine.catalog.schema import SegmentRow, table_to_rows
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
from jobs.demo.generator import TOPIC_DEFAULTS, TOPICS, BatchFile, DemoPlan
from jobs.runtime import job_runner
from jobs.runtime.config import KlakeConfig
from jobs.runtime.embedded_s3 import create_bucket, embedded_s3_environment
from jobs.runtime.job_runner import JobSpec
from layouts.store import join
from layouts.store.bound import Store

BUCKET = "klake-demo"


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


@contextmanager
def demo_config(storage: Storage, out: Path, master: str) -> Iterator[Path]:
    """The jobs' configuration file: OUT/demo.yaml for a local store, kept so that the README's tour
    runs on it afterwards; for the embedded S3, a temporary file removed at exit with the bucket (an
    endpoint stopped at exit makes no usable config, and a local run's OUT/demo.yaml stays as it was)."""
    if storage.endpoint_url is None:
        yield write_config(out / "demo.yaml", storage, master)
        return
    with tempfile.TemporaryDirectory(prefix="klake-demo-") as folder:
        yield write_config(Path(folder) / "demo.yaml", storage, master)


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
              f"# Run a job on it, e.g.: klake retention --conf {path} --dry-run --now <epoch ms or ISO-8601>\n"
              "# (the README's \"A five-minute tour\" runs more)\n")
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
    return table_to_rows(Catalog.open(Store(config.catalog_uri, config.storage)).segments())


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
