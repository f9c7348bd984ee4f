"""`read` of a 1-hour window out of 24 hours of a topic, against a full scan of the same topic, in the
same run (issue 5): wall time, object-store GET requests, bytes read and segments pruned.

Setup (untimed): ~`--mb` MiB of 100-byte records spread evenly over 24 hours, appended with the
`append` job into 8 partitions with hourly segments (`segment.ms` 1 h) and 64 KiB batches (a
producer's `batch.size`; a batch spanning hours would span segments' time ranges), so the catalog can prune.
Timed: the `read` job counting (a) the records of hour 12 and (b) every record. The window answer is
checked against the count of generated records whose timestamp falls in the hour.

Run: .venv/bin/python benchmarks/read_bench.py [--mb 256] [--workdir DIR]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from append_bench import DAY_MS, START_MS, VALUE_BYTES, append_input, bench_config, generate_input, run_cli  # noqa: E402

from jobs import read  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.job_runner import main  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402

HOUR_MS = 3_600_000


def _timed_read(conf: Path, report: Path, extra: list[str]) -> tuple[float, dict]:
    started = time.perf_counter()
    code = main(read.SPEC, ["--conf", str(conf), "--topic", "bench", "--report", str(report), "--no-progress", *extra])
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"read failed with exit code {code}; see {report}")
    return seconds, json.loads(report.read_text())["results"]["read"]


def run(mb: int, workdir: Path) -> dict:
    records = mb * 1024 * 1024 // VALUE_BYTES
    conf = bench_config(workdir, "segment.ms: 3600000", jobs="{batch_bytes: 65536}")
    spark = spark_session(load_config(conf))
    generate_input(spark, workdir / "input", records)
    append_input(conf, workdir / "input", workdir / "append.json")
    start, end = START_MS + 12 * HOUR_MS, START_MS + 13 * HOUR_MS
    window_s, window = _timed_read(conf, workdir / "window.json", ["--from", str(start), "--to", str(end)])
    full_s, full = _timed_read(conf, workdir / "full.json", [])
    expected = sum(1 for i in range(records) if start <= START_MS + i * DAY_MS // records < end)
    if window["records"] != expected or full["records"] != records:
        raise SystemExit(f"wrong answer: window {window['records']} (expected {expected}), "
                         f"full {full['records']} (expected {records})")
    return {"records": records, "window_records": window["records"],
            "window_s": round(window_s, 2), "full_scan_s": round(full_s, 2),
            "time_ratio_full_over_window": round(full_s / window_s, 2),
            "window_get_requests": window["get_requests"], "full_get_requests": full["get_requests"],
            "window_bytes_read": window["bytes_read"], "full_bytes_read": full["bytes_read"],
            "bytes_ratio_full_over_window": round(full["bytes_read"] / max(window["bytes_read"], 1), 1),
            "window_segments": window["segments"], "full_segments": full["segments"]}


def main_bench() -> None:
    result = run_cli(run, 256, __doc__)
    print(f"1 h of 24 h: {result['window_s']} s vs full scan {result['full_scan_s']} s "
          f"({result['time_ratio_full_over_window']}x); GETs {result['window_get_requests']} vs "
          f"{result['full_get_requests']}; bytes {result['bytes_ratio_full_over_window']}x fewer")


if __name__ == "__main__":
    main_bench()
