"""`append`: append a DataFrame of records to topics, in parallel across partitions, committed once.

Input: any source Spark reads (`--format parquet|json|csv|orc|delta...` with `--input PATH`, or
`--table NAME`) with Spark's Kafka sink columns: `value` (binary or string, required), `key`,
`headers` (array of struct<key string, value binary>), `topic` (or `--topic`), `partition`,
`timestamp` (timestamp or epoch ms; missing = the job's `--now`, as a producer stamps).

- A missing partition is chosen as Kafka's default producer does: murmur2 of the key for keyed
  records; null keys stick to one partition until `jobs.sticky_batch_bytes` (the producer's
  `batch.size`, 16384) of records went there, then move on (KIP-480's sticky partitioner), starting
  at a partition derived from the input split (the run carries over batches within an input task), so
  a re-run with the same input and Spark settings assigns identically. An explicit partition outside
  the topic is rejected (`UNKNOWN_PARTITION`), as is one outside this run's `--partition`.
- An `offset` column (Spark's Kafka source has one; `--keep-offsets` requires it) is kept: every record is
  appended at its own offset, with its timestamp and `timestampType` as given, as a follower appends the
  leader's records (`engine.log.kept_offsets`: increasing per partition, at or after the log end, gaps
  allowed); a record breaking the rule is rejected (`OFFSETS_OUT_OF_ORDER`), never renumbered.
- Input order is kept per partition: files in path order, rows in file order, or Spark's row order for
  tables. No shuffle (issue 14): the input tasks (Parquet files read by pyarrow in the tasks, split by
  row groups as Spark splits files; other input read by Spark) assign partitions and stage their rows
  grouped by partition (`engine.ops.append_staging`); then one task per partition reads back its own
  rows in input order and streams them through the engine in chunks of `buffer_bytes`, uploading
  each segment as it closes: a task's memory is a chunk plus one open segment, whatever the partition's
  size (a chunk boundary ends a batch, as a produce request does). The staged rows are deleted when
  the attempt ends (scrub removes those of a killed one).
- `--dry-run` writes nothing (no staged rows, segment, lease, rejects file or commit): it reads and
  appends in memory, so every record is checked and every segment encoded, and says what it would
  append and reject; its staged rows travel through the driver, so size the driver for the input.
- `s3://` input is read by the tasks with pyarrow through fsspec (Parquet, JSON lines, CSV), since
  Spark here has no S3 filesystem (hadoop-aws); other formats from S3 need a cluster that has one.
- Records Kafka would refuse (timestamp outside `message.timestamp.before/after.max.ms`, larger than
  `max.message.bytes`, negative timestamps unless KIP-228 is enabled, a partition outside the topic)
  are not appended; they are written with their reason to the rejects dataset (Parquet, one file
  per partition) next to the report, and counted in it. Accepted records are unaffected.
- Idempotent per partition: the default job id is derived from the input (paths, sizes, modification
  times), the topic and the assignment settings; the job ledger records, in the same commit as the
  segments, which partitions the job id appended, so a re-run with the same input and job id appends
  exactly the partitions no attempt committed, and nothing twice. A partition this attempt could not
  append (its lease held by another job) is "not yet appended": the run exits 1 and says so.

    spark-submit jobs/append.py --conf conf/s3.example.yaml --input s3://landing/2026-11-22/ --format parquet --topic clicks
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import pickle
import re
import sys
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import KlakeError
from engine.names import InvalidNameError, TopicPartition, validate_topic
from engine.ops.append import PartitionAppendOutcome, prepare_append
from engine.ops.append_staging import PIECE_SCHEMA, order_pieces, staged_batches
from engine.ops.lease import leased_partitions
from engine.ops.run import JobRun, PartitionInput, PartitionResult, run_prepare
from jobs.ingest.assign import tp_names
from jobs.ingest.columns import INPUT_COLUMNS, check_input_schema, staging_schema
from jobs.ingest.kept_offsets import keeps_offsets
from jobs.ingest.parquet import parquet_splits, parquet_tasks
from jobs.ingest.stage import STAGED_SCHEMA, Stager, append_tasks, staged_pieces
from jobs.runtime.job_runner import JobContext, JobSpec, check_partitions, main
from jobs.runtime.report import plural
from jobs.runtime.spark_session import counted_on_the_driver, run_with_progress
from layouts.object_layout import REJECTS_DIR, STAGING_DIR
from layouts.store import (
    ObjectInfo,
    StorageOptions,
    delete_object,
    delete_tree,
    describe_error,
    filesystem,
    is_s3,
    join,
    list_objects,
    object_info,
    open_ranged,
    read_bytes,
    write_bytes,
)

PROVENANCE = ("partition", "_rank", "_pos")  # a rejected record's source, with its run's topic (`_provenance`)
APPEND_CHUNK_BYTES = 32 * 1024**2  # most input a task hands the engine at a time: memory is this + one segment
STAGE_FLUSH_BYTES = 16 * 1024**2  # most rows an input task buffers before staging them (sorted once, then written)
BUFFER_FLOOR_BYTES = 4 * 1024**2  # least a task buffer shrinks to (`buffer_bytes`)
UNKNOWN_PARTITION = "UNKNOWN_PARTITION"
NOT_SELECTED = "PARTITION_NOT_SELECTED"
RESULT, UNPLACED, HELD = "result", "unplaced", "held"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", metavar="PATH", help="input files or directory (local or s3://)")
    source.add_argument("--table", metavar="NAME", help="a table of the Spark session's catalog")
    parser.add_argument("--format", default="parquet", help="Spark source format of --input (default parquet)")
    parser.add_argument("--input-option", dest="input_options", action="append", default=[], metavar="KEY=VALUE",
                        help="option for the Spark reader, e.g. header=true for CSV (repeatable)")
    parser.add_argument("--rejects", metavar="DIR",
                        help="where rejected records go, one Parquet file per partition (default beside --report, "
                             "else {root}/_rejects/{job id}/)")
    parser.add_argument("--keep-offsets", action="store_true",
                        help="the input must have an `offset` column (as Spark's Kafka source gives it); an input "
                             "that has one keeps its offsets anyway (README: Keeping a cluster's offsets)")


def _checks_parquet(ctx: JobContext) -> bool:
    """Parquet files are checked on the driver before Spark starts (footers and the `topic` column)."""
    return ctx.args.input is not None and ctx.args.format == "parquet"


def _check_parquet(ctx: JobContext) -> tuple[dict[str, str] | None, list[tuple[ObjectInfo, pq.FileMetaData]], pa.Schema]:
    """Every input file's footer, read with pyarrow before Spark starts: a file that is no Parquet is
    named, and so is one whose columns are not Spark's Kafka sink columns. Returns the topics of the
    `topic` column (each with a file holding it), read column-only, None if the input has no such column;
    each file (in path order) with its footer; and the first file's schema."""
    found: dict[str, str] = {}
    with_topic: dict[bool, str] = {}
    files: list[tuple[ObjectInfo, pq.FileMetaData]] = []
    first: pa.Schema | None = None
    for info in _input_files(ctx):
        try:
            parquet = pq.ParquetFile(open_ranged(info.uri, info.size, ctx.options))
            schema = parquet.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            raise KlakeError(f"input {info.uri}: not a readable Parquet file: {describe_error(exc)}") from None
        check_input_schema(schema, info.uri)
        files.append((info, parquet.metadata))
        first = first or schema
        with_topic.setdefault("topic" in schema.names, info.uri)
        if len(with_topic) > 1:
            raise KlakeError(f"input {with_topic[True]} has a `topic` column but {with_topic[False]} has none")
        for group in range(parquet.num_row_groups if "topic" in schema.names else 0):
            column = parquet.read_row_group(group, columns=["topic"]).column(0)
            for topic in pc.unique(column.combine_chunks()).to_pylist():
                found.setdefault(topic, info.uri)
    if None in found and not ctx.args.topics:
        raise KlakeError(f"input {found[None]}: column `topic` has nulls: name the --topic(s) to append")
    found.pop(None, None)
    return (found if with_topic.get(True) else None), files, first


