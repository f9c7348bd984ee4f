"""What the demo tells: the summary lines it prints, OUT/demo-report.json (the plan, each step's exit
code and report, the checks), and the timeline picture with the demo topics' rows and retention cut-offs."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from engine.catalog.schema import SegmentRow
from jobs.demo.checks import Check
from jobs.demo.generator import CONFIGS, START_MS, TOPICS, BatchFile, DemoPlan
from jobs.demo.pipeline import Pipeline, Snapshots, Storage
from jobs.demo.timeline import SegmentBar, draw_timeline
from kernel.times import format_duration, format_time


def _retention(ms: int) -> str:
    return "unlimited" if ms < 0 else format_duration(ms, precise=True)


def _size(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def _segments(rows: Sequence[SegmentRow]) -> str:
    data = [r for r in rows if r.size_bytes]
    return (f"{len(data)} segments, {_size(sum(r.size_bytes for r in data))}, "
            f"{sum(r.record_count for r in data):,} records")


def _found(scrubbed: dict, name: str) -> int:
    """How many of one finding scrub's report counts (none when scrub did not report)."""
    return scrubbed.get(name, {}).get("count", 0)


def append_lines(plan: DemoPlan, batches: Sequence[BatchFile], pipeline: Pipeline) -> list[str]:
    reports = [pipeline.step(f"append-{b.index:02d}").report for b in batches]
    committed = [r for r in reports if not r.get("results", {}).get("already_committed")]
    rejected: Counter[str] = Counter()
    for report in committed:
        rejected.update(report.get("rejected", {}).get("by_reason", {}))
    retried = pipeline.results("append-00-retry").get("already_committed")
    return [
        f"generated  {plan.days} days from {format_time(START_MS)}: {len(TOPICS)} topics, "
        f"{sum(t.partitions for t in TOPICS)} partitions, {sum(b.records for b in batches):,} records in "
        f"{len(batches)} Parquet batches (keys, tombstones, late and far-future timestamps)",
        f"append     {len(committed)} of {len(batches)} batches committed, "
        f"{sum(r.get('results', {}).get('records_appended', 0) for r in committed):,} records appended, "
        f"{sum(rejected.values())} rejected ({', '.join(f'{k} {v}' for k, v in rejected.items()) or 'none'})"
        + ("" if committed else ": a re-run, every batch was already committed, nothing doubled"),
        "retry      batch 0 again with its job id: " + ("already committed, nothing appended" if retried else "FAILED"),
    ]


def retention_lines(plan: DemoPlan, pipeline: Pipeline, snaps: Snapshots, held: Sequence[SegmentRow]) -> list[str]:
    now = plan.maintenance_now
    gone = {r.segment_id for r in snaps.before_retention} - {r.segment_id for r in snaps.after_retention}
    deleted = [r for r in snaps.before_retention if r.segment_id in gone]
    by_topic = Counter(r.topic for r in deleted)
    return [
        f"roll       {pipeline.results('roll').get('segments_rolled', 0)} idle active segments rolled at {format_time(now)} "
        "(the simulated clock of every maintenance job)",
        f"log        {_segments(snaps.before_retention)} before retention",
        f"retention  deleted {len(deleted)} segments, {_size(sum(r.size_bytes for r in deleted))}, "
        f"{sum(r.record_count for r in deleted):,} records ("
        + ", ".join(f"{t.name} {by_topic[t.name]} past {_retention(CONFIGS[t.name].retention_ms)}" for t in TOPICS) + ")",
        *(held_line(row, now) for row in held),
    ]


def held_line(row: SegmentRow, now: int) -> str:
    until = row.largest_timestamp + CONFIGS[row.topic].retention_ms + 1
    return (f"held back  {row.topic}-{row.partition} @{row.base_offset}: {row.record_count:,} records since "
            f"{format_time(row.base_timestamp)} share a segment with one stamped {format_time(row.largest_timestamp)} "
            f"({format_duration(row.largest_timestamp - now)} ahead): kept until {format_time(until)} (KAFKA-4340)")


def result_lines(plan: DemoPlan, pipeline: Pipeline, snaps: Snapshots, checks: Sequence[Check]) -> list[str]:
    cleaned = pipeline.results("compact")
    read_results = pipeline.results("read").get("read", {})
    topic, start, end = plan.read_range()
    scrubbed = pipeline.results("scrub").get("scrub", {})
    by_name = {c.name: c for c in checks}
    failed = [c for c in checks if not c.ok]
    return [
        f"compact    {cleaned.get('partitions_cleaned', 0)} of {cleaned.get('compacted_topics_partitions', 0)} "
        f"compacted partitions cleaned: {cleaned.get('records_read', 0):,} records read, "
        f"{cleaned.get('records_kept', 0):,} kept (the latest per key), {cleaned.get('records_removed', 0):,} removed",
        f"log        {_segments(snaps.after_compaction)} live now",
        f"lookups    offsets-for-times: {by_name['lookups'].detail}",
        f"read       {topic} [{format_time(start)}, {format_time(end)}): {read_results.get('segments', {}).get('read', 0)} of "
        f"{read_results.get('segments', {}).get('live', 0)} segments read, {by_name['read'].detail}",
        f"scrub      {scrubbed.get('objects_listed', 0)} objects: {_found(scrubbed, 'orphans')} orphans, "
        f"{_found(scrubbed, 'missing')} missing, {_found(scrubbed, 'size_mismatches')} size mismatches",
        "checks     " + ("every figure equals a recomputation from the generated input" if not failed
                         else "FAILED: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)),
    ]


def write_report(path: Path, plan: DemoPlan, storage: Storage, pipeline: Pipeline, checks: Sequence[Check],
                 lines: Sequence[str], elapsed: float) -> None:
    report = {"plan": asdict(plan), "storage": storage.label, "now_ms": plan.maintenance_now,
              "steps": [{"name": s.name, "exit_code": s.code, "seconds": s.seconds,
                         "report": str(pipeline.reports / f"{s.name}.json")} for s in pipeline.steps],
              "checks": [asdict(c) for c in checks], "summary": list(lines), "duration_s": elapsed}
    path.write_text(json.dumps(report, indent=2))


def draw(bars: Sequence[SegmentBar], plan: DemoPlan, path: Path) -> Path:
    cutoffs = {t.name: plan.maintenance_now - CONFIGS[t.name].retention_ms for t in TOPICS
               if CONFIGS[t.name].retention_ms >= 0}
    names = [f"{t.name}-{p}" for t in TOPICS for p in range(t.partitions)]
    labels = {t.name: f"{t.name}: {_retention(CONFIGS[t.name].retention_ms)} retention" for t in TOPICS}
    return draw_timeline(bars, names, cutoffs, plan.maintenance_now, path, labels)
