"""Recover a catalogued partition: rebuild bad sidecars, cut corrupt tails into quarantine (nothing lost).

Kafka's `LogLoader` (spec 7.1) and `LogSegment.recover` (spec 7.2), applied to immutable objects and
one catalog commit, under the partition's lease. Per live segment (verified by `recovery_check`):

- sidecars missing, invalid (KAFKA-10207: a zero-padded `.timeindex`; KAFKA-7283: never checked) or
  of another size than their row records
  -> rebuilt with Kafka's recovery rule (`_Planner._put_sidecars`, the topic's `index.interval.bytes`)
  and written as NEW objects under the root (object-layout keys of a new segment id); the `.log` is
  immutable and stays where it is, also for a Kafka-layout row (the broker copy is never touched);
- a corrupt or partial tail -> the bytes after the valid prefix are first copied to
  `{root}/_quarantine/{topic}-{partition}/{base:020d}-{segment_id}-at-{valid_bytes}.bin`, then the
  prefix is written as a new object-layout segment version with rebuilt sidecars. Kafka truncates
  the file in place and the cut bytes are gone;
- a valid prefix of zero bytes -> all bytes quarantined and the row leaves the live log. An ACTIVE
  segment (or one carrying the partition's log start offset) is kept as an empty segment instead, so
  the partition keeps its active segment (spec 7.1 step 5) and its log start offset;
- a `.log` that is missing, or intact but disagreeing with its row (size or facts) -> reported and
  left for the operator: klake does not guess whether the row or the object is right.

Differences from Kafka, on purpose:
- Kafka deletes every segment after one that lost bytes (spec 7.1 step 3). klake keeps later valid
  segments: their records are intact, and deleting them would lose data. The offsets cut out of
  the log show as a gap (reported, not an error). Kafka's rule exists because a broker's replicas
  re-fetch the deleted suffix from the leader; an archive has no leader to re-fetch from;
- Kafka recovers only segments after the recovery point and only after an unclean shutdown
  (KAFKA-10471, KAFKA-10101); klake verifies every segment on every run, so trust in a checkpoint
  never hides a corrupt segment;
- a batch whose records do not decode although its CRC matches ends the valid prefix (Kafka's
  recovery checks only the CRC, spec 7.2), and so does a batch whose offsets do not increase;
- a batch whose last offset is outside `[base, base + Int.MAX]` ends the valid prefix; Kafka's
  `InvalidOffsetException` empties the whole segment instead (spec 7.1 step 3);
- a new segment version keeps the row's `created_at_ms` (klake's mtime), so recovering a segment
  does not postpone its time-based retention; only an emptied ACTIVE segment gets `now_ms` (Kafka
  resets an emptied segment's creation time).

Idempotent: new segment ids derive from the old id and what changed (plus a digest of the kept
bytes), objects are written with `ensure_object` (put-if-absent, identical bytes accepted), and all
catalog changes are ONE `Catalog.swap`. Re-running after success finds nothing to do; re-running
after a crash before the commit rewrites identical objects and commits. Superseded objects are left
for the scrub job.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import Layout, SegmentRef, SegmentRow, SegmentState
from engine.index.batch_index import batch_index_bytes
from engine.index.rebuild import build_indexes
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog
from engine.ops.run import PartitionInput, PartitionStep, run_single_partition
from engine.ops.verify import (
    OffsetGap,
    PartitionCheck,
    Problem,
    SegmentCheck,
    check_segment,
    offset_continuity,
    verify_partition,
)
from engine.ops.versions import segment_row
from kernel.names import TopicPartition
from layouts.object_layout import SegmentKeys, object_segment_keys
from layouts.store import join
from layouts.store.bound import Store

__all__ = ["PartitionCheck", "Problem", "RecoveryReport", "SegmentRepair", "derived_segment_id",
           "quarantine_key", "recover_partition", "verify_partition"]

QUARANTINE_DIR = "_quarantine"
REBUILD_SIDECARS, CUT_TAIL, REMOVE, LEFT_FOR_OPERATOR = "rebuild-sidecars", "cut-tail", "remove", "left-for-operator"


@dataclass
class SegmentRepair:
    """What recovery does (or, in a dry run, would do) to one segment, and why."""

    action: str  # rebuild-sidecars | cut-tail | remove | left-for-operator
    segment_id: str
    base_offset: int
    log_key: str
    reasons: list[str]
    new_segment_id: str | None = None
    new_keys: dict[str, str] | None = None
    valid_bytes: int | None = None
    quarantine_key: str | None = None
    quarantined_bytes: int = 0
    next_offset_before: int | None = None
    next_offset_after: int | None = None
    objects_written: list[str] = field(default_factory=list)
    _new_row: SegmentRow | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}


@dataclass
class RecoveryReport:
    """The run report of one partition's recovery (`to_dict` is the JSON form)."""

    topic: str
    partition: int
    root: str
    job_id: str
    dry_run: bool
    segments_checked: int = 0
    repairs: list[SegmentRepair] = field(default_factory=list)
    gaps_after: list[OffsetGap] = field(default_factory=list)
    commit_version: int | None = None
    rows_removed: int = 0
    rows_added: int = 0

    @property
    def changes(self) -> list[SegmentRepair]:
        return [r for r in self.repairs if r.action != LEFT_FOR_OPERATOR]

    @property
    def left_for_operator(self) -> list[SegmentRepair]:
        return [r for r in self.repairs if r.action == LEFT_FOR_OPERATOR]

    @property
    def nothing_to_do(self) -> bool:
        return not self.changes

    @property
    def quarantined(self) -> dict[str, int]:
        """Quarantine object -> bytes it holds."""
        return {r.quarantine_key: r.quarantined_bytes for r in self.repairs if r.quarantine_key}

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "root": self.root, "job_id": self.job_id,
                "dry_run": self.dry_run, "segments_checked": self.segments_checked,
                "nothing_to_do": self.nothing_to_do, "repairs": [r.to_dict() for r in self.repairs],
                "quarantined": self.quarantined, "gaps_after": [g.to_dict() for g in self.gaps_after],
                "commit_version": self.commit_version, "rows_removed": self.rows_removed,
                "rows_added": self.rows_added}


