"""Mirror topics from one root into another (issue 15): a batch job through the partition-job protocol.

The destination root is the job's: its partitions are leased, its catalog gets the one commit
(`engine.ops.run`). The source root is only read (its catalog, its segments). Per partition the
offsets are (the rules: `engine.log.mirror`):

- `preserve`: the destination becomes an exact replica of the source (segments copied byte for byte,
  with their indexes, catalog facts and segment ids); a destination holding anything else fails with
  `NotAReplicaError` and nothing of that partition is written;
- `remap`: the source's batches are appended at the destination's log end with the destination's
  rules (roll, indexes, LogAppendTime stamp), and the offset map is written as a Parquet side file
  `{dest_root}/_mirror/{topic}-{partition}/{first destination offset:020d}.parquet` with one row per
  batch: `source_base_offset`, `source_last_offset`, `destination_base_offset` (a source offset o of
  that batch is destination offset `destination_base_offset + o - source_base_offset`);
- `auto` (default): `preserve` for an empty destination or a replica (one the mirror has made a
  replica stays one, marked by `{dest_root}/_mirror/{topic}-{partition}/replica`), if the two topics
  have the same `message.timestamp.type`; `remap` otherwise (a destination with segments of its own, a
  partition with offset maps, a LogAppendTime destination of a CreateTime source, which re-stamps).

Incremental and idempotent by content, as import is (no job-ledger entries): a replica copies the
versions the destination lacks; a remap continues after the last source offset the committed maps
name. Which maps are committed is the catalog's to say, atomically: the commit that adds a remap's
segments also records the Delta transaction identifier `offset_map_app_id(tp)` at version (the map's
first destination offset + 1), so a map is committed iff its first destination offset is below that
version. A map is written before the commit; a killed run leaves at worst one uncommitted map (at or
past the recorded version) and objects the scrubber removes; the next remap of the partition deletes
uncommitted maps before writing its own, so every map below the recorded version is a committed one,
whatever was appended to the destination meanwhile. The record is one entry per partition, written
without `lastUpdated`, so the ledger's retention (`delta.setTransactionRetentionDuration`) never
expires it (`AppTransaction.permanent`): no record means no remap ever committed, and every map is
one a killed run left.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import LIVE_STATES, Layout, SegmentRow, SegmentState, partition_log_start_offset
from engine.format.batch import scan_batches
from engine.log.append import log_append_time
from engine.log.mirror import NotAReplicaError, is_replica, relocate_batches, replica_plan
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import SegmentWriter
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.active_segment import last_log_append_time, resume_state
from engine.ops.catalog_table import AppTransaction, Catalog
from engine.ops.lease import DEFAULT_LEASE_TTL_MS
from engine.ops.run import (
    Execute,
    JobRun,
    PartitionInput,
    PartitionStep,
    Prepare,
    rows_by_partition,
    run_partition_job,
    serial_execute,
)
from engine.ops.topic_store import load_topic_config, save_topic_config, stored_topic_config
from engine.ops.versions import segment_object_keys, store_segment_version
from kernel.errors import KlakeError
from kernel.names import TopicPartition
from layouts.object_layout import batch_index_key, object_segment_keys, put_segment_objects
from layouts.store import join
from layouts.store.bound import Store

MODES = ("auto", "preserve", "remap")
MAP_DIR = "_mirror"
MAP_SCHEMA = pa.schema([pa.field("source_base_offset", pa.int64(), nullable=False),
                        pa.field("source_last_offset", pa.int64(), nullable=False),
                        pa.field("destination_base_offset", pa.int64(), nullable=False)])
"""Parquet key-value metadata of every map whose commit the catalog records (`offset_map_app_id`)."""
_MAP_NAME = re.compile(r"(\d{20})\.parquet")


@dataclass
class MirrorOutcome:
    """What the mirror did to one partition."""

    topic: str
    partition: int
    mode: str  # preserve | remap
    segments_copied: int = 0
    segments_replaced: int = 0
    batches_copied: int = 0
    bytes_copied: int = 0
    source_log_end_offset: int = 0
    log_end_offset: int = 0
    offset_map: str | None = None
    segments_written: list[str] = field(default_factory=list)
    source_first_offset: int | None = None  # the source offsets copied (None: nothing)
    source_last_offset: int | None = None
    dry_run: bool = False  # what the run would do: nothing is written

    def covers(self, first: int, last: int) -> None:
        """Note source offsets [first, last] as copied."""
        self.source_first_offset = first if self.source_first_offset is None else min(self.source_first_offset, first)
        self.source_last_offset = last if self.source_last_offset is None else max(self.source_last_offset, last)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_mirror_job_id(source_root: str, dest_root: str, mode: str) -> str:
    """The same mirror has the same job id, so a re-run of a killed one takes over its leases at once."""
    return "mirror-" + hashlib.sha256(f"{source_root}\x00{dest_root}\x00{mode}".encode()).hexdigest()[:24]


def offset_map_prefix(dest_root: str, tp: TopicPartition) -> str:
    return join(dest_root, MAP_DIR, tp.dir_name)


def offset_map_app_id(tp: TopicPartition) -> str:
    """The catalog's record of a partition's committed offset maps: a Delta transaction identifier whose
    version is the last committed map's first destination offset + 1 (it grows with the log end)."""
    return f"klake:mirror-map:{tp}"


