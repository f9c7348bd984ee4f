"""Retention dry run over a large synthetic catalog, through the real `klake retention --dry-run` job.

Builds catalog_bench's catalog (`--rows` segments, 20 topics x 10 partitions of one-minute segments, in
`--commits` Delta commits), sets `retention.ms` to half of each partition's span and the clock to its
end, so half of every partition's segments are past retention. Then runs the job in a child process
(`klake retention --dry-run --report ...`, the CLI's own entry) and prints its wall time, the child's peak
RSS (the driver: a dry run starts no Spark task and reads no segment object), the JSON report's size,
the Parquet side file's size and stdout's size against the targets of issue 14, and the planning alone
(`plan_retention` over the live rows, in this process, median of 3) against its goal. The reference measured in the
same run is a bare read of the live rows (`Catalog.segments()`): the job's wall time is printed as a
multiple of it.

Checks: the report's totals and the side file's decisions equal the synthetic catalog's brute-force
answer (segments with sequence number < per-partition/2 go, by the time pass).

`--real` runs the job for real instead (local Spark, `--master local[2]`): every row's three objects
exist as tiny files on local disk, the job deletes the old half through the catalog's two-phase delete,
and the checks add that exactly the old half's objects are gone, the rest are there, and the catalog's
live rows are the kept half. Issue 14 sets no target for a real run: its figures are printed as they are.

Run: .venv/bin/python benchmarks/retention_bench.py [--rows 1000000] [--commits 50] [--real]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from catalog_bench import EPOCH_MS, SEGMENT_MS, add_catalog_shape, build  # noqa: E402

from engine.log.retention import plan_retention  # noqa: E402
from engine.log.topic_config import TopicConfig  # noqa: E402
from engine.ops.catalog_table import Catalog  # noqa: E402
from layouts.store.bound import Store

TARGETS = {"wall_s": 10.0, "driver_rss_mb": 1024.0, "report_mb": 10.0, "plan_s": 1.0}
PROJECT = Path(__file__).resolve().parent.parent


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "MISSED"


def run_job(args: list[str], workdir: Path) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `klake <args>` (the CLI's own entry) in a child process: its wall time in s, its peak RSS in MB
    (the driver: a dry run starts no Spark task), and the finished process (SystemExit if it failed)."""
    peak = workdir / "peak_rss_kib"
    argv = ["klake", *args]
    # the child writes its own peak RSS (VmHWM, of its own address space): its ru_maxrss would count this
    # process's pages too, as Linux carries the high-water mark of the forked image across exec
    child = (f"import re, runpy, sys; sys.argv = {argv!r}\n"
             "try:\n    runpy.run_module('jobs.cli.main', run_name='__main__')\n"
             f"finally:\n    open({str(peak)!r}, 'w').write("
             "re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1))\n")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=PROJECT, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:2])} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return wall_s, int(peak.read_text()) / 1024, done  # KiB on Linux


def write_objects(live: pa.Table) -> float:
    """Every live row's `.log`, `.index` and `.timeindex` as a one-byte file (retention reads none of
    them; it deletes them); the seconds it took."""
    started = time.perf_counter()
    for column in ("log_key", "index_key", "timeindex_key"):
        for key in live[column].to_pylist():
            path = Path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x")
    return time.perf_counter() - started


