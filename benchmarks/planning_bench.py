"""Roll and compaction dry runs over a large synthetic catalog, through the real `klake roll --dry-run` and
`klake compact --dry-run` jobs (issue 14's Arrow planning beyond retention).

Builds catalog_bench's catalog (`--rows` segments, 20 topics x 10 partitions of one-minute segments, in
`--commits` Delta commits) and makes each partition's last segment ACTIVE (one more commit), with the
clock at the end of the span. Roll: even topics have `segment.ms` 30 s (their active segment, a minute
old, rolls by time), odd ones an hour (it stays). Compact: every topic is `cleanup.policy=compact`; even
topics clean (nothing is cleaned yet: dirty ratio 1), odd ones have `min.compaction.lag.ms` longer than
the span, so nothing is cleanable. Each job runs in a child process (the CLI's own entry), and the
benchmark prints its wall time, the child's peak RSS (the driver: a dry run starts no Spark task and
reads no segment object), the JSON report's and the Parquet side files' sizes and stdout's size against
the targets retention's dry run has (issue 14), and the planning alone (`plan_roll` / `plan_compaction`
over the live rows, in this process, median of 3).

Checks: the reports and side files equal the synthetic catalog's brute-force answer.

Run: .venv/bin/python benchmarks/planning_bench.py [--rows 1000000] [--commits 50]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from catalog_bench import EPOCH_MS, SEGMENT_MS, add_catalog_shape, build  # noqa: E402
from retention_bench import TARGETS, run_job, verdict  # noqa: E402

from engine.catalog.changes import CatalogChange  # noqa: E402
from engine.catalog.schema import SegmentState, table_to_rows  # noqa: E402
from engine.cleaner.selection import SegmentZone, plan_compaction  # noqa: E402
from engine.log.plan_columns import group_partitions  # noqa: E402
from engine.log.roll_plan import plan_roll  # noqa: E402
from engine.log.topic_config import TopicConfig  # noqa: E402
from engine.ops.catalog_table import Catalog  # noqa: E402
from layouts.object_layout import new_segment_id  # noqa: E402
from layouts.store.bound import Store

HOUR_MS = 3_600_000


def activate_last_segments(catalog: Catalog) -> int:
    """Each partition's last row becomes its ACTIVE segment (a new row version, under a new id), in one commit."""
    live, groups = group_partitions(catalog.segments())
    rows = table_to_rows(live.take(groups.ends - 1))
    catalog.apply(CatalogChange(add=tuple(replace(r, segment_id=new_segment_id(), state=str(SegmentState.ACTIVE))
                                          for r in rows),
                                remove=tuple(r.ref for r in rows)), operation="bench-activate")
    return len(rows)


