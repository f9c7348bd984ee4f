"""What an append says: its report's counts and summary lines, apart from the job that decides them
(`jobs.append`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.ops.append import PartitionAppendOutcome
from engine.ops.run import JobRun
from jobs.ingest.append_task import tally
from jobs.runtime.report import plural

if TYPE_CHECKING:
    from jobs.runtime.job_runner import JobContext


def report_append(ctx: JobContext, run_: JobRun[PartitionAppendOutcome], rows: list[dict], where: str | None) -> None:
    """Appended and rejected records of the partitions this attempt committed; held-back records of the
    others (the run fails, so the scheduler retries with the same job id)."""
    t = tally(rows, run_)
    count = sum(t.by_reason.values())
    ctx.report.rejected = {"count": count, "by_reason": dict(t.by_reason), "path": where if count else None}
    ctx.report.results.update({"records_in": t.received, "records_appended": 0 if ctx.dry_run else t.appended,
                               "appended_by_earlier_attempt": t.earlier, "not_yet_appended": dict(t.pending),
                               "already_committed": bool(run_.committed_earlier) and not run_.results
                               and not run_.failures})
    reasons = ', '.join(f'{k} {v}' for k, v in sorted(t.by_reason.items()))
    if ctx.dry_run:
        ctx.report.results |= {"records_to_append": t.appended, "segment_versions_to_write": t.versions}
        line = (f"append: would append {t.appended} of {t.received} record(s) in "
                f"{plural(t.versions, 'segment version')}" + (f"; would reject {count} ({reasons})" if count else ""))
    else:
        line = f"append: {t.appended} of {t.received} record(s) appended"
    if t.earlier:
        line += f"; {t.earlier} appended earlier by job {ctx.job_id}"
    if count and where is not None:
        line += f"; {count} rejected ({reasons}) -> {where}"
    ctx.report.summary.append(line)
    if t.pending:
        ctx.report.summary.append(
            f"append: {sum(t.pending.values())} record(s) of {', '.join(sorted(t.pending))} not yet appended: "
            f"re-run with --job-id {ctx.job_id} to append exactly those")
