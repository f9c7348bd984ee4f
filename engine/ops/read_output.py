"""A read's records written as Parquet files by the tasks themselves, committed by the driver (`read --output`).

The tasks already hold the records as Arrow (`engine.ops.read.read_item`), so each writes its own file
with pyarrow: no Arrow -> row -> Parquet round trip through Spark's JVM. The commit follows Spark's file
commit protocol (`FileOutputCommitter`), without the JVM:

1. each task attempt writes its one file under the run's staging directory,
   `{output}/_temporary/{job_id}/`, with a name of its own (task number and attempt), and returns it;
2. only once every task has succeeded (a Spark job returns one result per task, from the attempt that
   succeeded), the driver moves those files to `{output}/part-{task:05d}-{job_id}.snappy.parquet`, then
   deletes whatever else the directory held (an earlier run's files, attempts that failed or lost a
   race), and writes `_SUCCESS` last; with no record at all it writes one empty file with the schema,
   as Spark does, so a reader still finds it;
3. a run that fails deletes its staging directory and leaves the output as it was.

Readers (Spark, pyarrow) ignore names starting with `_` or `.`, so until the commit they see the earlier
run's files only. Memory: a task buffers one row group (`ROW_GROUP_BYTES` of Arrow data) at a time.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from layouts.store import join
from layouts.store.bound import Store

ROW_GROUP_BYTES = 64 * 1024**2
SUCCESS = "_SUCCESS"
STAGING = "_temporary"


def write_parquet(batches: Iterable[pa.RecordBatch], uri: str, schema: pa.Schema, store: Store,
                  columns: Mapping[str, object] | None = None) -> int:
    """Write `batches` as one snappy Parquet file at `uri`, a row group per ~`ROW_GROUP_BYTES` of Arrow data,
    with the per-column writer settings `columns` (`pyarrow.parquet.ParquetWriter` arguments: dictionary,
    statistics, encodings); the number of rows written. Nothing is written when there is no row (the caller
    needs no empty file)."""
    rows, pending, pending_bytes = 0, [], 0
    batches = iter(batches)
    for batch in batches:
        if batch.num_rows:
            pending.append(batch)
            pending_bytes += batch.nbytes
            break
    if not pending:
        return 0
    with store.open_write(uri) as out, pq.ParquetWriter(out, schema, compression="snappy", **(columns or {})) as writer:
        for batch in batches:
            if pending_bytes >= ROW_GROUP_BYTES:
                rows += _flush(writer, pending, schema)
                pending, pending_bytes = [], 0
            pending.append(batch)
            pending_bytes += batch.nbytes
        rows += _flush(writer, pending, schema)
    return rows


def _flush(writer: pq.ParquetWriter, batches: list[pa.RecordBatch], schema: pa.Schema) -> int:
    table = pa.Table.from_batches(batches, schema)
    writer.write_table(table, row_group_size=max(table.num_rows, 1))
    return table.num_rows


@dataclass(frozen=True)
class StagedOutput:
    """One run's Parquet output directory (`store`'s root) and its staging directory (module docstring)."""

    store: Store
    job_id: str

    @property
    def directory(self) -> str:
        return self.store.root

    @property
    def staging(self) -> str:
        return join(self.directory, STAGING, self.job_id)

    def attempt_uri(self, task: int, attempt: int) -> str:
        """Where task `task`'s attempt `attempt` (unique in the Spark application) writes its file."""
        return join(self.staging, f"part-{task:05d}-attempt-{attempt}.snappy.parquet")

    def final_uri(self, task: int) -> str:
        return join(self.directory, f"part-{task:05d}-{self.job_id}.snappy.parquet")

    def commit(self, staged: dict[int, str], schema: pa.Schema) -> list[str]:
        """Publish the succeeded attempts' files (`staged`: task -> file) in place of whatever the directory
        held; the published files' URIs."""
        staging_root = join(self.directory, STAGING)
        before = [info.uri for info in self.store.list_objects()
                  if not info.uri.startswith(staging_root + "/")]
        success = join(self.directory, SUCCESS)
        if success in before:
            self.store.delete(success)
        published = []
        for task, uri in sorted(staged.items()):
            self.store.move(uri, self.final_uri(task))
            published.append(self.final_uri(task))
        if not published:
            empty = io.BytesIO()
            pq.write_table(schema.empty_table(), empty, compression="snappy")
            self.store.write(self.final_uri(0), empty.getvalue())
            published.append(self.final_uri(0))
        self.store.delete_many([uri for uri in before if uri != success and uri not in published])
        self.store.delete_tree(staging_root)  # this run's failed attempts, and any killed run's
        self.store.write(success, b"")
        return published

    def abort(self) -> None:
        """A failed run: its staging directory goes, the output stays as the last committed run left it."""
        self.store.delete_tree(self.staging)