def median_s(plan: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        plan()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def job(name: str, conf: Path, now: int, workdir: Path) -> dict:
    report = workdir / f"{name}.json"
    wall_s, rss_mb, done = run_job([name, "--dry-run", "--conf", str(conf), "--now", str(now), "--report",
                                    str(report), "--no-progress"], workdir)
    data = json.loads(report.read_text())
    files = {k: Path(v["path"]) for k, v in data["results"]["files"].items()}
    return {"wall_s": round(wall_s, 2), "driver_rss_mb": round(rss_mb, 1),
            "report_mb": round(report.stat().st_size / 2**20, 3),
            "side_files_mb": round(sum(p.stat().st_size for p in files.values()) / 2**20, 2),
            "stdout_kb": round(len(done.stdout) / 1024, 1), "stdout": done.stdout, "data": data, "files": files}


def run(rows: int, commits: int, topics: int, partitions: int, workdir: Path) -> dict:
    catalog_uri, root = workdir / "catalog", workdir / "root"
    started = time.perf_counter()
    per_partition = build(str(catalog_uri), rows, topics, partitions, commits)
    catalog = Catalog.open(Store(str(catalog_uri)))
    activated = activate_last_segments(catalog)
    built_s = time.perf_counter() - started
    now = EPOCH_MS + per_partition * SEGMENT_MS
    names = [f"topic-{t:03d}" for t in range(topics)]
    root.mkdir(parents=True, exist_ok=True)
    base = f"storage: {{root: {root}}}\ncatalog: {{uri: {catalog_uri}}}\n"
    roll_settings = {t: {"partitions": partitions, "segment.ms": 30_000 if i % 2 == 0 else HOUR_MS}
                     for i, t in enumerate(names)}
    span = per_partition * SEGMENT_MS
    compact_settings = {t: {"partitions": partitions, "cleanup.policy": "compact"}
                        | ({} if i % 2 == 0 else {"min.compaction.lag.ms": 2 * span}) for i, t in enumerate(names)}
    (workdir / "roll.yaml").write_text(base + f"topics: {json.dumps(roll_settings)}\n")
    (workdir / "compact.yaml").write_text(base + f"topics: {json.dumps(compact_settings)}\n")

    live = catalog.segments()
    roll_configs = {t: TopicConfig(segment_ms=s["segment.ms"]) for t, s in roll_settings.items()}
    compact_configs = {t: TopicConfig(cleanup_policy="compact", min_compaction_lag_ms=s.get("min.compaction.lag.ms", 0))
                       for t, s in compact_settings.items()}
    roll_plan_s = median_s(lambda: plan_roll(live, roll_configs, now))
    compact_plan_s = median_s(lambda: plan_compaction(live, compact_configs, now))
    total, half = live.num_rows, topics // 2 + topics % 2

    roll = job("roll", workdir / "roll.yaml", now, workdir)
    compact = job("compact", workdir / "compact.yaml", now, workdir)
    roll_side = pq.read_table(roll["files"]["partitions"], columns=["topic", "action", "reason"])
    zones = pq.read_table(compact["files"]["segments"], columns=["topic", "zone"])
    even = pc.is_in(zones["topic"], pc.cast(names[::2], "string"))
    cleanable = pc.equal(zones["zone"].cast("string"), str(SegmentZone.CLEANABLE))
    expect_due = half * partitions
    checks = {
        "last segments made ACTIVE": activated == topics * partitions,
        "roll: rolls the even topics": roll["data"]["results"]["segments_rolled"] == expect_due,
        "roll: side file has every partition": roll_side.num_rows == topics * partitions,
        "roll: by time": set(roll_side.filter(pc.equal(roll_side["action"].cast("string"), "roll"))[
            "reason"].cast("string").to_pylist()) == {"now - first batch timestamp > segment.ms - jitter"},
        "compact: the even topics are due": compact["data"]["results"]["partitions_due"] == expect_due,
        "compact: side file has every segment": zones.num_rows == total,
        "compact: every closed segment of an even topic is cleanable, nothing else":
            pc.sum(cleanable).as_py() == pc.sum(even).as_py() - expect_due
            and pc.all(pc.invert(pc.and_(cleanable, pc.invert(even)))).as_py(),
    }
    return {"rows": total, "partitions": topics * partitions, "built_s": round(built_s, 1),
            "roll_plan_s": round(roll_plan_s, 3), "compact_plan_s": round(compact_plan_s, 3),
            "roll": roll, "compact": compact, "checks": checks}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_catalog_shape(parser)
    parser.add_argument("--dir", type=Path, help="where to build the catalog (default: a temporary directory, removed)")
    args = parser.parse_args()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="klake-planning-bench-"))
    shutil.rmtree(workdir / "catalog", ignore_errors=True)
    try:
        r = run(args.rows, args.commits, args.topics, args.partitions, workdir)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"catalog: {r['rows']:,} live segments in {r['partitions']} partitions (built in {r['built_s']} s); "
          "each partition's last segment ACTIVE")
    for name in ("roll", "compact"):
        j = r[name]
        tail = [line for line in j["stdout"].rstrip().splitlines() if not line.startswith("topic-")]
        print(f"{name} job stdout ({len(j['stdout'].splitlines())} lines; its partition lines left out here):\n  "
              + "\n  ".join(tail))
        print(f"{name} dry run: wall {j['wall_s']} s (target <= {TARGETS['wall_s']:g} s) "
              f"{verdict(j['wall_s'], TARGETS['wall_s'])}")
        print(f"{name} driver peak RSS {j['driver_rss_mb']} MB (target <= {TARGETS['driver_rss_mb']:g} MB) "
              f"{verdict(j['driver_rss_mb'], TARGETS['driver_rss_mb'])}")
        print(f"{name} report {j['report_mb']} MB (target <= {TARGETS['report_mb']:g} MB) "
              f"{verdict(j['report_mb'], TARGETS['report_mb'])}; side files {j['side_files_mb']} MB Parquet; "
              f"stdout {j['stdout_kb']} KB")
        plan_s = r[f"{name}_plan_s"]
        print(f"{name} planning alone {plan_s} s (goal < {TARGETS['plan_s']:g} s) {verdict(plan_s, TARGETS['plan_s'])}")
    failed = [name for name, ok in r["checks"].items() if not ok]
    print("checks: all passed" if not failed else f"checks FAILED: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