def offset_maps(dest: Store, tp: TopicPartition) -> list[tuple[int, str]]:
    """Every offset map file of the partition, committed or not, as (first destination offset, uri) in order."""
    return sorted((int(m.group(1)), info.uri) for info in dest.list_objects(offset_map_prefix(dest.root, tp))
                  if (m := _MAP_NAME.fullmatch(info.name)))


def committed_offset_maps(dest: Store, tp: TopicPartition, recorded: int | None,
                          found: Sequence[tuple[int, str]] | None = None) -> list[tuple[int, str]]:
    """The partition's committed offset maps, (first destination offset, uri) in order: those below
    `recorded`, the version the destination catalog records for `offset_map_app_id(tp)` (None: none
    committed). `found`: the partition's `offset_maps`, if listed already. The last committed map
    missing is an error: continuing without it would copy its batches again."""
    found = offset_maps(dest, tp) if found is None else found
    if recorded is None:
        return []
    committed = [entry for entry in found if entry[0] < recorded]
    if not committed or committed[-1][0] != recorded - 1:
        raise KlakeError(f"{tp}: the destination catalog records a committed offset map "
                         f"{join(offset_map_prefix(dest.root, tp), f'{recorded - 1:020d}.parquet')} that is missing "
                         "(where the mirror stopped is unknown): restore it")
    return committed


def destination_config(dest: Store, topic: str, source_config: TopicConfig, save: bool = True) -> TopicConfig:
    """A destination topic's settings: its own stored ones, else the source's, stored beside the
    destination's data (a replica is configured as its source) unless not to `save` (a dry run)."""
    stored = stored_topic_config(dest, topic)
    if stored is not None:
        return stored
    if save:
        save_topic_config(dest, topic, source_config)
    return source_config


def prepare_mirror(item: PartitionInput[None], *, source_rows: Mapping[TopicPartition, Sequence[SegmentRow]],
                   source_config: Mapping[str, TopicConfig], mode: str, origin: Store, dest: Store, now_ms: int,
                   job_id: str, dry_run: bool = False) -> PartitionStep[MirrorOutcome]:
    """Mirror one partition from the `origin` store's root into `dest`'s; the step is committed by the job's
    one commit. A `dry_run` reads what the run would (every batch a remap would move is checked) and writes
    nothing."""
    source = list(source_rows.get(item.tp, ()))
    dest_rows = list(item.rows)
    recorded = item.app_versions.get(offset_map_app_id(item.tp))
    same_time = source_config[item.tp.topic].message_timestamp_type == item.config.message_timestamp_type
    if mode == "preserve" and not same_time:
        raise KlakeError(f"{item.tp}: an exact replica keeps the source's timestamps, but message.timestamp.type is "
                         f"{source_config[item.tp.topic].message_timestamp_type} at the source and "
                         f"{item.config.message_timestamp_type} at the destination; mirror with --offsets remap")
    if mode == "auto":
        remapped = recorded is not None  # the catalog records every committed remap
        replica = same_time and not remapped and (is_replica(source, dest_rows) or _was_replica(dest, item.tp))
        mode = "preserve" if replica else "remap"
    if mode == "preserve":
        return _replicate(item.tp, source, dest_rows, origin, dest, job_id, dry_run)
    return _remap(item, source, recorded, origin, dest, now_ms, job_id, dry_run)


def _replica_marker(dest_root: str, tp: TopicPartition) -> str:
    return join(offset_map_prefix(dest_root, tp), "replica")


def _was_replica(dest: Store, tp: TopicPartition) -> bool:
    """Whether the partition was mirrored as a replica: `auto` keeps it one (a source compacted or
    truncated since then fails it, naming the segment) rather than appending the whole source again."""
    return dest.info(_replica_marker(dest.root, tp)) is not None


