"""Crash injection: a real `klake` job is SIGKILLed (its whole process group: driver, JVM, Python workers)
at a storage mutation, re-run at once with the same command in a fresh process (as a user re-runs after a
crash), then scrubbed; the store must then equal
a clean run's: every record exactly once, the same catalog, the same ListOffsets answers, the same
rejects, and no debris (no lease, lease temporary, orphan or superseded rejects file); an export's
output must be a clean export's, file for file and byte for byte (no temporary left, issue 26); a re-run
killed while taking over its dead attempt's lease is followed by a third attempt that takes it over at
once (issue 26's double crash).

The mutation points come from `tests/crash/hook/sitecustomize.py`, loaded by every Python process of
the run. A clean run counts them; then each chosen point is a run of its own. CI runs a sample (named
points per scenario); `make crash-sweep` (KLAKE_CRASH_SWEEP=full) kills at every point, local and S3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from engine.catalog.schema import table_to_rows
from engine.log.lookup import list_offsets
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.stored_segment import StoredSegment
from jobs.cli.main import main as klake_in_process
from kernel.names import TopicPartition
from layouts.object_layout import batch_index_key
from layouts.store import StorageOptions, filesystem, list_objects, read_bytes
from layouts.store.bound import Store as BoundStore
from tests.conftest import PROJECT_ROOT, Backend
from tests.oracles.kafka_python import read_with_kafka_python
from tests.scrub_findings import scrub_findings

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KLAKE = [sys.executable, "-m", "jobs.cli.main"]  # the `klake` console script's entry, of this checkout
HOOK = PROJECT_ROOT / "tests" / "crash" / "hook"
FULL_SWEEP = os.environ.get("KLAKE_CRASH_SWEEP") == "full"
NOW = 1_790_000_000_000
HOUR = 3_600_000
BROKER_DIRS = ("_confluent-command-0", "docker-connect-status-0", "timeindex_test-0")
SPARK = ["--master", "local[2]", "--set", "spark.conf.spark.ui.enabled=false",
         "--set", "spark.conf.spark.sql.shuffle.partitions=4"]


# --- the store and the runs ----------------------------------------------------------------------------


@dataclass
class Store:
    """One scenario's storage (local directory or moto bucket) with its config, saved once set up and
    restored before every run, so that each crash point starts from the very same state."""

    backend: Backend
    tmp: Path
    topics: dict
    saved: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.conf = self.tmp / "klake.yaml"
        self.conf.write_text(yaml.safe_dump({"storage": {"root": self.root}, "topics": self.topics}))

    @property
    def root(self) -> str:
        return self.backend.uri("root")

    def _files(self) -> dict[str, bytes]:
        fs, path = filesystem(self.root, self.backend.options)
        fs.invalidate_cache()
        return {p[len(path):]: fs.cat_file(p) for p in fs.find(path)} if fs.exists(path) else {}

    def save(self) -> None:
        self.saved = self._files()

    def restore(self) -> None:
        fs, path = filesystem(self.root, self.backend.options)
        fs.invalidate_cache()
        if self.backend.name == "local":
            shutil.rmtree(path, ignore_errors=True)
        elif fs.exists(path):
            fs.rm(path, recursive=True)
        for name, data in self.saved.items():
            self.backend.put(self.root + name, data)

    def klake_here(self, args: list[str]) -> int:
        """Run `klake` in this process, on the test session's Spark: the setup and the phases before the killed one
        are not what is under test, so they need no process (and JVM) of their own."""
        return klake_in_process([*args, "--conf", str(self.conf), "--no-progress"])

    def klake(self, args: list[str], crash_at: int | None = None, count_in: Path | None = None
              ) -> subprocess.CompletedProcess:
        """Run `klake` (a new process group, from this checkout), with the crash hook if asked: the run whose
        mutation points are counted or killed at one, and the re-run after a kill (a user's re-run is a fresh
        process)."""
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HOOK), str(PROJECT_ROOT)]))
        if count_in is not None:
            shutil.rmtree(count_in, ignore_errors=True)
            count_in.mkdir(parents=True)
            env |= {"KLAKE_CRASH_DIR": str(count_in), "KLAKE_CRASH_AT": str(crash_at or 0),
                    "KLAKE_CRASH_ROOT": self.backend.base if self.backend.name == "local" else "/nonexistent"}
        return subprocess.run([*KLAKE, *args, "--conf", str(self.conf), "--no-progress"], env=env,
                              capture_output=True, text=True, timeout=600, start_new_session=True)


@dataclass(frozen=True)
class Phase:
    """One run of the scenario's command: what happens before it, and the exit code a clean run gives."""

    args: list[str]
    code: int = 0
    before: Callable[[Store], None] | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    topics: dict
    setup: Callable[[Store], list[list[str]]]  # writes inputs; the commands that make the starting state
    phases: Callable[[Store], list[Phase]]     # the last phase is the one killed
    sample: tuple[str, ...]                     # the points CI kills at (see `sampled_points`)
    output: str | None = None                   # where the job writes outside the root (compared byte for byte)


