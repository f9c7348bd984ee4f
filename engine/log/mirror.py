"""Mirroring a partition into another root, the pure rules (issue 15; the I/O is `engine.ops.mirror`).

Two ways, chosen per partition:
- **replica** (offsets preserved): the destination's live segments become the source's, version for
  version: same `.log` bytes, same indexes, same catalog facts and segment ids, as a Kafka follower
  copies its leader's log without touching a byte (so a LogAppendTime topic keeps the leader's append
  times: KIP-32 stamps them once, at the leader). Only what the destination lacks is copied: a source
  version whose id the destination holds is already there; a destination segment that is an earlier
  version of a source one (the active segment the source has appended to since) is replaced by it;
  a source segment wholly below the destination's first offset is one the destination's own
  retention removed, and is not brought back.
- **re-assigned offsets** (MirrorMaker's way, through the destination's append rules): every batch is
  moved to the destination's log end in place, as the broker's leader assigns offsets (the base offset
  is outside the CRC); the batch keeps its lastOffsetDelta, records, producer id/epoch/base sequence and
  transactional and control flags, so a transaction's data and its marker stay in the same order and
  tombstones stay tombstones. On a LogAppendTime destination every batch is stamped with the
  destination's append time (`engine.log.append.log_append_time`: one clock read per append, monotonic
  if the topic opts in); on a CreateTime destination a batch keeps its timestamps and type, so every
  record reads the same time as at the source (KIP-32's rule: CreateTime records keep theirs).
  Gaps between batches (left by compaction) close up; gaps inside a batch stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.catalog.schema import SegmentRef, SegmentRow, SegmentState
from engine.format.batch import LOG_APPEND_TIME, BatchHeaders, with_base_offset, with_max_timestamp
from engine.log.append import batch_size_limit, batch_too_large
from engine.log.segment_writer import Append
from engine.log.topic_config import TopicConfig
from kernel.errors import KlakeError


class NotAReplicaError(KlakeError):
    """The destination holds segments that are no version of the source's: offsets cannot be preserved."""


@dataclass(frozen=True)
class ReplicaPlan:
    """What makes the destination a replica of the source: source rows to copy, destination rows that
    are earlier versions of them (each with the source row replacing it; the destination's bytes must be
    a prefix of the source's), and state changes of versions both hold (a roll: ACTIVE -> ROLLED)."""

    copy: tuple[SegmentRow, ...] = ()
    replace: tuple[tuple[SegmentRow, SegmentRow], ...] = ()
    transitions: tuple[tuple[SegmentRef, SegmentState], ...] = ()


def replica_plan(source: Sequence[SegmentRow], dest: Sequence[SegmentRow]) -> ReplicaPlan:
    """The replica plan of one partition (live rows in base-offset order on both sides); raises
    `NotAReplicaError` naming the first destination segment that is no version of a source segment."""
    if not source:
        return ReplicaPlan()
    source_ids = {r.segment_id: r for r in source}
    dest_ids = {r.segment_id: r for r in dest}
    source_start = source[0].base_offset
    by_base = {r.base_offset: r for r in source}
    replace = []
    for d in dest:
        if d.segment_id in source_ids or d.next_offset <= source_start:
            continue
        s = by_base.get(d.base_offset)
        if s is None or s.segment_id in dest_ids or s.next_offset < d.next_offset or s.size_bytes < d.size_bytes:
            raise NotAReplicaError(
                f"destination segment {d.log_key} (offsets {d.base_offset}..{d.next_offset - 1}, {d.size_bytes} "
                "bytes) is no version of a source segment")
        replace.append((d, s))
    dest_start = dest[0].base_offset if dest else None
    copy = tuple(s for s in source if s.segment_id not in dest_ids
                 and (dest_start is None or s.next_offset > dest_start))
    transitions = tuple((dest_ids[s.segment_id].ref, SegmentState(s.state)) for s in source
                        if s.segment_id in dest_ids and dest_ids[s.segment_id].state != s.state)
    replaced = {d.segment_id for d, _ in replace}
    after = sorted([d for d in dest if d.segment_id not in replaced] + list(copy), key=lambda r: r.base_offset)
    for a, b in zip(after, after[1:], strict=False):
        if a.next_offset > b.base_offset:
            raise NotAReplicaError(f"destination segment {a.log_key} (offsets {a.base_offset}..{a.next_offset - 1}) "
                                   f"overlaps source segment at {b.base_offset}: no version of it")
    return ReplicaPlan(copy, tuple(replace), transitions)


def is_replica(source: Sequence[SegmentRow], dest: Sequence[SegmentRow]) -> bool:
    """Whether the destination's rows can be those of a replica (its bytes are checked when copying)."""
    try:
        replica_plan(source, dest)
    except NotAReplicaError:
        return False
    return True


@dataclass(frozen=True)
class Relocated:
    """Batches moved to the destination: one `Append` each, and the offset map, one row per batch
    (a source offset o in [source_base, source_last] is destination offset dest_base + o - source_base)."""

    appends: list[Append]
    source_base: np.ndarray
    source_last: np.ndarray
    dest_base: np.ndarray

    @property
    def next_offset(self) -> int | None:
        return self.appends[-1].last_offset + 1 if self.appends else None


def relocate_batches(data: bytes, headers: BatchHeaders, from_offset: int, next_offset: int,
                     log_append_time: int | None, source: str, config: TopicConfig) -> Relocated:
    """The batches of `data` whose last offset is >= `from_offset`, moved to run on from `next_offset`
    (see the module docstring); `log_append_time` stamps them (a LogAppendTime destination). A batch
    larger than the destination topic (`config`) takes is refused, as the broker's append refuses it
    (RecordTooLargeException; `engine.log.append.batch_size_limit`), naming its source offset."""
    take = np.flatnonzero(headers.last_offset >= from_offset)
    picked = headers.take(take)
    if (legacy := picked.magic != 2).any():
        raise KlakeError(f"{source} at byte {int(picked.position[legacy][0])}: a magic-{int(picked.magic[legacy][0])} "
                         "message cannot move to another offset in place (a broker would convert it to v2); mirror "
                         "it with --offsets preserve")
    if (large := picked.size > batch_size_limit(config)).any():
        first = int(np.argmax(large))
        raise KlakeError(f"{source}: the batch at offset {int(picked.base_offset[first])} is "
                         f"{batch_too_large(int(picked.size[first]), config)} at the destination, which refuses it "
                         "as a broker would (RecordTooLargeException)")
    spans = picked.last_offset - picked.base_offset + 1
    dest_base = next_offset + np.cumsum(spans) - spans
    appends = []
    for pos, size, base, span, max_ts in zip(picked.position.tolist(), picked.size.tolist(), dest_base.tolist(),
                                             spans.tolist(), picked.max_timestamp.tolist(), strict=True):
        batch = with_base_offset(memoryview(data)[pos:pos + size], base)
        if log_append_time is not None:
            batch, max_ts = with_max_timestamp(batch, log_append_time, LOG_APPEND_TIME), log_append_time
        last = base + span - 1
        appends.append(Append(batch, base, last, max_ts, last))
    return Relocated(appends, picked.base_offset, picked.last_offset, dest_base.astype(np.int64))