def _selected_topics(ctx: JobContext, found: dict[str, str] | None) -> list[str]:
    """The topics this run appends: those of the input's `topic` column (only the --topic ones, if
    named), each checked by Kafka's rule and named with where it was found; without a `topic`
    column, the one --topic."""
    if found is None:
        if len(ctx.args.topics) != 1:
            raise KlakeError("the input has no `topic` column: name exactly one --topic")
        return list(ctx.args.topics)
    topics = sorted(t for t in found if not ctx.args.topics or t in ctx.args.topics)
    for topic in topics:
        try:
            validate_topic(topic)
        except InvalidNameError as exc:
            raise KlakeError(f"input {found[topic]}: column `topic`: {exc}") from None
    return topics


def _read_input(ctx: JobContext) -> tuple[Any, list[str]]:
    """Input other than Parquet files, through Spark (this starts it), with its schema checked, Spark's Kafka
    sink columns normalised and where each row comes from (`_file`, `_block`, and `_pos`: Spark's row id,
    increasing in each split); its `topic` column only if the input has one. Also the values `_file` takes:
    the input's files as Spark names them."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    args = ctx.args
    if args.table:
        df = ctx.spark.table(args.table)
        df = df.withColumn("_file", F.lit("")).withColumn("_block", F.lit(0).cast("long"))
        files = [""]
    elif is_s3(args.input):
        df, files = _input_over_fsspec(ctx)
    else:
        reader = ctx.spark.read.format(args.format)
        for item in args.input_options:
            key, _, value = item.partition("=")
            reader = reader.option(key, value)
        df = reader.load(args.input)
        df = (df.withColumn("_file", F.col("_metadata.file_path"))
              .withColumn("_block", F.col("_metadata.file_block_start")))
        files = df.inputFiles()
    sink = [f for f in df.schema.fields if f.name in INPUT_COLUMNS]
    try:
        schema = to_arrow_schema(StructType(sink))
    except (TypeError, ValueError) as exc:  # a type Arrow has no form for is no Kafka sink type either
        raise KlakeError(f"input {args.input or args.table}: {exc}") from None
    check_input_schema(schema, args.input or f"table {args.table}")
    if "_pos" not in df.columns:  # (s3:// input has its row in the file)
        df = df.withColumn("_pos", F.monotonically_increasing_id())
    columns = set(df.columns)
    if "partition" not in columns:
        df = df.withColumn("partition", F.lit(None).cast("int"))
    for name in ("key", "value"):
        if name in columns and dict(df.dtypes)[name] == "string":
            df = df.withColumn(name, F.col(name).cast("binary"))
    if "key" not in columns:
        df = df.withColumn("key", F.lit(None).cast("binary"))
    keep = [c for c in ("topic", "partition", "key", "value", "headers", "timestamp", "offset", "timestampType")
            if c in df.columns]
    return df.select(*keep, "_file", "_block", "_pos"), files


ARROW_FORMATS = ("json", "csv")  # from s3:// through fsspec (Parquet: `parquet_splits`, any filesystem)


def _input_files(ctx: JobContext) -> list[ObjectInfo]:
    """The input's data files in path order (not `_`/`.` files, not empty ones, as Spark reads them)."""
    path = ctx.args.input
    if not _is_dir(path, ctx):
        info = object_info(path, ctx.options)
        return [info] if info is not None else []
    files = [o for o in list_objects(path, ctx.options) if not o.name.startswith(("_", ".")) and o.size]
    if not files:
        raise KlakeError(f"input {path} holds no data files")
    return files