def _replicate(tp: TopicPartition, source: list[SegmentRow], dest_rows: list[SegmentRow], origin: Store, dest: Store,
               job_id: str, dry_run: bool) -> PartitionStep[MirrorOutcome]:
    plan = replica_plan(source, dest_rows)
    outcome = MirrorOutcome(tp.topic, tp.partition, "preserve",
                            source_log_end_offset=source[-1].next_offset if source else 0, dry_run=dry_run)
    for s in plan.copy:
        outcome.covers(s.base_offset, s.last_offset)
    for d, s in plan.replace:
        if origin.read(s.log_key, 0, d.size_bytes) != dest.read(d.log_key):
            raise NotAReplicaError(f"destination segment {d.log_key} is not a prefix of source segment {s.log_key}")
    if dry_run:
        outcome.segments_copied, outcome.segments_replaced = len(plan.copy), len(plan.replace)
        outcome.batches_copied = sum(s.batch_count for s in plan.copy)
        outcome.bytes_copied = sum(s.size_bytes for s in plan.copy)
        outcome.log_end_offset = max([s.next_offset for s in plan.copy] + ([dest_rows[-1].next_offset] if dest_rows else [0]))
        return PartitionStep(outcome)
    added = []
    if plan.copy:
        dest.ensure(_replica_marker(dest.root, tp), b"")
    for s in plan.copy:
        keys = object_segment_keys(dest.root, tp, s.base_offset, s.segment_id)
        log, index, timeindex = (origin.read(key) for key in (s.log_key, s.index_key, s.timeindex_key))
        batchindex = None if s.batchindex_size_bytes is None else origin.read(batch_index_key(s.timeindex_key))
        put_segment_objects(keys, log, index, timeindex, dest, batchindex=batchindex)
        added.append(replace(s, log_key=keys.log, index_key=keys.index, timeindex_key=keys.timeindex,
                             layout=str(Layout.OBJECT), job_id=job_id, index_size_bytes=len(index),
                             timeindex_size_bytes=len(timeindex),
                             batchindex_size_bytes=None if batchindex is None else len(batchindex)))
        outcome.bytes_copied += len(log)
        outcome.batches_copied += s.batch_count
    outcome.segments_copied, outcome.segments_replaced = len(added), len(plan.replace)
    outcome.segments_written = [r.log_key for r in added]
    outcome.log_end_offset = max([r.next_offset for r in added] + ([dest_rows[-1].next_offset] if dest_rows else [0]))
    change = CatalogChange(add=tuple(added), remove=tuple(d.ref for d, _ in plan.replace),
                           transitions=plan.transitions)
    return PartitionStep(outcome, change)


def _remap(item: PartitionInput[None], source: list[SegmentRow], recorded: int | None, origin: Store, dest: Store,
           now_ms: int, job_id: str, dry_run: bool) -> PartitionStep[MirrorOutcome]:
    tp, config, dest_rows = item.tp, item.config, list(item.rows)
    log_end = dest_rows[-1].next_offset if dest_rows else 0
    found = offset_maps(dest, tp)
    maps = committed_offset_maps(dest, tp, recorded, found)
    stale = [uri for first, uri in found if recorded is None or first >= recorded]  # left by killed runs
    outcome = MirrorOutcome(tp.topic, tp.partition, "remap", source_log_end_offset=source[-1].next_offset
                            if source else 0, log_end_offset=log_end, dry_run=dry_run)
    from_offset = 0
    if maps:  # the last committed map says where the previous runs stopped
        last_map = pq.read_table(pa.BufferReader(dest.read(maps[-1][1])))
        from_offset = int(last_map.column("source_last_offset").to_numpy().max()) + 1
    if source:  # records below the source's log start offset are deleted (KIP-107): not copied
        from_offset = max(from_offset, partition_log_start_offset(source))
    todo = [s for s in source if s.next_offset > from_offset]
    if not todo:
        return PartitionStep(outcome)
    active = dest_rows[-1] if dest_rows and dest_rows[-1].state == SegmentState.ACTIVE else None
    policy = RollPolicy(config)
    if active is not None:
        state, log, _ = resume_state(active, config, tp, dest)
        writer = SegmentWriter.resume(policy, state, str(tp), log)
    else:
        writer = SegmentWriter(policy, log_end, str(tp), now_ms, min_timestamp=min_timestamp(config))
    lat = log_append_time(config, now_ms, last_log_append_time(dest_rows, config))
    new_rows: list[SegmentRow] = []

    def write_version(segment_base: int, log: bytes, index: bytes, timeindex: bytes, state: SegmentState) -> None:
        if dry_run:
            outcome.segments_copied += 1
            return
        extends = active if active is not None and active.base_offset == segment_base else None
        new_rows.append(store_segment_version(dest, tp, segment_base, log, index, timeindex, state, job_id, now_ms, log_start_offset=extends.log_start_offset if extends else -1, extends=extends, min_timestamp=min_timestamp(config)))

    next_offset = log_end
    map_parts = []
    try:
        for s in todo:
            data = origin.read(s.log_key)
            moved = relocate_batches(data, scan_batches(data, s.log_key).headers, from_offset, next_offset, lat,
                                     s.log_key, config)
            for append in moved.appends:
                writer.append(append, now_ms)
                outcome.bytes_copied += len(append.data)
            for closed in writer.closed:  # upload each rolled segment at once: memory bounded by segment.bytes
                write_version(closed.base_offset, closed.log, closed.index, closed.timeindex, SegmentState.ROLLED)
            writer.closed.clear()
            map_parts.append(pa.table([moved.source_base, moved.source_last, moved.dest_base], schema=MAP_SCHEMA))
            next_offset = moved.next_offset or next_offset
            outcome.batches_copied += len(moved.appends)
            if moved.appends:
                outcome.covers(int(moved.source_base[0]), int(moved.source_last[-1]))
    except KlakeError:  # a batch the destination refuses: the segments uploaded so far go too
        dest.delete_many([k for r in new_rows for k in segment_object_keys(r)])
        raise
    if next_offset == log_end:
        return PartitionStep(outcome)
    act = writer.active
    offsets, times = act.indexer.snapshot()
    write_version(act.base_offset, b"".join(act.chunks), offsets.to_bytes(), times.to_bytes(), SegmentState.ACTIVE)
    if dry_run:
        outcome.log_end_offset = next_offset
        return PartitionStep(outcome)
    outcome.offset_map = join(offset_map_prefix(dest.root, tp), f"{log_end:020d}.parquet")
    sink = io.BytesIO()
    pq.write_table(pa.concat_tables(map_parts), sink)
    if (gone := dest.delete_many([uri for uri in stale if uri != outcome.offset_map])).failed:
        raise KlakeError(f"{tp}: uncommitted offset map(s) not deleted: {gone.failed}")  # the module docstring
    dest.write(outcome.offset_map, sink.getvalue())
    outcome.segments_written = [r.log_key for r in new_rows]
    outcome.segments_copied, outcome.log_end_offset = len(new_rows), next_offset
    return PartitionStep(outcome, CatalogChange(add=tuple(new_rows),
                                                remove=(active.ref,) if active is not None else ()),
                         app_transactions={offset_map_app_id(tp): AppTransaction(log_end + 1, permanent=True)})