def _input(path: Path, n: int, seed: int, topic: str | None = None, keys: int = 30, start: int = NOW - 3 * HOUR,
           step: int = 30_000, big: tuple[int, ...] = ()) -> Path:
    values = [f"r{seed}-{i:05d}|".encode() + b"x" * (20 + (i * 7 + seed) % 40) for i in range(n)]
    for i in big:
        values[i] += b"y" * 600  # larger than max.message.bytes: rejected
    columns = {"key": pa.array([b"key-%03d" % ((i * 31 + seed) % keys) for i in range(n)], pa.binary()),
               "value": pa.array(values, pa.binary()),
               "timestamp": pa.array([start + i * step for i in range(n)], pa.int64())}
    if topic:
        columns = {"topic": pa.array([topic] * n), **columns}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _append_setup(store: Store) -> list[list[str]]:
    first = _input(store.tmp / "in-0.parquet", 120, seed=0)
    _input(store.tmp / "in-1.parquet", 160, seed=1, start=NOW - HOUR, big=(17, 90))
    return [["append", "--input", str(first), "--topic", "orders", "--now", str(NOW), *SPARK]]


def _append_phases(store: Store) -> list[Phase]:
    return [Phase(["append", "--input", str(store.tmp / "in-1.parquet"), "--topic", "orders", "--now", str(NOW),
                   *SPARK])]


def _foreign_lease(store: Store) -> None:
    """Another job holds orders-2 for an hour: this attempt commits the other partitions only."""
    from engine.ops.lease import acquire_lease

    acquire_lease(BoundStore(store.root, store.backend.options), TopicPartition("orders", 2), "elsewhere:1", "another-job", HOUR)


def _lease_freed(store: Store) -> None:
    from engine.ops.lease import lease_uri

    fs, path = filesystem(lease_uri(BoundStore(store.root), TopicPartition("orders", 2)), store.backend.options)
    if json.loads(fs.cat_file(path))["job_id"] == "another-job":
        fs.rm_file(path)


def _partial_phases(store: Store) -> list[Phase]:
    append = _append_phases(store)[0].args
    return [Phase(append, code=1, before=_foreign_lease), Phase(append, before=_lease_freed)]


def _import_setup(store: Store) -> list[list[str]]:
    from tests.conftest import KAFKA_FIXTURES

    for name in BROKER_DIRS:
        store.backend.upload_tree(KAFKA_FIXTURES / "broker" / name, store.backend.uri("src", name))
    return []


def _import_phases(store: Store) -> list[Phase]:
    return [Phase(["import", store.backend.uri("src"), "--copy"])]


def _keyed_setup(topic: str) -> Callable[[Store], list[list[str]]]:
    def setup(store: Store) -> list[list[str]]:
        first = _input(store.tmp / "in-0.parquet", 300, seed=3, keys=25)
        return [["append", "--input", str(first), "--topic", topic, "--now", str(NOW), *SPARK]]

    return setup


