"""`klake demo`: the main job end to end, through the Spark jobs, on embedded storage.

It generates several days of a three-topic, six-partition stream (keyed updates and tombstones, late
and far-future timestamps, one LogAppendTime topic) as Parquet files with Spark's Kafka sink columns,
and runs the production jobs on it in one local Spark session: `append` batch by batch (each at its
window's end on a simulated clock), a retried append, then at noon after the last day `roll`,
`retention`, `compact`, `offsets-for-times`, a time-range `read`, `scrub` and `catalog-maintenance`.
Storage is an embedded S3 (a `moto_server` started and stopped by the command, a fresh bucket each
run), or a directory OUT/store with `--local`. Every figure is checked against a recomputation from
the generated input. Output: OUT/reports/*.json (one per job, with its stdout in *.log),
OUT/demo-report.json, and OUT/timeline.png (each partition's segments along time, by fate); with
`--local`, OUT/store and the jobs' configuration for it, OUT/demo.yaml, stay for the README's tour
(the embedded S3, and a configuration pointing at it, end with the run).

Idempotent: the data is a function of the seed and the clock is simulated, so a re-run writes the same
input files; each append's job id is its file's hash, so a re-run (or retry) appends nothing, and roll,
retention and compaction find nothing left to do at the same clock.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from jobs.demo.checks import run_checks
from jobs.demo.expected import build_model
from jobs.demo.generator import DemoPlan, generate, write_batches
from jobs.demo.pipeline import Pipeline, Storage, demo_config, demo_storage, run_pipeline, spark_for
from jobs.demo.report import append_lines, draw, result_lines, retention_lines, write_report
from jobs.demo.state import claim_store, merge_bars, save_state, segment_bars
from jobs.runtime.config import load_config
from jobs.runtime.job_runner import add_command, at_least
from layouts.store.bound import Store


def run_demo(args: argparse.Namespace) -> int:
    started = time.monotonic()
    plan = DemoPlan(args.days, args.records_per_day, args.batches_per_day, args.seed)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with ExitStack() as stack:
        storage = stack.enter_context(demo_storage(args.local, out))
        config_path = stack.enter_context(demo_config(storage, out, args.master))
        config = load_config(config_path)
        store = Store(config.root, config.storage)
        previous = claim_store(storage, store, plan)
        progress(f"klake demo: storage {storage.label}" + ("; it holds this demo already: a re-run" if previous
                                                            is not None else ""))
        table = generate(plan)
        batches = write_batches(table, plan, out / "input")
        model = build_model(table, plan)
        stack.enter_context(spark_for(config))
        pipeline = Pipeline(config_path, out / "reports", progress)
        snaps = run_pipeline(pipeline, batches, plan, config, out)
        checks, held = run_checks(model, pipeline, plan, snaps, out)
        bars = merge_bars(previous or [], segment_bars(snaps, held))
        save_state(storage, store, plan, bars)
    picture = draw(bars, plan, out / "timeline.png")
    lines = [*append_lines(plan, batches, pipeline), *retention_lines(plan, pipeline, snaps, held),
             *result_lines(plan, pipeline, snaps, checks)]
    elapsed = round(time.monotonic() - started, 1)
    lines += [f"output     {out / 'reports'}/*.json, {out / 'demo-report.json'}, timeline {picture}",
              f"explore    {explore(storage, config_path)}", f"done in {elapsed} s; storage: {storage.label}"]
    write_report(out / "demo-report.json", plan, storage, pipeline, checks, lines, elapsed)
    print("\n".join(["", "klake demo summary", *lines]))
    return 0 if all(c.ok for c in checks) else 1


def explore(storage: Storage, config_path: Path) -> str:
    """Where the README's tour goes on from here: this run's store, or how to get one that outlives the run."""
    tour = '(README, "A five-minute tour")'
    if storage.endpoint_url is None:
        return f"the jobs with --conf {config_path}, the catalog {storage.root}/_catalog {tour}"
    return f"the embedded S3 ended with this run; `klake demo --local` keeps a store and its demo.yaml {tour}"


def register(commands: argparse._SubParsersAction) -> None:
    demo = add_command(commands, "demo", "run the main job end to end on embedded storage (no external services)",
                       "Generate days of a three-topic stream and run the jobs on it (append, roll, retention, "
                       "compact, offsets-for-times, read, scrub), checking every figure against a recomputation "
                       "from the input.", "klake demo --local", run_demo)
    demo.add_argument("--local", action="store_true",
                      help="keep the data in OUT/store, with OUT/demo.yaml for the jobs (default: an "
                           "embedded S3, gone at exit)")
    demo.add_argument("--out", default="demo-output", metavar="DIR",
                      help="where everything goes (default demo-output/)")
    demo.add_argument("--days", type=at_least(2), default=4, help="days of data to generate (default 4)")
    demo.add_argument("--records-per-day", type=at_least(10), default=3000,
                      help="records per topic per day (default 3000)")
    demo.add_argument("--batches-per-day", type=int, default=2, choices=(1, 2, 3, 4, 6, 8, 12, 24),
                      help="append jobs per day of data (default 2)")
    demo.add_argument("--seed", type=int, default=7, help="random seed of the generated data (default 7)")
    demo.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
