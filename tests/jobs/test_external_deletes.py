"""`--allow-external-deletes` (issue 26): a job leaves the objects of the segments it deletes that lie outside
its root (imported in place from a broker's log dir) where they are and says so in its summary and report,
unless the run opts in. Truth: the broker's files on disk, listed before and after each run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs import import_log, retention
from jobs.runtime.job_runner import JobSpec, main
from tests.conftest import KAFKA_FIXTURES

pytestmark = pytest.mark.spark

LATER = 1_900_000_000_000  # past every fixture timestamp


def run(spec: JobSpec, tmp: Path, *argv: str) -> dict:
    report = tmp / f"{spec.name}-report.json"
    assert main(spec, [*argv, "--no-progress", "--report", str(report)]) == 0
    return json.loads(report.read_text())


def test_retention_keeps_objects_outside_the_root_unless_the_run_opts_in(spark, tmp_path: Path) -> None:  # noqa: ANN001
    broker = tmp_path / "broker"
    for name in ("timeindex_test-0", "docker-connect-status-0"):
        shutil.copytree(KAFKA_FIXTURES / "broker" / name, broker / name)
    files = {p: p.read_bytes() for p in broker.rglob("*") if p.is_file()}
    root = str(tmp_path / "root")
    run(import_log.SPEC, tmp_path, str(broker), "--root", root)  # in place: the rows point into the broker's dir

    kept = run(retention.SPEC, tmp_path, "--root", root, "--topic", "timeindex_test", "--now", str(LATER),
               "--set", "topics.timeindex_test.retention.ms=1")
    logs = sorted(str(p) for p in (broker / "timeindex_test-0").glob("*.log"))
    assert set(logs) <= set(kept["results"]["cleanup"]["left_in_place"])
    assert kept["results"]["cleanup"]["external_deleted"] == []
    assert {p: p.read_bytes() for p in broker.rglob("*") if p.is_file()} == files  # not a byte touched
    left = len(kept["results"]["cleanup"]["left_in_place"])
    assert f"left in place: {left} objects of deleted segments outside the root" in kept["summary"]

    gone = run(retention.SPEC, tmp_path, "--root", root, "--topic", "docker-connect-status", "--now", str(LATER),
               "--set", "topics.docker-connect-status.retention.ms=1", "--allow-external-deletes")
    deleted = gone["results"]["cleanup"]["external_deleted"]
    assert str(broker / "docker-connect-status-0" / "00000000000000000000.log") in deleted
    assert not (broker / "docker-connect-status-0" / "00000000000000000000.log").exists()
    assert f"deleted {len(deleted)} object" in gone["summary"] and "--allow-external-deletes" in gone["summary"]
    assert gone["results"]["cleanup"]["left_in_place"] == []
    assert all(p.read_bytes() == data for p, data in files.items() if p.parent.name == "timeindex_test-0")
