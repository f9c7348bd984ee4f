"""Every job's `--dry-run` writes nothing (issue 26), on a local directory and on a moto_server bucket.

Truth is independent of klake's own meters: the store is listed and read whole before and after each
dry run (every object's bytes and modification time, the catalog included), and on S3 the moto server's
recorder lists every request the run made: only GET and HEAD may appear (no PUT, POST - DeleteObjects,
multipart uploads - or DELETE). Each dry run must also have work it would do, which its summary says
("would ..."), so that writing nothing is not simply having nothing to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from jobs import append
from jobs.cli.main import JOBS
from jobs.runtime.embedded_s3 import create_bucket, embedded_s3_environment
from jobs.runtime.job_runner import JobSpec, main
from layouts.store import StorageOptions, filesystem, list_objects
from tests.conftest import Backend
from tests.jobs.test_jobs import HOUR, NOW, Jobs, input_table, write_parquet

pytestmark = pytest.mark.spark

DRY_RUN_JOBS = {spec.name: spec for spec in JOBS if spec.mutates and spec.dry_run}
TOPICS = {"logs": {"partitions": 2, "segment.bytes": 1500, "retention.ms": HOUR, "segment.ms": 600_000},
          "state": {"partitions": 1, "cleanup.policy": "compact", "segment.bytes": 1200},
          "bad": {"partitions": 1, "segment.bytes": 1000, "index.interval.bytes": 100}}


class Recorder:
    """The moto server's request recorder (`/moto-api/recorder/`), writing to a file of this test's."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _call(self, action: str) -> bytes:
        method = "GET" if action == "download-recording" else "POST"
        request = urllib.request.Request(f"{self.url}/moto-api/recorder/{action}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()

    def start(self) -> None:
        self._call("reset-recording")
        self._call("start-recording")

    def stop(self) -> list[str]:
        """The methods of the requests recorded since `start`."""
        self._call("stop-recording")
        return [json.loads(line)["method"] for line in self._call("download-recording").decode().splitlines()]


class Store:
    """The store the dry runs look at: `root` with topics that give every job work to do, a second root
    (`dst`) to mirror into, and the input of an append."""

    def __init__(self, tmp: Path, backend: Backend, recorder: Recorder | None) -> None:
        self.backend, self.recorder, self.tmp = backend, recorder, tmp
        self.jobs = Jobs(tmp, backend, TOPICS)
        self.dst_conf = tmp / "dst.yaml"
        self.dst_conf.write_text(yaml.safe_dump({"storage": {"root": backend.uri("dst")}}))
        old = input_table(120, topic="logs", seed=1, start_ts=NOW - 3 * HOUR, step_ms=60_000)  # past retention
        state = input_table(200, topic="state", seed=2, keys=10, tag="s")  # ten keys: compaction is due
        bad = input_table(60, topic="bad", seed=3, tag="b")
        table = pa.concat_tables([old, state, bad]).append_column(
            "partition", pa.array([i % 2 for i in range(120)] + [0] * 260, pa.int32()))
        code, report = self.jobs.run(append.SPEC, "--input", str(write_parquet(tmp / "in.parquet", table)))
        assert code == 0, report.get("failures")
        garbage = self.jobs.rows("bad", 0)[0]  # recover has a sidecar to rebuild
        backend.put(garbage.index_key, b"\x07" * 37)
        # scrub has debris: a killed writer's temporary, a killed append's staged rows
        backend.put(backend.uri("root", "_topics", "logs", f".config-00000009.json.tmp-{'a' * 32}"), b"{")
        backend.put(backend.uri("root", "_staging", "append-x", "b" * 32, f"{'c' * 32}.arrow"), b"rows")
        more = input_table(40, topic="logs", seed=4, start_ts=NOW - HOUR // 2, tag="m")
        more = more.append_column("partition", pa.array([0] * 38 + [7, 1], pa.int32()))  # 7: no such partition
        stamps = more["timestamp"].to_pylist()
        stamps[5] = -5  # refused: negative timestamps need KIP-228
        self.append_input = write_parquet(tmp / "more.parquet", more.set_column(3, "timestamp", pa.array(stamps)))

    def args(self, name: str) -> list[str]:
        wall = time.time_ns() // 1_000_000
        return {"append": ["--input", str(self.append_input)],
                "scrub": ["--now", str(wall + 2 * HOUR)],
                "catalog-maintenance": ["--vacuum-retention-hours", "0", "--allow-short-vacuum"],
                "mirror": [self.jobs.root]}.get(name, [])

    def snapshot(self) -> dict[str, tuple[int, int, str]]:
        """Every object of the backend (both roots, their catalogs): size, mtime and a digest of its bytes."""
        fs, _ = filesystem(self.backend.base, self.backend.options)
        fs.invalidate_cache()
        return {o.uri: (o.size, o.mtime_ms, hashlib.sha256(fs.cat_file(filesystem(o.uri, self.backend.options)[1]))
                        .hexdigest()) for o in list_objects(self.backend.base, self.backend.options)}

    def dry_run(self, spec: JobSpec) -> tuple[int, dict, list[str]]:
        """Run `spec --dry-run`: its exit code, its report (written outside the store) and the methods of
        the S3 requests it made (none recorded locally)."""
        report = self.tmp / f"dry-run-{spec.name}-{uuid.uuid4().hex[:6]}.json"
        conf = self.dst_conf if spec.name == "mirror" else self.jobs.conf
        argv = [*self.args(spec.name), "--dry-run", "--no-progress", "--conf", str(conf), "--report", str(report)]
        if "--now" not in argv:
            argv += ["--now", str(NOW)]
        if self.recorder is not None:
            self.recorder.start()
        code = main(spec, argv)
        methods = self.recorder.stop() if self.recorder is not None else []
        return code, json.loads(report.read_text()), methods


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, spark) -> Iterator[Store]:
    """One store per backend for every job's dry run (each run is checked against the store as it found it);
    on S3, a moto server of its own whose recorder writes to this test's directory."""
    tmp = tmp_path_factory.mktemp(f"dry-run-{request.param}")
    if request.param == "local":
        yield Store(tmp, Backend("local", str(tmp / "store"), StorageOptions()), None)
        return
    saved = os.environ.get("MOTO_RECORDER_FILEPATH")
    os.environ["MOTO_RECORDER_FILEPATH"] = str(tmp / "moto-recording.jsonl")  # read by the server at start
    try:
        with embedded_s3_environment() as url:
            backend = Backend("s3", create_bucket(f"klake-{uuid.uuid4().hex[:12]}"), StorageOptions.from_env())
            yield Store(tmp, backend, Recorder(url))
    finally:
        if saved is None:
            os.environ.pop("MOTO_RECORDER_FILEPATH", None)
        else:
            os.environ["MOTO_RECORDER_FILEPATH"] = saved


def test_every_job_with_a_dry_run_is_covered() -> None:
    assert sorted(DRY_RUN_JOBS) == sorted(["append", "roll", "retention", "compact", "recover", "rebuild-index",
                                           "scrub", "catalog-maintenance", "mirror"])


@pytest.mark.parametrize("name", sorted(DRY_RUN_JOBS))
def test_a_dry_run_writes_nothing_and_says_what_it_would_do(store: Store, name: str) -> None:
    before = store.snapshot()
    code, report, methods = store.dry_run(DRY_RUN_JOBS[name])
    # recover and scrub find the rebuilt-to-be sidecar (a partition needs repair, a size the row does not record)
    assert code == (1 if name in ("recover", "scrub") else 0), report["failures"]
    assert report["dry_run"] is True and "would" in report["summary"], report["summary"]
    assert store.snapshot() == before
    assert not {"PUT", "CopyObject", "DELETE"} & set(report["requests"]), report["requests"]
    if store.recorder is not None:  # the recorder saw the run's reads, and nothing else
        assert "GET" in methods and set(methods) <= {"GET", "HEAD"}, sorted(set(methods))
    if name == "append":  # validated in memory: what it would append and reject
        results, rejected = report["results"], report["rejected"]
        assert (results["records_in"], results["records_to_append"], results["records_appended"]) == (40, 38, 0)
        assert rejected["by_reason"] == {"UNKNOWN_PARTITION": 1, "NEGATIVE_TIMESTAMP": 1} and rejected["path"] is None
        assert results["segment_versions_to_write"] > 0
        assert "would append 38 of 40 record(s)" in report["summary"]


def test_a_dry_run_of_an_append_its_job_id_already_committed_would_append_nothing(store: Store) -> None:
    """The dry run asks the job ledger as the run does: after the append, the same input would append
    nothing (runs after every dry run of its store: pytest groups a module fixture's tests)."""
    code, report = store.jobs.run(append.SPEC, "--input", str(store.append_input))
    assert code == 0 and report["results"]["records_appended"] == 38
    before = store.snapshot()
    code, report, _ = store.dry_run(append.SPEC)
    assert code == 0 and store.snapshot() == before
    assert report["results"]["records_to_append"] == 0 and report["results"]["already_committed"] is True
    assert "append: already done: job " in report["summary"]


def test_a_dry_run_append_to_a_new_root_creates_nothing(spark, tmp_path: Path) -> None:
    """No catalog, no topic settings, not even the root directory: the root stays as it was (absent)."""
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    jobs = Jobs(tmp_path, backend, {"fresh": {"partitions": 2}})
    table = input_table(30, topic="fresh", seed=8)
    code, report = jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)), "--dry-run")
    assert code == 0, report["failures"]
    assert report["results"]["records_to_append"] == 30 and not (tmp_path / "store").exists()