def _dead_attempt(store: Store) -> None:
    """A first attempt of `retention-1` died holding its leases: the run killed is the re-run taking them over."""
    from engine.ops.lease import acquire_lease

    for partition in range(2):
        acquire_lease(BoundStore(store.root, store.backend.options), TopicPartition("logs", partition), "dead:1", "retention-1", HOUR)


def _clear_output(store: Store) -> None:
    """The export's output starts empty: a killed run leaves what it wrote for the re-run to finish."""
    fs, path = filesystem(store.backend.uri("out"), store.backend.options)
    fs.invalidate_cache()
    if fs.exists(path):
        fs.rm(path, recursive=True)


def _export_phases(store: Store) -> list[Phase]:
    """One task at a time (`local[1]`): the partitions' writes come in the same order in every run, so a
    point of the clean run is the same write in the killed one."""
    return [Phase(["export", "--output", store.backend.uri("out"), "--now", str(NOW), *SPARK, "--master", "local[1]"],
                  before=_clear_output)]


SCENARIOS = {
    "append": Scenario("append", {"orders": {"partitions": 4, "segment.bytes": 2000, "max.message.bytes": 400}},
                       _append_setup, _append_phases,
                       ("staging-write", "segment-write", "batchindex-write", "commit-after")),
    "append-partial-lease": Scenario(
        "append-partial-lease", {"orders": {"partitions": 4, "segment.bytes": 2000, "max.message.bytes": 400}},
        _append_setup, _partial_phases, ("commit-after",)),
    "import": Scenario("import", {}, _import_setup, _import_phases, ("segment-write", "commit-after")),
    "retention": Scenario("retention", {"logs": {"partitions": 2, "segment.bytes": 1500, "retention.ms": HOUR}},
                          _keyed_setup("logs"),
                          lambda store: [Phase(["retention", "--now", str(NOW), "--job-id", "retention-1", *SPARK])],
                          ("commit-after",)),
    # batches (max.message.bytes) small against index.interval.bytes: the cleaned segments get a .batchindex;
    # one clean run counts the points of both kills (before the commit, and at a .batchindex write)
    "compact": Scenario(
        "compact", {"state": {"partitions": 2, "cleanup.policy": "compact", "segment.bytes": 3000,
                              "max.message.bytes": 300}},
        _keyed_setup("state"), lambda store: [Phase(["compact", "--now", str(NOW), "--job-id", "compact-1", *SPARK])],
        ("commit-before", "batchindex-write")),
    "truncate": Scenario("truncate", {"orders": {"partitions": 2, "segment.bytes": 1500}}, _keyed_setup("orders"),
                         lambda store: [Phase(["truncate", "--topic", "orders", "--partition", "1", "--offset", "40",
                                               "--now", str(NOW), "--job-id", "truncate-1", *SPARK])],
                         ("commit-after",)),
    # a double crash: the re-run (same job id) is killed while taking over its dead attempt's lease, after
    # claiming the takeover marker; the third attempt must take it over at once (issue 26)
    "retention-double-crash": Scenario(
        "retention-double-crash", {"logs": {"partitions": 2, "segment.bytes": 1500, "retention.ms": HOUR}},
        _keyed_setup("logs"),
        lambda store: [Phase(["retention", "--now", str(NOW), "--job-id", "retention-1", *SPARK],
                             before=_dead_attempt)],
        ("takeover-claimed",)),
    "export": Scenario("export", {"orders": {"partitions": 2, "segment.bytes": 1500}}, _keyed_setup("orders"),
                       _export_phases, ("export-write",), output="out"),
}
S3_SAMPLE = {"append": ("commit-before",), "append-partial-lease": ("commit-after",), "import": ("commit-after",),
             "retention-double-crash": ("takeover-claimed",)}


# --- what a run left ------------------------------------------------------------------------------------


