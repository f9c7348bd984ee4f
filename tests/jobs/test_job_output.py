"""What a job says is what it did: its request and byte figures include the driver's own requests, and
dry runs speak of what they would do.

Truth without klake's meters: the objects a run leaves under the root (their count and sizes bound
the PUTs and bytes written), the source files it copied (bounding the bytes read), and the catalog
version and object listing (a dry run changes neither).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from jobs import append, compact, import_log, recover, scrub
from jobs.cli.main import main as klake
from jobs.runtime.job_runner import JobSpec, main
from layouts.store import list_objects, read_bytes
from tests.conftest import KAFKA_FIXTURES, Backend
from tests.jobs.test_jobs import HOUR, NOW, Jobs, compact_input, input_table, local_backend, write_parquet
from tests.scrub_findings import scrub_findings

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def run(spec: JobSpec, tmp: Path, *argv: str) -> dict:
    report = tmp / f"{spec.name}-report.json"
    assert main(spec, [*argv, "--no-progress", "--report", str(report)]) == 0
    return json.loads(report.read_text())


# --- the driver's own requests count -------------------------------------------------------------------


def test_import_and_scrub_report_the_requests_and_bytes_of_the_driver(backend: Backend, tmp_path: Path) -> None:
    """`import` (its listing, reads and copies) and `scrub` (its listing, its deletes) run on the driver
    alone; their figures were "requests: none" or missed the listing before."""
    source = KAFKA_FIXTURES / "broker"
    root = backend.uri("root")
    report = run(import_log.SPEC, tmp_path, str(source), "--copy", "--root", root)
    copied = [o for o in list_objects(root, backend.options) if o.name.endswith(SEGMENT_SUFFIXES)]
    source_logs = sum(p.stat().st_size for p in source.rglob("*.log"))
    assert report["requests"]["LIST"] >= 1  # the source's listing
    assert report["requests"]["PUT"] >= len(copied) and report["requests"]["GET"] >= 7  # 7 segments read
    assert report["bytes"]["written"] >= sum(o.size for o in copied) > 0
    assert report["bytes"]["read"] >= source_logs
    assert f"read {report['bytes']['read']:,} B, wrote {report['bytes']['written']:,} B" in report["summary"]

    orphans = [backend.uri("root", "t-0", f"{i:020d}-{'ab' * 8}.log") for i in range(3)]
    for uri in orphans:
        backend.put(uri, b"x" * 10)
    report = run(scrub.SPEC, tmp_path, "--root", root, "--now", str(NOW * 2))  # long past the grace period
    assert set(scrub_findings(report)["deleted"]) == set(orphans)
    assert report["requests"]["LIST"] >= 1 and report["requests"]["DELETE"] >= 1
    assert report["requests"]["DELETE"] == report["results"]["scrub"]["delete_requests"]
    assert "requests: none" not in report["summary"]


def test_one_segment_is_one_segment(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    source = tmp_path / "broker"
    shutil.copytree(KAFKA_FIXTURES / "broker" / "docker-connect-status-0", source / "docker-connect-status-0")
    root = str(tmp_path / "root")
    run(import_log.SPEC, tmp_path, str(source), "--root", root)
    capsys.readouterr()
    assert klake(["segments", "--catalog", f"{root}/_catalog"]) == 0
    assert capsys.readouterr().err.splitlines() == ["1 segment"]


# --- dry runs say what they would do ---------------------------------------------------------------------


@pytest.mark.spark
def test_compact_dry_run_says_it_would_clean_what_the_run_then_cleans(spark, tmp_path: Path) -> None:  # noqa: ANN001
    jobs = Jobs(tmp_path, local_backend(tmp_path),
                {"state": {"partitions": 2, "cleanup.policy": "compact", "segment.bytes": 1200}})
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", compact_input(300, 8))))[0] == 0
    objects, version = jobs.objects(), jobs.catalog.version()

    code, report = jobs.run(compact.SPEC, "--dry-run")
    assert code == 0 and jobs.objects() == objects and jobs.catalog.version() == version
    lines = report["summary"].splitlines()
    for p in range(2):
        (line,) = [line for line in lines if line.startswith(f"state-{p}: ")]
        assert line.startswith(f"state-{p}: would clean (dirty ratio 1 > min.cleanable.dirty.ratio 0.5)"), line
    assert "compact: would clean 2 of 2 compacted partition(s)" in lines
    assert report["results"]["partitions_due"] == 2 and report["results"]["partitions_cleaned"] == 0
    assert not any("not cleaned" in line for line in lines)

    code, report = jobs.run(compact.SPEC)
    assert code == 0 and report["results"]["partitions_cleaned"] == 2
    assert all(f"state-{p}: cleaned (dirty ratio 1 > " in report["summary"] for p in range(2))
    code, report = jobs.run(compact.SPEC, "--dry-run")  # nothing dirty is left: nothing is due
    assert code == 0 and report["results"]["partitions_due"] == 0
    assert all(f"state-{p}: not cleaned (dirty ratio 0 <= " in report["summary"] for p in range(2))


@pytest.mark.spark
def test_recover_dry_run_would_quarantine_and_counts_each_partition_once(spark, tmp_path: Path) -> None:  # noqa: ANN001
    backend = local_backend(tmp_path)
    jobs = Jobs(tmp_path, backend, {"t": {"partitions": 2, "segment.bytes": 1000, "max.message.bytes": 300}})
    table = input_table(200, seed=12, start_ts=NOW - HOUR).append_column(
        "partition", pa.array([i % 2 for i in range(200)], pa.int32()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)), "--topic", "t")[0] == 0
    bad = jobs.rows("t", 1)[1]
    corrupt = bytearray(read_bytes(bad.log_key))
    corrupt[len(corrupt) // 2] ^= 0x55
    backend.put(bad.log_key, bytes(corrupt))
    objects, version = jobs.objects(), jobs.catalog.version()

    code, report = jobs.run(recover.SPEC, "--dry-run")
    assert code == 1 and jobs.objects() == objects and jobs.catalog.version() == version  # nothing written
    lines = report["summary"].splitlines()
    (quarantine,) = [line for line in lines if "quarantine" in line]
    planned = re.fullmatch(r"  would quarantine (\d+) bytes at (\S+/_quarantine/t-1/\S+)", quarantine)
    assert planned is not None, quarantine
    assert {e["partition"]: e["status"] for e in report["partitions"]} == {"t-0": "succeeded", "t-1": "failed"}
    assert [f["partition"] for f in report["failures"]] == ["t-1"]
    assert "recover failed (dry run): 1 partition(s) ok, 1 failed;" in report["summary"]

    code, report = jobs.run(recover.SPEC)
    assert code == 0
    (quarantine,) = [line for line in report["summary"].splitlines() if "quarantine" in line]
    assert quarantine == f"  {planned[1]} bytes quarantined at {planned[2]}"
    assert len(read_bytes(planned[2])) == int(planned[1])  # the plan named what the run wrote
