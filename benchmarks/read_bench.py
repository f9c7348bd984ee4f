"""`read` of a 1-hour window out of 24 hours of a topic, against full scans of the same topic, in the
same run (issues 5, 13, 14): wall time, throughput, object-store GET requests, bytes read, segments pruned.

Setup (untimed): ~`--mb` MiB of 100-byte records spread evenly over 24 hours, appended with the
`append` job into 8 partitions with hourly segments (`segment.ms` 1 h) and 64 KiB batches (a
producer's `batch.size`; a batch spanning hours would span segments' time ranges), so the catalog can prune.
Timed, each the whole `read` job as a user runs it:
(a) the records of hour 12, counted (no `--output`);
(b) every record, counted (no `--output`: the job's answer is the counts; its tasks still read, CRC-check,
    decode and range-test every batch, and build no rows);
(c) every record written to Parquet (`--output DIR`, the default format, committed);
(d) klake's decoder alone over the same segment files in this process (read, CRC, decode to Arrow).
Both full scans are held against (d) (issue 14: >= 0.5x) and against the 22 MB/s a full scan reached
before the compiled codec (issue 13: >= 10x). The window's count is checked against the generated
records whose timestamp falls in the hour and both scans' counts against the input; untimed, every row of
the Parquet output is checked against the input (key, value, timestamp, topic, partition, each record once)
and its schema, read back by Spark, against Spark's Kafka source schema.

Run: .venv/bin/python benchmarks/read_bench.py [--mb 256] [--repeat 3] [--workdir DIR]
(the full scans and the decoder alone run `--repeat` times, interleaved; the best of each is kept, with
the CPU seconds of all processes it took: this process, Spark's JVM and its Python workers).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from append_bench import DAY_MS, START_MS, VALUE_BYTES, append_input, bench_config, generate_input, run_cli  # noqa: E402

from engine.catalog.schema import table_to_rows  # noqa: E402
from engine.format.batch import scan_batches  # noqa: E402
from engine.format.records import decode_checked  # noqa: E402
from engine.ops.catalog_table import Catalog  # noqa: E402
from jobs import read  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.job_runner import main  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402
from layouts.store import read_bytes  # noqa: E402
from layouts.store.bound import Store

HOUR_MS = 3_600_000
PRE_CODEC_MB_PER_S = 22.0  # the full scan before the compiled codec (benchmarks/history/2026-11-results-diary.md, 2026-11-22: 316 MB in 13.6 s)


def _timed_read(conf: Path, report: Path, extra: list[str]) -> tuple[float, dict]:
    started = time.perf_counter()
    code = main(read.SPEC, ["--conf", str(conf), "--topic", "bench", "--report", str(report), "--no-progress", *extra])
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"read failed with exit code {code}; see {report}")
    return seconds, json.loads(report.read_text())["results"]["read"]


def run(mb: int, workdir: Path, repeat: int = 3) -> dict:
    records = mb * 1024 * 1024 // VALUE_BYTES
    conf = bench_config(workdir, "segment.ms: 3600000", jobs="{batch_bytes: 65536}")
    spark = spark_session(load_config(conf))
    generate_input(spark, workdir / "input", records)
    append_input(conf, workdir / "input", workdir / "append.json")
    start, end = START_MS + 12 * HOUR_MS, START_MS + 13 * HOUR_MS
    window_s, window = _timed_read(conf, workdir / "window.json", ["--from", str(start), "--to", str(end)])
    output = workdir / "parquet"
    full_runs, parquet_runs, decoder_runs = [], [], []
    for _ in range(repeat):  # interleaved, best of each: the machine may be shared
        cpu = _process_tree_cpu()
        full_runs.append((*_timed_read(conf, workdir / "full.json", []), _cpu_since(cpu)))
        cpu = _process_tree_cpu()
        parquet_runs.append((*_timed_read(conf, workdir / "parquet.json", ["--output", str(output)]),
                             _cpu_since(cpu)))
        cpu = _process_tree_cpu()
        decoder_runs.append((*_decoder_alone(conf), _cpu_since(cpu)))
    full_s, full, full_cpu = min(full_runs, key=lambda run: run[0])
    parquet_s, parquet, parquet_cpu = min(parquet_runs, key=lambda run: run[0])
    decoder_s, decoded, decoder_cpu = min(decoder_runs, key=lambda run: run[0])
    expected = sum(1 for i in range(records) if start <= START_MS + i * DAY_MS // records < end)
    if (window["records"] != expected or full["records"] != records or parquet["records"] != records
            or decoded != records):
        raise SystemExit(f"wrong answer: window {window['records']} (expected {expected}), full {full['records']}, "
                         f"Parquet {parquet['records']}, decoder {decoded} (expected {records})")
    _check_every_record(spark, output, records)
    scanned = full["bytes_read"]
    return {"records": records, "window_records": window["records"],
            "window_s": round(window_s, 2), "full_scan_s": round(full_s, 2),
            "time_ratio_full_over_window": round(full_s / window_s, 2),
            "parquet_scan_s": round(parquet_s, 2), "decoder_alone_s": round(decoder_s, 2),
            "full_scan_mb_per_s": round(scanned / full_s / 1e6, 1),
            "parquet_scan_mb_per_s": round(scanned / parquet_s / 1e6, 1),
            "decoder_alone_mb_per_s": round(scanned / decoder_s / 1e6, 1),
            "full_scan_over_decoder_alone": round(decoder_s / full_s, 2),
            "parquet_scan_over_decoder_alone": round(decoder_s / parquet_s, 2),
            "full_scan_over_pre_codec": round(scanned / full_s / 1e6 / PRE_CODEC_MB_PER_S, 1),
            "parquet_scan_over_pre_codec": round(scanned / parquet_s / 1e6 / PRE_CODEC_MB_PER_S, 1),
            "parquet_output_bytes": sum(f.stat().st_size for f in output.glob("part-*")), "runs": repeat,
            "full_scan_cpu_s": full_cpu, "parquet_scan_cpu_s": parquet_cpu, "decoder_alone_cpu_s": decoder_cpu,
            "window_get_requests": window["get_requests"], "full_get_requests": full["get_requests"],
            "window_bytes_read": window["bytes_read"], "full_bytes_read": full["bytes_read"],
            "bytes_ratio_full_over_window": round(full["bytes_read"] / max(window["bytes_read"], 1), 1),
            "window_segments": window["segments"], "full_segments": full["segments"]}


def _check_every_record(spark, output: Path, records: int) -> None:  # noqa: ANN001
    """Untimed: the Parquet output of the full scan, read back by Spark, against the generated input, record
    by record: each value names its id (`generate_input`), which fixes its key and timestamp; every id once;
    and its schema is Spark's Kafka source schema."""
    from pyspark.sql import functions as F

    written = spark.read.parquet(str(output))
    if written.schema != spark.createDataFrame([], read.KAFKA_SCHEMA).schema:
        raise SystemExit(f"Parquet output schema {written.schema.simpleString()} is not {read.KAFKA_SCHEMA}")
    rows = written.withColumn("id", F.split(F.col("value").cast("string"), "x").getItem(0).cast("long"))
    ok = ((F.col("value") == F.rpad(F.col("id").cast("string"), VALUE_BYTES, "x").cast("binary"))
          & (F.col("topic") == "bench") & F.col("partition").between(0, 7) & (F.col("timestampType") == 0)
          & F.col("headers").isNull()
          & (F.col("key") == F.concat(F.lit("k"), (F.col("id") % 100_000).cast("string")).cast("binary"))
          & (F.col("timestamp") == F.timestamp_millis(F.lit(START_MS) + (F.col("id") * DAY_MS / records).cast("long"))))
    checked = rows.select("id", "partition", "offset", ok.alias("ok"))
    summary = checked.agg(F.count("*").alias("n"), F.countDistinct("id").alias("ids"), F.min("id").alias("low"),
                          F.max("id").alias("high"), F.sum(F.when(F.col("ok"), 0).otherwise(1)).alias("bad"),
                          F.countDistinct("partition", "offset").alias("offsets")).first()
    if (summary.n, summary.ids, summary.low, summary.high, summary.bad, summary.offsets) != (
            records, records, 0, records - 1, 0, records):
        raise SystemExit(f"full scan rows differ from the input: {summary.asDict()} for {records} records")


