"""Append input records to a partition as Kafka's leader would (spec 2.1-2.6, 3).

Input: an Arrow table with Spark's Kafka-sink columns `key`, `value` (binary, nullable), optional
`headers` (list<struct<key: string, value: binary>>) and optional `timestamp` (int64 ms or an Arrow
timestamp; null = "now", as the Java producer sets it); other columns (topic, partition) are ignored.
The clock is explicit (`now_ms`), so a re-run makes the same bytes.

Validation (`LogValidator`, per record, first failing rule wins; a rejected record goes to `rejects`
with its input row, reason and the numbers, and every other record still appends in input order):
- `INVALID_RECORD`: a null key on a compacted topic (KAFKA-1755), or a null header key;
- `NEGATIVE_TIMESTAMP`: a timestamp < -1 (spec 9 recommendation; Kafka mode only, for both
  timestamp types, since the producer's value is stored in the record's delta either way);
- `INVALID_TIMESTAMP`: CreateTime and `now - ts > before.max.ms` or `ts - now > after.max.ms`
  (strict, spec 2.3; never for LogAppendTime, never for -1 in Kafka mode);
- `RECORD_TOO_LARGE`: the record alone makes a batch larger than `max.message.bytes` (or
  `segment.bytes`, spec 2.1) after compression.

Timestamps: CreateTime keeps the producer's; LogAppendTime stamps one `now` per append into every
batch's maxTimestamp (type bit set; records keep the producer's deltas, as the broker's in-place path
leaves them); `klake.log.append.time.monotonic` uses `max(last appended, now)`.

KIP-228 (`klake.timestamps.allow.negative`): every int64 is a timestamp and -1 is a real instant.
"No timestamp" cannot be written at all: a null input timestamp becomes `now`, as a producer would
set it, so every record klake writes in this mode has a real time, in its delta on disk and in the
`RecordTable`. The batch maxTimestamp is the true maximum (also below -1), and the time index's
"none" sentinel moves to `-2**63` (`min_timestamp = -2**63 + 1`); a segment whose records are all
at `-2**63` therefore gets no time-index entry, and lookups scan it from its start. A batch is cut
where a timestamp delta would overflow int64, so readers without wrapping arithmetic read it too.

Batching: accepted records are packed in input order into batches of at most the limit, greedily,
from their exact encoded sizes (computed with numpy, no trial encoding), then encoded once with
`encode_batches`. Compressed batches are packed by their *uncompressed* size, a conservative
estimate; a batch that compression made larger than the limit is split, a lone record that still
does not fit is rejected and the following batches' base offsets are shifted in place (outside
the CRC, as the broker assigns offsets). Each batch is one `Append` (one produce request) to a
`SegmentWriter`, which may resume the partition's active segment (`ActiveSegmentState`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.format import compression
from engine.format.batch import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP,
    V2_HEADER_SIZE,
    with_base_offset,
    with_max_timestamp,
)
from engine.format.builder import as_binary, as_binary_chunks, as_headers, encode_batches
from engine.format.compiled import codec
from engine.format.records import HEADERS_TYPE
from engine.format.varint import encoded_size
from engine.index.common import INT64_MAX, INT64_MIN
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.kept_offsets import (
    LOG_APPEND_TIME_TYPE,
    OFFSETS_OUT_OF_ORDER,
    contiguous_runs,
    kept_offset_mask,
    kept_offsets,
    out_of_order_messages,
)
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import ActiveSegmentState, Append, ClosedSegment, SegmentWriter
from engine.log.summary import SegmentSummary, TxnSummary
from engine.log.timestamp_floor import has_timestamp, no_timestamp
from engine.log.topic_config import TopicConfig, min_timestamp
from kernel.times import format_duration, format_time

INVALID_RECORD = "INVALID_RECORD"
NEGATIVE_TIMESTAMP = "NEGATIVE_TIMESTAMP"
INVALID_TIMESTAMP = "INVALID_TIMESTAMP"
RECORD_TOO_LARGE = "RECORD_TOO_LARGE"
REASONS = (INVALID_RECORD, NEGATIVE_TIMESTAMP, INVALID_TIMESTAMP, RECORD_TOO_LARGE, OFFSETS_OUT_OF_ORDER)
REJECT_FIELDS = [pa.field("row", pa.int64(), nullable=False), pa.field("reason", pa.string(), nullable=False),
                 pa.field("message", pa.string(), nullable=False)]


@dataclass(frozen=True)
class AppendCounters:
    records_in: int
    records_accepted: int
    rejected: dict[str, int]
    batches: int
    bytes: int
    segments_rolled: int

    def __add__(self, other: AppendCounters) -> AppendCounters:
        """The counts of two consecutive appends to one partition (a streamed append's chunks)."""
        rejected = {reason: self.rejected.get(reason, 0) + other.rejected.get(reason, 0)
                    for reason in dict.fromkeys([*self.rejected, *other.rejected])}
        return AppendCounters(self.records_in + other.records_in, self.records_accepted + other.records_accepted,
                              rejected, self.batches + other.batches, self.bytes + other.bytes,
                              self.segments_rolled + other.segments_rolled)


@dataclass
class ActiveOutput:
    """The active segment after the append: bytes from `start_position` (0 unless resumed without its
    bytes) as the batches written (`pieces`, not joined: a streamed append keeps adding to them and
    writes the segment from them), its indexes as they stand (no final time entry: it is
    still active) and its resume state."""

    base_offset: int
    pieces: list[bytes]
    start_position: int
    offset_index: OffsetIndex
    time_index: TimeIndex
    state: ActiveSegmentState


@dataclass
class AppendResult:
    """Segments rolled during the append (with their final time entries), the active segment, the
    rejected rows (`row`, `reason`, `message` + the input's record columns), and the bookkeeping a
    caller commits: the new log end offset and the LogAppendTime used (input value if none)."""

    closed: list[ClosedSegment]
    active: ActiveOutput
    summaries: list[SegmentSummary]  # the catalog facts of each closed segment, then the active one
    rejects: pa.Table
    offsets: np.ndarray  # per input row: the assigned offset, -1 when rejected
    counters: AppendCounters
    log_end_offset: int
    last_log_append_time: int | None


@dataclass
class _Rejects:
    """Rejected input rows, in the order found; one reason per row."""

    rows: list[np.ndarray] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    messages: list[list[str]] = field(default_factory=list)

    def add(self, rows: np.ndarray, reason: str, messages: list[str]) -> None:
        if rows.size:
            self.rows.append(rows.astype(np.int64))
            self.reasons.append(reason)
            self.messages.append(messages)

    def table(self, source: pa.Table, carry: Sequence[str] = ()) -> pa.Table:
        """The rejected rows with their reasons and record columns, plus the `carry` columns of `source`
        (a caller's provenance: where each row came from)."""
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        reasons = [r for r, m in zip(self.reasons, self.messages, strict=True) for _ in m]
        messages = [x for m in self.messages for x in m]
        order = np.argsort(rows, kind="stable")
        extra = [c for c in ("key", "value", "timestamp", "headers", "offset", *carry) if c in source.column_names]
        # no rejects (the common case): no take, which would first join a chunked column's chunks (and no
        # slice, which would keep the chunk's buffers alive as long as the rejects)
        taken = source.select(extra).take(pa.array(rows[order])) if rows.size else source.select(extra).schema.empty_table()
        base = pa.table([pa.array(rows[order], pa.int64()), pa.array(reasons, pa.string()).take(pa.array(order)),
                         pa.array(messages, pa.string()).take(pa.array(order))], schema=pa.schema(REJECT_FIELDS))
        for name in extra:
            base = base.append_column(name, taken.column(name))
        return base

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(REASONS, 0)
        for reason, rows in zip(self.reasons, self.rows, strict=True):
            out[reason] += int(rows.size)
        return out


def append_records(table: pa.Table, config: TopicConfig, *, log_end_offset: int, now_ms: int,
                   last_log_append_time: int | None = None, resume: ActiveSegmentState | None = None,
                   resume_log: bytes | None = None, resume_summary: SegmentSummary | None = None,
                   segment_key: str = "", leader_epoch: int = -1, batch_bytes: int | None = None,
                   carry: Sequence[str] = (), keep_offsets: bool = False) -> AppendResult:
    """Validate, batch and append `table`'s records after `log_end_offset` (see the module docstring).

    `resume` continues the partition's active segment (its `next_offset` must be `log_end_offset`;
    `resume_summary` holds its catalog facts); without it the first segment starts at `log_end_offset`,
    created at `now_ms`. `batch_bytes` is
    an optional packing target below `max.message.bytes`, like the producer's `batch.size`: a record
    larger than it still gets a batch of its own. The rejects table carries the `carry` columns of
    `table` besides the record's own.

    `keep_offsets` appends each record at the offset of `table`'s `offset` column, as a follower appends
    the leader's records (`engine.log.kept_offsets`: increasing, at or after the log end, gaps allowed;
    a record breaking the rule is rejected, `OFFSETS_OUT_OF_ORDER`), with its timestamp and timestamp
    type as given (`timestampType`, Spark's Kafka source column; else the topic's): a follower does not
    check timestamps against its clock, so `INVALID_TIMESTAMP` does not apply, and a LogAppendTime
    record's timestamp is its batch's append time, not `now`.
    """
    kip228 = config.allow_negative_timestamps
    min_ts = min_timestamp(config)
    if resume is not None and resume.next_offset != log_end_offset:
        raise ValueError(f"resumed segment ends at {resume.next_offset}, not at log end offset {log_end_offset}")
    if resume is not None and resume.time_index.min_timestamp != min_ts:
        raise ValueError(f"resumed segment's time index has min_timestamp {resume.time_index.min_timestamp}, "
                         f"but klake.timestamps.allow.negative={kip228} needs {min_ts}")
    keys, values, headers, ts = _columns(table, now_ms)
    rejects = _Rejects()
    kept = types = None
    ok = np.ones(len(keys), dtype=bool)
    if keep_offsets:
        kept, valid = kept_offsets(table.column("offset"))
        ok = kept_offset_mask(kept, valid, log_end_offset)
        broken = np.flatnonzero(~ok)
        rejects.add(broken, OFFSETS_OUT_OF_ORDER, out_of_order_messages(kept, valid, log_end_offset, broken))
        types = _timestamp_types(table, config)
    ok = _validate(keys, headers, ts, config, now_ms, rejects, ok, check_window=not keep_offsets)

    policy = RollPolicy(config)
    limit = batch_size_limit(config)
    codec = compression.NONE if config.compression_type in ("producer", "uncompressed") \
        else compression.codec_id(config.compression_type)
    rows = np.flatnonzero(ok)
    fixed = _fixed_sizes(keys, values, headers, rows)
    solo = V2_HEADER_SIZE + _record_sizes(fixed, np.zeros_like(fixed), np.zeros_like(fixed))
    if codec == compression.NONE:  # exact: reject before offsets are assigned
        too_big = solo > limit
        rejects.add(rows[too_big], RECORD_TOO_LARGE, [_too_large(int(s), config) for s in solo[too_big]])
        rows, fixed = rows[~too_big], fixed[~too_big]

    target = min(limit, batch_bytes or limit)
    if kept is None:
        lat = log_append_time(config, now_ms, last_log_append_time)
        lengths = plan_batches(fixed, ts[rows], target, cut_on_delta_overflow=kip228)
        batches, lengths, rows = _encode(keys, values, headers, ts, rows, lengths, limit, codec, lat,
                                         log_end_offset, leader_epoch, rejects, config)
        bases = log_end_offset + np.cumsum(lengths) - lengths
        appended_at = np.full(lengths.shape[0], lat is not None)
        record_offsets = log_end_offset + np.arange(rows.shape[0])
        stamps = np.full(rows.shape[0], lat) if lat is not None else ts[rows]
    else:
        batches, lengths, rows, appended_at = _encode_kept(keys, values, headers, ts, rows, fixed, kept, types,
                                                           target, limit, codec, leader_epoch, rejects, config)
        bases = kept[rows][np.cumsum(lengths) - lengths] if lengths.size else np.zeros(0, np.int64)
        record_offsets, stamps = kept[rows], ts[rows]
        lat = int(stamps[-1]) if appended_at.size and appended_at[-1] else None
    max_ts = _batch_max_timestamps(ts[rows], lengths, lat if kept is None else None, kip228)
    if kip228 and (lat is None or kept is not None):
        batches = [with_max_timestamp(b, int(m)) if m < NO_TIMESTAMP else b
                   for b, m in zip(batches, max_ts.tolist(), strict=True)]

    if resume is not None:
        writer = SegmentWriter.resume(policy, resume, segment_key, resume_log)
    else:  # kept offsets: a new log starts at its first record (a follower's log at the leader's start)
        start = int(bases[0]) if kept is not None and bases.size else log_end_offset
        writer = SegmentWriter(policy, start, segment_key, now_ms, min_timestamp=min_ts)
    offset = log_end_offset
    for data, base, n, m in zip(batches, bases.tolist(), lengths.tolist(), max_ts.tolist(), strict=True):
        writer.append(Append(data, base, base + n - 1, m, base + n - 1), now_ms)
        offset = base + n

    offsets = np.full(len(keys), -1, np.int64)
    offsets[rows] = record_offsets
    active = writer.active
    snap = active.indexer.snapshot()
    counts = rejects.counts()
    written = _Written(bases, lengths, max_ts, record_offsets, stamps, appended_at, min_ts, resume_summary)
    summaries = [written.summary(s.base_offset, s.next_offset, s.size, s.max_timestamp,
                                 s.offset_of_max_timestamp) for s in writer.closed]
    summaries.append(written.summary(active.base_offset, active.next_offset, active.size,
                                     active.indexer.max_timestamp, active.indexer.offset_of_max_timestamp))
    return AppendResult(
        closed=writer.closed,
        active=ActiveOutput(active.base_offset, list(active.chunks), active.start_position, *snap,
                            active.state()),
        summaries=summaries,
        rejects=rejects.table(table, carry),
        offsets=offsets,
        counters=AppendCounters(len(keys), int(rows.shape[0]), counts, len(batches), sum(map(len, batches)),
                                len(writer.closed)),
        log_end_offset=offset,
        last_log_append_time=lat if batches else last_log_append_time,
    )


def log_append_time(config: TopicConfig, now_ms: int, last_log_append_time: int | None) -> int | None:
    """The time one append stamps into every batch of a LogAppendTime topic (None for CreateTime):
    the clock read once per append (spec 2.2), or `max(last appended, now)` when the topic opts in
    to monotonic append times (`klake.log.append.time.monotonic`, the KIP-32 draft's rule)."""
    if config.message_timestamp_type != "LogAppendTime":
        return None
    if not config.monotonic_log_append_time or last_log_append_time is None:
        return now_ms
    return max(last_log_append_time, now_ms)


# ------------------------------------------------------------------------------------------ input


def _columns(table: pa.Table, now_ms: int) -> tuple[pa.Array, pa.Array | pa.ChunkedArray, pa.Array | None, np.ndarray]:
    """(keys, values, headers, timestamps): null keys/values stay null, null header lists become
    empty, a null timestamp becomes `now_ms` (the producer's default)."""
    if "value" not in table.column_names:
        raise ValueError("the input needs a `value` column (Spark's Kafka sink schema)")
    n = table.num_rows
    values = as_binary_chunks(table.column("value"))  # (encoded batch by batch from its chunks)
    keys = as_binary(table.column("key")) if "key" in table.column_names else pa.nulls(n, pa.binary())
    headers = None
    if "headers" in table.column_names:
        headers = as_headers(table.column("headers"))
        if headers.null_count:
            headers = pc.if_else(headers.is_null(), pa.scalar([], HEADERS_TYPE), headers)
    ts = np.full(n, now_ms, np.int64)
    if "timestamp" in table.column_names:
        ts = _millis(table.column("timestamp").combine_chunks(), now_ms)
    return keys, values, headers, ts


def _millis(column: pa.Array, now_ms: int) -> np.ndarray:
    if pa.types.is_timestamp(column.type):
        per_ms = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}[column.type.unit]
        raw = column.cast(pa.int64()).fill_null(0).to_numpy()
        ms = raw * 1000 if per_ms is None else raw // per_ms  # floor, as Spark's toMillis
    else:
        ms = column.cast(pa.int64()).fill_null(0).to_numpy()
    ms = np.array(ms, dtype=np.int64)
    if column.null_count:
        ms[~column.is_valid().to_numpy(zero_copy_only=False)] = now_ms
    return ms


