"""`append`: append a DataFrame of records to topics, in parallel across partitions, committed once.

Input: any source Spark reads (`--format parquet|json|csv|orc|delta...` with `--input PATH`, or
`--table NAME`) with Spark's Kafka sink columns: `value` (binary or string, required), `key`,
`headers` (array of struct<key string, value binary>), `topic` (or `--topic`), `partition`,
`timestamp` (timestamp or epoch ms; missing = the job's `--now`, as a producer stamps).

- A missing partition is chosen as Kafka's default producer does: murmur2 of the key for keyed
  records; null keys stick to one partition until `jobs.sticky_batch_bytes` (the producer's
  `batch.size`, 16384) of records went there, then move on (KIP-480's sticky partitioner), starting
  at a partition derived from the input split (the run carries over Arrow batches within a task), so
  a re-run with the same input and Spark settings assigns identically. Keyed records are partitioned
  in the JVM (the package's jar), so only records with neither key nor partition pass through Python
  before the shuffle, and none when Parquet footers show there are none. An explicit partition outside
  the topic is rejected (`UNKNOWN_PARTITION`), as is one outside this run's `--partition`.
- Input order is kept per partition: files in path order, rows in file order (`_metadata`), or
  Spark's row order for tables. Spark sorts each partition's rows into that order (one task per
  partition) and the task streams them through the engine in chunks of `APPEND_CHUNK_BYTES`, uploading
  each segment as it closes: a task's memory is a chunk plus one open segment, whatever the partition's
  size (a chunk boundary ends a batch, as a produce request does).
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
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import KlakeError
from engine.format.partitioner import murmur2
from engine.names import InvalidNameError, TopicPartition, validate_topic
from engine.ops.append import prepare_append
from engine.ops.run import JobRun, PartitionInput, PartitionResult, run_prepare
from jobs.runtime.job_runner import JobContext, JobSpec, main
from jobs.runtime.spark_session import KAFKA_PARTITION, counted_on_the_driver, run_with_progress
from layouts.object_layout import REJECTS_DIR
from layouts.store import (
    ObjectInfo,
    StorageOptions,
    delete_object,
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

ORDER_COLUMNS = ("_rank", "_block", "_seq")  # input order: the file's place in path order, split, row
PROVENANCE = ("partition", "_rank", "_pos")  # a rejected record's source, with its run's topic (`_provenance`)
RECORD_COLUMNS = ("partition", "key", "value", "headers", "timestamp")  # a task reads these, `_tp`, `_rank`, `_pos`
ORDER_BITS = 63  # `_order` is a non-negative long: topic-partition index, file rank, row in the file
APPEND_CHUNK_BYTES = 32 * 1024**2  # input a task hands the engine at a time: memory is this + one segment
UNKNOWN_PARTITION = "UNKNOWN_PARTITION"
NOT_SELECTED = "PARTITION_NOT_SELECTED"
RESULT, UNPLACED, HELD = "result", "unplaced", "held"
RESULT_SCHEMA = "topic string, partition int, kind string, result binary"


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


def _is_text(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_)


def _is_bytes(type_: pa.DataType) -> bool:
    return pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or _is_text(type_)


def _is_headers(type_: pa.DataType) -> bool:
    if not (pa.types.is_list(type_) or pa.types.is_large_list(type_)) or not pa.types.is_struct(type_.value_type):
        return False
    fields = {f.name: f.type for f in type_.value_type}
    return set(fields) == {"key", "value"} and _is_text(fields["key"]) and _is_bytes(fields["value"])


# Spark's Kafka sink columns and the Arrow types each may have (the module docstring's input rule, its one
# home): checked on Parquet footers before Spark starts, and on any other input's schema once Spark has it.
SINK_COLUMNS: dict[str, tuple[str, Callable[[pa.DataType], bool]]] = {
    "topic": ("string", _is_text),
    "partition": ("an integer", pa.types.is_integer),
    "key": ("binary or string", _is_bytes),
    "value": ("binary or string", _is_bytes),
    "headers": ("array<struct<key: string, value: binary>>", _is_headers),
    "timestamp": ("a timestamp or epoch ms (an integer)", lambda t: pa.types.is_timestamp(t) or pa.types.is_integer(t)),
}


def check_input_schema(schema: pa.Schema, where: str) -> None:
    """Raise, naming `where` and the column, unless `schema` has a `value` column and every Kafka sink
    column it has is of a usable type (all-null columns are; other columns are ignored)."""
    if "value" not in schema.names:
        raise KlakeError(f"input {where}: no `value` column (found {sorted(schema.names)}); it needs Spark's "
                         "Kafka sink columns")
    for field in schema:
        if field.name in SINK_COLUMNS:
            expected, accepts = SINK_COLUMNS[field.name]
            type_ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
            if not (pa.types.is_null(type_) or accepts(type_)):
                raise KlakeError(f"input {where}: column `{field.name}` is {field.type}; Spark's Kafka sink needs "
                                 f"{expected}")


def _checks_parquet(ctx: JobContext) -> bool:
    """Parquet files are checked on the driver before Spark starts (footers and the `topic` column)."""
    return ctx.args.input is not None and ctx.args.format == "parquet"


def _check_parquet(ctx: JobContext) -> tuple[dict[str, str] | None, bool, int]:
    """Every input file's footer, read with pyarrow before Spark starts: a file that is no Parquet is
    named, and so is one whose columns are not Spark's Kafka sink columns. Returns the topics of the
    `topic` column (each with a file holding it), read column-only, None if the input has no such column;
    whether a record may have neither key nor partition (`may_need_sticky`); and the most rows a file
    has (what a row's place in its file, `_pos`, can reach)."""
    found: dict[str, str] = {}
    with_topic: dict[bool, str] = {}
    sticky = False
    most_rows = 0
    for info in _input_files(ctx):
        try:
            parquet = pq.ParquetFile(open_ranged(info.uri, info.size, ctx.options))
            schema = parquet.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            raise KlakeError(f"input {info.uri}: not a readable Parquet file: {describe_error(exc)}") from None
        check_input_schema(schema, info.uri)
        sticky = sticky or may_need_sticky(parquet.metadata)
        most_rows = max(most_rows, parquet.metadata.num_rows)
        with_topic.setdefault("topic" in schema.names, info.uri)
        if len(with_topic) > 1:
            raise KlakeError(f"input {with_topic[True]} has a `topic` column but {with_topic[False]} has none")
        for group in range(parquet.num_row_groups if "topic" in schema.names else 0):
            column = parquet.read_row_group(group, columns=["topic"]).column(0)
            for topic in pc.unique(column.combine_chunks()).to_pylist():
                found.setdefault(topic, info.uri)
    found.pop(None, None)
    return (found if with_topic.get(True) else None), sticky, most_rows


def may_need_sticky(metadata: pq.FileMetaData) -> bool:
    """Whether a Parquet file may hold a record with neither key nor partition (the sticky partitioner's):
    some row group has nulls in both columns (a missing column is all nulls), or no null count to say."""
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        nulls = {"key": row_group.num_rows, "partition": row_group.num_rows}
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            if chunk.path_in_schema in nulls:
                stats = chunk.statistics
                nulls[chunk.path_in_schema] = stats.null_count if stats is not None and stats.has_null_count else None
        if all(count is None or count > 0 for count in nulls.values()):
            return True
    return False


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
    """The input (this starts Spark) with its schema checked, Spark's Kafka sink columns normalised
    and where each row comes from (`_file`, `_block`, `_seq`, and `_pos`: its row in the file for
    Parquet, else `_seq`); its `topic` column only if the input has one. Also the values `_file` takes:
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
        if args.format == "parquet":  # Spark's row index in the file (Parquet's only), whatever the split
            df = df.withColumn("_pos", F.col("_metadata.row_index"))
        files = df.inputFiles()
    if not _checks_parquet(ctx):
        sink = [f for f in df.schema.fields if f.name in SINK_COLUMNS]
        try:
            schema = to_arrow_schema(StructType(sink))
        except (TypeError, ValueError) as exc:  # a type Arrow has no form for is no Kafka sink type either
            raise KlakeError(f"input {args.input or args.table}: {exc}") from None
        check_input_schema(schema, args.input or f"table {args.table}")
    df = df.withColumn("_seq", F.monotonically_increasing_id())
    if "_pos" not in df.columns:
        df = df.withColumn("_pos", F.col("_seq"))
    columns = set(df.columns)
    if "partition" not in columns:
        df = df.withColumn("partition", F.lit(None).cast("int"))
    for name in ("key", "value"):
        if name in columns and dict(df.dtypes)[name] == "string":
            df = df.withColumn(name, F.col(name).cast("binary"))
    if "key" not in columns:
        df = df.withColumn("key", F.lit(None).cast("binary"))
    keep = [c for c in ("topic", "partition", "key", "value", "headers", "timestamp") if c in df.columns]
    return df.select(*keep, "_file", "_block", "_seq", "_pos"), files


ARROW_FORMATS = ("parquet", "json", "csv")


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
    """One input file as Arrow (JSON = JSON lines)."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    data = io.BytesIO(read_bytes(uri, options))
    return {"parquet": pq.read_table, "json": pjson.read_json, "csv": pcsv.read_csv}[fmt](data)


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
                table = table.append_column("_file", pa.array([files[index]] * table.num_rows, pa.string()))
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
    digest.update(json.dumps([sorted(args.topics), args.partition_ids, ctx.config.jobs["sticky_batch_bytes"]]).encode())
    return f"append-{digest.hexdigest()[:24]}"


def _is_dir(path: str, ctx: JobContext) -> bool:
    fs, inner = filesystem(path, ctx.options)
    if not fs.exists(inner):
        raise KlakeError(f"input {path} does not exist")
    return fs.isdir(inner)


def _assign_partitions(df: Any, counts: dict[str, int], sticky_bytes: int, sticky_rows: bool) -> Any:
    """`df` with every missing partition filled (module docstring). Keyed records get Kafka's partition
    in the JVM (`KAFKA_PARTITION`, the jar's murmur2): they never pass through a Python worker before the
    shuffle (issue 14). Only records with neither key nor partition go through the per-task sticky pass
    (`StickyAssigner`); each of its tasks reads the same input split, in the same order, as the task that
    assigned every record did, so its runs are the same. No such record (`sticky_rows` False, from the
    Parquet footers' null counts): no sticky pass, and the input is read once."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType

    partitions = F.create_map(*[F.lit(x) for topic, n in sorted(counts.items()) for x in (topic, n)])
    neither = F.col("partition").isNull() & F.col("key").isNull()
    keyed = df.withColumn("partition", F.coalesce(
        "partition", F.call_udf(KAFKA_PARTITION, F.col("key"), partitions[F.col("topic")])))
    if not sticky_rows:
        return keyed
    unkeyed = df.where(neither).withColumn("partition", F.lit(None).cast(IntegerType()))
    assigner = partial(_sticky_partitions, counts, sticky_bytes)
    return keyed.where(~neither).unionByName(unkeyed.mapInArrow(assigner, unkeyed.schema))


def _sticky_partitions(counts: dict[str, int], sticky_bytes: int,
                       batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One Spark task's records with neither key nor partition, their partitions filled."""
    yield from StickyAssigner(counts, sticky_bytes).assign(batches)


class StickyAssigner:
    """The partitions of records with neither key nor partition, across all the Arrow batches of one Spark
    task (KIP-480's sticky partitioner, module docstring): a run per topic that moves to the next partition
    once `sticky_bytes` of values went to the current one, carried over batch boundaries, starting at a
    partition derived from the input split of the topic's first such record."""

    def __init__(self, counts: dict[str, int], sticky_bytes: int) -> None:
        self.counts, self.sticky_bytes = counts, max(sticky_bytes, 1)
        self.runs: dict[str, tuple[int, int]] = {}  # topic -> (current partition, bytes sent to it)

    def assign(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            chosen = np.zeros(batch.num_rows, np.int32)
            topics = batch.column("topic")
            sizes = pc.fill_null(pc.binary_length(batch.column("value")), 0).to_numpy(zero_copy_only=False)
            for topic in pc.unique(topics).to_pylist():
                rows = np.flatnonzero(pc.equal(topics, topic).to_numpy(zero_copy_only=False))
                chosen[rows] = self._run(topic, rows, sizes, batch)
            yield batch.set_column(batch.schema.get_field_index("partition"), "partition", pa.array(chosen, pa.int32()))

    def _run(self, topic: str, rows: np.ndarray, sizes: np.ndarray, batch: pa.RecordBatch) -> np.ndarray:
        n = self.counts[topic]
        if topic not in self.runs:
            first = int(rows[0])
            seed = f"{batch.column('_file')[first].as_py()}@{batch.column('_block')[first].as_py()}:{topic}"
            self.runs[topic] = (int(murmur2(pa.array([seed.encode()], pa.binary()))[0] & np.uint32(0x7FFFFFFF)) % n, 0)
        current, sent = self.runs[topic]
        run_sizes = sizes[rows].astype(np.int64)
        before = sent + np.cumsum(run_sizes) - run_sizes  # bytes of the run when each record arrives
        total = sent + int(run_sizes.sum())
        self.runs[topic] = ((current + total // self.sticky_bytes) % n, total % self.sticky_bytes)
        return ((current + before // self.sticky_bytes) % n).astype(np.int32)


# Spark spells a local file `file:/p` in `_metadata.file_path` but `file:///p` in `inputFiles()`: one spelling
_EMPTY_AUTHORITY = r"^([A-Za-z][A-Za-z0-9+.-]*):///"
_NO_AUTHORITY = r"^([A-Za-z][A-Za-z0-9+.-]*):/(?!/)"  # the other way round: `file:/p` as `file:///p`


def file_order(files: Sequence[str]) -> list[str]:
    """The input's files (as `_file` spells them) in path order: `_rank` indexes this list."""
    return sorted(set(pc.replace_substring_regex(pa.array(list(files), pa.string()), _EMPTY_AUTHORITY,
                                                 r"\1:/").to_pylist()))


def with_file_rank(df: Any, order: Sequence[str]) -> Any:
    """`df` with its `_file` replaced by `_rank`, the file's place in `order` (`file_order`): an int to
    shuffle, sort by and hand to the append tasks instead of a path per row (issue 14), turned back into
    the path only for a rejected record. Looked up in the JVM (a broadcast join on `_file` as it is: the
    table has both spellings of a file, so no row's path is rewritten); a file not in `order` fails the
    job naming it."""
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


def tp_names(counts: dict[str, int]) -> list[tuple[str, int | None]]:
    """What each `_tp` value names: every partition of every topic (topics in name order), then, one per
    topic, the records that name a partition the topic lacks (partition None: a run split by partition)."""
    return [(t, p) for t in sorted(counts) for p in range(counts[t])] + [(t, None) for t in sorted(counts)]


def task_rows(df: Any, counts: dict[str, int], files: int, most_rows: int | None,
              selected: Sequence[TopicPartition]) -> Any:
    """`df`'s rows as the append tasks take them (issue 14): every record of a topic-partition in one task,
    in input order: `_tp` (the record's place in `tp_names(counts)`), `RECORD_COLUMNS`, `_rank`, `_pos`.
    Each `selected` partition has a task of its own (`task_keys`); other records share them.

    Spark sorts by one long, `_order` (`_tp`, then the file's rank, then the row's place in the file),
    when the rows' places are known to be below `most_rows` (Parquet footers) and the three fit in 63
    bits: the sort then decides by the key's prefix alone (a radix sort, no row compared) and only that
    long is shuffled besides the record; its parts are split again after the sort, in the JVM. Else by
    the four columns `_tp`, `_rank`, `_block`, `_seq`."""
    from pyspark.sql import functions as F

    def lookup(mapping: dict[str, int]) -> Any:
        return F.create_map(*[F.lit(x) for item in sorted(mapping.items()) for x in item])[F.col("topic")]

    names = sorted(counts)
    total = sum(counts.values())
    first = dict(zip(names, np.cumsum([0, *(counts[t] for t in names)])[:-1].tolist(), strict=True))
    inside = (F.col("partition") >= 0) & (F.col("partition") < lookup(counts))  # else UNKNOWN_PARTITION
    tp = F.when(inside, lookup(first) + F.col("partition")) \
        .otherwise(lookup({t: total + i for i, t in enumerate(names)})).cast("int")
    record = [c for c in RECORD_COLUMNS if c in df.columns]
    tasks = max(len(selected), 1)
    place = {(tp.topic, tp.partition): i for i, tp in enumerate(selected)}
    keys = task_keys(df.sparkSession, tasks)
    task_key = F.array(*[F.lit(keys[place.get(name, i % tasks)]) for i, name in enumerate(tp_names(counts))])
    tp_bits, rank_bits = (total + len(names) - 1).bit_length(), max(files - 1, 0).bit_length()
    pos_bits = max(most_rows - 1, 0).bit_length() if most_rows is not None else ORDER_BITS
    if tp_bits + rank_bits + pos_bits > ORDER_BITS:
        return df.withColumn("_tp", tp).repartition(tasks, F.element_at(task_key, F.col("_tp") + 1)) \
            .sortWithinPartitions("_tp", *ORDER_COLUMNS) \
            .select("_tp", *record, "_rank", "_pos")
    order = F.shiftleft(tp.cast("long"), rank_bits + pos_bits) \
        .bitwiseOR(F.shiftleft(F.col("_rank").cast("long"), pos_bits)).bitwiseOR(F.col("_pos"))
    key = F.col("_order")
    return df.select(*record, order.alias("_order")) \
        .repartition(tasks, F.element_at(task_key, F.shiftright(key, rank_bits + pos_bits).cast("int") + 1)) \
        .sortWithinPartitions("_order") \
        .select(F.shiftright(key, rank_bits + pos_bits).cast("int").alias("_tp"), *record,
                F.shiftright(key, pos_bits).bitwiseAND((1 << rank_bits) - 1).cast("int").alias("_rank"),
                key.bitwiseAND((1 << pos_bits) - 1).alias("_pos"))


def task_keys(spark: Any, tasks: int) -> list[int]:
    """For each of `tasks` tasks, an int that Spark's hash partitioning (`pmod(hash(key), tasks)`, the
    same Murmur3 as SQL's `hash`) sends to it: repartitioning by these puts one partition in each task,
    where hashing the partitions themselves would put two in some tasks and none in others."""
    from pyspark.sql import functions as F

    keys: dict[int, int] = {}
    tried = 0
    while len(keys) < tasks:
        more = spark.range(tried, tried + 16 * tasks).select(F.col("id").cast("int").alias("key"))
        for row in more.select("key", F.pmod(F.hash("key"), F.lit(tasks)).alias("task")).collect():
            keys.setdefault(row["task"], row["key"])
        tried += 16 * tasks
    return [keys[task] for task in range(tasks)]


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
                   items: dict[TopicPartition, PartitionInput], selected: set[TopicPartition],
                   counts: dict[str, int], rejects_dir: str, files: Sequence[str],
                   prepare_kwargs: dict) -> Iterator[pa.RecordBatch]:
    """One task: append each topic-partition run of its sorted rows, a result row per partition."""
    options = prepare_kwargs["options"]
    for tp_index, chunks in _Runs(batches, APPEND_CHUNK_BYTES):
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


def _unplaced(topic: str, partition: int, rows: pa.Table, reason: str, message: str, rejects_dir: str,
              files: Sequence[str], options: StorageOptions | None) -> pa.Table:
    """Records naming a partition the topic lacks or this run does not select: written by the task to
    `{rejects_dir}/unplaced/{topic}-{partition}.parquet`; their result row."""
    rejects = _provenance(_rejected(rows, reason, message), topic, files)
    uri = _write_parquet(join(rejects_dir, "unplaced", f"{topic}-{partition}.parquet"), rejects, options)
    return _result_row(topic, partition, UNPLACED, (reason, rejects.num_rows, uri))


def _append_run(tp: TopicPartition, chunks: Iterator[pa.Table], items: dict[TopicPartition, PartitionInput],
                rejects_dir: str, files: Sequence[str], prepare_kwargs: dict) -> pa.Table:
    """One selected partition's records, in input order and in chunks: appended as a stream, result pickled.

    Rejected records are written by the task to `{rejects_dir}/{topic}-{partition}.parquet` before the
    driver's commit (a crash after the commit cannot lose them). Records of a selected partition this
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
        if rejects is not None and rejects.num_rows:
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


def run(ctx: JobContext) -> None:
    from pyspark.sql import functions as F

    if ctx.args.input:
        _is_dir(ctx.args.input, ctx)  # a missing input is an input error (exit 2) naming the path, also with --job-id
    if ctx.args.job_id is None:
        ctx.job_id = ctx.report.job_id = default_job_id(ctx)
    topics = counts = most_rows = None
    sticky_rows = True  # unless Parquet footers say no record has neither key nor partition
    if _checks_parquet(ctx):  # bad input fails here, before Spark starts and before anything is written
        found, sticky_rows, most_rows = _check_parquet(ctx)
        topics = _selected_topics(ctx, found)
        counts = partition_counts(ctx, topics)
    df, files = _read_input(ctx)
    if topics is None:
        found = ({r["topic"]: ctx.args.input or f"table {ctx.args.table}"
                  for r in df.select("topic").distinct().collect() if r["topic"] is not None}
                 if "topic" in df.columns else None)
        topics = _selected_topics(ctx, found)
        counts = partition_counts(ctx, topics)
    if "topic" not in df.columns:
        df = df.withColumn("topic", F.lit(topics[0]))
    elif ctx.args.topics:
        df = df.where(F.col("topic").isin(ctx.args.topics))
    order = file_order(files)
    assigned = with_file_rank(_assign_partitions(df, counts, int(ctx.config.jobs["sticky_batch_bytes"]),
                                                 sticky_rows), order)
    names = tp_names(counts)
    tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])
           if not ctx.args.partition_ids or p in ctx.args.partition_ids]
    prepare_kwargs = {"root": ctx.config.root, "now_ms": ctx.now_ms, "options": ctx.options,
                      "append_id": ctx.job_id, "batch_bytes": int(ctx.config.jobs["batch_bytes"]) or None}
    where = rejects_dir(ctx)
    rows: list = []

    def execute(items: Sequence[PartitionInput]) -> list[PartitionResult]:
        by_tp = {item.tp: item for item in items}
        # one task per partition (an explicit count: adaptive execution does not coalesce it), rows in
        # input order; each task streams its partitions' rows through the engine chunk by chunk
        ordered = task_rows(assigned, counts, len(order), most_rows, tps)
        grouped = ordered.mapInArrow(
            lambda batches: _append_stream(batches, names, by_tp, set(tps), counts, where, order, prepare_kwargs),
            RESULT_SCHEMA)
        rows.extend(run_with_progress(ctx.spark, grouped.collect, len(items), ctx.progress()))
        # a partition without input records has no result: it has nothing to append and nothing to finish
        return counted_on_the_driver([pickle.loads(row["result"])[0] for row in rows if row["kind"] == RESULT])

    run_ = ctx.run_partitions_with(tps, execute, ledger_idle=True)
    _drop_uncommitted_rejects(ctx, run_, where)
    _report(ctx, run_, rows, where)


def _drop_uncommitted_rejects(ctx: JobContext, run_: JobRun, where: str) -> None:
    """A partition that did not commit will be appended (and its records rejected) by a later attempt:
    its rejects file is not true yet (scrub reclaims it if this attempt dies before getting here)."""
    for result in run_.results:
        counters = result.step.outcome.counters if result.step is not None else None
        if str(result.tp) in run_.failures and counters is not None and sum(counters.rejected.values()):
            delete_object(partition_rejects_uri(where, result.tp), ctx.options)


def _report(ctx: JobContext, run_: JobRun, rows: list, where: str) -> None:
    """Appended and rejected records of the partitions this attempt committed; held-back records of the
    others (the run fails, so the scheduler retries with the same job id)."""
    appended = received = earlier = 0
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
                by_reason.update({reason: k for reason, k in result.step.outcome.counters.rejected.items() if k})
    count = sum(by_reason.values())
    ctx.report.rejected = {"count": count, "by_reason": dict(by_reason), "path": where if count else None}
    ctx.report.results.update({"records_in": received, "records_appended": appended,
                               "appended_by_earlier_attempt": earlier, "not_yet_appended": dict(pending),
                               "already_committed": bool(run_.committed_earlier) and not run_.results
                               and not run_.failures})
    line = f"append: {appended} of {received} record(s) appended"
    if earlier:
        line += f"; {earlier} appended earlier by job {ctx.job_id}"
    if count:
        line += f"; {count} rejected ({', '.join(f'{k} {v}' for k, v in sorted(by_reason.items()))}) -> {where}"
    ctx.report.summary.append(line)
    if pending:
        ctx.report.summary.append(
            f"append: {sum(pending.values())} record(s) of {', '.join(sorted(pending))} not yet appended: "
            f"re-run with --job-id {ctx.job_id} to append exactly those")


SPEC = JobSpec("append", "append records (Spark's Kafka sink columns) to topics", run, add_arguments,
               description=__doc__)

if __name__ == "__main__":
    sys.exit(main(SPEC))
