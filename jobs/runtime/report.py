"""A job's JSON run report: what it touched, moved and decided, and what went wrong.

Fields: job, job_id, status (succeeded/failed), dry_run, now_ms, started_at, duration_s, config (secrets
hidden), partitions (one entry per partition: status, error, outcome, requests, bytes, seconds),
failures, requests (object-store requests by verb: every request of the run, the driver's own and its
tasks', but not the catalog's, which delta-rs makes in Rust), bytes (read/written), commit (version, attempts,
conflicts), rejected (count, by reason, where the rejected records were written), anomalies, results
(job-specific answers such as lookups; `files`: the side files written next to the report), summary (the
lines printed on stdout). Per-item detail too large for JSON (a plan's decision for every segment) goes
to Parquet side files next to the report, `<report>.<name>.parquet`; `details` (--verbose) is printed
before the summary and kept out of the JSON.
"""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from engine.ops.run import JobRun
from layouts.store.bound import Store

SUCCEEDED, FAILED = "succeeded", "failed"


class ReportedPlan(Protocol):
    """A driver plan as the report shows it (`RetentionPlan`, `RollPlan`, `CompactionPlan`)."""

    def side_files(self) -> dict[str, pa.Table]: ...

    def totals(self) -> dict[str, Any]: ...


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 segment`, `2 segments` (`nouns` when the plural is not noun + "s"): counts in output read right."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


@dataclass
class RunReport:
    job: str
    job_id: str
    dry_run: bool
    now_ms: int
    config: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)
    commit: dict[str, Any] = field(default_factory=dict)
    rejected: dict[str, Any] = field(default_factory=lambda: {"count": 0, "by_reason": {}, "path": None})
    anomalies: list[str] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)
    duration_s: float | None = None
    side_files: dict[str, pa.Table] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return FAILED if self.failures else SUCCEEDED

    def fail(self, where: str, error: str) -> None:
        """Record a failure; a partition already reported as succeeded becomes failed (never both)."""
        self.failures.append({"partition": where, "error": error})
        for entry in self.partitions:
            if entry["partition"] == where and entry["status"] == SUCCEEDED:
                entry["status"], entry["error"] = FAILED, error

    def add_plan(self, plan: ReportedPlan) -> None:
        """A driver plan's detail to its Parquet side files (one row per segment or partition, written next
        to the report) and its counts by reason to the summary, most frequent first."""
        self.side_files.update(plan.side_files())
        self.summary += [f"  {count:>12,}  {reason}" for reason, count in plan.totals()["by_reason"].items()]

    def add_run(self, run: JobRun[Any]) -> None:
        """Fold an engine `JobRun` in: per-partition outcomes (with each task's traffic), failures, the commit.
        The run's total traffic is the job's meter's (`job_runner.run_job`), which already holds it."""
        by_tp = {str(r.tp): r for r in run.results}
        for name, error in run.failures.items():
            if name not in by_tp:
                self.partitions.append({"partition": name, "status": FAILED, "error": error})
        for name, result in by_tp.items():
            error = run.failures.get(name)
            outcome = result.step.outcome.to_dict() if result.step is not None else None
            self.partitions.append({"partition": name, "status": FAILED if error else SUCCEEDED, "error": error,
                                    "outcome": outcome, "requests": result.requests, "bytes": result.bytes,
                                    "seconds": round(result.seconds, 3)})
        for name, error in sorted(run.failures.items()):
            self.fail(name, error)
        if run.commit is not None:
            self.commit = {"version": run.commit.version, "attempts": run.commit.attempts,
                           "conflicts": max(run.commit.attempts - 1, 0), "added": run.commit.added,
                           "removed": run.commit.removed, "transitioned": run.commit.transitioned}
        if run.committed_earlier:
            self.results["committed_earlier"] = [str(tp) for tp in run.committed_earlier]
        for name, job_id in sorted(run.spent_leases.items()):
            self.summary.append(f"{run.operation}: {name}: took over the lease of job {job_id}, which committed the "
                                "partition and was stopped before releasing it (it has no work after its commit)")
        cleanup = run.cleanup
        self.results["cleanup"] = {"deleted_objects": len(cleanup.deleted_objects),
                                   "left_in_place": cleanup.left_in_place,
                                   "external_deleted": cleanup.external_deleted,
                                   "failed_deletes": cleanup.failed_deletes,
                                   "commit_versions": cleanup.commit_versions,
                                   "finished_from_earlier_run": run.finished_from_earlier_run}
        if cleanup.left_in_place:
            self.summary.append(f"left in place: {plural(len(cleanup.left_in_place), 'object')} of deleted segments "
                                "outside the root (imported in place, or another root's); --allow-external-deletes "
                                "deletes them (results.cleanup.left_in_place lists them)")
        if cleanup.external_deleted:
            self.summary.append(f"deleted {plural(len(cleanup.external_deleted), 'object')} outside the root "
                                "(--allow-external-deletes; results.cleanup.external_deleted lists them)")
        for uri, reason in cleanup.failed_deletes.items():
            self.anomalies.append(f"could not delete {uri}: {reason} (the scrub job will retry)")

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "job_id": self.job_id, "status": self.status, "dry_run": self.dry_run,
                "now_ms": self.now_ms, "started_at": datetime.fromtimestamp(self.started, UTC).isoformat(),
                "duration_s": self.duration_s, "config": self.config, "partitions": self.partitions,
                "failures": self.failures, "requests": dict(self.requests), "bytes": dict(self.bytes),
                "commit": self.commit, "rejected": self.rejected, "anomalies": self.anomalies,
                "results": self.results, "summary": "\n".join(self.summary)}

    def finish(self) -> None:
        self.duration_s = round(time.time() - self.started, 3)
        touched = sum(1 for p in self.partitions if p["status"] == SUCCEEDED)
        failed = len({f["partition"] for f in self.failures})
        verbs = ", ".join(f"{n} {verb}" for verb, n in sorted(self.requests.items())) or "none"
        self.summary.append(
            f"{self.job} {self.status}{' (dry run)' if self.dry_run else ''}: {touched} partition(s) ok, "
            f"{failed} failed; read {self.bytes.get('read', 0):,} B, wrote {self.bytes.get('written', 0):,} B; "
            f"requests: {verbs}; {self.duration_s:.1f} s; job id {self.job_id}")
        self.summary += [f"FAILED {f['partition']}: {f['error']}" for f in self.failures]
        self.summary += [f"anomaly: {a}" for a in self.anomalies]

    def write(self, uri: str, store: Store) -> None:
        """Write the report as JSON (local path or s3://), replacing an earlier attempt's report, and its
        side files as Parquet next to it (`retention.json` -> `retention.segments.parquet`); `store` reaches it
        (the job's own, with its storage settings)."""
        stem = uri[:-len(".json")] if uri.endswith(".json") else uri
        for name, table in self.side_files.items():
            buffer = io.BytesIO()
            pq.write_table(table, buffer, compression="zstd")
            path = f"{stem}.{name}.parquet"
            store.write(path, buffer.getvalue())
            self.results.setdefault("files", {})[name] = {"path": path, "rows": table.num_rows,
                                                          "bytes": buffer.tell()}
            self.summary.append(f"{name}: {plural(table.num_rows, 'row')} in {path}")
        store.write(uri, json.dumps(self.to_dict(), indent=2, default=str).encode())
