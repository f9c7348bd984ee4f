"""Spark with delta-spark reads the catalog klake writes with delta-rs (issue 27, 3e), on a local root and on
the moto server through hadoop-aws (`s3a://`).

The jars are the pinned `delta-spark` set, plus the `hadoop-aws` set on S3 (`tests/oracles/fetch_jvm.py`;
missing, the test fails under CI); Spark runs in a child process (`tests/oracles/delta_spark_reader.py`) so the
suite's shared session stays free of Delta's extension and of S3A. Truth: `klake segments` (the CLI, with `--from`/`--to`) and delta-rs itself for
the table's history; the catalog holds several commits, retired rows and keys stored relative to the root.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from dataclasses import replace

import pytest
from deltalake import DeltaTable

from engine.catalog.schema import SegmentState
from engine.ops.catalog_table import Catalog
from jobs.cli.main import main as klake
from jobs.runtime.embedded_s3 import create_bucket
from layouts.store import StorageOptions
from layouts.store.bound import Store
from tests.catalog_rows import add_segments, make_row, transition
from tests.conftest import PROJECT_ROOT
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark

HOUR = 3_600_000
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
WINDOWS = [(T0 + 30 * HOUR + 17 * 60_000, T0 + 31 * HOUR), (T0, T0 + 1), (T0 + 95 * HOUR, T0 + 200 * HOUR)]
COMPARED = ("topic", "partition", "base_offset", "next_offset", "record_count", "size_bytes",
            "base_timestamp", "largest_timestamp", "state")
RANGE_SQL = ("SELECT topic, `partition`, base_offset FROM {{table}} WHERE state IN ('ACTIVE', 'ROLLED') "
             "AND largest_timestamp >= {start} AND base_timestamp BETWEEN 0 AND {end} ORDER BY 1, 2, 3")


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """Hourly segments of three partitions over four days under a root, in several commits, a few retired."""
    if request.param == "local":
        root, options = str(tmp_path_factory.mktemp("delta-spark") / "root"), StorageOptions()
    else:
        request.getfixturevalue("moto_server")
        root, options = f"{create_bucket(f'delta-spark-{uuid.uuid4().hex[:8]}')}/root", StorageOptions.from_env()
    catalog = Catalog.create(Store(f"{root}/_catalog", options))
    rnd = random.Random(7)
    rows = []
    for topic, partition in (("orders", 0), ("orders", 1), ("clicks", 0)):
        for hour in range(96):
            late = rnd.randint(0, 20) * 60_000
            row = make_row(topic, partition, hour * 1000, hour * 1000 + 1000, base_ts=T0 + hour * HOUR - late,
                           largest_ts=T0 + (hour + 1) * HOUR - 1)
            rows.append(replace(row, **{k: getattr(row, k).replace("/r/", f"{root}/", 1)
                                        for k in ("log_key", "index_key", "timeindex_key")}))
    for start in range(0, len(rows), 96):
        add_segments(catalog, rows[start:start + 96])
    transition(catalog, [r.ref for r in rows[:10]], SegmentState.DELETE_STARTED)
    return catalog


def spark_answers(catalog: Catalog, *queries: dict) -> list[list[dict]]:
    classpath = fetch_jvm.require("delta-spark")
    if catalog.uri.startswith("s3://"):
        classpath += os.pathsep + fetch_jvm.require("hadoop-aws")
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "tests" / "oracles" / "delta_spark_reader.py"), classpath,
                           catalog.uri, *(json.dumps(q) for q in queries)],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def klake_segments(catalog: Catalog, capsys: pytest.CaptureFixture, *args: str) -> list[dict]:
    capsys.readouterr()
    assert klake(["segments", "--catalog", catalog.uri, "--json", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_spark_with_delta_spark_reads_queries_and_time_travels_the_catalog(
        catalog: Catalog, capsys: pytest.CaptureFixture) -> None:
    first_version = DeltaTable(catalog.uri, version=1, storage_options=(
        StorageOptions.from_env().delta_storage_options() if catalog.uri.startswith("s3://") else None),
    ).to_pyarrow_table().to_pylist()
    live_sql = {"sql": "SELECT * FROM {table} WHERE state IN ('ACTIVE', 'ROLLED') ORDER BY topic, `partition`, base_offset"}
    ranges = [{"sql": RANGE_SQL.format(start=start, end=end)} for start, end in WINDOWS]
    live, *windows, as_of_1 = spark_answers(catalog, live_sql, *ranges, {"version": 1})

    ours = klake_segments(catalog, capsys)
    assert len(ours) == 3 * 96 - 10
    assert [{k: r[k] for k in COMPARED} for r in live] == [{k: r[k] for k in COMPARED} for r in ours]
    root = catalog.uri.rsplit("/", 1)[0]
    assert [f"{root}/{r['log_key']}" for r in live] == [r["log_key"] for r in ours]  # keys relative to the root

    for (start, end), spark_rows in zip(WINDOWS, windows, strict=True):
        selected = klake_segments(catalog, capsys, "--from", str(start), "--to", str(end))
        assert [(r["topic"], r["partition"], r["base_offset"]) for r in spark_rows] == \
            [(r["topic"], r["partition"], r["base_offset"]) for r in selected]
        assert selected, "each window selects some segments"

    key = ("topic", "partition", "segment_id", "state")
    assert sorted(tuple(r[k] for k in key) for r in as_of_1) == sorted(tuple(r[k] for k in key) for r in first_version)
    assert len(as_of_1) == 96 and {r["state"] for r in as_of_1} == {"ROLLED"}
