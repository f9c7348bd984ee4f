"""An append's input: found (files in path order, as Spark reads them, or a table of the Spark session),
checked before anything is written (Parquet footers before Spark starts, any other input's schema once
Spark has it; its topics and their partition counts), read with where each row comes from, and named by
the job id it derives."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.ingest.columns import INPUT_COLUMNS, check_input_schema
from jobs.ingest.kept_offsets import keeps_offsets
from jobs.ingest.parquet import ParquetInput, check_footers
from jobs.ingest.topics import partition_counts, selected_topics
from kernel.errors import KlakeError
from layouts.store import ObjectInfo, is_s3
from layouts.store.bound import Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.runtime.job_runner import JobContext

ARROW_FORMATS = ("json", "csv")  # from s3:// through fsspec (Parquet: `parquet_splits`, any filesystem)


@dataclass(frozen=True)
class InputSettings:
    """What an append reads and what it selects: `append`'s flags (`from_args`), or a caller's own, as the
    archive's Spark Kafka source, a table of the session (issue 30)."""

    input: str | None
    table: str | None
    format: str
    input_options: tuple[str, ...]
    topics: tuple[str, ...]
    """The topics appended (`--topic`; none: every topic of the input)."""
    partition_ids: tuple[int, ...]
    """The partitions appended (`--partition`; none: all)."""
    keep_offsets: bool
    rejects: str | None
    known_topics: tuple[str, ...] | None = None
    """The input's topics when the caller knows them without a scan of its `topic` column (`_found_topics`)."""
    by_partition: bool = False
    """Whether each split of the input holds one whole topic-partition in order (`AppendInput.by_partition`)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> InputSettings:
        return cls(args.input, args.table, args.format, tuple(args.input_options), tuple(args.topics),
                   tuple(args.partition_ids), args.keep_offsets, args.rejects)

    @property
    def where(self) -> str:
        """The input as a bad-input line names it."""
        return self.input or f"table {self.table}"


@dataclass(frozen=True)
class AppendInput:
    """The checked input: its topics with their partition counts, its files in path order (`_rank` indexes
    them), and either its Parquet files (read by pyarrow in the input tasks) or a DataFrame of Spark's."""

    topics: list[str]
    counts: dict[str, int]
    order: list[str]
    parquet: ParquetInput | None
    df: DataFrame | None
    keep_offsets: bool
    """Whether the records keep the input's offsets (`jobs.ingest.kept_offsets`)."""
    by_partition: bool = False
    """Whether each of the DataFrame's splits holds exactly one topic-partition's records, in order, and no
    two splits the same one (Spark's Kafka source over whole partitions, the archive's): its tasks append
    directly, nothing staged (`jobs.ingest.append_task.AppendTasks.over_input`)."""


def open_input(ctx: JobContext, settings: InputSettings) -> AppendInput:
    """The input checked, bad input failing before anything is written: Parquet files before Spark starts
    (footers and the `topic` column), any other input through Spark (this starts it)."""
    from pyspark.sql import functions as F

    topics_asked = list(settings.topics)
    if settings.input is not None and settings.format == "parquet":
        found, files, schema = check_footers(input_files(settings.input, ctx.store), ctx.store, bool(topics_asked))
        topics = selected_topics(found, topics_asked)
        counts = partition_counts(ctx.config, ctx.catalogued_partitions(), topics)
        return AppendInput(topics, counts, [info.uri for info, _ in files], ParquetInput(files, schema, topics[0]),
                           None, keeps_offsets(schema.names, settings.keep_offsets, settings.input))
    df, names = _read_input(ctx, settings)
    topics = selected_topics(_found_topics(df, settings.known_topics, settings.where), topics_asked)
    counts = partition_counts(ctx.config, ctx.catalogued_partitions(), topics)
    if "topic" not in df.columns:
        df = df.withColumn("topic", F.lit(topics[0]))
    order = file_order(names)
    keep = keeps_offsets(df.columns, settings.keep_offsets, settings.where)
    return AppendInput(topics, counts, order, None, with_file_rank(df, order), keep, settings.by_partition)


def _found_topics(df: DataFrame, known: Sequence[str] | None, where: str) -> dict[str, str] | None:
    """The topics of the input's `topic` column (None without one), each with where it was found. `known`:
    the caller knows them without a scan, as the archive does (its Kafka source reads exactly those topics;
    a scan of the column would read every record from the cluster once more, issue 30's benchmark)."""
    if known is not None:
        return dict.fromkeys(known, where)
    if "topic" not in df.columns:
        return None
    return {r["topic"]: where for r in df.select("topic").distinct().collect() if r["topic"] is not None}


