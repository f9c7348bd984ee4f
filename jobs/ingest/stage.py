"""An append's input tasks staging their rows by topic-partition (`engine.ops.append_staging`), without a
shuffle (issue 14), the size of their buffers, and the append tasks that read them back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import KlakeError
from engine.names import TopicPartition
from engine.ops.append_staging import PIECE_SCHEMA, RowStager
from engine.ops.run import PartitionInput
from jobs.ingest.assign import StickyAssigner, assign_partitions, topic_index, with_tp
from jobs.ingest.columns import staging_schema
from jobs.ingest.parquet import InputSplit, ParquetInput, parquet_splits, parquet_tasks, split_batches
from layouts.metering import add_counted, metered
from layouts.store import StorageOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STAGED_SCHEMA = "pieces binary, requests string, bytes string, error string"  # an input task's outcome
STAGE_FLUSH_BYTES = 16 * 1024**2  # most rows an input task buffers before staging them (sorted once, then written)
BUFFER_FLOOR_BYTES = 4 * 1024**2  # least a task buffer shrinks to (`buffer_bytes`)


def buffer_bytes(most: int, items: Iterable[PartitionInput]) -> int:
    """A task buffer's size: a quarter of the smallest `segment.bytes` among the partitions, between
    `BUFFER_FLOOR_BYTES` and `most`, so that a worker's memory beyond its open segment shrinks with the
    segment too (issue 28 item 8: within 4 x segment.bytes + 300 MB also at 32 MiB segments)."""
    smallest = min((item.config.segment_bytes for item in items), default=most * 4)
    return min(most, max(BUFFER_FLOOR_BYTES, smallest // 4))


@dataclass(frozen=True)
class Stager:
    """What an input task needs to stage its rows (`engine.ops.append_staging`): partition counts, the sticky
    setting, the input's files, this run's topics (None: every topic) and where to write (None: a dry run,
    which writes nothing)."""

    counts: dict[str, int]
    sticky_bytes: int
    files: Sequence[str]
    topics: frozenset[str] | None
    prefix: str | None
    options: StorageOptions | None
    flush_bytes: int

    def stage(self, batches: Iterable[pa.RecordBatch]) -> pa.RecordBatch:
        """Stage one input task's batches (in input order): one row of its pieces (Arrow IPC) and traffic, or
        the bad input it found (the driver reports it, exit code 2)."""
        pieces, error = PIECE_SCHEMA.empty_table(), None
        with metered() as meter:
            try:
                sticky = StickyAssigner(self.counts, self.sticky_bytes, self.files)
                stager = RowStager(self.prefix, self.options, self.flush_bytes)
                for batch in batches:
                    if self.topics is not None:
                        batch = _of_topics(batch, self.topics)
                    if batch.num_rows:
                        topics = topic_index(batch, self.counts, self.files)
                        staged = with_tp(assign_partitions(batch, self.counts, sticky, topics), self.counts, topics)
                        stager.add(staged.drop_columns(["topic"]))
                pieces = stager.finish()
            except KlakeError as exc:
                error = str(exc)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, pieces.schema) as writer:
            writer.write_table(pieces)
        return pa.RecordBatch.from_pydict({"pieces": [sink.getvalue().to_pybytes()],
                                           "requests": [json.dumps(dict(meter.requests))],
                                           "bytes": [json.dumps(dict(meter.bytes))], "error": [error]})

    def parquet_tasks(self, tasks: Sequence[Sequence[InputSplit]], schema: pa.Schema, topic: str | None,
                      ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Spark tasks over Parquet input (`mapInArrow` over the task numbers): each reads its splits (`topic`
        for input without a `topic` column)."""
        for batch in ids:
            for task in batch.column(0).to_pylist():
                yield self.stage(b for split in tasks[task]
                                 for b in split_batches(split, schema, self.options, topic))

    def spark_task(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """A Spark task over any other input (`mapInArrow` over its rows, input order per split)."""
        yield self.stage(batches)


def _of_topics(batch: pa.RecordBatch, topics: frozenset[str]) -> pa.RecordBatch:
    """The rows of `batch` whose topic is one of `topics`: `batch` itself when all are (a filter copies every
    column even then; an archive's batches are all of its topics)."""
    keep = pc.is_in(batch.column("topic"), pa.array(sorted(topics), pa.string()))
    return batch if pc.all(keep).as_py() else batch.filter(keep)


def staged_pieces(table: pa.Table) -> pa.Table:
    """The pieces of every input task (`Stager.stage`'s rows), their traffic added to the driver's meters;
    the first bad input a task found is raised."""
    parts = []
    for row in table.to_pylist():
        add_counted(json.loads(row["requests"]), json.loads(row["bytes"]))
        parts.append(pa.ipc.open_stream(row["pieces"]).read_all())
    errors = sorted(e for e in table.column("error").to_pylist() if e is not None)
    if errors:
        raise KlakeError(errors[0])
    return pa.concat_tables(parts) if parts else PIECE_SCHEMA.empty_table()


def append_tasks(pieces: dict[int, pa.Table], selected: dict[int, TopicPartition]) -> list[list[pa.Table]]:
    """The append tasks: each selected partition with staged rows has a task of its own; the other `_tp`s
    (partitions not selected, or that the topic lacks: only rejected) are shared among them. A task's list
    holds each of its `_tp`'s pieces in input order (`order_pieces`)."""
    own = [tp for tp in sorted(pieces) if tp in selected]
    tasks = [[pieces[tp]] for tp in own] or [[]]
    for i, tp in enumerate(tp for tp in sorted(pieces) if tp not in selected):
        tasks[i % len(tasks)].append(pieces[tp])
    return [sorted(task, key=lambda t: t.column("tp")[0].as_py()) for task in tasks if task]


def stage_input(spark: SparkSession, stager: Stager, parquet: ParquetInput | None, df: DataFrame | None) -> pa.Table:
    """Run the input tasks (no shuffle): Parquet input read by pyarrow in the tasks, split by row groups as
    Spark splits files; any other input (`df`) read by Spark, one task per Spark split. Every staged piece."""
    if parquet is None:
        assert df is not None
        return staged_pieces(df.mapInArrow(stager.spark_task, STAGED_SCHEMA).toArrow())
    conf = spark._jsparkSession.sessionState().conf()  # Spark's own split settings (FilePartition)
    open_cost, most = int(conf.filesOpenCostInBytes()), int(conf.filesMaxPartitionBytes())
    total = sum(info.size + open_cost for info, _ in parquet.files)
    split_bytes = min(most, max(open_cost, total // max(spark.sparkContext.defaultParallelism, 1)))
    tasks = parquet_tasks(parquet_splits(parquet.files, split_bytes), split_bytes, open_cost)
    if not tasks:
        return PIECE_SCHEMA.empty_table()
    schema = parquet.schema
    staging = staging_schema(schema if "topic" in schema.names else schema.append(pa.field("topic", pa.string())))
    frame = spark.range(len(tasks), numPartitions=len(tasks))
    run = partial(stager.parquet_tasks, tasks, staging, None if "topic" in schema.names else parquet.topic)
    return staged_pieces(frame.mapInArrow(run, STAGED_SCHEMA).toArrow())
