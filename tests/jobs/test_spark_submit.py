"""The jobs as operators run them: real `spark-submit jobs/<job>.py` subprocesses on `local[2]`, storing
on a moto_server S3 bucket. Each submit starts its own JVM and Python workers (~20-30 s), so there are
three: an append, a retention over what it appended, and an append that fails on a missing input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from kafka.partitioner.default import murmur2

from engine.catalog.schema import table_to_rows
from engine.ops.catalog_table import Catalog
from layouts.store import object_info, read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import kafka_time_retention
from tests.conftest import PROJECT_ROOT, Backend
from tests.oracles.kafka_python import read_with_kafka_python

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.s3]

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
NOW = 1_790_000_000_000
HOUR = 3_600_000
PARTITIONS = 3


def submit(job: str, *args: str) -> subprocess.CompletedProcess:
    """`spark-submit jobs/<job>.py args...` on local[2], with the moto endpoint and credentials of this
    process's environment, Python workers in this venv."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1", "KLAKE_SPARK_LOG_LEVEL": "ERROR"}
    command = [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.sql.shuffle.partitions=4", str(PROJECT_ROOT / "jobs" / f"{job}.py"), *args]
    return subprocess.run(command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=420)



@pytest.fixture
def conf(s3_backend: Backend, tmp_path: Path) -> Path:
    path = tmp_path / "klake.yaml"
    path.write_text(yaml.safe_dump({
        "storage": {"root": s3_backend.uri("logs")},
        "topics": {"clicks": {"partitions": PARTITIONS, "segment.bytes": 2000, "retention.ms": HOUR}}}))
    return path


def test_spark_submit_append_then_retention_on_s3(s3_backend: Backend, conf: Path, tmp_path: Path) -> None:
    n = 400
    keys = [b"user-%03d" % (i % 37) for i in range(n)]
    values = [b"click-%05d|" % i + b"z" * (i % 50) for i in range(n)]
    timestamps = [NOW - 3 * HOUR + i * 27_000 for i in range(n)]  # three hours up to now
    pq.write_table(pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                             "timestamp": pa.array(timestamps, pa.int64())}), tmp_path / "clicks.parquet")
    report_uri = s3_backend.uri("reports", "append.json")  # the report goes to S3 too

    done = submit("append", "--conf", str(conf), "--input", str(tmp_path / "clicks.parquet"), "--topic", "clicks",
                  "--now", str(NOW), "--report", report_uri)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads(read_bytes(report_uri, s3_backend.options))
    assert report["status"] == "succeeded" and report["failures"] == []
    assert report["results"]["records_in"] == report["results"]["records_appended"] == n
    assert report["rejected"]["count"] == 0 and report["commit"]["version"] >= 1
    assert f"append: {n} of {n} record(s) appended" in done.stdout

    catalog = Catalog.open(Store(s3_backend.uri("logs", "_catalog"), s3_backend.options))
    before = {p: catalog.live_segments("clicks", p) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):  # kafka-python decodes what landed where its partitioner sends each key
        records = [r for row in before[p] for r in read_with_kafka_python(read_bytes(row.log_key, s3_backend.options))[0]]
        rows = [int(r[3][6:11]) for r in records]
        assert rows == sorted(rows) and [r[0] for r in records] == list(range(len(records)))
        assert all((murmur2(keys[i]) & 0x7FFFFFFF) % PARTITIONS == p for i in rows)
        assert [(r[1], r[2], r[3]) for r in records] == [(timestamps[i], keys[i], values[i]) for i in rows]
    assert sum(r.record_count for rows in before.values() for r in rows) == n

    expected = {p: kafka_time_retention(before[p], NOW, HOUR) for p in range(PARTITIONS)}
    assert all(0 < len(expected[p]) < len(before[p]) for p in range(PARTITIONS))
    local_report = tmp_path / "retention.json"
    done = submit("retention", "--conf", str(conf), "--now", "2026-09-21T14:13:20Z", "--report", str(local_report))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads(local_report.read_text())
    assert report["status"] == "succeeded" and report["now_ms"] == NOW
    deleted = sum(len(rows) for rows in expected.values())
    assert report["results"]["segments_deleted"] == deleted
    assert report["results"]["cleanup"]["deleted_objects"] == 3 * deleted
    assert len(report["partitions"]) == PARTITIONS and report["requests"]["DELETE"] >= 1
    assert f"retention: deleted {deleted} segment(s)" in done.stdout
    remaining = {r.segment_id for r in table_to_rows(catalog.all_rows())}
    for p in range(PARTITIONS):
        assert [r.segment_id for r in catalog.live_segments("clicks", p)] == [
            r.segment_id for r in before[p][len(expected[p]):]]
        for row in expected[p]:
            assert row.segment_id not in remaining and object_info(row.log_key, s3_backend.options) is None


def test_spark_submit_append_of_a_missing_input_exits_2_naming_it(conf: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "landing" / "2026-09-21")
    done = submit("append", "--conf", str(conf), "--input", missing, "--topic", "clicks", "--now", str(NOW))
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    # spark-submit's PythonRunner merges the Python driver's stderr into its stdout
    assert f"klake append: error: input {missing} does not exist" in done.stdout + done.stderr