def _read_input(ctx: JobContext, settings: InputSettings) -> tuple[DataFrame, list[str]]:
    """Input other than Parquet files, through Spark (this starts it), with its schema checked, Spark's Kafka
    sink columns normalised and where each row comes from (`_file`, `_block`, and `_pos`: Spark's row id,
    increasing in each split); its `topic` column only if the input has one. Also the values `_file` takes:
    the input's files as Spark names them."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if settings.table:
        df = ctx.spark.table(settings.table)
        df = df.withColumn("_file", F.lit("")).withColumn("_block", F.lit(0).cast("long"))
        files = [""]
    elif is_s3(settings.input):
        df, files = _input_over_fsspec(ctx, settings)
    else:
        reader = ctx.spark.read.format(settings.format)
        for item in settings.input_options:
            key, _, value = item.partition("=")
            reader = reader.option(key, value)
        df = reader.load(settings.input)
        df = (df.withColumn("_file", F.col("_metadata.file_path"))
              .withColumn("_block", F.col("_metadata.file_block_start")))
        files = df.inputFiles()
    sink = [f for f in df.schema.fields if f.name in INPUT_COLUMNS]
    try:
        # a TimestampType column is an instant; Arrow's type needs a zone to name (any: the epoch is the same)
        schema = to_arrow_schema(StructType(sink), timezone="UTC")
    except (TypeError, ValueError) as exc:  # a type Arrow has no form for is no Kafka sink type either
        raise KlakeError(f"input {settings.input or settings.table}: {exc}") from None
    check_input_schema(schema, settings.where)
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


def is_dir(path: str, store: Store) -> bool:
    """Whether the input `path` is a directory; a missing input is bad input naming it."""
    fs, inner = store.filesystem(path)
    if not fs.exists(inner):
        raise KlakeError(f"input {path} does not exist")
    return fs.isdir(inner)


def input_files(path: str, store: Store) -> list[ObjectInfo]:
    """The input's data files in path order (not `_`/`.` files, not empty ones, as Spark reads them)."""
    if not is_dir(path, store):
        info = store.info(path)
        return [info] if info is not None else []
    files = [o for o in store.list_objects(path) if not o.name.startswith(("_", ".")) and o.size]
    if not files:
        raise KlakeError(f"input {path} holds no data files")
    return files


def read_arrow_file(uri: str, fmt: str, store: Store) -> pa.Table:
    """One JSON-lines or CSV input file as Arrow."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    data = io.BytesIO(store.read(uri))
    return {"json": pjson.read_json, "csv": pcsv.read_csv}[fmt](data)


def _input_over_fsspec(ctx: JobContext, settings: InputSettings) -> tuple[DataFrame, list[str]]:
    """s3:// input without hadoop-aws in Spark: the driver lists the files, one task reads each with
    pyarrow through fsspec (the same storage access as the segments), in path order."""
    from pyspark.sql.pandas.types import from_arrow_schema

    fmt, store = settings.format, ctx.store
    if fmt not in ARROW_FORMATS:
        raise KlakeError(f"--format {fmt} is read from s3:// only as {'/'.join(ARROW_FORMATS)} (Spark here has no "
                         "S3 filesystem); use --table, a local path, or a cluster with hadoop-aws")
    files = [info.uri for info in input_files(str(settings.input), store)]
    schema = read_arrow_file(files[0], fmt, store).schema
    full = schema.append(pa.field("_file", pa.string())).append(pa.field("_block", pa.int64())) \
        .append(pa.field("_pos", pa.int64()))

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                table = read_arrow_file(files[index], fmt, store)
                try:
                    table = table.select(schema.names).cast(schema)
                except (KeyError, pa.ArrowInvalid) as exc:
                    raise KlakeError(f"input {files[index]}: its columns differ from {files[0]}'s: {exc}") from None
                table = table.append_column("_file", pa.repeat(pa.scalar(files[index], pa.string()), table.num_rows))
                table = table.append_column("_block", pa.array(np.zeros(table.num_rows, np.int64)))
                yield from table.append_column("_pos", pa.array(np.arange(table.num_rows, dtype=np.int64))).to_batches()

    return ctx.spark.range(len(files), numPartitions=len(files)).mapInArrow(read, from_arrow_schema(full)), files


def input_job_id(ctx: JobContext, settings: InputSettings) -> str:
    """A job id that names the input: the same files, topic and assignment settings give the same id."""
    digest = hashlib.sha256()
    if settings.input:
        listing = sorted((o.uri, o.size, o.mtime_ms) for o in ctx.store.list_objects(settings.input)) \
            if is_dir(settings.input, ctx.store) else [(settings.input,)]
        digest.update(json.dumps([settings.format, sorted(settings.input_options), listing]).encode())
    else:
        digest.update(f"table:{settings.table}".encode())
    digest.update(json.dumps([sorted(settings.topics), list(settings.partition_ids),
                              ctx.config.jobs.sticky_batch_bytes]).encode())
    return f"append-{digest.hexdigest()[:24]}"


# Spark spells a local file `file:/p` in `_metadata.file_path` but `file:///p` in `inputFiles()`: one spelling
_EMPTY_AUTHORITY = r"^([A-Za-z][A-Za-z0-9+.-]*):///"
_NO_AUTHORITY = r"^([A-Za-z][A-Za-z0-9+.-]*):/(?!/)"  # the other way round: `file:/p` as `file:///p`


def file_order(files: Sequence[str]) -> list[str]:
    """The input's files (as `_file` spells them) in path order: `_rank` indexes this list."""
    return sorted(set(pc.replace_substring_regex(pa.array(list(files), pa.string()), _EMPTY_AUTHORITY,
                                                 r"\1:/").to_pylist()))


def with_file_rank(df: DataFrame, order: Sequence[str]) -> DataFrame:
    """`df` with its `_file` replaced by `_rank`, the file's place in `order` (`file_order`): an int per row
    instead of a path (issue 14), turned back into the path only for a rejected record or a sticky run's
    seed. Looked up in the JVM (a broadcast join on `_file` as it is: the table has both spellings of a
    file, so no row's path is rewritten); a file not in `order` fails the job naming it. A table's rows
    (`--table`, the archive's Kafka source: one "file", `""`) all have rank 0, without a join: the join's
    broadcast job and its per-row probe and copy would cost the archive's benchmark (issue 30) for nothing."""
    from pyspark.sql import functions as F

    if list(order) == [""]:
        return df.withColumn("_rank", F.lit(0)).drop("_file")

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
