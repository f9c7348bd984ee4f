"""`append` of ~1 GB of 100-byte records into 8 partitions on local[2], against Spark writing the same
DataFrame to Parquet, in the same run and the same session (issues 5 and 14).

The input (keys k0..k99999, 100-byte values, timestamps over one day) is generated once as Parquet
files, untimed. Timed: (a) Spark reads the input and writes it as Parquet (snappy, Spark's default);
(b) the klake `append` job reads the same input, assigns partitions (murmur2 of the key), encodes v2
batches, rolls segments (segment.bytes 256 MiB), writes `.log`/`.index`/`.timeindex` and commits once.
Both run `--rounds` times (default 2), interleaved, each append into a fresh root and catalog; the best of
each is kept, as the read and codec benchmarks do: the session's Parquet write is warm from generating the
input, while the first append starts its Python workers and their imports (round 1's ratio is printed too).
Prints MB/s of input for both and the ratio append/parquet (time), plus the append report's figures,
and the peak RSS of the largest Spark Python worker during the append (each worker's VmHWM, sampled
until the job ends) against issue 14's bound, 4 x segment.bytes + 300 MB.

Run: .venv/bin/python benchmarks/append_bench.py [--mb 1024] [--partitions 8] [--segment-mb 256] [--rounds 2]
[--workdir DIR]
(issue 14's memory target: --mb 1024 --partitions 1 --segment-mb 128)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs import append  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.job_runner import main  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402

VALUE_BYTES = 100
DAY_MS = 86_400_000
START_MS = 1_790_000_000_000


def generate_input(spark, path: Path, records: int) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    (spark.range(records, numPartitions=8)
     .select(F.concat(F.lit("k"), (F.col("id") % 100_000).cast("string")).cast("binary").alias("key"),
             F.expr(f"cast(rpad(cast(id as string), {VALUE_BYTES}, 'x') as binary)").alias("value"),
             (F.lit(START_MS) + (F.col("id") * DAY_MS / records).cast("long")).alias("timestamp"))
     .write.mode("overwrite").parquet(str(path)))


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench_config(workdir: Path, topic_settings: str, jobs: str = "{}", partitions: int = 8) -> Path:
    """The benchmarks' klake config: local[2], a store under `workdir`, topic `bench` with `partitions`."""
    conf = workdir / "bench.yaml"
    conf.write_text(f"storage: {{root: {workdir / 'store'}}}\nspark: {{master: 'local[2]', conf: "
                    f"{{spark.ui.enabled: 'false', spark.sql.shuffle.partitions: '8'}}}}\njobs: {jobs}\n"
                    f"topic_defaults: {{message.timestamp.before.max.ms: 9223372036854775807, {topic_settings}}}\n"
                    f"topics: {{bench: {{partitions: {partitions}}}}}\n")
    return conf


def append_input(conf: Path, source: Path, report: Path) -> dict:
    """Run the `append` job on `source` (topic `bench`, clock at the end of the generated day); its report."""
    code = main(append.SPEC, ["--conf", str(conf), "--input", str(source), "--topic", "bench",
                              "--now", str(START_MS + DAY_MS), "--report", str(report), "--no-progress"])
    if code != 0:
        raise SystemExit(f"append failed with exit code {code}; see {report}")
    return json.loads(report.read_text())


def run_cli(run: Callable[..., dict], default_mb: int, description: str, counts: dict[str, int] | None = None
            ) -> dict:
    """`--mb` and `--workdir` (a temporary one, removed, by default), and an `--NAME N` option per entry of
    `counts` (its default) passed to `run` by name; prints and returns the figures."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=default_mb, help=f"MiB of 100-byte values (default {default_mb})")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed)")
    for name, default in (counts or {}).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default, help=f"default {default}")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="klake-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = run(args.mb, workdir, **{name: getattr(args, name) for name in counts or {}})
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return result


class WorkerPeaks:
    """The largest peak RSS (VmHWM) of this process's Spark Python workers (descendants running
    `pyspark.daemon` or `pyspark.worker`), sampled every `every_s` until `stop`: VmHWM is each process's
    own high-water mark, so a sample misses nothing of a worker alive at that moment."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.peak_kib = 0
        self._every = every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> WorkerPeaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _poll(self) -> None:
        while True:
            for pid in _descendants(os.getpid()):
                self.peak_kib = max(self.peak_kib, _python_worker_hwm_kib(pid))
            if self._done.wait(self._every):
                return


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _python_worker_hwm_kib(pid: int) -> int:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"pyspark.daemon" not in command and b"pyspark.worker" not in command:  # not the JVM
            return 0
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)