def _process_tree_cpu() -> dict[str, float]:
    """CPU seconds used so far by this process and its children (Spark's JVM, the Python workers), by
    kind; from /proc (Linux), empty elsewhere."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, cpu, kinds = {}, {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid], cpu[pid] = int(fields[1]), (int(fields[11]) + int(fields[12])) / tick
        kinds[pid] = "jvm" if command.endswith(b"java") else "python"
    tree, grown = {os.getpid()}, True
    while grown:
        grown = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grown = True
    totals: dict[str, float] = {}
    for pid in tree & cpu.keys():
        totals[kinds[pid]] = totals.get(kinds[pid], 0.0) + cpu[pid]
    return totals


def _cpu_since(before: dict[str, float]) -> dict[str, float]:
    return {kind: round(total - before.get(kind, 0.0), 2) for kind, total in _process_tree_cpu().items()}


def _decoder_alone(conf: Path) -> tuple[float, int]:
    """klake's decoder alone, in this one process, over the same segment files: read, frame, check
    the CRCs and decode to Arrow (the reference the full scan's throughput is held against)."""
    config = load_config(conf)
    rows = table_to_rows(Catalog.open(Store(config.catalog_uri, config.storage)).segments(topic="bench"))
    started = time.perf_counter()
    records = 0
    for row in rows:
        data = read_bytes(row.log_key, config.storage)
        headers = scan_batches(data, row.log_key, verify_crc=False).headers
        decoded = decode_checked(data, headers, np.arange(len(headers)), row.log_key)
        records += decoded.to_arrow(headers).num_rows
    return time.perf_counter() - started, records


def main_bench() -> None:
    result = run_cli(run, 256, __doc__, {"repeat": 3})
    print(f"full scan {result['full_scan_mb_per_s']} MB/s; klake's decoder alone on the same files "
          f"{result['decoder_alone_mb_per_s']} MB/s (best of {result['runs']} each; the first figure is the counted scan)")
    for name, key in (("counted", "full_scan"), ("to Parquet", "parquet_scan")):
        print(f"  {name}: {result[key + '_s']} s, {result[key + '_mb_per_s']} MB/s = "
              f"{result[key + '_over_decoder_alone']}x the decoder alone (target >= 0.5x), "
              f"{result[key + '_over_pre_codec']}x the pre-codec {PRE_CODEC_MB_PER_S} MB/s (target >= 10x)")
    print(f"CPU seconds: full scan {result['full_scan_cpu_s']}, to Parquet {result['parquet_scan_cpu_s']}, "
          f"decoder alone {result['decoder_alone_cpu_s']}")
    print(f"1 h of 24 h: {result['window_s']} s vs full scan {result['full_scan_s']} s "
          f"({result['time_ratio_full_over_window']}x); GETs {result['window_get_requests']} vs "
          f"{result['full_get_requests']}; bytes {result['bytes_ratio_full_over_window']}x fewer")


if __name__ == "__main__":
    main_bench()