def read_arrow_file(uri: str, fmt: str, options: StorageOptions | None) -> pa.Table:
    """One JSON-lines or CSV input file as Arrow."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    data = io.BytesIO(read_bytes(uri, options))
    return {"json": pjson.read_json, "csv": pcsv.read_csv}[fmt](data)


def _input_over_fsspec(ctx: JobContext) -> tuple[Any, list[str]]:
    """s3:// input without hadoop-aws in Spark: the driver lists the files, one task reads each with
    pyarrow through fsspec (the same storage access as the segments), in path order."""
    from pyspark.sql.pandas.types import from_arrow_schema

    fmt, options = ctx.args.format, ctx.options
    if fmt not in ARROW_FORMATS:
        raise KlakeError(f"--format {fmt} is read from s3:// only as {'/'.join(ARROW_FORMATS)} (Spark here has no "
                         "S3 filesystem); use --table, a local path, or a cluster with hadoop-aws")
    files = [info.uri for info in _input_files(ctx)]
    schema = read_arrow_file(files[0], fmt, options).schema
    full = schema.append(pa.field("_file", pa.string())).append(pa.field("_block", pa.int64())) \
        .append(pa.field("_pos", pa.int64()))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                table = read_arrow_file(files[index], fmt, options)
                try:
                    table = table.select(schema.names).cast(schema)
                except (KeyError, pa.ArrowInvalid) as exc:
                    raise KlakeError(f"input {files[index]}: its columns differ from {files[0]}'s: {exc}") from None
                table = table.append_column("_file", pa.repeat(pa.scalar(files[index], pa.string()), table.num_rows))
                table = table.append_column("_block", pa.array(np.zeros(table.num_rows, np.int64)))
                yield from table.append_column("_pos", pa.array(np.arange(table.num_rows, dtype=np.int64))).to_batches()

    return ctx.spark.range(len(files), numPartitions=len(files)).mapInArrow(read, from_arrow_schema(full)), files


def default_job_id(ctx: JobContext) -> str:
    """A job id that names the input: the same files, topic and assignment settings give the same id."""
    args = ctx.args
    digest = hashlib.sha256()
    if args.input:
        listing = sorted((o.uri, o.size, o.mtime_ms) for o in list_objects(args.input, ctx.options)) \
            if _is_dir(args.input, ctx) else [(args.input,)]
        digest.update(json.dumps([args.format, sorted(args.input_options), listing]).encode())
    else:
        digest.update(f"table:{args.table}".encode())
    digest.update(json.dumps([sorted(args.topics), args.partition_ids, ctx.config.jobs.sticky_batch_bytes]).encode())
    return f"append-{digest.hexdigest()[:24]}"


def _is_dir(path: str, ctx: JobContext) -> bool:
    fs, inner = filesystem(path, ctx.options)
    if not fs.exists(inner):
        raise KlakeError(f"input {path} does not exist")
    return fs.isdir(inner)


# Spark spells a local file `file:/p` in `_metadata.file_path` but `file:///p` in `inputFiles()`: one spelling
_EMPTY_AUTHORITY = r"^([A-Za-z][A-Za-z0-9+.-]*):///"
_NO_AUTHORITY = r"^([A-Za-z][A-Za-z0-9+.-]*):/(?!/)"  # the other way round: `file:/p` as `file:///p`


def file_order(files: Sequence[str]) -> list[str]:
    """The input's files (as `_file` spells them) in path order: `_rank` indexes this list."""
    return sorted(set(pc.replace_substring_regex(pa.array(list(files), pa.string()), _EMPTY_AUTHORITY,
                                                 r"\1:/").to_pylist()))