def derived_segment_id(segment_id: str, change: str) -> str:
    """The id of the segment version that `change` makes of `segment_id`: the same inputs, the same id."""
    return hashlib.sha256(f"{segment_id}\x00{change}".encode()).hexdigest()[:16]


def quarantine_key(root: str, tp: TopicPartition, row: SegmentRow, valid_bytes: int) -> str:
    """Where the bytes cut from `row`'s `.log` after `valid_bytes` are kept."""
    return join(root, QUARANTINE_DIR, tp.dir_name, f"{row.base_offset:020d}-{row.segment_id}-at-{valid_bytes}.bin")


class _Planner:
    """Plans (and unless dry-running, writes the objects of) every segment's repair."""

    def __init__(self, store: Store, tp: TopicPartition, config: TopicConfig,
                 job_id: str, now_ms: int, write: bool, rebuild_all: bool = False) -> None:
        self.store, self.root, self.tp = store, store.root, tp
        self.interval, self.min_timestamp = config.index_interval_bytes, min_timestamp(config)
        self.job_id, self.now_ms, self.write, self.rebuild_all = job_id, now_ms, write, rebuild_all

    def repair(self, check: SegmentCheck) -> SegmentRepair | None:
        row = check.row
        reasons = [str(p) for p in check.problems]
        if check.log_missing:
            return SegmentRepair(LEFT_FOR_OPERATOR, row.segment_id, row.base_offset, row.log_key, reasons)
        if check.tail_bytes:
            return self._cut(check, reasons)
        if not check.facts_valid or check.log_size != row.size_bytes:
            reasons.append(f"{row.log_key}: the log is intact but disagrees with its catalog row; "
                           "left for the operator")
            return SegmentRepair(LEFT_FOR_OPERATOR, row.segment_id, row.base_offset, row.log_key, reasons)
        if not check.sidecars_valid:
            return self._rebuild_sidecars(check, reasons)
        if self.rebuild_all:
            return self._rebuild_sidecars(check, [f"rebuild requested (index.interval.bytes {self.interval})"])
        return None

    def _put(self, repair: SegmentRepair, uri: str, data: bytes) -> None:
        if self.write and self.store.ensure(uri, data):
            repair.objects_written.append(uri)

    def _rebuild_sidecars(self, check: SegmentCheck, reasons: list[str]) -> SegmentRepair:
        row = check.row
        new_id = derived_segment_id(row.segment_id, f"sidecars:{self.interval}")
        owned = object_segment_keys(self.root, self.tp, row.base_offset, new_id)
        keys = SegmentKeys(row.log_key, owned.index, owned.timeindex)
        repair = SegmentRepair(REBUILD_SIDECARS, row.segment_id, row.base_offset, row.log_key, reasons,
                               new_segment_id=new_id, new_keys=_keys_dict(keys), valid_bytes=check.valid_bytes,
                               next_offset_before=row.next_offset, next_offset_after=row.next_offset)
        sizes = self._put_sidecars(repair, keys, check)  # a .batchindex beside the new .timeindex, whoever owns the .log
        repair._new_row = replace(row, segment_id=new_id, index_key=keys.index, timeindex_key=keys.timeindex,
                                  job_id=self.job_id, index_size_bytes=sizes.index,
                                  timeindex_size_bytes=sizes.timeindex, batchindex_size_bytes=sizes.batchindex)
        return repair

    def _put_sidecars(self, repair: SegmentRepair, keys: SegmentKeys, check: SegmentCheck) -> _SidecarSizes:
        """Rebuild the sidecars of the checked log's valid prefix and write them at `keys`: the `.index`, the
        `.timeindex`, then the `.batchindex` where it pays (commit protocol order, after the `.log`).

        Recovery rebuilds rather than settling (`engine.index.checks.settle_indexes`, the validate-or-rebuild
        of import and export): a segment gets here only when `check_segment` (verify's check, wider than
        `check_sidecars`: also the sizes the row records and the `.batchindex`) already failed its stored
        sidecars, when its tail is cut (a new, shorter segment version) or when a rebuild is requested.
        Kafka's `LogSegment.recover` likewise resets and rebuilds the indexes, both for a segment whose
        `sanityCheck` fails and for every segment after the recovery point (`LogLoader`, spec 7.1-7.2)."""
        headers = check.prefix_headers
        offsets, times = build_indexes(headers, check.row.base_offset, self.interval,
                                       min_timestamp=self.min_timestamp)
        index, timeindex = offsets.to_bytes(), times.to_bytes()
        self._put(repair, keys.index, index)
        self._put(repair, keys.timeindex, timeindex)
        batchindex = batch_index_bytes(len(headers), timeindex, check.row.base_offset, lambda: headers,
                                       min_timestamp=self.min_timestamp)
        if batchindex is not None:
            self._put(repair, keys.batchindex, batchindex)
        return _SidecarSizes(len(index), len(timeindex), None if batchindex is None else len(batchindex))

    def _cut(self, check: SegmentCheck, reasons: list[str]) -> SegmentRepair:
        """Quarantine the tail first (nothing is lost if the run dies), then write the prefix."""
        row, data, valid = check.row, check.data, check.valid_bytes
        if data is None or check.summary is None:
            raise ValueError(f"{row.log_key}: cutting a tail needs the checked .log bytes (keep_data=True)")
        qkey = quarantine_key(self.root, self.tp, row, valid)
        keep_empty = row.state == SegmentState.ACTIVE or row.log_start_offset >= 0
        repair = SegmentRepair(CUT_TAIL if valid or keep_empty else REMOVE, row.segment_id, row.base_offset,
                               row.log_key, reasons, valid_bytes=valid, quarantine_key=qkey,
                               quarantined_bytes=len(data) - valid, next_offset_before=row.next_offset,
                               next_offset_after=check.summary.next_offset if valid or keep_empty else None)
        self._put(repair, qkey, data[valid:])
        if repair.action == REMOVE:
            return repair
        prefix = data[:valid]
        digest = hashlib.blake2b(prefix, digest_size=8).hexdigest()
        new_id = derived_segment_id(row.segment_id, f"cut:{valid}:{self.interval}:{digest}")
        keys = object_segment_keys(self.root, self.tp, row.base_offset, new_id)
        repair.new_segment_id, repair.new_keys = new_id, _keys_dict(keys)
        self._put(repair, keys.log, prefix)
        sizes = self._put_sidecars(repair, keys, check)
        new_row = segment_row(self.tp, new_id, keys, Layout.OBJECT, check.summary, SegmentState(row.state),
                              self.job_id, created_at_ms=row.created_at_ms if valid else self.now_ms,
                              index_size_bytes=sizes.index, timeindex_size_bytes=sizes.timeindex,
                              batchindex_size_bytes=sizes.batchindex)
        repair._new_row = replace(new_row, log_start_offset=row.log_start_offset, cleaned=row.cleaned)
        return repair


