"""The engine's operations on one partition, run in this process with the same protocol as a job over
many partitions (`engine.ops.run.run_single_partition`): the tests' way to append, compact, retain,
truncate and export without Spark. Test-only, so they live here and not in the product (issue 28)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import partial

import pyarrow as pa

from engine.log.topic_config import TopicConfig
from engine.ops.append import PartitionAppendOutcome, prepare_append
from engine.ops.catalog_table import Catalog
from engine.ops.compact import CompactionPlanner, CompactOutcome, prepare_compaction
from engine.ops.export import (
    ExportRange,
    ExportReport,
    check_output,
    prepare_export,
    report_of,
    write_checkpoints,
)
from engine.ops.retention import RetentionOutcome, RetentionPlanner, prepare_retention
from engine.ops.run import Prepare, run_partition_job, run_single_partition, serial_execute
from engine.ops.truncate import TruncateOutcome, prepare_delete_records, prepare_truncation
from kernel.names import TopicPartition
from layouts.store import StorageOptions, normalize_uri
from layouts.store.bound import Store

_WHOLE_LOG = ExportRange()


def append_to_partition(catalog: Catalog, root: str, tp: TopicPartition, records: pa.Table, config: TopicConfig,
                        now_ms: int, options: StorageOptions | None = None,
                        append_id: str | None = None) -> PartitionAppendOutcome:
    """Append `records` (Spark's Kafka sink columns) to `tp` and commit; see the module docstring."""
    append_id = append_id or uuid.uuid4().hex
    root = normalize_uri(root)
    prepare = partial(prepare_append, records=records, store=Store(root, options), now_ms=now_ms,
                      append_id=append_id)
    run = run_single_partition(catalog, Store(root, options), tp, config, prepare, operation="append", job_id=append_id, ledger_idle=True)
    if tp in run.committed_earlier:
        return PartitionAppendOutcome(tp.topic, tp.partition, append_id, already_committed=True)
    outcome = run.outcome(tp)
    outcome.commit_version = run.commit.version if run.commit else None
    return outcome


def compact_partition(catalog: Catalog, root: str, tp: TopicPartition, config: TopicConfig, now_ms: int,
                      options: StorageOptions | None = None, force: bool = False,
                      job_id: str | None = None, dry_run: bool = False) -> CompactOutcome:
    """Run one cleaning round on `tp` if Kafka's trigger says so (or `force`), committed in one swap."""
    job_id = job_id or uuid.uuid4().hex
    root = normalize_uri(root)
    prepare = partial(prepare_compaction, store=Store(root, options), now_ms=now_ms, job_id=job_id, dry_run=dry_run)
    run = run_single_partition(catalog, Store(root, options), tp, config, prepare, operation="compact", job_id=job_id, mutate=not dry_run, planner=CompactionPlanner(now_ms, force), deletes_after_commit=True)
    outcome = run.outcome(tp)
    outcome.cleanup = run.cleanup
    return outcome


def apply_retention(catalog: Catalog, root: str, tp: TopicPartition, config: TopicConfig, now_ms: int,
                    options: StorageOptions | None = None, dry_run: bool = False,
                    job_id: str | None = None, allow_external_deletes: bool = False) -> RetentionOutcome:
    """Plan and (unless `dry_run`) apply retention to one partition; `allow_external_deletes` also deletes the
    retired objects outside the root (`engine.ops.deletion`)."""
    job_id = job_id or uuid.uuid4().hex
    root = normalize_uri(root)
    prepare = partial(prepare_retention, store=Store(root, options), now_ms=now_ms, job_id=job_id, dry_run=dry_run)
    run = run_single_partition(catalog, Store(root, options), tp, config, prepare, operation="retention", job_id=job_id, mutate=not dry_run, planner=RetentionPlanner(now_ms), allow_external_deletes=allow_external_deletes, deletes_after_commit=True)
    outcome = run.outcome(tp)
    outcome.cleanup = run.cleanup
    outcome.finished_from_earlier_run = run.finished_from_earlier_run.get(str(tp), 0)
    return outcome


def _run_single(catalog: Catalog, root: str, tp: TopicPartition, config: TopicConfig, prepare: Prepare[TruncateOutcome],
                operation: str, job_id: str, options: StorageOptions | None) -> TruncateOutcome:
    run = run_single_partition(catalog, Store(root, options), tp, config, prepare, operation=operation, job_id=job_id,
                               deletes_after_commit=True)
    outcome = run.outcome(tp)
    outcome.cleanup = run.cleanup
    return outcome


def truncate_partition(catalog: Catalog, root: str, tp: TopicPartition, target: int, config: TopicConfig,
                       now_ms: int, options: StorageOptions | None = None,
                       job_id: str | None = None) -> TruncateOutcome:
    """Remove every record at or above `target` (see the module docstring)."""
    job_id = job_id or uuid.uuid4().hex
    root = normalize_uri(root)
    prepare = partial(prepare_truncation, store=Store(root, options), targets={tp: target}, now_ms=now_ms, job_id=job_id)
    return _run_single(catalog, root, tp, config, prepare, "truncate", job_id, options)


def delete_records(catalog: Catalog, root: str, tp: TopicPartition, offset: int, now_ms: int,
                   options: StorageOptions | None = None, job_id: str | None = None) -> TruncateOutcome:
    """Raise the log start offset to `offset` (KIP-107) and retire the whole segments below it."""
    job_id = job_id or uuid.uuid4().hex
    prepare = partial(prepare_delete_records, offsets={tp: offset}, job_id=job_id)
    return _run_single(catalog, normalize_uri(root), tp, TopicConfig(), prepare, "delete-records", job_id, options)


def export_log_dir(catalog: Catalog, root: str, configs: Mapping[TopicPartition, TopicConfig], output: str,
                   rng: ExportRange = _WHOLE_LOG, topic_ids: Mapping[str, str] | None = None,
                   options: StorageOptions | None = None) -> ExportReport:
    """Export the partitions in `configs` to `output`, in this process (the job runs the partitions as
    Spark tasks through the same `prepare_export`)."""
    output = check_output(output, root, catalog.uri)
    source, destination = Store(root, options), Store(output, options)
    prepare = partial(prepare_export, source=source, output=destination, rng=rng, topic_ids=dict(topic_ids or {}))
    run = run_partition_job(catalog, source, configs, serial_execute(prepare), operation="export", job_id="export", mutate=False, ledger=False)
    report = report_of(output, run)
    report.checkpoints_written = write_checkpoints(destination, report.partitions)
    return report


