"""An append's rows on their way from the input's tasks to the partitions' tasks, through storage.

Kafka appends a partition's records in the order they were produced; the `append` job's input order is
the input's (files in path order, rows in file order). Spark would bring each partition's rows together
with a shuffle and a sort: every row serialised by the JVM, written, read, compared and sent to Python
again, which costs twice a Parquet write of the same data (issue 14, benchmarks/history/2026-11-results-diary.md "Append:
what a shuffle of rows costs by itself"). Instead, each input task stages its rows here, grouped by
topic-partition, and the partition's task reads back exactly its own:

- `RowStager` (input side): buffers a task's rows up to `flush_bytes`, sorts them stably by `_tp` (the
  rows of one input split arrive in input order, so a stable sort keeps it) and writes them as one Arrow
  IPC file under the job attempt's staging prefix, a record batch per *piece*: the rows of one
  topic-partition from one input split (`_rank`, `_block`) within that flush, each an IPC stream of its
  own. It returns one row per piece (`PIECE_SCHEMA`): its byte range and where it belongs in input order.
- `staged_batches` (partition side): a partition's pieces in input order (`order_pieces`: split by
  split, and within a split by its first row), each read back with one ranged read and decoded in place,
  so a task holds one piece at a time, never a partition.

Staged files live under `{root}/_staging/{job id}/{attempt}/` (`layouts.object_layout.STAGING_DIR`) and are
deleted when the attempt ends; those of an attempt that died are debris the scrubber removes after its
grace period. A dry run writes nothing (issue 26): its pieces carry their IPC bytes themselves (`data`),
through the driver to the partitions' tasks, so it needs driver memory for the input it checks.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Iterator
from contextlib import nullcontext

import numpy as np
import pyarrow as pa

from layouts.store import join
from layouts.store.bound import Store

PIECE_SCHEMA = pa.schema([("tp", pa.int32()), ("rank", pa.int32()), ("block", pa.int64()), ("first", pa.int64()),
                          ("uri", pa.string()), ("offset", pa.int64()), ("length", pa.int64()), ("rows", pa.int64()),
                          ("data", pa.large_binary())])
"""A staged piece: its topic-partition index (`_tp`), input split (`_rank`, `_block`) and first row's place
(`_pos`), the object holding it and its IPC stream's byte range there, and its row count; a dry run's piece
holds its IPC stream in `data` instead (no object: `uri` null)."""
PIECE_ROWS = 262_144  # a piece larger than this is written as several pieces


class RowStager:
    """One input task's rows, staged by topic-partition (module docstring). `add` takes record batches
    with `_tp`, `_rank`, `_block`, `_pos` and the columns to stage; `finish` writes what is buffered and
    returns every piece written, as a table of `PIECE_SCHEMA`. Without a `prefix` (a dry run) nothing is
    written: the pieces hold their bytes."""

    def __init__(self, prefix: str | None, store: Store, flush_bytes: int) -> None:
        self.prefix, self.store, self.flush_bytes = prefix, store, flush_bytes
        self._buffered: list[pa.RecordBatch] = []
        self._size = 0
        self._pieces: list[pa.Table] = []

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            self._buffered.append(batch)
            self._size += batch.nbytes
            if self._size >= self.flush_bytes:
                self._flush()

    def finish(self) -> pa.Table:
        self._flush()
        return pa.concat_tables(self._pieces) if self._pieces else PIECE_SCHEMA.empty_table()

    def _flush(self) -> None:
        if not self._buffered:
            return
        table = pa.Table.from_batches(self._buffered)  # not combined: the sort's take is its one copy
        self._buffered, self._size = [], 0
        tps = table.column("_tp").to_numpy()
        if (tps[1:] < tps[:-1]).any():
            table = table.take(pa.array(_partition_order(tps)))
        keys = np.stack([table.column(c).to_numpy().astype(np.int64) for c in ("_tp", "_rank", "_block")])
        starts = np.concatenate([[0], np.flatnonzero((keys[:, 1:] != keys[:, :-1]).any(axis=0)) + 1])
        ends = np.append(starts[1:], table.num_rows)
        # pieces larger than PIECE_ROWS become several batches, each a piece of its own (its first row says where)
        cuts = [(s, min(s + PIECE_ROWS, e)) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)
                for s in range(s, e, PIECE_ROWS)]
        uri = None if self.prefix is None else join(self.prefix, f"{uuid.uuid4().hex}.arrow")
        stored = table.drop_columns(["_block"])
        lengths, data = [], []
        # each piece's IPC stream straight into the object, no copy (a dry run's into memory)
        with nullcontext(io.BytesIO()) if uri is None else self.store.open_write(uri) as out:
            for start, stop in cuts:
                before = out.tell()
                with pa.ipc.new_stream(out, stored.schema) as writer:
                    writer.write_table(stored.slice(start, stop - start), max_chunksize=stop - start)
                lengths.append(out.tell() - before)
            if uri is None:
                whole = out.getvalue()
                data = [whole[at:at + n] for at, n in zip(np.cumsum(lengths) - lengths, lengths, strict=True)]
        firsts = np.array([s for s, _ in cuts], np.int64)
        self._pieces.append(pa.table({
            "tp": pa.array(keys[0, firsts], pa.int32()), "rank": pa.array(keys[1, firsts], pa.int32()),
            "block": pa.array(keys[2, firsts], pa.int64()),
            "first": table.column("_pos").take(pa.array(firsts)).cast(pa.int64()),
            "uri": pa.array([uri] * len(cuts), pa.string()),
            "offset": pa.array(np.cumsum(lengths) - lengths, pa.int64()), "length": pa.array(lengths, pa.int64()),
            "rows": pa.array([e - s for s, e in cuts], pa.int64()),
            "data": pa.array(data or [None] * len(cuts), pa.large_binary())}, schema=PIECE_SCHEMA))


def _partition_order(tps: np.ndarray) -> np.ndarray:
    """The stable order of rows by their `_tp` values (non-negative): numpy's stable sort is a radix sort
    for integers of 16 bits or less, several times faster than its merge sort of int32 values."""
    return np.argsort(tps.astype(np.uint16) if tps.max(initial=0) < 2**16 else tps, kind="stable")


def order_pieces(pieces: pa.Table) -> dict[int, pa.Table]:
    """Each `_tp`'s pieces in input order: by input split (`rank`, `block`), then by first row (a split's
    rows may span flushes, whose pieces cover consecutive rows)."""
    ordered = pieces.sort_by([("tp", "ascending"), ("rank", "ascending"), ("block", "ascending"),
                              ("first", "ascending")])
    tps = ordered.column("tp").to_numpy()
    if not len(tps):
        return {}
    starts = np.concatenate([[0], np.flatnonzero(np.diff(tps)) + 1])
    ends = np.append(starts[1:], len(tps))
    return {int(tps[s]): ordered.slice(s, e - s) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)}


def staged_batches(pieces: Iterable[pa.Table], store: Store) -> Iterator[pa.RecordBatch]:
    """The staged rows of the given pieces' tables (each one `_tp`'s, from `order_pieces`), in that order:
    each piece one ranged read (a local file's range mapped, not copied: `read_view`), or a dry run's piece
    its own bytes, its record batches decoded in place (no copy)."""
    for table in pieces:
        for i, (uri, offset, length) in enumerate(zip(*(table.column(c).to_pylist()
                                                         for c in ("uri", "offset", "length")), strict=True)):
            if uri is None:
                yield from pa.ipc.open_stream(table.column("data")[i].as_buffer())
                continue
            try:
                data = store.read_view(uri, offset, offset + length)
            except FileNotFoundError:
                raise FileNotFoundError(f"staged rows {uri} are gone (was the staging prefix deleted?)") from None
            yield from pa.ipc.open_stream(pa.py_buffer(data))
