"""A streaming `AvailableNow` run of `spark.readStream.format("klake")` against the batch read
`spark.read.format("klake")` of the same records (issue 29's acceptance: the stream within 1.2x the batch's time).

Setup (untimed): ~`--mb` MiB of 100-byte records over 8 partitions, appended with the `append` job
(`append_bench`'s input). Timed, interleaved `--repeat` times, best of each kept (the machine may be shared):
(a) batch: every record through the batch source into Spark's `noop` sink (every row built and handed to Spark);
(b) stream: one `Trigger.AvailableNow` run from earliest, on a fresh checkpoint, into the `noop` sink (one
    micro-batch: no `maxOffsetsPerTrigger`).
Checked: the stream's progress reports every record (numInputRows) and the batch source counts them all.

Run: .venv/bin/python benchmarks/stream_bench.py [--mb 1024] [--repeat 3] [--workdir DIR]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from append_bench import VALUE_BYTES, append_input, bench_config, generate_input, run_cli  # noqa: E402

from jobs.klake_source import register  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402

TARGET_RATIO = 1.2


def _batch(spark, root: str) -> float:  # noqa: ANN001
    started = time.perf_counter()
    (spark.read.format("klake").option("root", root).option("subscribe", "bench").load()
     .write.format("noop").mode("overwrite").save())
    return time.perf_counter() - started


def _stream(spark, root: str, checkpoint: Path) -> tuple[float, int]:  # noqa: ANN001
    started = time.perf_counter()
    query = (spark.readStream.format("klake").option("root", root).option("subscribe", "bench")
             .option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.perf_counter() - started
    return seconds, sum(progress["numInputRows"] for progress in query.recentProgress)


def run(mb: int, workdir: Path, repeat: int = 3) -> dict:
    records = mb * 1024 * 1024 // VALUE_BYTES
    conf = bench_config(workdir, "segment.bytes: 134217728", jobs="{batch_bytes: 65536}")
    config = load_config(conf)
    spark = spark_session(config)
    generate_input(spark, workdir / "input", records)
    append_input(conf, workdir / "input", workdir / "append.json")
    register(spark)
    root = config.root
    counted = spark.read.format("klake").option("root", root).option("subscribe", "bench").load().count()
    batch_runs, stream_runs = [], []
    for n in range(repeat):
        batch_runs.append(_batch(spark, root))
        seconds, rows = _stream(spark, root, workdir / f"checkpoint-{n}")
        if rows != records:
            raise SystemExit(f"wrong answer: the stream read {rows} records, expected {records}")
        stream_runs.append(seconds)
    if counted != records:
        raise SystemExit(f"wrong answer: the batch source counts {counted} records, expected {records}")
    batch_s, stream_s = min(batch_runs), min(stream_runs)
    return {"records": records, "mb": mb, "runs": repeat, "batch_s": round(batch_s, 2),
            "stream_available_now_s": round(stream_s, 2), "stream_over_batch": round(stream_s / batch_s, 2)}


def main_bench() -> None:
    result = run_cli(run, 1024, __doc__, {"repeat": 3})
    verdict = "ok" if result["stream_over_batch"] <= TARGET_RATIO else "MISSED"
    print(f"stream AvailableNow {result['stream_available_now_s']} s vs batch {result['batch_s']} s: "
          f"{result['stream_over_batch']}x (target <= {TARGET_RATIO}x) {verdict}")


if __name__ == "__main__":
    main_bench()