def _validate(keys: pa.Array, headers: pa.Array | None, ts: np.ndarray, config: TopicConfig, now_ms: int,
              rejects: _Rejects, ok: np.ndarray, check_window: bool = True) -> np.ndarray:
    """Mask of the records `ok` holds that pass Kafka's per-record checks; the others are added to
    `rejects`. `check_window` is the leader's CreateTime window against its clock (a follower's append,
    keeping offsets, does not check it)."""
    ok = ok.copy()

    def reject(mask: np.ndarray, reason: str, message) -> None:
        rows = np.flatnonzero(mask & ok)
        rejects.add(rows, reason, [message(int(r)) for r in rows])
        ok[rows] = False

    if config.compacted and keys.null_count:
        reject(~keys.is_valid().to_numpy(zero_copy_only=False), INVALID_RECORD,
               lambda _: "compacted topic cannot accept a record without a key (KAFKA-1755)")
    if headers is not None and len(headers):
        null_key = pc.is_null(pc.list_flatten(headers).field("key")).to_numpy(zero_copy_only=False)
        if null_key.any():
            owner = np.repeat(np.arange(len(headers)), np.diff(headers.offsets.to_numpy()))
            mask = np.zeros(len(keys), dtype=bool)
            mask[owner[null_key]] = True
            reject(mask, INVALID_RECORD, lambda _: "record has a header with a null key")
    if not config.allow_negative_timestamps:
        reject(ts < NO_TIMESTAMP, NEGATIVE_TIMESTAMP,
               lambda r: f"timestamp {format_time(int(ts[r]))} is before 1970 (negative): Kafka reserves -1 "
                         "for \"no timestamp\" and rejects anything lower (spec 9); "
                         "klake.timestamps.allow.negative enables KIP-228 semantics")
    if config.message_timestamp_type == "CreateTime" and check_window:
        before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
        low, high = now_ms - before, now_ms + after  # exact: Python ints do not overflow
        outside = (ts < max(low, INT64_MIN)) | (ts > min(high, INT64_MAX))
        if not config.allow_negative_timestamps:
            outside &= ts != NO_TIMESTAMP
        reject(outside, INVALID_TIMESTAMP,
               lambda r: f"timestamp {format_time(int(ts[r]))} is out of range: CreateTime timestamps must be "
                         f"within [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms] = "
                         f"[{format_time(low)}, {format_time(high)}] with now = {format_time(now_ms)}, "
                         f"before = {format_duration(before, precise=True)}, "
                         f"after = {format_duration(after, precise=True)}")
    return ok


