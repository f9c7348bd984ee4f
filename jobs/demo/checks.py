"""The demo's checks: every figure of the jobs' reports, and the catalog they left, compared with what
`expected` computes by brute force from the generated input; a failed check fails the demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.catalog.schema import SegmentRow
from jobs.demo.expected import (
    Model,
    brute_force_lookup,
    by_partition,
    compacted,
    expected_retention,
    final_survivors,
)
from jobs.demo.generator import CONFIGS, DemoPlan
from jobs.demo.pipeline import Pipeline, Snapshots


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def check_appends(model: Model, pipeline: Pipeline, final: list[SegmentRow]) -> Check:
    """Each committed batch appended (and rejected) exactly what the model says; no log is doubled."""
    wrong = []
    for i, (appended, rejected) in enumerate(zip(model.appended, model.rejected, strict=True)):
        report = pipeline.step(f"append-{i:02d}").report
        if report.get("results", {}).get("already_committed"):
            continue
        if report.get("results", {}).get("records_appended") != sum(appended.values()):
            wrong.append(f"batch {i}: {report.get('results')} appended, model {dict(appended)}")
        if report.get("rejected", {}).get("by_reason") != {k: v for k, v in rejected.items() if v}:
            wrong.append(f"batch {i}: rejected {report.get('rejected')}, model {dict(rejected)}")
    ends = {name: rows[-1].next_offset for name, rows in by_partition(final).items()}
    wrong += [f"{name}: log end offset {ends.get(name)}, model {len(log.timestamps)}"
              for name, log in model.logs.items() if ends.get(name) != len(log.timestamps)]
    return Check("appends", not wrong, "; ".join(wrong) or "every log end offset equals the model's")


def reported_holds(pipeline: Pipeline) -> set[str]:
    return {h["segment_id"] for p in pipeline.step("retention").report.get("partitions", [])
            for h in (p.get("outcome") or {}).get("plan", {}).get("held_back_by_future_timestamp", [])}


def check_retention(snaps: Snapshots, now: int, holds: set[str]) -> tuple[Check, list[SegmentRow]]:
    """The segments that left, and those held back, equal the time pass over the rows before; returns the holds."""
    expected, held = [], []
    for rows in by_partition(snaps.before_retention).values():
        gone, hold = expected_retention(rows, CONFIGS[rows[0].topic], now)
        expected += gone
        held += hold
    actual = {r.segment_id for r in snaps.before_retention} - {r.segment_id for r in snaps.after_retention}
    ok = actual == {r.segment_id for r in expected} and holds == {r.segment_id for r in held}
    return Check("retention", ok, f"{len(actual)} segments deleted and {len(holds)} held back; brute force "
                                  f"{len(expected)} and {len(held)}"), held


def check_compaction(model: Model, snaps: Snapshots, pipeline: Pipeline) -> Check:
    """Records removed = live records of compacted topics before - the model's survivors after."""
    before = sum(r.record_count for r in snaps.after_retention if compacted(f"{r.topic}-{r.partition}"))
    after = sum(s.offsets.size for name, s in final_survivors(model, snaps.after_compaction).items()
                if compacted(name))
    reported = pipeline.results("compact").get("records_removed")
    return Check("compaction", reported == before - after, f"{reported} records removed, brute force {before - after}")


def check_segments(model: Model, final: list[SegmentRow]) -> Check:
    """Every live segment holds exactly the model's surviving records of its offset range."""
    kept = final_survivors(model, final)
    wrong = []
    for name, rows in by_partition(final).items():
        offsets = kept[name].offsets
        for row in rows:
            inside = offsets[(offsets >= row.base_offset) & (offsets < row.next_offset)]
            largest = int(model.logs[name].timestamps[inside].max()) if inside.size else row.largest_timestamp
            if row.record_count != inside.size or row.largest_timestamp != largest:
                wrong.append(f"{name}@{row.base_offset}: {row.record_count} records, largest {row.largest_timestamp}; "
                             f"model {inside.size}, {largest}")
    return Check("segments", not wrong, "; ".join(wrong[:3]) or f"{len(final)} live segments equal the model")


def check_lookups(model: Model, final: list[SegmentRow], answers: Sequence[Mapping[str, Any]]) -> Check:
    kept = final_survivors(model, final)

    def expected(a: Mapping[str, Any]) -> tuple[int, int]:
        name = f"{a['topic']}-{a['partition']}"
        return brute_force_lookup(model.logs[name], kept[name].offsets, kept[name].start, a["target"])

    right = sum((a["offset"], a["timestamp"]) == expected(a) for a in answers)
    return Check("lookups", bool(answers) and right == len(answers),
                 f"{right} of {len(answers)} answers equal a brute-force scan")


def check_read(model: Model, final: list[SegmentRow], plan: DemoPlan, output: Path) -> Check:
    topic, start, end = plan.read_range()
    expected = set()
    for name, kept in final_survivors(model, final).items():
        ts = model.logs[name].timestamps[kept.offsets]
        if name.rsplit("-", 1)[0] == topic:
            expected |= {(int(name.rsplit("-", 1)[1]), int(o)) for o in kept.offsets[(ts >= start) & (ts < end)]}
    table = pq.read_table(output) if output.exists() else pa.table({"partition": [], "offset": []})
    actual = set(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))
    return Check("read", actual == expected and len(actual) == table.num_rows,
                 f"{table.num_rows:,} records read, brute force {len(expected):,}")


def check_scrub(pipeline: Pipeline) -> Check:
    found = pipeline.results("scrub").get("scrub", {})
    clean = bool(found) and not any(found[name]["count"] for name in ("missing", "size_mismatches", "orphans"))
    return Check("scrub", clean, "no orphans, missing objects or size mismatches")


def run_checks(model: Model, pipeline: Pipeline, plan: DemoPlan, snaps: Snapshots, out: Path
               ) -> tuple[list[Check], list[SegmentRow]]:
    """Every figure against the model; returns the checks and the brute force's held-back segments."""
    final = snaps.after_compaction
    retention_check, held = check_retention(snaps, plan.maintenance_now, reported_holds(pipeline))
    failed = [s.name for s in pipeline.steps if s.code != 0]
    checks = [
        Check("jobs", not failed, f"failed: {', '.join(failed)}" if failed else f"{len(pipeline.steps)} jobs exited 0"),
        check_appends(model, pipeline, final),
        Check("retry", bool(pipeline.results("append-00-retry").get("already_committed")),
              "the retried append found its commit and appended nothing"),
        retention_check,
        check_compaction(model, snaps, pipeline),
        check_segments(model, final),
        check_lookups(model, final, pipeline.results("offsets-for-times").get("answers", [])),
        check_read(model, final, plan, out / "read" / plan.read_range()[0]),
        check_scrub(pipeline),
    ]
    return checks, held
