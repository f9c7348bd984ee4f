"""What the broker tests share: a klake job run to its report, and one `AvailableNow` run of a streaming source
(klake's or Spark's Kafka source) with its batches and checkpointed offsets."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from jobs.runtime.job_runner import JobSpec, main


def run_job(spec: JobSpec, tmp: Path, *argv: str) -> dict:
    """Run `spec` with `argv`; its report, the run asserted successful."""
    report = tmp / f"{spec.name}-{uuid.uuid4().hex[:6]}.json"
    code = main(spec, [*argv, "--no-progress", "--report", str(report)])
    document = json.loads(report.read_text())
    assert code == 0, document.get("failures")
    return document


def available_now(spark, fmt: str, options: dict[str, str], checkpoint: Path, sources: list | None = None
                  ) -> dict[int, list[dict]]:
    """One AvailableNow run of `fmt` with `options`: each batch's rows (as dicts, in partition and offset order);
    each progress's source entry (offsets, metrics) appended to `sources` if given."""
    batches: dict[int, list[dict]] = {}

    def sink(frame, batch_id: int) -> None:  # noqa: ANN001 - Spark's DataFrame
        batches[batch_id] = [r.asDict(recursive=True) for r in frame.orderBy("partition", "offset").collect()]

    query = (spark.readStream.format(fmt).options(**options).load().writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    if sources is not None:
        sources += [progress.sources[0] for progress in query.recentProgress]
    return batches


def checkpointed_offsets(checkpoint: Path) -> list[dict]:
    """The end offsets of every batch in the checkpoint's offset log (its last line: the source's JSON)."""
    files = sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    return [json.loads(p.read_text().splitlines()[-1]) for p in files]