def batch_size_limit(config: TopicConfig) -> int:
    """The largest batch (log overhead included) a partition takes: `max.message.bytes`, and never more
    than `segment.bytes` (spec 2.1; the broker's RecordTooLargeException for either)."""
    return min(config.max_message_bytes, config.segment_bytes)


def batch_too_large(size: int, config: TopicConfig) -> str:
    """Why a `size`-byte batch is refused, for a `size` above `batch_size_limit(config)`."""
    limit = batch_size_limit(config)
    what = "max.message.bytes" if limit == config.max_message_bytes else "segment.bytes"
    return f"a {size}-byte batch, larger than {what} = {limit}"


def _too_large(size: int, config: TopicConfig) -> str:
    return f"the record alone makes {batch_too_large(size, config)}"


# ------------------------------------------------------------------------------------------ sizes


def _fixed_sizes(keys: pa.Array, values: pa.Array | pa.ChunkedArray, headers: pa.Array | None,
                 rows: np.ndarray) -> np.ndarray:
    """Per record (of `rows`): the encoded bytes that do not depend on its batch, i.e. everything
    except the length, timestampDelta and offsetDelta varints (spec 1.5)."""
    def lengths(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
        return pc.binary_length(arr).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    klen, vlen = lengths(keys)[rows], lengths(values)[rows]
    size = 1 + encoded_size(klen) + np.maximum(klen, 0) + encoded_size(vlen) + np.maximum(vlen, 0)
    if headers is None:
        return size + 1  # headerCount 0
    list_offsets = headers.offsets.to_numpy().astype(np.int64)
    counts = np.diff(list_offsets)
    flat = pc.list_flatten(headers)
    hk = lengths(flat.field("key"))
    hv = lengths(flat.field("value"))
    each = encoded_size(hk) + np.maximum(hk, 0) + encoded_size(hv) + np.maximum(hv, 0)
    cum = np.concatenate(([0], np.cumsum(each)))
    start = list_offsets[:-1] - list_offsets[0]
    per_record = cum[start + counts] - cum[start]
    return size + (encoded_size(counts) + per_record)[rows]


def _record_sizes(fixed: np.ndarray, ts_delta: np.ndarray, offset_delta: np.ndarray) -> np.ndarray:
    body = fixed + encoded_size(ts_delta) + encoded_size(offset_delta)
    return body + encoded_size(body)


def plan_batches(fixed: np.ndarray, ts: np.ndarray, limit: int, cut_on_delta_overflow: bool = False) -> np.ndarray:
    """Greedy batch lengths: each batch takes as many following records as keep its exact
    (uncompressed) size <= `limit`, at least one; with `cut_on_delta_overflow` (KIP-228) a batch also
    ends before a record whose timestamp delta would overflow int64. `fixed` is `_fixed_sizes`; a
    batch's deltas are relative to its first record (spec 1.5). One compiled pass over the records."""
    return codec.plan_batches(np.ascontiguousarray(fixed, np.int64), np.ascontiguousarray(ts, np.int64), int(limit),
                              V2_HEADER_SIZE, bool(cut_on_delta_overflow))


# ---------------------------------------------------------------------------------------- encoding


def _encode(keys, values, headers, ts, rows, lengths, limit, codec, lat, base_offset, leader_epoch,
            rejects: _Rejects, config: TopicConfig) -> tuple[list[bytes], np.ndarray, np.ndarray]:
    """Encode the planned batches; split batches that compression grew over `limit`; reject a lone
    record that does not fit and shift the later batches' base offsets. Returns (batches, lengths, rows)."""
    if not rows.size:
        return [], np.zeros(0, np.int64), rows
    if rows.shape[0] == len(keys):  # nothing rejected: no copy
        k, v, h = keys, values, headers
    else:
        take = pa.array(rows)
        k, v, h = keys.take(take), values.take(take), None if headers is None else headers.take(take)
    t = ts[rows]
    kind = CREATE_TIME if lat is None else LOG_APPEND_TIME

    def encode(first: int, counts: list[int], offset: int) -> list[bytes]:
        stop = first + sum(counts)
        return encode_batches(k[first:stop], v[first:stop], t[first:stop], None if h is None else h[first:stop],
                              batch_lengths=counts, base_offset=offset, codec=codec, timestamp_type=kind,
                              log_append_time=lat, partition_leader_epoch=leader_epoch)

    batches = encode(0, lengths.tolist(), base_offset)
    counts = lengths.tolist()
    firsts = (np.cumsum(lengths) - lengths).tolist()
    if codec == compression.NONE:
        return batches, lengths, rows
    keep = np.ones(rows.shape[0], dtype=bool)
    out: list[bytes] = []
    out_counts: list[int] = []
    pending = list(zip(batches, firsts, counts, strict=True))[::-1]
    while pending:
        data, first, count = pending.pop()
        if len(data) <= limit:
            out.append(data)
            out_counts.append(count)
        elif count == 1:
            keep[first] = False
            rejects.add(rows[first:first + 1], RECORD_TOO_LARGE, [_too_large(len(data), config)])
        else:
            half = count // 2
            offset = struct.unpack_from(">q", data)[0]
            left, right = encode(first, [half, count - half], offset)
            pending += [(right, first + half, count - half), (left, first, half)]
    if not keep.all():
        offset = base_offset
        for i, (data, count) in enumerate(zip(out, out_counts, strict=True)):
            if struct.unpack_from(">q", data)[0] != offset:
                out[i] = with_base_offset(data, offset)
            offset += count
    return out, np.asarray(out_counts, np.int64), rows[keep]


def _timestamp_types(table: pa.Table, config: TopicConfig) -> np.ndarray:
    """Each record's kept timestamp type: the input's `timestampType` (Spark's Kafka source: 0 CreateTime,
    1 LogAppendTime), else (and for a null) the topic's."""
    default = LOG_APPEND_TIME_TYPE if config.message_timestamp_type == "LogAppendTime" else 0
    if "timestampType" not in table.column_names:
        return np.full(table.num_rows, default, np.int64)
    column = table.column("timestampType").combine_chunks().cast(pa.int64())
    return np.asarray(column.fill_null(default).to_numpy(zero_copy_only=False), np.int64)


def _encode_kept(keys, values, headers, ts, rows, fixed, kept, types, target, limit, codec, leader_epoch,
                 rejects: _Rejects, config: TopicConfig) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray]:
    """Batches of records keeping their offsets (`engine.log.kept_offsets`): each run of consecutive
    offsets (and one timestamp type; one time, for LogAppendTime) is planned and encoded as `_encode`
    does, at its first record's offset, a LogAppendTime run with its records' time as the append time.
    A record compression cannot fit leaves a gap: each batch keeps its first record's own offset.
    Returns (batches, lengths, rows, per batch whether it is LogAppendTime)."""
    starts = contiguous_runs(kept[rows], types[rows], ts[rows])
    ends = np.append(starts[1:], rows.shape[0]).astype(np.int64) if starts.size else starts
    out: list[bytes] = []
    out_lengths: list[np.ndarray] = []
    out_rows: list[np.ndarray] = []
    appended_at: list[bool] = []
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        run = rows[start:end]
        lat = int(ts[run[0]]) if types[run[0]] == LOG_APPEND_TIME_TYPE else None
        lengths = plan_batches(fixed[start:end], ts[run], target, cut_on_delta_overflow=config.allow_negative_timestamps)
        batches, lengths, run = _encode(keys, values, headers, ts, run, lengths, limit, codec, lat,
                                        int(kept[run[0]]), leader_epoch, rejects, config)
        for data, first in zip(batches, (np.cumsum(lengths) - lengths).tolist(), strict=True):
            own = int(kept[run[first]])
            out.append(data if struct.unpack_from(">q", data)[0] == own else with_base_offset(data, own))
        out_lengths.append(lengths)
        out_rows.append(run)
        appended_at += [lat is not None] * len(batches)
    if not out_lengths:
        return [], np.zeros(0, np.int64), rows, np.zeros(0, bool)
    return out, np.concatenate(out_lengths), np.concatenate(out_rows), np.array(appended_at, bool)


