"""Import a broker's log dir (Kafka layout, local or `s3://`) into the catalog.

Every `<topic>-<partition>` directory under the source is registered, one row per segment, in ONE
catalog commit. Without `copy` the rows point at the Kafka-layout `.log` objects where they are
(layout `kafka`); with `copy` each segment is copied into the object layout under the root. Rules:

- the source is checked first (`scan_source`): a directory that is neither a partition of a valid
  topic nor one of Kafka's non-live (`-delete`, `-future`, `-stray`) directories fails the import
  before anything is written, naming every such directory, as a broker refuses to load that log dir;
- the source is never modified: sidecars that are missing or fail validation are rebuilt with Kafka's
  recovery rule (`settle_indexes`, validate-or-rebuild) and written under the root in the object layout,
  and the rebuild is reported;
- a corrupt segment is reported by name and byte position and the partition's import stops there;
  the segments before it are kept, and with `copy` so is the valid prefix of the corrupt segment
  (Kafka's recovery truncates a segment to its valid prefix, spec 7.2);
- re-running is a no-op: a segment's id is derived from its source key and size, so a segment that
  is already registered with the same key and size is recognised without reading it;
- each partition is leased while it is imported, so two imports of one partition cannot interleave
  (the partition-job protocol of `engine.ops.run`, as every job);
- the source's last segment is registered ACTIVE (it was the broker's active segment), the others
  ROLLED; a previously ACTIVE row followed by newly imported segments moves to ROLLED in the same commit;
- a log start offset the log dir's `log-start-offset-checkpoint` holds inside a newly registered
  segment (a DeleteRecords the broker had applied) goes on that segment's row, as the catalog keeps it.

Other layouts of Kafka's segments (a tiered-storage bucket: `engine.ops.tiered`) plug in as a `SourceLayout`:
how the source is listed into partitions of segments, where its log start offsets are, and the layout its
rows get in place. A tiered bucket also says which uploads it still holds (`KafkaPartitionDir.present`): a
re-import forgets the rows of uploads the broker's remote retention deleted (`remote_retention`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import partial

from engine.catalog.changes import CatalogChange, plan_change
from engine.catalog.schema import Layout, SegmentRef, SegmentRow, SegmentState
from engine.errors import CorruptRecordError, KlakeError
from engine.format.batch import BatchHeaders, scan_batches
from engine.index.batch_index import batch_index_bytes
from engine.index.checks import settle_indexes
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.index.rebuild import build_indexes
from engine.log.kafka_files import parse_offset_checkpoint
from engine.log.summary import SegmentSummary, summarize_segment
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.names import LOG_START_OFFSET_CHECKPOINT, TopicPartition
from engine.ops.catalog_table import Catalog
from engine.ops.lease import DEFAULT_LEASE_TTL_MS
from engine.ops.run import PartitionInput, PartitionStep, run_partition_job, serial_execute
from engine.ops.versions import segment_row
from layouts.kafka_layout import KafkaLogDir, KafkaPartitionDir, KafkaSegmentFiles, scan_log_dir
from layouts.object_layout import SegmentKeys, object_segment_keys, put_segment_objects
from layouts.store import StorageOptions, ensure_object, join, normalize_uri, object_info, read_bytes
from layouts.store.bound import Store


@dataclass
class SegmentOutcome:
    """What happened to one source segment."""

    source: str
    base_offset: int
    status: str  # registered | already-registered | corrupt
    segment_id: str | None = None
    sidecars: str = "valid"  # valid | rebuilt
    sidecar_problems: list[str] = field(default_factory=list)
    error: str | None = None
    byte_position: int | None = None
    valid_bytes: int | None = None
    kept_bytes: int = 0


@dataclass
class PartitionOutcome:
    """What happened to one partition directory."""

    topic: str
    partition: int
    source: str
    segments: list[SegmentOutcome] = field(default_factory=list)
    error: str | None = None
    orphan_indexes: list[str] = field(default_factory=list)
    ignored_files: int = 0
    set_aside: dict[str, str] = field(default_factory=dict)
    forgotten: list[str] = field(default_factory=list)
    """Catalogued uploads a tiered-storage bucket no longer holds, whose rows this import removed."""

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> dict:
        return asdict(self) | {"failed": self.failed}


@dataclass
class ImportReport:
    """The run report of one import (`to_dict` is the JSON form)."""

    source: str
    root: str
    catalog: str
    copy: bool
    job_id: str
    partitions: list[PartitionOutcome] = field(default_factory=list)
    skipped_dirs: dict[str, str] = field(default_factory=dict)
    rows_added: int = 0
    already_registered: int = 0
    sidecars_rebuilt: int = 0
    commit_version: int | None = None
    requests: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(p.failed for p in self.partitions)

    def to_dict(self) -> dict:
        return asdict(self) | {"failed": self.failed}


def default_import_job_id(source: str, root: str, copy: bool) -> str:
    """The same import (source, root, copy or in place) has the same job id, so that re-running the
    same command after a crash takes over its own leases at once."""
    return "import-" + hashlib.sha256(f"{source}\x00{root}\x00{copy}".encode()).hexdigest()[:24]


def imported_segment_id(source_log: str, size: int) -> str:
    """Deterministic id of an imported segment: the same source key and size give the same id."""
    return hashlib.sha256(f"{source_log}\x00{size}".encode()).hexdigest()[:16]


@dataclass
class _Sidecars:
    """Index bytes for a segment: the source's own files (with their keys) or rebuilt ones; `headers`, the
    log's batches they were checked against or built from (for its `.batchindex`)."""

    index: bytes
    timeindex: bytes
    headers: BatchHeaders
    problems: list[str]
    source_keys: tuple[str, str] | None = None

    @property
    def rebuilt(self) -> bool:
        return self.source_keys is None