def with_file_rank(df: Any, order: Sequence[str]) -> Any:
    """`df` with its `_file` replaced by `_rank`, the file's place in `order` (`file_order`): an int per row
    instead of a path (issue 14), turned back into the path only for a rejected record or a sticky run's
    seed. Looked up in the JVM (a broadcast join on `_file` as it is: the table has both spellings of a
    file, so no row's path is rewritten); a file not in `order` fails the job naming it."""
    from pyspark.sql import functions as F

    spellings = [(rank, spelling) for rank, name in enumerate(order)
                 for spelling in dict.fromkeys([name, re.sub(_NO_AUTHORITY, r"\1:///", name)])]
    at = F.col("id").cast("int") + 1
    ranks = df.sparkSession.range(len(spellings), numPartitions=1).select(  # built in the JVM: no Python task
        F.element_at(F.array(*[F.lit(rank) for rank, _ in spellings]), at).alias("_rank"),
        F.element_at(F.array(*[F.lit(spelling) for _, spelling in spellings]), at).alias("_name"))
    joined = df.join(F.broadcast(ranks), F.col("_file") == ranks["_name"], "left")
    missing = F.raise_error(F.concat(F.lit("input file "), F.col("_file"), F.lit(" is not among the input's files")))
    return joined.withColumn("_rank", F.when(F.col("_rank").isNull(), missing).otherwise(F.col("_rank"))) \
        .drop("_file", "_name")


