"""Parquet input read by the input tasks with pyarrow (local or `s3://`, through fsspec): every file's footer
checked on the driver before Spark starts; the files' row groups in splits sized as Spark sizes file splits,
packed into tasks as Spark packs files, each split read with its rows' input order (`_rank`: the file's
place in path order, `_block`: the split's first row group, `_pos`: the row in the file)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engine.errors import KlakeError
from jobs.ingest.columns import check_input_schema
from layouts.store import ObjectInfo, StorageOptions, describe_error, open_ranged


@dataclass(frozen=True)
class ParquetInput:
    """Parquet input whose footers were checked: each file (in path order) with its footer, the first file's
    schema, and the topic of input without a `topic` column."""

    files: list[tuple[ObjectInfo, pq.FileMetaData]]
    schema: pa.Schema
    topic: str


def check_footers(files: Sequence[ObjectInfo], options: StorageOptions | None, topic_named: bool,
                  ) -> tuple[dict[str, str] | None, list[tuple[ObjectInfo, pq.FileMetaData]], pa.Schema | None]:
    """Every input file's footer, read with pyarrow before Spark starts: a file that is no Parquet is
    named, and so is one whose columns are not Spark's Kafka sink columns. Returns the topics of the
    `topic` column (each with a file holding it), read column-only, None if the input has no such column
    (nulls in it only if a --topic is named: `topic_named`); each file (in path order) with its footer;
    and the first file's schema.

    The `topic` column is read without Arrow's thread pool: its threads reading through a Python file object
    (`open_ranged`) can outlive a bad-input exit and abort the process in Python's finalization (exit -6
    instead of 2, seen in CI; apache/arrow#50482)."""
    found: dict[str, str] = {}
    with_topic: dict[bool, str] = {}
    checked: list[tuple[ObjectInfo, pq.FileMetaData]] = []
    first: pa.Schema | None = None
    for info in files:
        try:
            parquet = pq.ParquetFile(open_ranged(info.uri, info.size, options))
            schema = parquet.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            raise KlakeError(f"input {info.uri}: not a readable Parquet file: {describe_error(exc)}") from None
        check_input_schema(schema, info.uri)
        checked.append((info, parquet.metadata))
        first = first or schema
        with_topic.setdefault("topic" in schema.names, info.uri)
        if len(with_topic) > 1:
            raise KlakeError(f"input {with_topic[True]} has a `topic` column but {with_topic[False]} has none")
        for group in range(parquet.num_row_groups if "topic" in schema.names else 0):
            column = parquet.read_row_group(group, columns=["topic"], use_threads=False).column(0)
            for topic in pc.unique(column.combine_chunks()).to_pylist():
                found.setdefault(topic, info.uri)
    if None in found and not topic_named:
        raise KlakeError(f"input {found[None]}: column `topic` has nulls: name the --topic(s) to append")
    found.pop(None, None)
    return (found if with_topic.get(True) else None), checked, first


@dataclass(frozen=True)
class InputSplit:
    """Consecutive row groups of one Parquet input file, read by one task (`_block` is the first's index)."""

    rank: int
    uri: str
    size: int  # the file's
    row_groups: tuple[int, ...]
    first_row: int
    bytes: int  # the row groups' (compressed)


def parquet_splits(files: Sequence[tuple[ObjectInfo, pq.FileMetaData]], split_bytes: int) -> list[InputSplit]:
    """Each file's row groups in splits of about `split_bytes` (compressed), as Spark splits files."""
    splits = []
    for rank, (info, metadata) in enumerate(files):
        groups: list[int] = []
        size = first = row = 0
        for group in range(metadata.num_row_groups):
            if groups and size >= split_bytes:
                splits.append(InputSplit(rank, info.uri, info.size, tuple(groups), first, size))
                groups, size, first = [], 0, row
            row_group = metadata.row_group(group)
            groups.append(group)
            size += sum(row_group.column(c).total_compressed_size for c in range(row_group.num_columns))
            row += row_group.num_rows
        if groups:
            splits.append(InputSplit(rank, info.uri, info.size, tuple(groups), first, size))
    return splits


def parquet_tasks(splits: Sequence[InputSplit], split_bytes: int, open_cost: int) -> list[list[InputSplit]]:
    """Consecutive splits packed into tasks of about `split_bytes` (each split costs `open_cost` more, as
    Spark packs files)."""
    tasks: list[list[InputSplit]] = []
    size = 0
    for split in splits:
        cost = split.bytes + open_cost
        if tasks and size + cost <= split_bytes:
            tasks[-1].append(split)
            size += cost
        else:
            tasks.append([split])
            size = cost
    return tasks


def split_batches(split: InputSplit, schema: pa.Schema, options: StorageOptions | None,
                   topic: str | None) -> Iterator[pa.RecordBatch]:
    """A split's rows as `schema` (`staging_schema`), with `_rank`, `_block` and `_pos` (its row in the file);
    `topic` fills the `topic` column of input that has none."""
    parquet = pq.ParquetFile(open_ranged(split.uri, split.size, options))
    present = [name for name in schema.names if name in parquet.schema_arrow.names]
    position = split.first_row
    for batch in _row_group_batches(parquet, split, present):
        n = batch.num_rows
        columns = []
        for field in schema:
            if field.name in present:
                column = batch.column(field.name)
                try:
                    columns.append(column if column.type == field.type else column.cast(field.type))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise KlakeError(f"input {split.uri}: column `{field.name}` is {column.type}, not {field.type} "
                                     f"as in the input's first file: {exc}") from None
            elif field.name == "topic":
                columns.append(pa.repeat(pa.scalar(topic, pa.string()), n))
            else:
                columns.append(pa.nulls(n, field.type))
        yield pa.RecordBatch.from_arrays([*columns, pa.array(np.full(n, split.rank, np.int32)),
                                          pa.array(np.full(n, split.row_groups[0], np.int64)),
                                          pa.array(np.arange(position, position + n, dtype=np.int64))],
                                         schema=schema.append(pa.field("_rank", pa.int32()))
                                         .append(pa.field("_block", pa.int64())).append(pa.field("_pos", pa.int64())))
        position += n


def _row_group_batches(parquet: pq.ParquetFile, split: InputSplit, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The split's rows, one row group after another: a page that cannot be read (a footer fine but a data
    page corrupt: bad compressed bytes, a bad page header) is bad input naming the file and row group
    (issue 26), found in the input task, before anything is appended."""
    for group in split.row_groups:
        batches = parquet.iter_batches(batch_size=65_536, row_groups=[group], columns=columns, use_threads=False)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except (OSError, pa.ArrowException) as exc:
                raise KlakeError(f"input {split.uri}: row group {group}: cannot be read: "
                                 f"{' '.join(str(exc).split())}") from None
            yield batch