class _PartitionImporter:
    """Imports the segments of one partition directory, collecting rows for the single commit."""

    def __init__(self, part: KafkaPartitionDir, root: str, copy: bool, job_id: str, interval: int,
                 existing: dict[SegmentRef, SegmentRow], options: StorageOptions | None, floor: int,
                 in_place: Layout = Layout.KAFKA) -> None:
        """`floor`: the topic's `min_timestamp` (a broker's log: Kafka's 0); `in_place`: the rows' layout
        without `copy`."""
        self.part = part
        self.in_place = in_place
        self.floor = floor
        self.root = root
        self.copy = copy
        self.job_id = job_id
        self.interval = interval
        self.existing = existing
        self.options = options
        self.rows: list[SegmentRow] = []
        self.outcome = PartitionOutcome(topic=part.tp.topic, partition=part.tp.partition, source=part.uri,
                                        orphan_indexes=[i.uri for i in part.orphan_indexes],
                                        ignored_files=sum(len(v) for v in part.other_files.values()),
                                        set_aside=dict(part.set_aside))

    def run(self) -> None:
        last = len(self.part.segments) - 1
        for i, seg in enumerate(self.part.segments):
            state = SegmentState.ACTIVE if i == last else SegmentState.ROLLED
            if not self._import_segment(seg, state):
                self.outcome.error = self.outcome.segments[-1].error
                return
        self.outcome.error = self.part.error

    def _import_segment(self, seg: KafkaSegmentFiles, state: SegmentState) -> bool:
        """Register one segment; False if it is corrupt, which stops the partition."""
        segment_id = imported_segment_id(seg.log.uri, seg.log.size)
        known = self.existing.get(SegmentRef(self.part.tp.topic, self.part.tp.partition, segment_id))
        if known is not None and known.size_bytes == seg.log.size:
            self.outcome.segments.append(SegmentOutcome(seg.log.uri, seg.base_offset, "already-registered",
                                                        segment_id=segment_id))
            return True
        data = read_bytes(seg.log.uri, self.options)
        try:
            summary = summarize_segment(data, seg.base_offset, seg.log.uri, min_timestamp=self.floor)
        except CorruptRecordError as exc:
            self._corrupt(seg, exc, valid_bytes=None)
            return False
        if summary.problems:
            outcome = self._corrupt(seg, summary.problems[0], summary.valid_bytes)
            if self.copy and summary.valid_bytes > 0:
                self._keep_valid_prefix(seg, data[:summary.valid_bytes], outcome)
            return False
        self._register(seg, data, summary, segment_id, state, self._sidecars(seg, data, state))
        return True

    def _corrupt(self, seg: KafkaSegmentFiles, problem: CorruptRecordError, valid_bytes: int | None) -> SegmentOutcome:
        outcome = SegmentOutcome(seg.log.uri, seg.base_offset, "corrupt", error=str(problem),
                                 byte_position=problem.position, valid_bytes=valid_bytes)
        self.outcome.segments.append(outcome)
        return outcome

    def _keep_valid_prefix(self, seg: KafkaSegmentFiles, prefix: bytes, outcome: SegmentOutcome) -> None:
        """Copy and register the bytes before the corruption, as Kafka's recovery would keep them."""
        prefix_id = imported_segment_id(seg.log.uri, len(prefix))
        summary = summarize_segment(prefix, seg.base_offset, seg.log.uri, min_timestamp=self.floor)
        sidecars = self._rebuilt(scan_batches(prefix, seg.log.uri).headers, seg,
                                 ["corrupt segment: indexes rebuilt for its valid prefix"])
        self._register(seg, prefix, summary, prefix_id, SegmentState.ROLLED, sidecars, record=False)
        outcome.segment_id, outcome.kept_bytes = prefix_id, len(prefix)

    def _sidecars(self, seg: KafkaSegmentFiles, data: bytes, state: SegmentState) -> _Sidecars:
        """The segment's own sidecars if they are valid for its log, else rebuilt ones."""
        index_bytes = read_bytes(seg.index.uri, self.options) if seg.index else None
        timeindex_bytes = read_bytes(seg.timeindex.uri, self.options) if seg.timeindex else None
        headers = scan_batches(data, seg.log.uri).headers
        offsets, times, check = settle_indexes(headers, seg.base_offset, index_bytes, timeindex_bytes, seg.log.uri,
                                               self.interval, state is SegmentState.ACTIVE, min_timestamp=self.floor)
        return _Sidecars(offsets.to_bytes(), times.to_bytes(), headers, check.problems,
                         (seg.index.uri, seg.timeindex.uri) if check.valid else None)

    def _rebuilt(self, headers: BatchHeaders, seg: KafkaSegmentFiles, problems: list[str]) -> _Sidecars:
        offsets, times = build_indexes(headers, seg.base_offset, self.interval, min_timestamp=self.floor)
        return _Sidecars(offsets.to_bytes(), times.to_bytes(), headers, problems=problems)

    def _keys(self, seg: KafkaSegmentFiles, data: bytes, segment_id: str, sidecars: _Sidecars,
              batchindex: bytes | None) -> tuple[SegmentKeys, Layout]:
        """Write what must be written (put-if-absent) and return the keys the row points at. In place, the
        broker's valid sidecars are used where they are, unless the segment gets a `batchindex`: nothing is
        ever written into a broker's dir, so the sidecars are then copied under the root, with it beside
        them (`batch_index_key`)."""
        tp = self.part.tp
        owned = object_segment_keys(self.root, tp, seg.base_offset, segment_id)
        if self.copy:
            put_segment_objects(owned, data, sidecars.index, sidecars.timeindex, self.options, batchindex=batchindex)
            return owned, Layout.OBJECT
        if sidecars.source_keys is not None and batchindex is None:
            return SegmentKeys(seg.log.uri, *sidecars.source_keys), self.in_place
        ensure_object(owned.index, sidecars.index, self.options)
        ensure_object(owned.timeindex, sidecars.timeindex, self.options)
        if batchindex is not None:
            ensure_object(owned.batchindex, batchindex, self.options)
        return SegmentKeys(seg.log.uri, owned.index, owned.timeindex), self.in_place

    def _register(self, seg: KafkaSegmentFiles, data: bytes, summary: SegmentSummary, segment_id: str,
                  state: SegmentState, sidecars: _Sidecars, record: bool = True) -> None:
        batchindex = batch_index_bytes(summary.batch_count, sidecars.timeindex, seg.base_offset,
                                       lambda: sidecars.headers, min_timestamp=self.floor)
        keys, layout = self._keys(seg, data, segment_id, sidecars, batchindex)
        self.rows.append(segment_row(self.part.tp, segment_id, keys, layout, summary, state, self.job_id,
                                     index_size_bytes=len(sidecars.index),
                                     timeindex_size_bytes=len(sidecars.timeindex),
                                     batchindex_size_bytes=None if batchindex is None else len(batchindex)))
        if record:
            self.outcome.segments.append(SegmentOutcome(
                seg.log.uri, seg.base_offset, "registered", segment_id=segment_id,
                sidecars="rebuilt" if sidecars.rebuilt else "valid", sidecar_problems=sidecars.problems))


