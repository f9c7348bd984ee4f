"""Export: a topic's catalogued segments written out as a broker's log dir (README, "Exporting to Kafka").

For each partition, under `{output}/{topic}-{partition}/`:
- `{base_offset:020d}.log`: the segment's bytes, Kafka's exactly; `.index` / `.timeindex`: the stored
  sidecars when they check out against the log (a segment imported from a broker keeps the broker's
  files, byte for byte), else rebuilt (`settle_indexes`), and for every segment cut by a range rebuilt,
  with Kafka's recovery rule (`engine.index.rebuild`), which a broker applies to a segment it recovers;
  the active segment's time index ends with the entry a broker's clean shutdown appends (`closed_time_index`);
- `.txnindex` beside each segment holding the ABORT marker of a non-empty transaction: its aborted
  transactions as a broker recovering the exported batches from the first one writes them
  (`engine.cleaner.txn.completed_transactions`, `engine.index.txn_index`), so a broker serving the dir
  answers read_committed fetches without rebuilding them;
- `leader-epoch-checkpoint`: the leader epoch cache a broker builds from those batches
  (`engine.log.kafka_files.LeaderEpochCache`), truncated to the log start offset;
- `partition.metadata`: the topic id (given, else derived from the topic name).
At the top of the log dir, `recovery-point-offset-checkpoint`, `log-start-offset-checkpoint` and
`replication-offset-checkpoint`, with the entries of other partitions already there kept. The log start
offset is the catalog's (a DeleteRecords inside a segment keeps the segment whole, as a broker does),
raised to `from` by a range; the high watermark and the recovery point are the log end offset (an archive
holds committed data, and every file a broker's recovery would rebuild is written).

A range (offsets, or times turned into offsets as a consumer's `offsetsForTimes` does: the first offset
whose timestamp is >= the time) is cut at batch boundaries: a batch is kept or dropped whole. With the
isolation level read_committed the export also ends where no transaction is left open (the greatest
offset at or below the last stable offset that no transaction straddles): a broker loading a dir after a
clean shutdown rebuilds no producer state, so it would serve an open transaction's records as committed.

Idempotent: a file already holding the same bytes is left alone, any other is written whole (one PUT
on S3; a temporary file renamed over the name locally), segment files of the partition directory that
the export does not hold (an earlier export's, a broker's `.snapshot`) are deleted, and so
are the temporary files a killed export left (`layouts.store.TEMPORARY_NAME`) in the partition directory
and beside the checkpoints; the log dir's checkpoints are written last, so an interrupted export is
finished by running it again, to the very bytes of a clean export.
The klake root is only read: no lease, no catalog commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from engine.catalog.schema import SegmentRow, SegmentState, partition_log_start_offset
from engine.cleaner.txn import completed_transactions, control_types
from engine.format.batch import BatchHeaders, scan_batches
from engine.index.append_rule import SegmentIndexer
from engine.index.checks import settle_indexes
from engine.index.offset_index import OffsetIndex
from engine.index.rebuild import build_indexes
from engine.index.time_index import TimeIndex
from engine.index.txn_index import txn_index_bytes
from engine.log.kafka_files import (
    LeaderEpochCache,
    cut_at_batches,
    derived_topic_id,
    leader_epoch_checkpoint,
    offset_checkpoint,
    parse_offset_checkpoint,
    partition_metadata,
)
from engine.log.lookup import offset_for_timestamp
from engine.log.timestamp_floor import has_timestamp
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.read import IsolationLevel, partition_transactions
from engine.ops.run import JobRun, PartitionInput, PartitionStep
from engine.ops.stored_segment import stored_segment
from kernel.errors import KlakeError
from kernel.names import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TopicPartition,
)
from kernel.times import format_time
from layouts.kafka_layout import KafkaFileKind, classify_kafka_file, kafka_segment_keys, txn_index_key
from layouts.store import TEMPORARY_NAME, join, normalize_uri
from layouts.store.bound import Store

_SEGMENT_FILE_KINDS = (KafkaFileKind.LOG, KafkaFileKind.INDEX, KafkaFileKind.TIMEINDEX, KafkaFileKind.TXNINDEX,
                       KafkaFileKind.SNAPSHOT)


@dataclass(frozen=True)
class ExportRange:
    """`from_offset <= offset < to_offset` and times turned into offsets (`from_ms`, `to_ms`); None leaves
    a side open. `isolation` read_committed also ends each partition where it holds no open transaction
    (`engine.cleaner.txn.Transactions.stable_prefix_end`)."""

    from_offset: int | None = None
    to_offset: int | None = None
    from_ms: int | None = None
    to_ms: int | None = None
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED

    def __post_init__(self) -> None:
        for name in ("from_offset", "to_offset"):
            if (value := getattr(self, name)) is not None and value < 0:
                raise KlakeError(f"export range: {name} must be >= 0, got {value}")


@dataclass
class ExportedSegment:
    """One segment written: its base offset, offsets, size, whether a range cut it, where its indexes
    came from (`stored`: the catalogued files; `rebuilt`: Kafka's recovery rule) and why."""

    base_offset: int
    next_offset: int
    size_bytes: int
    cut: bool
    indexes: str
    index_problems: list[str] = field(default_factory=list)


@dataclass
class PartitionExport:
    """What the export wrote for one partition; `log_end_offset` None when nothing was in range."""

    topic: str
    partition: int
    directory: str
    topic_id: str
    segments: list[ExportedSegment] = field(default_factory=list)
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    recovery_point: int | None = None
    leader_epochs: list[tuple[int, int]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    unchanged: int = 0
    deleted: list[str] = field(default_factory=list)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ExportReport:
    """A whole export: per partition outcomes, failures, and the log dir checkpoints written."""

    output: str
    partitions: list[PartitionExport] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    checkpoints_written: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"output": self.output, "partitions": [p.to_dict() for p in self.partitions],
                "failures": self.failures, "checkpoints_written": self.checkpoints_written}


def check_output(output: str, root: str, catalog_uri: str) -> str:
    """The output as a normalized URI; refused when it overlaps the klake root or the catalog (an export
    there would mix the two layouts, and scrub deletes what no catalog row references)."""
    output = normalize_uri(output)
    for name, other in (("root", normalize_uri(root)), ("catalog", normalize_uri(catalog_uri))):
        if output == other or output.startswith(other + "/") or other.startswith(output + "/"):
            raise KlakeError(f"export output {output} overlaps the klake {name} {other}: choose a directory or "
                             "prefix outside it")
    return output


class _Writer:
    """Writes the files of one directory, leaving those that already hold the same bytes."""

    def __init__(self, directory: str, store: Store) -> None:
        self.store = store
        self.existing = {info.uri: info.size for info in store.list_objects(directory)}
        self.written: list[str] = []
        self.kept: list[str] = []

    def put(self, uri: str, data: bytes) -> None:
        if self.existing.get(uri) == len(data) and self.store.read(uri) == data:
            self.kept.append(uri)
            return
        self.store.write(uri, data)
        self.written.append(uri)

    def stale_files(self) -> list[str]:
        """Segment files already there that this export does not hold, and temporaries a killed export left."""
        mine = set(self.written) | set(self.kept)
        names = {uri: uri.rsplit("/", 1)[-1] for uri in self.existing if uri not in mine}
        return sorted(uri for uri, name in names.items()
                      if classify_kafka_file(name)[0] in _SEGMENT_FILE_KINDS or TEMPORARY_NAME.fullmatch(name))


def check_times(rng: ExportRange, config: TopicConfig, topic: str = "the topic") -> None:
    """The range's times must be times of the topic: at or after its earliest (`min_timestamp`: 1970, or
    any int64 with KIP-228's opt-in); -1/-2/-3 are times here, not ListOffsets' special targets."""
    floor = min_timestamp(config)
    for name, value in (("from", rng.from_ms), ("to", rng.to_ms)):
        if value is not None and not has_timestamp(value, floor):
            raise KlakeError(f"export --{name} {format_time(value)} is before {topic}'s earliest timestamp "
                             f"{format_time(floor)}; times before 1970 need klake.timestamps.allow.negative "
                             "(KIP-228)")


def offset_bounds(rows: Sequence[SegmentRow], rng: ExportRange, config: TopicConfig, log_start: int,
                  source: Store) -> tuple[int | None, int | None, bool]:
    """The range as offsets: the time bounds become the first offset whose timestamp is >= them
    (ListOffsets), combined with the offset bounds; the flag says the range is empty (no record at or
    after `from_ms`)."""
    low, high = rng.from_offset, rng.to_offset
    check_times(rng, config)
    if rng.from_ms is None and rng.to_ms is None:
        return low, high, False
    segments = [stored_segment(row, source, config) for row in rows]
    if rng.from_ms is not None:
        answer = offset_for_timestamp(segments, rng.from_ms, log_start)
        if not answer.found:
            return low, high, True
        low = answer.offset if low is None else max(low, answer.offset)
    if rng.to_ms is not None:
        answer = offset_for_timestamp(segments, rng.to_ms, log_start)
        if answer.found:
            high = answer.offset if high is None else min(high, answer.offset)
    return low, high, False


def prepare_export(item: PartitionInput[None], *, source: Store, output: Store, rng: ExportRange,
                   topic_ids: Mapping[str, str]) -> PartitionStep[PartitionExport]:
    """Write one partition's directory under `output`'s root from the segments `source` reaches (the klake
    root's); nothing is committed."""
    tp, config = item.tp, item.config
    floor = min_timestamp(config)
    directory = output.uri(tp.dir_name)
    topic_id = topic_ids.get(tp.topic) or derived_topic_id(tp.topic)
    outcome = PartitionExport(tp.topic, tp.partition, directory, topic_id)
    rows = list(item.rows)
    catalog_start = partition_log_start_offset(rows) or 0
    low, high, empty = offset_bounds(rows, rng, config, catalog_start, source)
    if rng.isolation == IsolationLevel.READ_COMMITTED and not empty:
        stable_end = partition_transactions(rows, source, floor).stable_prefix_end
        if stable_end is not None:
            high = stable_end if high is None else min(high, stable_end)
    if empty or (low is not None and high is not None and high <= low):
        return PartitionStep(outcome)
    writer = _Writer(directory, output)
    epochs = LeaderEpochCache()
    end: int | None = None
    written: list[tuple[str, BatchHeaders, np.ndarray]] = []  # per segment: its .log key, headers, control types
    for row in rows:
        below = row.size_bytes > 0 and row.next_offset <= max(catalog_start, low or 0)
        if below or (high is not None and row.base_offset >= high):
            continue
        data = source.read(row.log_key)
        headers = scan_batches(data, row.log_key).headers
        cut = cut_at_batches(headers, row.base_offset, low, high)
        if cut.empty and len(headers):
            continue
        whole = cut.first == 0 and cut.end == len(headers)
        check = None
        if whole:
            log = data
            offsets, times, check = settle_indexes(
                headers, row.base_offset, source.read(row.index_key), source.read(row.timeindex_key),
                row.log_key, config.index_interval_bytes, row.state == SegmentState.ACTIVE, min_timestamp=floor)
            if row.state == SegmentState.ACTIVE and len(headers):
                times = closed_time_index(offsets, times, headers, row)
        else:  # a slice is a new segment: its indexes are what recovery builds for it
            log = data[cut.start:cut.stop]
            headers = scan_batches(log, row.log_key).headers
            offsets, times = build_indexes(headers, cut.base_offset, config.index_interval_bytes, min_timestamp=floor)
        index, timeindex = offsets.to_bytes(), times.to_bytes()
        keys = kafka_segment_keys(output.root, tp, cut.base_offset)
        for uri, content in ((keys.log, log), (keys.index, index), (keys.timeindex, timeindex)):
            writer.put(uri, content)
        epochs.append(headers)
        written.append((keys.log, headers, control_types(log, headers, row.log_key)))
        end = int(headers.last_offset[-1]) + 1 if len(headers) else max(end or 0, cut.base_offset)
        outcome.segments.append(ExportedSegment(
            cut.base_offset, end, len(log), not whole, "stored" if check is not None and check.valid else "rebuilt",
            [] if check is None else check.problems))
    if not outcome.segments:
        return PartitionStep(outcome)
    start = max(catalog_start, low or 0, outcome.segments[0].base_offset)
    outcome.log_start_offset, outcome.log_end_offset = min(start, end), end
    outcome.recovery_point = end
    for uri, content in transaction_indexes(written):
        writer.put(uri, content)
    epochs.truncate_from_start(outcome.log_start_offset)
    outcome.leader_epochs = [(e.epoch, e.start_offset) for e in epochs.entries]
    writer.put(join(directory, LEADER_EPOCH_CHECKPOINT), leader_epoch_checkpoint(epochs.entries))
    writer.put(join(directory, PARTITION_METADATA), partition_metadata(topic_id))
    stale = writer.stale_files()
    if stale:
        result = output.delete_many(stale)
        if result.failed:
            uri, why = next(iter(result.failed.items()))
            raise KlakeError(f"{tp}: could not delete the stale file {uri} of an earlier export: {why}")
    outcome.written, outcome.unchanged, outcome.deleted = writer.written, len(writer.kept), stale
    return PartitionStep(outcome)


def closed_time_index(offsets: OffsetIndex, times: TimeIndex, headers: BatchHeaders, row: SegmentRow) -> TimeIndex:
    """The active segment's time index as a broker leaves it at a clean shutdown: `LogSegment.close` appends
    the final entry `(segment max, its offset)` (`maybeAppend`, skipping the full check), and a broker that
    loads the log dir without recovery answers ListOffsets MAX_TIMESTAMP from that last entry (an index
    without it answers no offset at all)."""
    return SegmentIndexer.resume(offsets, times, size=row.size_bytes, last_offset=int(headers.last_offset[-1]),
                                 max_timestamp=row.largest_timestamp,
                                 offset_of_max_timestamp=row.offset_of_largest_timestamp).close()[1]


def transaction_indexes(segments: Sequence[tuple[str, BatchHeaders, np.ndarray]]) -> list[tuple[str, bytes]]:
    """The `.txnindex` of each segment (its `.log` key, batch headers and control types, in log order) that
    holds an aborted transaction's marker: `LogSegment.updateTxnIndex` appends the entry to the segment
    the marker is appended to."""
    if not segments:
        return []
    aborted = completed_transactions(BatchHeaders.concat([h for _, h, _ in segments]),
                                     np.concatenate([kinds for _, _, kinds in segments])).aborted
    out = []
    ends = np.cumsum([len(h) for _, h, _ in segments])
    last_offsets = np.concatenate([h.last_offset for _, h, _ in segments])  # ascending, legacy batches too
    segment_of = np.searchsorted(ends, np.searchsorted(last_offsets, aborted.last_offset), side="right")
    for i, (log_key, _, _) in enumerate(segments):
        mine = aborted.take(np.flatnonzero(segment_of == i))
        if len(mine):
            out.append((txn_index_key(log_key), txn_index_bytes(mine.producer_id, mine.first_offset,
                                                                mine.last_offset, mine.last_stable_offset)))
    return out


def write_checkpoints(output: Store, exported: Sequence[PartitionExport]) -> list[str]:
    """The log dir's offset checkpoints with the exported partitions' entries (others already there kept);
    only files whose bytes change are written, and the temporaries of a killed export's checkpoints are
    deleted. Returns the files written."""
    done = [p for p in exported if p.log_end_offset is not None]
    if not done:
        return []
    names = {RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT}
    output.delete_many([info.uri for info in output.list_objects() if info.uri == output.uri(info.name)
                        and (match := TEMPORARY_NAME.fullmatch(info.name)) and match["name"] in names])
    values = {RECOVERY_POINT_CHECKPOINT: {p.tp: p.recovery_point for p in done},
              LOG_START_OFFSET_CHECKPOINT: {p.tp: p.log_start_offset for p in done},
              REPLICATION_OFFSET_CHECKPOINT: {p.tp: p.log_end_offset for p in done}}
    written = []
    for name, entries in values.items():
        uri = output.uri(name)
        old = output.read(uri) if output.info(uri) is not None else None
        merged = (parse_offset_checkpoint(old, uri) if old is not None else {}) | entries
        data = offset_checkpoint(merged)
        if data != old:
            output.write(uri, data)
            written.append(uri)
    return written


def report_of(output: str, run: JobRun[PartitionExport]) -> ExportReport:
    """The export's report from the partition runs (the driver writes the checkpoints afterwards)."""
    report = ExportReport(output, failures=dict(run.failures))
    report.partitions = sorted((r.step.outcome for r in run.results if r.step is not None),
                               key=lambda p: (p.topic, p.partition))
    return report