def state(store: Store, output: str | None = None) -> dict:
    """Everything a user can observe, without object names or ids (they differ from run to run); with
    `output`, every file the job wrote there (name and bytes)."""
    options = store.backend.options
    catalog = Catalog.open(BoundStore(f"{store.root}/_catalog", options))
    rows = table_to_rows(catalog.all_rows())
    facts = [(r.topic, r.partition, r.base_offset, r.last_offset, r.next_offset, r.record_count, r.batch_count,
              r.size_bytes, r.first_batch_timestamp, r.base_timestamp, r.largest_timestamp,
              r.offset_of_largest_timestamp, r.timestamp_type, r.state, r.log_start_offset, r.cleaned, r.magic,
              read_bytes(r.log_key, options), read_bytes(r.index_key, options), read_bytes(r.timeindex_key, options),
              None if r.batchindex_size_bytes is None else read_bytes(batch_index_key(r.timeindex_key), options))
             for r in rows]
    records, lookups = {}, {}
    for tp in sorted({TopicPartition(r.topic, r.partition) for r in rows if r.state != "DELETE_STARTED"}):
        live = [r for r in rows if (r.topic, r.partition) == (tp.topic, tp.partition) and r.state != "DELETE_STARTED"]
        start = max([live[0].base_offset, *(r.log_start_offset for r in live)])
        found = [rec for r in live for rec in read_with_kafka_python(read_bytes(r.log_key, options))[0]
                 if rec[0] >= start]
        records[str(tp)] = found
        segments = [StoredSegment(r, BoundStore(store.root, options), TopicConfig().index_interval_bytes,
                                  min_timestamp=0) for r in live]
        stamps = sorted({rec[1] for rec in found})
        targets = [-2, -1, -3] + (stamps[:1] + stamps[len(stamps) // 2:len(stamps) // 2 + 1] + [stamps[-1] + 1]
                                  if stamps else [])
        lookups[str(tp)] = [astuple(list_offsets(segments, t, start, min_timestamp=0)) for t in targets]
    rejects = sorted((row["topic"], row["partition"], row["value"], row["reason"])
                     for o in list_objects(store.root, options) if "/_rejects/" in o.uri
                     for row in pq.read_table(pa.BufferReader(read_bytes(o.uri, options))).to_pylist())
    found = {}
    if output is not None:
        fs, path = filesystem(store.backend.uri(output), options)
        fs.invalidate_cache()
        found = {p[len(path):]: fs.cat_file(p) for p in fs.find(path)}
    return {"rows": facts, "records": records, "lookups": lookups, "rejects": rejects, "output": found}


def assert_no_debris(store: Store) -> None:
    """After `scrub --grace-ms 0`: no lease or lease temporary, and nothing scrub would still remove."""
    leftovers = [o.uri for o in list_objects(store.root, store.backend.options) if "/_leases/" in o.uri]
    assert leftovers == [], leftovers
    report = store.tmp / "scrub-check.json"
    assert klake_in_process(["scrub", "--conf", str(store.conf), "--grace-ms", "0", "--dry-run",
                             "--report", str(report), "--no-progress"]) == 0
    found = scrub_findings(json.loads(report.read_text()))
    assert (found["orphan"], found["debris"], found["missing"]) == ([], [], []), found


# --- the sweep ------------------------------------------------------------------------------------------


def run_phases(store: Store, scenario: Scenario, crash_at: int | None, points: Path) -> subprocess.CompletedProcess:
    """Run the scenario's phases from the saved state; count (and with `crash_at`, kill at) the last one's
    mutation points. Returns the last run."""
    store.restore()
    phases = scenario.phases(store)
    for phase in phases[:-1]:
        if phase.before:
            phase.before(store)
        assert store.klake_here(phase.args) == phase.code
    last = phases[-1]
    if last.before:
        last.before(store)
    return store.klake(last.args, crash_at=crash_at, count_in=points)


def sampled_points(points: list[str], wanted: tuple[str, ...]) -> list[int]:
    """The points CI kills at: `segment-write` the middle write of a segment object, `batchindex-write` the
    first write of a `.batchindex` (the last object of a segment version, `layouts.object_layout.put_segment_objects`),
    `staging-write` an append's input task writing its staged rows, `takeover-claimed` the mutation right after
    a lease takeover marker is created, `export-write` the middle publication of
    an exported `.log` (its temporary written whole, not yet renamed), `commit-before` / `commit-after` the
    first catalog commit of the run (after it: its deletes and lease releases)."""
    chosen = []
    for name in wanted:
        if name == "staging-write":
            chosen.append(next(i for i, p in enumerate(points, 1) if "/_staging/" in p.split()[3]))
        elif name == "batchindex-write":
            chosen.append(next(i for i, p in enumerate(points, 1)
                               if p.split()[2] in ("local:link", "s3:put_object") and ".batchindex" in p.split()[3]))
        elif name == "takeover-claimed":
            chosen.append(1 + next(i for i, p in enumerate(points, 1) if ".takeover-" in p.split()[3]
                                   and p.split()[2] in ("local:link", "s3:put_object")))
        elif name == "export-write":
            writes = [i for i, p in enumerate(points, 1) if p.split()[2] == "local:replace" and ".log.tmp-" in p]
            chosen.append(writes[len(writes) // 2])
        elif name == "segment-write":
            writes = [i for i, p in enumerate(points, 1)
                      if p.split()[2] in ("local:link", "s3:put_object", "s3:complete_multipart_upload")
                      and not any(f"_{d}/" in p.split()[3] for d in ("leases", "rejects", "staging", "topics"))]
            chosen.append(writes[len(writes) // 2])
        else:
            chosen.append(next(i for i, p in enumerate(points, 1) if f"delta:_commit:{name.split('-')[1]}" in p))
    return chosen


def check_scenario(scenario: Scenario, backend: Backend, tmp: Path, sample: tuple[str, ...]) -> None:
    store = Store(backend, tmp / scenario.name, scenario.topics)
    for command in scenario.setup(store):
        assert store.klake_here(command) == 0
    store.save()

    clean = run_phases(store, scenario, None, tmp / "points-clean")
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert klake_in_process(["scrub", "--conf", str(store.conf), "--grace-ms", "0", "--no-progress"]) == 0
    expected = state(store, scenario.output)
    assert any(expected["records"].values()) and (scenario.output is None or expected["output"])
    points = (tmp / "points-clean" / "points").read_text().splitlines()

    chosen = range(1, len(points) + 1) if FULL_SWEEP else sampled_points(points, sample)
    for n in chosen:
        killed = run_phases(store, scenario, n, tmp / f"points-{n}")
        assert killed.returncode == -9, f"point {n} ({points[n - 1]}) was not reached: {killed.stderr[-2000:]}"
        rerun = store.klake(scenario.phases(store)[-1].args)  # at once, the very same command, a fresh process
        assert rerun.returncode == 0, f"re-run after a kill at {points[n - 1]}:\n{rerun.stdout}\n{rerun.stderr[-3000:]}"
        assert klake_in_process(["scrub", "--conf", str(store.conf), "--grace-ms", "0", "--no-progress"]) == 0
        got = state(store, scenario.output)
        for part in expected:
            assert got[part] == expected[part], f"{part} differs from a clean run after a kill at {points[n - 1]}"
        assert_no_debris(store)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_job_killed_at_a_storage_mutation_reruns_to_a_clean_runs_state_local(name: str, spark, tmp_path: Path
                                                                             ) -> None:
    check_scenario(SCENARIOS[name], Backend("local", str(tmp_path / "store"), StorageOptions()), tmp_path,
                   SCENARIOS[name].sample)


@pytest.mark.s3
@pytest.mark.parametrize("name", [n for n in SCENARIOS if FULL_SWEEP or n in S3_SAMPLE])
def test_a_job_killed_at_a_storage_mutation_reruns_to_a_clean_runs_state_s3(name: str, spark, s3_backend: Backend,
                                                                          tmp_path: Path) -> None:
    check_scenario(SCENARIOS[name], s3_backend, tmp_path, S3_SAMPLE.get(name, SCENARIOS[name].sample))