def _demotions(rows: list[SegmentRow],
               existing: dict[SegmentRef, SegmentRow]) -> list[tuple[SegmentRef, SegmentState]]:
    """Existing ACTIVE rows that newly imported segments follow become ROLLED."""
    if not rows:
        return []
    first_new = min(r.base_offset for r in rows)
    return [(ref, SegmentState.ROLLED) for ref, row in existing.items()
            if row.state == SegmentState.ACTIVE and row.base_offset < first_new]


def _with_log_start(rows: list[SegmentRow], existing: Mapping[SegmentRef, SegmentRow],
                    log_start: int | None) -> list[SegmentRow]:
    """The new rows with a log start offset inside them on the row of the segment holding it."""
    everything = sorted([*rows, *existing.values()], key=lambda r: r.base_offset)
    if log_start is None or not everything or log_start <= everything[0].base_offset:
        return rows
    holder = [r for r in everything if r.base_offset <= log_start][-1]
    return [replace(r, log_start_offset=log_start) if r is holder else r for r in rows]


def prepare_import(item: PartitionInput[None], parts: Mapping[TopicPartition, KafkaPartitionDir], root: str, copy: bool,
                   job_id: str, index_interval_bytes: int, options: StorageOptions | None,
                   log_start_offsets: Mapping[TopicPartition, int] | None = None,
                   in_place: Layout = Layout.KAFKA) -> PartitionStep[PartitionOutcome]:
    """Import one partition directory against its live rows; the change is checked here, so a partition
    whose rows conflict with the import fails alone (`CatalogStateError`)."""
    existing = {row.ref: row for row in item.rows}
    part = parts[item.tp]
    importer = _PartitionImporter(part, root, copy, job_id, index_interval_bytes, existing, options,
                                  min_timestamp(item.config), in_place)
    importer.run()
    rows = _with_log_start(importer.rows, existing, (log_start_offsets or {}).get(item.tp))
    in_bucket = [row for row in item.rows if row.layout == in_place] if part.present is not None else []
    gone, problem = remote_retention(item.tp, in_bucket, part.present or frozenset())
    importer.outcome.error = importer.outcome.error or problem
    importer.outcome.forgotten = [row.log_key for row in gone]
    forgotten = {row.ref for row in gone}
    kept = {ref: row for ref, row in existing.items() if ref not in forgotten}
    change = CatalogChange(add=tuple(rows), remove=tuple(row.ref for row in gone),
                           transitions=tuple(_demotions(rows, kept)))
    plan_change(change, existing)
    return PartitionStep(importer.outcome, change)