def run(mb: int, workdir: Path, partitions: int = 8, segment_mb: int = 256, rounds: int = 2) -> dict:
    records = mb * 1024 * 1024 // VALUE_BYTES
    conf = bench_config(workdir, f"segment.bytes: {segment_mb << 20}", partitions=partitions)
    spark = spark_session(load_config(conf))
    source = workdir / "input"
    generate_input(spark, source, records)
    input_bytes = records * VALUE_BYTES
    parquet_runs, append_runs, peak_kib, figures, out_mb = [], [], 0, {}, 0.0
    for index in range(rounds):  # interleaved, best of each: round 1's append starts its Python workers cold
        started = time.perf_counter()
        spark.read.parquet(str(source)).write.mode("overwrite").parquet(str(workdir / "parquet-out"))
        parquet_runs.append(time.perf_counter() - started)
        store = workdir / f"round-{index}"  # a fresh root and catalog each round: the same append, not a no-op retry
        store.mkdir()
        round_conf = bench_config(store, f"segment.bytes: {segment_mb << 20}", partitions=partitions)
        started = time.perf_counter()
        with WorkerPeaks() as peaks:
            figures = append_input(round_conf, source, store / "append.json")
        append_runs.append(time.perf_counter() - started)
        peak_kib = max(peak_kib, peaks.peak_kib)
        out_mb = _dir_bytes(store / "store") / 2**20
        shutil.rmtree(store, ignore_errors=True)
    parquet_s, append_s = min(parquet_runs), min(append_runs)
    bound_mb = 4 * segment_mb + 300
    return {"records": records, "input_mb": round(input_bytes / 2**20, 1), "partitions": partitions,
            "segment_mb": segment_mb, "worker_peak_rss_mb": round(peak_kib / 1024, 1),
            "worker_peak_rss_bound_mb": bound_mb, "rounds": rounds,
            "parquet_runs_s": [round(s, 2) for s in parquet_runs], "append_runs_s": [round(s, 2) for s in append_runs],
            "parquet_s": round(parquet_s, 2), "parquet_mb_s": round(input_bytes / 2**20 / parquet_s, 1),
            "parquet_out_mb": round(_dir_bytes(workdir / "parquet-out") / 2**20, 1),
            "append_s": round(append_s, 2), "append_mb_s": round(input_bytes / 2**20 / append_s, 1),
            "append_out_mb": round(out_mb, 1),
            "ratio_append_time_over_parquet": round(append_s / parquet_s, 2),
            "ratio_first_round": round(append_runs[0] / parquet_runs[0], 2),
            "records_appended": figures["results"]["records_appended"],
            "requests": figures["requests"], "commit": figures["commit"]}


def main_bench() -> None:
    result = run_cli(run, 1024, __doc__, {"partitions": 8, "segment_mb": 256, "rounds": 2})
    print(f"append {result['append_mb_s']} MB/s vs Spark Parquet write {result['parquet_mb_s']} MB/s: "
          f"append takes {result['ratio_append_time_over_parquet']}x the Parquet time (target <= 1.5x; best of "
          f"{result['rounds']} interleaved rounds each; round 1 alone {result['ratio_first_round']}x)")
    peak, bound = result["worker_peak_rss_mb"], result["worker_peak_rss_bound_mb"]
    print(f"largest Python worker peak RSS {peak} MB; bound 4 x segment.bytes + 300 MB = {bound} MB: "
          f"{'ok' if 0 < peak <= bound else 'MISSED'}")


if __name__ == "__main__":
    main_bench()