class _SidecarSizes(NamedTuple):
    """The sizes of a segment version's rebuilt sidecars (`batchindex` None: none was made)."""

    index: int
    timeindex: int
    batchindex: int | None


def _keys_dict(keys: SegmentKeys) -> dict[str, str]:
    return {"log": keys.log, "index": keys.index, "timeindex": keys.timeindex}


def _plan(rows: Sequence[SegmentRow], report: RecoveryReport, planner: _Planner
          ) -> tuple[list[SegmentRef], list[SegmentRow]]:
    """Check every live segment, plan its repair (writing objects unless dry-running), and return the swap."""
    report.segments_checked = len(rows)
    after: list[SegmentRow] = []
    remove: list[SegmentRef] = []
    add: list[SegmentRow] = []
    for row in rows:
        repair = planner.repair(check_segment(row, planner.store, keep_data=True,
                                              min_timestamp=planner.min_timestamp))
        if repair is None or repair.action == LEFT_FOR_OPERATOR:
            after.append(row)
        else:
            remove.append(row.ref)
            if repair._new_row is not None:
                add.append(repair._new_row)
                after.append(repair._new_row)
        if repair is not None:
            report.repairs.append(repair)
    report.gaps_after = offset_continuity(after)[0]
    return remove, add


def prepare_recovery(item: PartitionInput[None], *, store: Store, job_id: str, now_ms: int,
                     dry_run: bool = False, rebuild_all: bool = False) -> PartitionStep[RecoveryReport]:
    """Verify one partition and write its repairs (unless `dry_run`); the step swaps repaired rows in.
    `rebuild_all` also rebuilds valid sidecars (e.g. after changing `index.interval.bytes`)."""
    report = RecoveryReport(item.tp.topic, item.tp.partition, store.root, job_id, dry_run)
    planner = _Planner(store, item.tp, item.config, job_id, now_ms, write=not dry_run,
                       rebuild_all=rebuild_all)
    remove, add = _plan(item.rows, report, planner)
    report.rows_removed, report.rows_added = len(remove), len(add)
    if dry_run:
        return PartitionStep(report)
    return PartitionStep(report, CatalogChange(add=tuple(add), remove=tuple(remove)))


def recover_partition(catalog: Catalog, store: Store, tp: TopicPartition,
                      dry_run: bool = False, job_id: str | None = None,
                      now_ms: int | None = None, config: TopicConfig | None = None) -> RecoveryReport:
    """Verify `tp` and repair what can be repaired without losing a byte, in one catalog commit.

    `config` supplies `index.interval.bytes` for rebuilt sidecars (Kafka's default 4096 without it).
    A dry run reports the plan (same ids, keys and quarantine objects) and writes nothing.
    """
    job_id = job_id or uuid.uuid4().hex
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    prepare = partial(prepare_recovery, store=store, job_id=job_id, now_ms=now_ms, dry_run=dry_run)
    run = run_single_partition(catalog, store, tp, config or TopicConfig(), prepare, operation="recover",
                               job_id=job_id, mutate=not dry_run)
    report = run.outcome(tp)
    if run.commit is not None:
        report.commit_version = run.commit.version
    return report
