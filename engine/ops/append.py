"""Append records to one catalogued partition: the active segment grows as a new object version.

Under the partition's lease: read the catalog's live rows, resume the ACTIVE segment exactly where
the previous job left it (`engine.ops.active_segment`: its bytes, `.index`, `.timeindex` and roll state,
so segment boundaries and index entries are what one broker appending the same sequence would produce),
append with Kafka's rules (`engine.log.append`), write every new segment version under a new id
(put-if-absent), and swap the old ACTIVE row for the new rows in ONE catalog commit. Rejected records
are returned with their reasons; nothing is dropped silently.

Idempotent by `append_id`: the job ledger (engine.ops.catalog_table) records in the same commit that this id
appended to this partition, so a re-run after a crash appends nothing twice; a crash before the commit
leaves only unreferenced objects (the scrubber removes them) and the re-run appends everything once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import SegmentRow, SegmentState
from engine.log.append import AppendCounters, append_records
from engine.log.summary import SegmentSummary
from engine.log.topic_config import min_timestamp
from engine.ops.active_segment import last_log_append_time, resume_state
from engine.ops.run import PartitionInput, PartitionStep
from engine.ops.versions import store_segment_version
from layouts.store import Parts
from layouts.store.bound import Store


@dataclass
class PartitionAppendOutcome:
    topic: str
    partition: int
    append_id: str
    already_committed: bool
    counters: AppendCounters | None = None
    rejects: pa.Table | None = None
    log_end_offset: int | None = None
    first_offset: int | None = None  # of the first record appended (an archive reports it)
    segments_written: list[str] = field(default_factory=list)
    commit_version: int | None = None

    def to_dict(self) -> dict[str, Any]:
        counters = self.counters
        return {"topic": self.topic, "partition": self.partition, "append_id": self.append_id,
                "already_committed": self.already_committed, "log_end_offset": self.log_end_offset,
                "first_offset": self.first_offset,
                "records_in": counters.records_in if counters else 0,
                "records_accepted": counters.records_accepted if counters else 0,
                "rejected": dict(counters.rejected) if counters else {},
                "batches": counters.batches if counters else 0, "bytes": counters.bytes if counters else 0,
                "segments_written": self.segments_written, "commit_version": self.commit_version}


def _whole(pieces: list[bytes], chunks: list[bytes], start_position: int) -> list[bytes]:
    """A segment's whole log, in parts: what the chunks before this one wrote to it (`pieces`, when the
    writer continued it from `start_position`), then `chunks`."""
    if not start_position:
        return chunks
    if sum(map(len, pieces)) != start_position:
        raise ValueError(f"the pieces of the continued segment hold {sum(map(len, pieces))} bytes, "
                         f"not {start_position}")
    return [*pieces, *chunks]


def prepare_append(item: PartitionInput[None], *, records: pa.Table | Iterable[pa.Table], store: Store, now_ms: int,
                   append_id: str, batch_bytes: int | None = None,
                   carry: Sequence[str] = (), dry_run: bool = False, keep_offsets: bool = False,
                   ) -> PartitionStep[PartitionAppendOutcome]:
    """Write the new segment versions of one partition; the step swaps them in for the old ACTIVE row.

    `records` is one table or a stream of them (consecutive chunks of the partition's input, in order):
    each chunk is appended where the previous one ended, every segment it closes is uploaded at once,
    and only the active segment stays in memory, so memory is bounded by `segment.bytes`, not by the
    partition (issue 14): a segment is kept as the batches each chunk added and written batch after batch,
    never joined into one more copy of itself. A chunk boundary ends a batch, as a produce request does.
    Rejected rows are numbered across the whole stream and carry the input's `carry` columns. Writing and
    committing are separate so that a job over many partitions commits once (`engine.ops.run`); the caller
    holds the partition's lease. A `dry_run` appends in memory (every record checked, every segment
    encoded and counted) and uploads nothing: its step is what the run would commit. `keep_offsets` appends
    every record at its `offset` column's offset (`engine.log.kept_offsets`), chunk after chunk.
    """
    tp, rows, config = item.tp, list(item.rows), item.config
    active = rows[-1] if rows and rows[-1].state == SegmentState.ACTIVE else None
    log_end = rows[-1].next_offset if rows else 0
    resume = resume_log = resumed = None
    if active is not None:
        resume, resume_log, resumed = resume_state(active, config, tp, store)
    last_append = last_log_append_time(rows, config)
    # the old ACTIVE segment's next version keeps its raised log start offset, and is written by
    # extending its .log object server-side (only the new bytes are uploaded)
    previous = {active.base_offset: active} if active is not None else {}

    def write_version(base: int, log: Parts, index: bytes, timeindex: bytes, state: SegmentState,
                      summary: SegmentSummary) -> SegmentRow:
        old = previous.get(base)
        return store_segment_version(store, tp, base, log, index, timeindex, state, append_id, now_ms,
                                     log_start_offset=old.log_start_offset if old else -1, extends=old,
                                     summary=summary, min_timestamp=min_timestamp(config), upload=not dry_run)

    new_rows: list[SegmentRow] = []
    pieces = [resume_log] if resume_log else []  # the active segment's bytes so far, chunk by chunk
    counters: AppendCounters | None = None
    rejects: list[pa.Table] = []
    first_row = 0
    first_offset = None
    result = None
    for chunk in [records] if isinstance(records, pa.Table) else records:
        result = append_records(chunk, config, log_end_offset=log_end, now_ms=now_ms,
                                last_log_append_time=last_append, resume=resume, resume_summary=resumed,
                                segment_key=str(tp), batch_bytes=batch_bytes, carry=carry,
                                keep_offsets=keep_offsets)
        for seg, summary in zip(result.closed, result.summaries, strict=False):
            log = _whole(pieces, seg.chunks, seg.start_position)
            new_rows.append(write_version(seg.base_offset, log, seg.index, seg.timeindex, SegmentState.ROLLED, summary))
        act = result.active
        pieces = [*pieces, *act.pieces] if act.start_position else list(act.pieces)
        resume, resumed = act.state, result.summaries[-1]
        log_end, last_append = result.log_end_offset, result.last_log_append_time
        counters = result.counters if counters is None else counters + result.counters
        if first_offset is None and (placed := result.offsets[result.offsets >= 0]).size:
            first_offset = int(placed[0])
        rejects.append(result.rejects.set_column(0, "row", pc.add(result.rejects.column("row"), first_row)))
        first_row += chunk.num_rows
    if result is None:
        return PartitionStep(PartitionAppendOutcome(tp.topic, tp.partition, append_id, False, None, None, log_end))
    outcome = PartitionAppendOutcome(tp.topic, tp.partition, append_id, False, counters,
                                     pa.concat_tables(rejects), log_end, first_offset)
    if counters.records_accepted == 0:
        return PartitionStep(outcome)
    act = result.active
    new_rows.append(write_version(act.base_offset, pieces, act.offset_index.to_bytes(), act.time_index.to_bytes(),
                          SegmentState.ACTIVE, result.summaries[-1]))
    outcome.segments_written = [] if dry_run else [r.log_key for r in new_rows]
    return PartitionStep(outcome, CatalogChange(add=tuple(new_rows), remove=(active.ref,) if active is not None else ()))