def source_partitions(catalog: Catalog, topics: Sequence[str] = (), partitions: Sequence[int] = ()
                      ) -> list[TopicPartition]:
    """The source catalog's partitions selected by `topics` / `partitions` (all by default); a topic the
    source does not hold is bad input."""
    found = catalog.partitions()
    if missing := set(topics) - {tp.topic for tp in found}:
        raise KlakeError(f"topic(s) not in the source catalog {catalog.uri}: {sorted(missing)}")
    return [tp for tp in found if (not topics or tp.topic in topics) and (not partitions or tp.partition in partitions)]


def mirror_partitions(origin: Store, source_catalog: Catalog, dest: Store, dest_catalog: Catalog | None,
                      tps: Sequence[TopicPartition], *, dest_configs: Mapping[str, TopicConfig] | None = None,
                      mode: str = "auto", now_ms: int,
                      job_id: str | None = None, execute: Callable[[Prepare[MirrorOutcome]], Execute[MirrorOutcome]] = serial_execute,
                      lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS, dry_run: bool = False) -> JobRun[MirrorOutcome]:
    """Mirror `tps` from the `origin` store's root into `dest`'s in one job (see the module
    docstring); `dest_configs` are the destination topics' settings where the caller declared them,
    the others are `destination_config`'s. `execute` runs the partitions (serially by default).
    A `dry_run` says per partition what the run would copy and writes nothing: no lease, no commit,
    no object, no topic settings (`dest_catalog` None: a destination without a catalog yet)."""
    if mode not in MODES:
        raise KlakeError(f"offsets mode {mode!r}: expected one of {', '.join(MODES)}")
    if origin.root == dest.root:
        raise KlakeError(f"mirror source and destination are the same root {origin.root}")
    job_id = job_id or default_mirror_job_id(origin.root, dest.root, mode)
    topics = sorted({tp.topic for tp in tps})
    source_config = {t: load_topic_config(origin, t) for t in topics}
    declared = dict(dest_configs or {})
    configs = {t: declared.get(t) or destination_config(dest, t, source_config[t], save=not dry_run)
               for t in topics}
    rows = {tp: tuple(r for r in found if r.state in LIVE_STATES)
            for tp, found in rows_by_partition(source_catalog, tps).items()}
    prepare = partial(prepare_mirror, source_rows=rows, source_config=source_config, mode=mode, origin=origin, dest=dest,
                      now_ms=now_ms, job_id=job_id, dry_run=dry_run)
    return run_partition_job(dest_catalog, dest, {tp: configs[tp.topic] for tp in tps}, execute(prepare),
                             operation="mirror", job_id=job_id, mutate=not dry_run, ledger=False,
                             lease_ttl_ms=lease_ttl_ms, app_ids=lambda tp: [offset_map_app_id(tp)])
