"""The append tasks: one per selected partition with staged rows, each reading its rows back in input order
and streaming them through the engine in chunks (`engine.ops.append.prepare_append`), so a task holds one
chunk and one open segment, never a whole partition (issue 14); its rejects written to the rejects dataset
(`engine.ops.rejects`) before the driver's commit. Each task answers one result row per partition, which
the driver tallies for the report."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.errors import KlakeError
from engine.names import TopicPartition
from engine.ops.append import PartitionAppendOutcome, prepare_append
from engine.ops.append_staging import staged_batches
from engine.ops.rejects import rejected, store_partition_rejects, with_provenance, write_unplaced
from engine.ops.run import JobRun, PartitionInput, PartitionResult, run_prepare
from jobs.ingest.assign import topic_index, with_tp
from jobs.ingest.stage import buffer_bytes
from layouts.store import StorageOptions

PROVENANCE = ("partition", "_rank", "_pos")  # a rejected record's source, with its run's topic (`with_provenance`)
APPEND_CHUNK_BYTES = 32 * 1024**2  # most input a task hands the engine at a time: memory is this + one segment
UNKNOWN_PARTITION = "UNKNOWN_PARTITION"
NOT_SELECTED = "PARTITION_NOT_SELECTED"
RESULT, UNPLACED, HELD = "result", "unplaced", "held"  # a task's result row: appended, rejected whole, not appended
RESULT_SCHEMA = "topic string, partition int, kind string, result binary"  # (`_result_row`)


@dataclass(frozen=True)
class AppendTasks:
    """What every append task needs (`tps`: `_tp` names, `tp_names`), called with a task's number and staged
    pieces; `rejects_dir` None is a dry run, which writes nothing."""

    names: Sequence[tuple[str, int | None]]
    items: dict[TopicPartition, PartitionInput[None]]
    selected: frozenset[TopicPartition]
    counts: dict[str, int]
    rejects_dir: str | None
    files: Sequence[str]
    options: StorageOptions | None
    prepare_kwargs: dict

    def __call__(self, numbered: tuple[int, list[pa.Table]]) -> list[dict]:
        """One task: append each topic-partition run of its sorted rows, a result row per partition."""
        batches = staged_batches(numbered[1], self.options)
        return [row for out in self._stream(batches) for row in out.to_pylist()]

    def over_input(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """One Spark task over input whose splits each hold one topic-partition's records in order
        (`AppendInput.by_partition`): its rows appended as they come, nothing staged (staging would write
        and read back every row to bring a partition's rows together, which they already are); its result
        rows (`RESULT_SCHEMA`). A second run of rows in one task breaks the input's promise: the task fails."""
        seen: set[int] = set()

        def runs() -> Iterator[pa.RecordBatch]:
            for batch in batches:
                if batch.num_rows:
                    staged = with_tp(batch, self.counts, topic_index(batch, self.counts, self.files))
                    yield staged.drop_columns(["topic", "_block"])

        for out in self._stream(runs(), seen):
            yield from out.to_batches()

    def _stream(self, batches: Iterator[pa.RecordBatch], seen: set[int] | None = None) -> Iterator[pa.Table]:
        for tp_index, chunks in _Runs(batches, buffer_bytes(APPEND_CHUNK_BYTES, self.items.values())):
            if seen is not None:
                if tp_index in seen:
                    topic, partition = self.names[tp_index]
                    raise KlakeError(f"input: the records of {topic}-{partition} are not in one run of one split")
                seen.add(tp_index)
            topic, partition = self.names[tp_index]
            if partition is None:  # partitions the topic lacks, all in one run: a rejects file for each
                table = pa.concat_tables(list(chunks))
                message = f"{topic} has partitions 0..{self.counts[topic] - 1}"
                for lacking in pc.unique(table.column("partition")).to_pylist():
                    rows = table.filter(pc.equal(table.column("partition"), lacking))
                    yield self._unplaced(topic, lacking, rows, UNKNOWN_PARTITION, message)
            elif (tp := TopicPartition(topic, partition)) not in self.selected:
                yield self._unplaced(topic, partition, pa.concat_tables(list(chunks)), NOT_SELECTED,
                                     f"{tp} is not among this run's --partition")
            else:
                yield self._append_run(tp, chunks)

    def _unplaced(self, topic: str, partition: int, rows: pa.Table, reason: str, message: str) -> pa.Table:
        """Records naming a partition the topic lacks or this run does not select: written by the task to
        `{rejects_dir}/unplaced/{topic}-{partition}.parquet` (a dry run's nowhere); their result row."""
        rejects = with_provenance(rejected(rows, reason, message, PROVENANCE), topic, self.files)
        uri = None if self.rejects_dir is None else write_unplaced(self.rejects_dir, topic, partition, rejects,
                                                                   self.options)
        return _result_row(topic, partition, UNPLACED, (reason, rejects.num_rows, uri))

    def _append_run(self, tp: TopicPartition, chunks: Iterator[pa.Table]) -> pa.Table:
        """One selected partition's records, in input order and in chunks: appended as a stream, result pickled.

        Rejected records are written by the task to `{rejects_dir}/{topic}-{partition}.parquet` before the
        driver's commit (a crash after the commit cannot lose them); a dry run's are only counted. Records of
        a selected partition this attempt does not append (its lease is held elsewhere, or an earlier attempt
        of the job id appended it) are only counted: they are neither appended nor rejected.
        """
        item = self.items.get(tp)
        if item is None:
            return _result_row(tp.topic, tp.partition, HELD, sum(chunk.num_rows for chunk in chunks))
        seen = 0

        def counted() -> Iterator[pa.Table]:
            nonlocal seen
            for chunk in chunks:
                seen += chunk.num_rows
                yield chunk

        result = run_prepare(partial(prepare_append, records=counted(), carry=PROVENANCE, **self.prepare_kwargs),
                             item)
        for rest in chunks:  # a failed append leaves rows unread; they still count as this partition's input
            seen += rest.num_rows
        if result.step is not None:
            outcome = result.step.outcome
            if self.rejects_dir is not None:  # (a dry run writes none)
                store_partition_rejects(self.rejects_dir, tp, with_provenance(outcome.rejects, tp.topic, self.files),
                                        self.options)
            outcome.rejects = None
        return _result_row(tp.topic, tp.partition, RESULT, (result, seen))


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


def _result_row(topic: str, partition: int, kind: str, payload: object) -> pa.Table:
    return pa.table({"topic": [topic], "partition": pa.array([partition], pa.int32()), "kind": [kind],
                     "result": pa.array([pickle.dumps(payload)], pa.binary())})


def partition_results(rows: Sequence[dict]) -> list[PartitionResult[PartitionAppendOutcome]]:
    """The partitions' results of the tasks' rows (a partition without input records has none: it has
    nothing to append and nothing to finish)."""
    return [pickle.loads(row["result"])[0] for row in rows if row["kind"] == RESULT]


@dataclass
class Tally:
    """The records of a run, by what became of them: received, appended (or to append, in a dry run) in
    `versions` segment versions, rejected by reason, appended earlier by the job id, and not yet appended by
    partition (their run failed or their lease was held)."""

    received: int = 0
    appended: int = 0
    versions: int = 0
    earlier: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    pending: Counter[str] = field(default_factory=Counter)


def tally(rows: Sequence[dict], run: JobRun[PartitionAppendOutcome]) -> Tally:
    """Appended and rejected records of the partitions this attempt committed; held-back records of the
    others."""
    out = Tally()
    for row in rows:
        payload = pickle.loads(row["result"])
        if row["kind"] == UNPLACED:
            reason, n, _ = payload
            out.received += n
            out.by_reason[reason] += n
            continue
        tp = TopicPartition(row["topic"], row["partition"])
        if row["kind"] == HELD:
            out.received += payload
            if tp in run.committed_earlier:
                out.earlier += payload
            else:
                out.pending[str(tp)] += payload
        else:
            result, n = payload
            out.received += n
            if str(tp) in run.failures:
                out.pending[str(tp)] += n
            elif result.step is not None and result.step.outcome.counters is not None:
                out.appended += result.step.outcome.counters.records_accepted
                out.versions += len(result.step.change.add)
                out.by_reason.update({reason: k for reason, k in result.step.outcome.counters.rejected.items() if k})
    return out