def run(rows: int, commits: int, topics: int, partitions: int, workdir: Path, real: bool = False) -> dict:
    catalog_uri, root = workdir / "catalog", workdir / "root"
    started = time.perf_counter()
    per_partition = build(str(catalog_uri), rows, topics, partitions, commits,
                          **({"root": str(root)} if real else {}))
    catalog = Catalog.open(Store(str(catalog_uri)))
    built_s = time.perf_counter() - started
    retention_ms = per_partition // 2 * SEGMENT_MS
    now = EPOCH_MS + per_partition * SEGMENT_MS
    conf = workdir / "retention.yaml"
    declared = ", ".join(f"topic-{t:03d}: {{partitions: {partitions}}}" for t in range(topics))
    conf.write_text(f"storage: {{root: {root}}}\ncatalog: {{uri: {catalog_uri}}}\n"
                    f"topic_defaults: {{retention.ms: {retention_ms}}}\ntopics: {{{declared}}}\n")
    root.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    live = catalog.segments()
    read_s = time.perf_counter() - started
    configs = {f"topic-{t:03d}": TopicConfig(retention_ms=retention_ms) for t in range(topics)}
    times = []
    for _ in range(3):
        started = time.perf_counter()
        plan = plan_retention(live, configs, now)
        times.append(time.perf_counter() - started)
    plan_s = statistics.median(times)

    objects_s = write_objects(live) if real else 0.0
    report = workdir / "retention.json"
    mode = ["--master", "local[2]"] if real else ["--dry-run"]
    wall_s, rss_mb, done = run_job(["retention", *mode, "--conf", str(conf), "--now", str(now), "--report",
                                    str(report), "--no-progress"], workdir)

    data = json.loads(report.read_text())
    side = Path(data["results"]["files"]["segments"]["path"])
    decisions = pq.read_table(side, columns=["segment_id", "action", "decided_by"])
    total = live.num_rows
    doomed_ids = live.filter(pc.less(live["base_offset"], per_partition // 2 * 1_000))["segment_id"]
    checks = {
        "plan in this process deletes half": plan.segments_to_delete == total // 2,
        "report's partitions": len(data["partitions"]) == topics * partitions,
        "report's totals": sum(p["outcome"]["plan"]["totals"]["segments"] for p in data["partitions"]) == total // 2,
        "side file has every segment": decisions.num_rows == total,
        "side file deletes exactly the old half": sorted(decisions.filter(pc.equal(decisions["action"], "delete"))[
            "segment_id"].to_pylist()) == sorted(doomed_ids.to_pylist()),
        "by the time pass": set(decisions.filter(pc.equal(decisions["action"], "delete"))["decided_by"].to_pylist())
        == {"time"},
    }
    if real:
        doomed = set(doomed_ids.to_pylist())
        kept = live.filter(pc.invert(pc.is_in(live["segment_id"], value_set=doomed_ids)))
        present = {str(p) for p in root.glob("topic-*/*") if p.is_file()}  # segment objects, not leases
        after = Catalog.open(Store(str(catalog_uri))).segments()
        checks |= {
            "report: deleted half": data["results"]["segments_deleted"] == total // 2,
            "objects of the old half gone, the rest there": present == {
                key for column in ("log_key", "index_key", "timeindex_key") for key in kept[column].to_pylist()},
            "catalog's live rows are the kept half": sorted(after["segment_id"].to_pylist())
            == sorted(i for i in live["segment_id"].to_pylist() if i not in doomed),
        }
    return {"rows": total, "partitions": topics * partitions, "built_s": round(built_s, 1),
            "catalog_read_s": round(read_s, 3), "plan_s": round(plan_s, 3), "wall_s": round(wall_s, 2),
            "driver_rss_mb": round(rss_mb, 1), "report_mb": round(report.stat().st_size / 2**20, 3),
            "side_file_mb": round(side.stat().st_size / 2**20, 2), "stdout_kb": round(len(done.stdout) / 1024, 1),
            "ratio_wall_over_catalog_read": round(wall_s / read_s, 1), "checks": checks, "stdout": done.stdout,
            "objects_s": round(objects_s, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_catalog_shape(parser)
    parser.add_argument("--dir", type=Path, help="where to build the catalog (default: a temporary directory, removed)")
    parser.add_argument("--real", action="store_true",
                        help="delete for real (local Spark) over tiny segment objects on local disk, not a dry run")
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="klake-retention-bench-"))
    shutil.rmtree(workdir / "catalog", ignore_errors=True)
    try:
        r = run(args.rows, args.commits, args.topics, args.partitions, workdir, args.real)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"catalog: {r['rows']:,} live segments in {r['partitions']} partitions (built in {r['built_s']} s); "
          f"half of each partition past retention.ms")
    print("job stdout:\n  " + "\n  ".join(r["stdout"].rstrip().splitlines()))
    if args.real:
        print(f"retention run (real deletes, local[2], {3 * r['rows']:,} objects written in {r['objects_s']} s): "
              f"wall {r['wall_s']} s, driver peak RSS {r['driver_rss_mb']} MB, report {r['report_mb']} MB, "
              f"side file {r['side_file_mb']} MB; no target for a real run (issue 14's are for the dry run)")
    else:
        print(f"retention dry run: wall {r['wall_s']} s (target <= {TARGETS['wall_s']:g} s) "
              f"{verdict(r['wall_s'], TARGETS['wall_s'])}")
        print(f"driver peak RSS {r['driver_rss_mb']} MB (target <= {TARGETS['driver_rss_mb']:g} MB) "
              f"{verdict(r['driver_rss_mb'], TARGETS['driver_rss_mb'])}")
        print(f"report {r['report_mb']} MB (target <= {TARGETS['report_mb']:g} MB) "
              f"{verdict(r['report_mb'], TARGETS['report_mb'])}; side file {r['side_file_mb']} MB Parquet; "
              f"stdout {r['stdout_kb']} KB")
    print(f"planning alone {r['plan_s']} s (goal < {TARGETS['plan_s']:g} s) {verdict(r['plan_s'], TARGETS['plan_s'])}; "
          f"reference: reading the live rows {r['catalog_read_s']} s; the job takes "
          f"{r['ratio_wall_over_catalog_read']}x that")
    failed = [name for name, ok in r["checks"].items() if not ok]
    print("checks: all passed" if not failed else f"checks FAILED: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