def remote_retention(tp: TopicPartition, rows: list[SegmentRow], present: frozenset[str]
                     ) -> tuple[list[SegmentRow], str | None]:
    """The rows of a tiered partition whose uploads the bucket no longer holds, to forget: the broker's remote
    retention (KIP-405's `RemoteLogManager` expiring remote segments by `retention.ms`/`retention.bytes`, or
    below a DeleteRecords) deletes them from the log start on, so those gone rows come before every remaining
    one. A row gone after a remaining one is no retention but a hole in the log: it is the problem returned
    (naming the upload), and nothing is forgotten."""
    ordered = sorted(rows, key=lambda row: row.base_offset)
    gone = [row for row in ordered if row.log_key not in present]
    remaining = [row for row in ordered if row.log_key in present]
    hole = next((row for row in gone if remaining and row.base_offset > remaining[0].base_offset), None)
    if hole is not None:
        return [], (f"{tp}: the catalogued upload {hole.log_key} (offsets {hole.base_offset}..{hole.next_offset - 1}) "
                    "is gone from the bucket while earlier ones remain: not the broker's remote retention, which "
                    "deletes from the log start; nothing forgotten")
    return gone, None


class InvalidSourceError(KlakeError):
    """The log dir to import holds something no broker would load: nothing of it is imported."""


def scan_source(source: str, options: StorageOptions | None = None) -> KafkaLogDir:
    """List the log dir to import and refuse it, naming them, if it holds directories that are no
    partition of a valid topic (Kafka's `LogManager` refuses to start on them too); a source with
    nothing under it is a wrong path."""
    log_dir = scan_log_dir(source, options)
    if invalid := log_dir.invalid_dirs:
        raise InvalidSourceError(
            f"import source {log_dir.uri}: {len(invalid)} director{'y is' if len(invalid) == 1 else 'ies are'} "
            f"not <topic>-<partition> with a valid topic name: {', '.join(map(repr, invalid))}; a broker refuses "
            "such a log dir too: move them out of it, then re-run")
    if not log_dir.partitions and not log_dir.skipped_dirs:
        raise InvalidSourceError(f"import source {log_dir.uri}: no <topic>-<partition> directories there")
    return log_dir