def buffer_bytes(most: int, items: Iterable[PartitionInput]) -> int:
    """A task buffer's size: a quarter of the smallest `segment.bytes` among the partitions, between
    `BUFFER_FLOOR_BYTES` and `most`, so that a worker's memory beyond its open segment shrinks with the
    segment too (issue 28 item 8: within 4 x segment.bytes + 300 MB also at 32 MiB segments)."""
    smallest = min((item.config.segment_bytes for item in items), default=most * 4)
    return min(most, max(BUFFER_FLOOR_BYTES, smallest // 4))


class _Runs:
    """A task's rows, sorted by (`_tp`, input order), as one run per `_tp` value: its value and its rows
    in chunks of about `chunk_bytes` (the engine appends a chunk at a time, so a task holds one chunk and
    one open segment, never a whole partition)."""

    def __init__(self, batches: Iterator[pa.RecordBatch], chunk_bytes: int) -> None:
        self._batches = iter(batches)
        self._head: pa.Table | None = None
        self.chunk_bytes = chunk_bytes

    def __iter__(self) -> Iterator[tuple[int, Iterator[pa.Table]]]:
        while (head := self._peek()) is not None:
            key = head.column("_tp")[0].as_py()
            chunks = self._chunks(key)
            yield key, chunks
            for _ in chunks:  # whatever the run's consumer left (a failed partition): skip its rows
                pass

    def _peek(self) -> pa.Table | None:
        if self._head is not None and self._head.num_rows:
            return self._head
        for batch in self._batches:
            if batch.num_rows:
                self._head = pa.Table.from_batches([batch])
                return self._head
        self._head = None
        return None

    def _chunks(self, key: int) -> Iterator[pa.Table]:
        parts: list[pa.Table] = []
        size = 0
        while (head := self._peek()) is not None:
            flags = head.column("_tp").to_numpy() == key
            length = head.num_rows if flags.all() else int(np.argmin(flags))
            if length == 0:
                break
            parts.append(head.slice(0, length))
            size += parts[-1].get_total_buffer_size()
            self._head = head.slice(length)
            if size >= self.chunk_bytes:
                yield pa.concat_tables(parts)
                parts, size = [], 0
            if length < head.num_rows:
                break
        if parts:
            yield pa.concat_tables(parts)


def _append_stream(batches: Iterator[pa.RecordBatch], names: Sequence[tuple[str, int | None]],
                   items: dict[TopicPartition, PartitionInput[None]], selected: set[TopicPartition],
                   counts: dict[str, int], rejects_dir: str | None, files: Sequence[str],
                   prepare_kwargs: dict) -> Iterator[pa.RecordBatch]:
    """One task: append each topic-partition run of its sorted rows, a result row per partition."""
    options = prepare_kwargs["options"]
    for tp_index, chunks in _Runs(batches, buffer_bytes(APPEND_CHUNK_BYTES, items.values())):
        topic, partition = names[tp_index]
        if partition is None:  # partitions the topic lacks, all in one run: a rejects file for each
            table = pa.concat_tables(list(chunks))
            message = f"{topic} has partitions 0..{counts[topic] - 1}"
            for lacking in pc.unique(table.column("partition")).to_pylist():
                rows = table.filter(pc.equal(table.column("partition"), lacking))
                yield from _unplaced(topic, lacking, rows, UNKNOWN_PARTITION, message, rejects_dir, files,
                                     options).to_batches()
        elif (tp := TopicPartition(topic, partition)) not in selected:
            yield from _unplaced(topic, partition, pa.concat_tables(list(chunks)), NOT_SELECTED,
                                 f"{tp} is not among this run's --partition", rejects_dir, files,
                                 options).to_batches()
        else:
            yield from _append_run(tp, chunks, items, rejects_dir, files, prepare_kwargs).to_batches()


def _unplaced(topic: str, partition: int, rows: pa.Table, reason: str, message: str, rejects_dir: str | None,
              files: Sequence[str], options: StorageOptions | None) -> pa.Table:
    """Records naming a partition the topic lacks or this run does not select: written by the task to
    `{rejects_dir}/unplaced/{topic}-{partition}.parquet` (a dry run's, `rejects_dir` None, nowhere); their
    result row."""
    rejects = _provenance(_rejected(rows, reason, message), topic, files)
    uri = None if rejects_dir is None else _write_parquet(join(rejects_dir, "unplaced", f"{topic}-{partition}.parquet"),
                                                          rejects, options)
    return _result_row(topic, partition, UNPLACED, (reason, rejects.num_rows, uri))


def _append_run(tp: TopicPartition, chunks: Iterator[pa.Table], items: dict[TopicPartition, PartitionInput[None]],
                rejects_dir: str | None, files: Sequence[str], prepare_kwargs: dict) -> pa.Table:
    """One selected partition's records, in input order and in chunks: appended as a stream, result pickled.

    Rejected records are written by the task to `{rejects_dir}/{topic}-{partition}.parquet` before the
    driver's commit (a crash after the commit cannot lose them); a dry run's (`rejects_dir` None) are only
    counted. Records of a selected partition this
    attempt does not append (its lease is held elsewhere, or an earlier attempt of the job id appended
    it) are only counted: they are neither appended nor rejected.
    """
    options = prepare_kwargs["options"]
    item = items.get(tp)
    if item is None:
        return _result_row(tp.topic, tp.partition, HELD, sum(chunk.num_rows for chunk in chunks))
    seen = 0

    def counted() -> Iterator[pa.Table]:
        nonlocal seen
        for chunk in chunks:
            seen += chunk.num_rows
            yield chunk

    result = run_prepare(partial(prepare_append, records=counted(), carry=PROVENANCE, **prepare_kwargs), item)
    for rest in chunks:  # a failed append leaves rows unread; they still count as this partition's input
        seen += rest.num_rows
    if result.step is not None:
        outcome = result.step.outcome
        rejects = _provenance(outcome.rejects, tp.topic, files)
        if rejects_dir is None:  # a dry run
            pass
        elif rejects is not None and rejects.num_rows:
            _write_parquet(partition_rejects_uri(rejects_dir, tp), rejects, options)
        else:  # an earlier attempt's rejects of this partition (another --now) are not true for this one
            delete_object(partition_rejects_uri(rejects_dir, tp), options)
        outcome.rejects = None
    return _result_row(tp.topic, tp.partition, RESULT, (result, seen))


def _provenance(rejects: pa.Table | None, topic: str, files: Sequence[str]) -> pa.Table | None:
    """Rejects as the rejects file holds them: where each came from (topic, partition, input file, and
    `seq`: its row in the file for Parquet input, else Spark's row id) instead of its row number in the
    stream."""
    if rejects is None or rejects.num_rows == 0:
        return rejects
    rejects = rejects.drop_columns(["row"])
    at = rejects.schema.get_field_index("_rank")
    rejects = rejects.set_column(at, "file", pa.array(files, pa.string()).take(rejects.column(at)))
    rejects = rejects.add_column(rejects.schema.get_field_index("partition"), "topic",
                                 pa.array([topic] * rejects.num_rows, pa.string()))
    return rejects.rename_columns(["seq" if name == "_pos" else name for name in rejects.column_names])


def partition_rejects_uri(rejects_dir: str, tp: TopicPartition) -> str:
    """Where an append attempt writes the records of `tp` it rejected; valid once `tp` is committed."""
    return join(rejects_dir, f"{tp}.parquet")


def _write_parquet(uri: str, table: pa.Table, options: StorageOptions | None) -> str:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    write_bytes(uri, buffer.getvalue(), options)
    return uri


def _result_row(topic: str, partition: int, kind: str, payload: object) -> pa.Table:
    return pa.table({"topic": [topic], "partition": pa.array([partition], pa.int32()), "kind": [kind],
                     "result": pa.array([pickle.dumps(payload)], pa.binary())})


def _rejected(table: pa.Table, reason: str, message: str) -> pa.Table:
    """Every record of `table` as a reject with `reason`, in the columns `append_records` gives its
    rejects (with the `PROVENANCE` columns carried)."""
    n = table.num_rows
    rejects = pa.table({"row": pa.array(np.arange(n), pa.int64()), "reason": pa.array([reason] * n, pa.string()),
                        "message": pa.array([message] * n, pa.string())})
    for name in ("key", "value", "timestamp", "headers", *PROVENANCE):
        if name in table.column_names:
            rejects = rejects.append_column(name, table.column(name))
    return rejects


def partition_counts(ctx: JobContext, topics: Sequence[str]) -> dict[str, int]:
    """Each topic's partition count: declared (`topics.<t>.partitions`), else what the catalog holds."""
    catalogued: dict[str, int] = {}
    for tp in ctx.catalogued_partitions():
        catalogued[tp.topic] = max(catalogued.get(tp.topic, 0), tp.partition + 1)
    counts = {}
    for topic in topics:
        declared = ctx.config.topic(topic)
        if declared is not None and declared.partitions is not None:
            if declared.partitions < catalogued.get(topic, 0):
                raise KlakeError(f"topic {topic}: declares {declared.partitions} partitions but the catalog "
                                 f"holds {catalogued[topic]}; partitions can only be added")
            counts[topic] = declared.partitions
        elif topic in catalogued:
            counts[topic] = catalogued[topic]
        else:
            raise KlakeError(f"topic {topic} is new: declare its partition count (topics.{topic}.partitions in "
                             f"the config, or --set topics.{topic}.partitions=N)")
    return counts


def rejects_dir(ctx: JobContext) -> str:
    """The Parquet dataset of this job id's rejected records: `--rejects`, else beside `--report`,
    else `{root}/_rejects/{job id}/` (where scrub reclaims files of attempts that never committed)."""
    if ctx.args.rejects:
        return ctx.args.rejects.rstrip("/")
    if ctx.args.report:
        return ctx.args.report.rsplit(".", 1)[0] + ".rejects"
    return join(ctx.config.root, REJECTS_DIR, ctx.job_id)


def _stage_input(ctx: JobContext, stager: Stager, parquet: tuple | None, df: Any) -> pa.Table:
    """Run the input tasks (no shuffle): Parquet input read by pyarrow in the tasks, split by row groups as
    Spark splits files; any other input read by Spark, one task per Spark split. Every staged piece."""
    if parquet is None:
        return staged_pieces(df.mapInArrow(stager.spark_task, STAGED_SCHEMA).toArrow())
    files, schema, topic = parquet
    conf = ctx.spark._jsparkSession.sessionState().conf()  # Spark's own split settings (FilePartition)
    open_cost, most = int(conf.filesOpenCostInBytes()), int(conf.filesMaxPartitionBytes())
    total = sum(info.size + open_cost for info, _ in files)
    split_bytes = min(most, max(open_cost, total // max(ctx.spark.sparkContext.defaultParallelism, 1)))
    tasks = parquet_tasks(parquet_splits(files, split_bytes), split_bytes, open_cost)
    if not tasks:
        return PIECE_SCHEMA.empty_table()
    staging = staging_schema(schema if "topic" in schema.names else schema.append(pa.field("topic", pa.string())))
    frame = ctx.spark.range(len(tasks), numPartitions=len(tasks))
    run = partial(stager.parquet_tasks, tasks, staging, None if "topic" in schema.names else topic)
    return staged_pieces(frame.mapInArrow(run, STAGED_SCHEMA).toArrow())


def run(ctx: JobContext) -> None:
    from pyspark.sql import functions as F

    if ctx.args.input:
        _is_dir(ctx.args.input, ctx)  # a missing input is an input error (exit 2) naming the path, also with --job-id
    if ctx.args.job_id is None:
        ctx.job_id = ctx.report.job_id = default_job_id(ctx)
    df = parquet = None
    if _checks_parquet(ctx):  # bad input fails here, before Spark starts and before anything is written
        found, parquet_files, schema = _check_parquet(ctx)
        topics = _selected_topics(ctx, found)
        counts = partition_counts(ctx, topics)
        order = [info.uri for info, _ in parquet_files]
        parquet = (parquet_files, schema, topics[0])
        keep = keeps_offsets(schema.names, ctx.args.keep_offsets, ctx.args.input)
    else:
        df, files = _read_input(ctx)
        found = ({r["topic"]: ctx.args.input or f"table {ctx.args.table}"
                  for r in df.select("topic").distinct().collect() if r["topic"] is not None}
                 if "topic" in df.columns else None)
        topics = _selected_topics(ctx, found)
        counts = partition_counts(ctx, topics)
        if "topic" not in df.columns:
            df = df.withColumn("topic", F.lit(topics[0]))
        order = file_order(files)
        df = with_file_rank(df, order)
        keep = keeps_offsets(df.columns, ctx.args.keep_offsets, ctx.args.input or f"table {ctx.args.table}")
    check_partitions([TopicPartition(t, counts[t] - 1) for t in topics], set(topics), set(ctx.args.partition_ids), None)
    names = tp_names(counts)
    tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])
           if not ctx.args.partition_ids or p in ctx.args.partition_ids]
    selected = {names.index((tp.topic, tp.partition)): tp for tp in tps}
    if _appended_already(ctx, tps):
        return
    prepare_kwargs = {"root": ctx.config.root, "now_ms": ctx.now_ms, "options": ctx.options,
                      "append_id": ctx.job_id, "batch_bytes": ctx.config.jobs.batch_bytes or None,
                      "dry_run": ctx.dry_run, "keep_offsets": keep}
    where = None if ctx.dry_run else rejects_dir(ctx)
    rows: list = []

    def execute(items: Sequence[PartitionInput[None]]) -> list[PartitionResult[PartitionAppendOutcome]]:
        by_tp = {item.tp: item for item in items}
        prefix = None if ctx.dry_run else join(ctx.config.root, STAGING_DIR, ctx.job_id, uuid.uuid4().hex)
        stager = Stager(counts, ctx.config.jobs.sticky_batch_bytes, order,
                        frozenset(ctx.args.topics) if ctx.args.topics else None, prefix, ctx.options,
                        buffer_bytes(STAGE_FLUSH_BYTES, items))
        try:
            tasks = append_tasks(order_pieces(_stage_input(ctx, stager, parquet, df)), selected)

            options = ctx.options

            def task(numbered: tuple[int, list[pa.Table]]) -> list[dict]:
                batches = staged_batches(numbered[1], options)
                return [row for out in _append_stream(batches, names, by_tp, set(tps), counts, where, order,
                                                      prepare_kwargs) for row in out.to_pylist()]

            # one Spark task per partition (a fixed number of RDD partitions: nothing coalesces them), each
            # reading its staged rows in input order and streaming them through the engine chunk by chunk
            rdd = ctx.spark.sparkContext.parallelize(list(enumerate(tasks)), max(len(tasks), 1)).flatMap(task)
            rows.extend(run_with_progress(ctx.spark, rdd.collect, len(items), ctx.progress()))
        finally:
            if prefix is not None:
                delete_tree(prefix, ctx.options)
        # a partition without input records has no result: it has nothing to append and nothing to finish
        return counted_on_the_driver([pickle.loads(row["result"])[0] for row in rows if row["kind"] == RESULT])

    run_ = ctx.run_partitions_with(tps, execute, ledger_idle=True)
    _drop_uncommitted_rejects(ctx, run_, where)
    _report(ctx, run_, rows, where)


def _appended_already(ctx: JobContext, tps: Sequence[TopicPartition]) -> bool:
    """Whether the job ledger holds this job id's append for every partition: a re-run of an append that
    finished. Then it says so and stops before staging any row (a run that finished some partitions only
    goes on, and finishes the others)."""
    if not tps or not ctx.catalogued_partitions() or ctx.catalog.committed_partitions(ctx.job_id, tps) != set(tps):
        return False
    if leased_partitions(ctx.config.root, tps, ctx.options):  # an attempt killed after its commit left its
        return False  # leases: the partitions' run takes them over and releases them, as every re-run does
    ctx.report.results.update({"records_appended": 0, "already_committed": True}
                              | ({"records_to_append": 0} if ctx.dry_run else {}))
    ctx.report.summary.append(f"append: already done: job {ctx.job_id} appended this input to "
                              f"{plural(len(tps), 'partition')} (the job ledger says so); nothing appended again")
    return True


def _drop_uncommitted_rejects(ctx: JobContext, run_: JobRun[PartitionAppendOutcome], where: str | None) -> None:
    """A partition that did not commit will be appended (and its records rejected) by a later attempt:
    its rejects file is not true yet (scrub reclaims it if this attempt dies before getting here). A dry
    run (`where` None) wrote none."""
    for result in [] if where is None else run_.results:
        counters = result.step.outcome.counters if result.step is not None else None
        if str(result.tp) in run_.failures and counters is not None and sum(counters.rejected.values()):
            delete_object(partition_rejects_uri(where, result.tp), ctx.options)


def _report(ctx: JobContext, run_: JobRun[PartitionAppendOutcome], rows: list, where: str | None) -> None:
    """Appended and rejected records of the partitions this attempt committed; held-back records of the
    others (the run fails, so the scheduler retries with the same job id)."""
    appended = received = earlier = versions = 0
    by_reason: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    for row in rows:
        payload = pickle.loads(row["result"])
        if row["kind"] == UNPLACED:
            reason, n, _ = payload
            received += n
            by_reason[reason] += n
            continue
        tp = TopicPartition(row["topic"], row["partition"])
        if row["kind"] == HELD:
            received += payload
            if tp in run_.committed_earlier:
                earlier += payload
            else:
                pending[str(tp)] += payload
        else:
            result, n = payload
            received += n
            if str(tp) in run_.failures:
                pending[str(tp)] += n
            elif result.step is not None and result.step.outcome.counters is not None:
                appended += result.step.outcome.counters.records_accepted
                versions += len(result.step.change.add)
                by_reason.update({reason: k for reason, k in result.step.outcome.counters.rejected.items() if k})
    count = sum(by_reason.values())
    ctx.report.rejected = {"count": count, "by_reason": dict(by_reason), "path": where if count else None}
    ctx.report.results.update({"records_in": received, "records_appended": 0 if ctx.dry_run else appended,
                               "appended_by_earlier_attempt": earlier, "not_yet_appended": dict(pending),
                               "already_committed": bool(run_.committed_earlier) and not run_.results
                               and not run_.failures})
    if ctx.dry_run:
        ctx.report.results |= {"records_to_append": appended, "segment_versions_to_write": versions}
    reasons = ', '.join(f'{k} {v}' for k, v in sorted(by_reason.items()))
    if ctx.dry_run:
        line = (f"append: would append {appended} of {received} record(s) in {plural(versions, 'segment version')}"
                + (f"; would reject {count} ({reasons})" if count else ""))
    else:
        line = f"append: {appended} of {received} record(s) appended"
    if earlier:
        line += f"; {earlier} appended earlier by job {ctx.job_id}"
    if count and where is not None:
        line += f"; {count} rejected ({reasons}) -> {where}"
    ctx.report.summary.append(line)
    if pending:
        ctx.report.summary.append(
            f"append: {sum(pending.values())} record(s) of {', '.join(sorted(pending))} not yet appended: "
            f"re-run with --job-id {ctx.job_id} to append exactly those")


SPEC = JobSpec("append", "append records (Spark's Kafka sink columns) to topics", run, add_arguments,
               example="klake append --conf demo-output/demo.yaml --input demo-output/hour --format json --dry-run")

if __name__ == "__main__":
    sys.exit(main(SPEC))
