"""The benchmarks still run: each in a tiny "smoke" size, printing its figures and passing its own checks.

Nothing here is timed or compared for speed; it keeps every script in `benchmarks/` (and codec_bench's
JVM side, `benchmarks/KafkaCodecBench.java`) from rotting between the runs that fill
benchmarks/RESULTS.md (issue 14: `catalog_bench.py` had broken unnoticed).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from jobs.ingest.arrow_batches import records_per_batch
from tests.conftest import PROJECT_ROOT
from tests.oracles import fetch_jvm


def test_codec_bench_prints_its_table_and_passes_its_checks() -> None:
    fetch_jvm.require("kafka")
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "codec_bench.py"), "--batches", "2",
                           "--runs", "1", "--codecs", "none,lz4", "--values", "100", "--warmup", "0.1"],
                          capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout
    assert done.returncode in (0, 1), out + done.stderr  # 1 = a speed target missed, which is not this test's business
    for codec in ("none", "lz4"):
        for op in ("decode", "encode"):
            assert re.search(rf"^{codec} +100 {op} +[\d,]+ +[\d,]+ +[\d.]+x +[\d.]+/[\d.]+/[\d.]+x +[\d.]+x  "
                             r">= 1\.0x (ok|MISSED)$", out, re.M), out
    # kafka-clients: decode of klake's batches, encode, per cell; klake: its own batches and kafka-clients', per cell
    assert "checks: all passed (4 on kafka-clients, 4 on klake)" in out, out


def _bench(script: str, *args: str, timeout: int = 600) -> str:
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_catalog_bench_runs_on_a_tiny_catalog() -> None:
    out = _bench("catalog_bench.py", "--rows", "2000", "--commits", "3", "--repeat", "1")
    assert re.search(r"^catalog: 2000 rows", out, re.M), out
    assert len(re.findall(r" ms  \(\d+ segments\)$", out, re.M)) == 12, out


def test_read_bench_runs_in_smoke_size() -> None:
    """The read benchmark checks its own answers (window and full scan against the generated records)."""
    out = _bench("read_bench.py", "--mb", "2", "--repeat", "1")
    assert re.search(r"^full scan [\d.]+ MB/s; klake's decoder alone on the same files [\d.]+ MB/s", out, re.M), out


def test_stream_bench_runs_in_smoke_size() -> None:
    """The stream benchmark checks its own answers (the stream's and the batch source's record counts)."""
    out = _bench("stream_bench.py", "--mb", "2", "--repeat", "1")
    assert re.search(r"^stream AvailableNow [\d.]+ s vs batch [\d.]+ s: [\d.]+x \(target <= 1.2x\) (ok|MISSED)$",
                     out, re.M), out
    assert '"records": 20971' in out, out


def test_append_bench_runs_in_smoke_size() -> None:
    out = _bench("append_bench.py", "--mb", "2")
    assert re.search(r"^append [\d.]+ MB/s vs Spark Parquet write [\d.]+ MB/s", out, re.M), out
    assert '"records_appended": 20971' in out, out


def test_retention_bench_runs_in_smoke_size() -> None:
    """The retention benchmark checks the job's report and side file against the synthetic catalog's answer."""
    out = _bench("retention_bench.py", "--rows", "2000", "--commits", "3")
    assert re.search(r"^catalog: 2,000 live segments in 200 partitions", out, re.M), out
    assert re.search(r"^retention dry run: wall [\d.]+ s \(target <= 10 s\) (ok|MISSED)$", out, re.M), out
    assert re.search(r"^driver peak RSS [\d.]+ MB", out, re.M) and "checks: all passed" in out, out
    assert "retention: would delete 1000 segment(s), kept 1000" in out, out


def test_lookup_bench_runs_in_smoke_size() -> None:
    """The lookup benchmark checks every answer against brute force and prints bytes read vs the minimum."""
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "lookup_bench.py"), "--mb", "1",
                           "--big-mb", "1", "--partitions", "2", "--targets", "3"],
                          capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout
    assert done.returncode in (0, 1), out + done.stderr  # 1 = a target missed, which is not this test's business
    for shape in ("demo", "small-batches", "big-segment"):
        assert re.search(rf"^{shape} +\d+ +\d+ +[\d,]+ +[\d,]+ +[\d.]+x .* (ok|MISSED)$", out, re.M), out
    assert re.search(r"^answers: all \d+ equal brute force$", out, re.M), out


def test_planning_bench_runs_in_smoke_size() -> None:
    """The planning benchmark checks the roll and compact jobs' reports and side files against the synthetic
    catalog's answer."""
    out = _bench("planning_bench.py", "--rows", "2000", "--commits", "3")
    assert re.search(r"^catalog: 2,000 live segments in 200 partitions", out, re.M), out
    for job in ("roll", "compact"):
        assert re.search(rf"^{job} dry run: wall [\d.]+ s \(target <= 10 s\) (ok|MISSED)$", out, re.M), out
        assert re.search(rf"^{job} driver peak RSS [\d.]+ MB", out, re.M), out
    assert "roll: 100 of 200 partition(s) rolled" in out and "compact: would clean 100 of 200" in out, out
    assert "checks: all passed" in out, out


def test_kafka_bench_runs_in_smoke_size() -> None:
    """A real broker, Spark's Kafka source and klake on the same records; the script checks every count (and
    that klake's compact read and kept what the broker's LogCleaner read and kept)."""
    fetch_jvm.require("kafka")
    fetch_jvm.require("spark-kafka")
    out = _bench("kafka_bench.py", "--mb", "2", "--compact-mb", "4", "--partitions", "2", "--rounds", "1",
                 timeout=1200)
    assert re.search(r"^read, counted: klake [\d.]+ MB/s vs Spark's Kafka source [\d.]+ MB/s", out, re.M), out
    assert re.search(r"^ingest: klake append [\d.]+ s vs kafka-clients producer", out, re.M), out
    assert re.search(r"^compaction: klake compact \(local\[1\]\) [\d.]+ MB/s vs the broker's LogCleaner", out, re.M), out


def test_archive_bench_runs_in_smoke_size() -> None:
    """A real broker filled by kafka-clients' producer, Spark's Kafka source to Parquet and `klake archive` of the
    same topic; the script checks the Parquet row count and the archive against the broker's end offsets."""
    fetch_jvm.require("kafka")
    fetch_jvm.require("spark-kafka")
    out = _bench("archive_bench.py", "--mb", "2", "--partitions", "2", "--rounds", "1", "--warmup", "0",
                 timeout=1200)
    assert re.search(r"^archive: klake [\d.]+ MB/s \([\d.]+ s\) vs Spark's Kafka source to Parquet", out, re.M), out
    batches = json.loads(out[out.index("\n{\n") + 1:out.rindex("\n}") + 2])["arrow_batches"]  # sized, Spark's check off
    assert batches["records"] == records_per_batch(batches["largest_record_bytes"]) == 10_000, batches