@dataclass(frozen=True)
class _Written:
    """What the encoder wrote, as arrays (batch lengths and maxTimestamps, record timestamps as a reader
    will see them), from which each segment's catalog facts follow without decoding a byte of it;
    `resumed` holds the facts of the active segment the append continued."""

    bases: np.ndarray  # each batch's base offset
    lengths: np.ndarray
    max_timestamps: np.ndarray
    record_offsets: np.ndarray  # increasing; consecutive unless the append kept offsets with gaps
    record_timestamps: np.ndarray
    log_append_time: np.ndarray  # per batch: whether its timestamp type is LogAppendTime
    min_timestamp: int
    resumed: SegmentSummary | None

    def summary(self, base: int, next_offset: int, size: int, largest: int, largest_offset: int) -> SegmentSummary:
        """The facts `engine.log.summary.summarize_segment` would read back from the segment's bytes."""
        batches = np.flatnonzero((self.bases >= base) & (self.bases < next_offset))
        lo, hi = (int(i) for i in np.searchsorted(self.record_offsets, [base, next_offset]))
        stamps = self.record_timestamps[lo:hi]
        stamps = stamps[has_timestamp(stamps, self.min_timestamp)]
        old = self.resumed if self.resumed is not None and self.resumed.base_offset == base else None
        old_batches = old is not None and old.batch_count > 0
        lows = ([int(stamps.min())] if stamps.size else []) + \
            ([old.base_timestamp] if old_batches and has_timestamp(old.base_timestamp, self.min_timestamp)
             else [])
        types = ({"LogAppendTime" if self.log_append_time[b] else "CreateTime" for b in batches.tolist()}
                 | ({old.timestamp_type} if old_batches else set()))
        magics = ([2] if batches.size else []) + ([old.magic] if old_batches else [])
        if old_batches:
            first_batch = old.first_batch_timestamp
        else:
            first_batch = (int(self.max_timestamps[batches[0]]) if batches.size
                           else no_timestamp(self.min_timestamp))
        none = no_timestamp(self.min_timestamp)
        has_largest = has_timestamp(largest, self.min_timestamp)
        return SegmentSummary(
            base_offset=base, last_offset=next_offset - 1, next_offset=next_offset,
            record_count=hi - lo + (old.record_count if old else 0),
            batch_count=int(batches.size) + (old.batch_count if old else 0), size_bytes=size,
            first_batch_timestamp=first_batch, base_timestamp=min(lows) if lows else none,
            largest_timestamp=largest if has_largest else none,
            offset_of_largest_timestamp=largest_offset if has_largest else base,
            timestamp_type=types.pop() if len(types) == 1 else ("Mixed" if types else "CreateTime"),
            magic=max(magics, default=2), valid_bytes=size,
            **asdict(old.transactions if old else TxnSummary(0, None, None)))  # an append adds no transaction


def _batch_max_timestamps(ts: np.ndarray, lengths: np.ndarray, lat: int | None, kip228: bool) -> np.ndarray:
    """Each batch's maxTimestamp (spec 2.2): the append time, or the max record timestamp, floored
    at -1 in Kafka mode (the builder's rule) and the true maximum in KIP-228 mode."""
    if not lengths.size:
        return np.zeros(0, np.int64)
    if lat is not None:
        return np.full(lengths.shape[0], lat, np.int64)
    top = np.maximum.reduceat(ts, np.cumsum(lengths) - lengths)
    return top if kip228 else np.maximum(top, NO_TIMESTAMP)