def source_log_start_offsets(source: str, options: StorageOptions | None = None) -> dict[TopicPartition, int]:
    """The log dir's `log-start-offset-checkpoint`, if it has one (`KafkaFileError` naming its bad line)."""
    uri = join(normalize_uri(source), LOG_START_OFFSET_CHECKPOINT)
    if object_info(uri, options) is None:
        return {}
    return parse_offset_checkpoint(read_bytes(uri, options), uri)


@dataclass(frozen=True)
class SourceLayout:
    """The extension point of `import`: how a layout's source is listed into partitions of segments
    (`scan`, raising `InvalidSourceError` on a source no broker would load), the log start offsets it
    records (`log_start_offsets`), and the layout of the rows registered in place."""

    name: str
    scan: Callable[[str, StorageOptions | None], KafkaLogDir]
    log_start_offsets: Callable[[str, StorageOptions | None], dict[TopicPartition, int]]
    in_place: Layout


KAFKA_SOURCE = SourceLayout("kafka", scan_source, source_log_start_offsets, Layout.KAFKA)
"""A broker's log dir (or a copy of it)."""


def import_log_dir(source: str, root: str, catalog: Catalog, copy: bool = False,
                   index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
                   options: StorageOptions | None = None, job_id: str | None = None,
                   lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS, log_dir: KafkaLogDir | None = None,
                   log_start_offsets: Mapping[TopicPartition, int] | None = None,
                   layout: SourceLayout | None = None) -> ImportReport:
    """Register every partition directory under `source` in `catalog` with one commit, through the
    partition-job protocol every job uses (`engine.ops.run`: lease, plan, check the lease, one commit).

    A killed import is finished by a re-run with the same `job_id`, at once: it takes over the dead
    attempt's leases and recognises the segments already registered. The import keeps no job-ledger
    entries: it is idempotent by content (a segment's id is its source key and size), and re-running
    the same command later must register the segments the broker has written since. `log_dir` is the
    source's `scan_source` and `log_start_offsets` its `source_log_start_offsets`, when the caller checked
    them before creating the catalog.
    """
    layout = layout or KAFKA_SOURCE
    source, root = normalize_uri(source), normalize_uri(root)
    job_id = job_id or default_import_job_id(source, root, copy)
    report = ImportReport(source=source, root=root, catalog=catalog.uri, copy=copy, job_id=job_id)
    log_dir = log_dir or layout.scan(source, options)
    if log_start_offsets is None:
        log_start_offsets = layout.log_start_offsets(source, options)
    report.skipped_dirs = log_dir.skipped_dirs
    parts = {part.tp: part for part in log_dir.partitions}
    prepare = partial(prepare_import, parts=parts, root=root, copy=copy, job_id=job_id,
                      index_interval_bytes=index_interval_bytes, options=options,
                      log_start_offsets=log_start_offsets, in_place=layout.in_place)
    run = run_partition_job(catalog, Store(root, options), dict.fromkeys(parts, TopicConfig()), serial_execute(prepare),
                            operation="import", job_id=job_id, ledger=False,
                            lease_ttl_ms=lease_ttl_ms)
    stepped = {result.tp: result.step.outcome for result in run.results if result.step is not None}
    for tp, part in parts.items():
        outcome = stepped.get(tp) or PartitionOutcome(tp.topic, tp.partition, part.uri)
        outcome.error = run.failures.get(str(tp), outcome.error)
        report.partitions.append(outcome)
    report.partitions.sort(key=lambda p: (p.topic, p.partition))
    if run.commit is not None:
        report.commit_version, report.rows_added = run.commit.version, run.commit.added
    report.already_registered = sum(s.status == "already-registered" for p in report.partitions for s in p.segments)
    report.sidecars_rebuilt = sum(s.sidecars == "rebuilt" for p in report.partitions for s in p.segments)
    report.requests, report.bytes = dict(run.requests), dict(run.bytes)
    return report
