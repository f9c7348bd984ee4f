"""Kafka's log cleaner (spec 8) against independent truth.

- A brute-force reference model (Kafka's rules written literally over plain Python records that
  kafka-python, an independent decoder, reads from the input) is compared with `clean_log` on
  hypothesis-generated logs: several segments, keyed/keyless records, tombstones, updates, offset gaps,
  CreateTime/LogAppendTime, codecs, existing delete horizons, idempotent and transactional producers
  with COMMIT/ABORT markers. kafka-python reads every output segment; the grouping is re-derived by
  brute force with `SegmentIndexer`; every index passes `check_indexes`; a second round with the
  same clock is a no-op and a later round matches the model again.
- Real data: Java-written legacy wrappers and transaction markers, broker logs (a Connect status
  topic with tombstones, 3 MiB of idempotent-producer segments).
- Selection numbers and boundaries (dirty ratio, min/max compaction lag, LSO/HW, checkpoint reset),
  grouping limits (segment.bytes, segment.index.bytes, Int.MAX offset range, empty exemption),
  partial cleaning, producer expiration.
"""

from __future__ import annotations

import json
from base64 import b64decode
from dataclasses import dataclass, replace

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from engine.cleaner.cleaning import CleanResult, SourceSegment, clean_log
from engine.cleaner.selection import (
    UNCLEANABLE_ACTIVE,
    UNCLEANABLE_LSO,
    UNCLEANABLE_MIN_LAG,
    SegmentInfo,
    cleanable_range,
    should_clean,
)
from engine.format import compression
from engine.format.batch import LOG_APPEND_TIME, scan_batches
from engine.format.builder import CONTROL_ABORT, CONTROL_COMMIT, encode_batch
from engine.index.append_rule import SegmentIndexer
from engine.index.checks import check_indexes
from engine.index.offset_index import OffsetIndex
from engine.index.time_index import TimeIndex
from engine.log.topic_config import TopicConfig
from tests.codecs_for_tests import control_record
from tests.conftest import KAFKA_FIXTURES

FIXTURES = KAFKA_FIXTURES
INT_MAX = 2**31 - 1
DAY = 86_400_000
COMPACT = TopicConfig(cleanup_policy="compact")


# --------------------------------------------------------------------------------- reading (kafka-python)


@dataclass(frozen=True)
class Rec:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple


@dataclass(frozen=True)
class Batch:
    """A v2 batch as kafka-python reads it."""

    base_offset: int
    last_offset: int
    codec: int
    timestamp_type: int
    transactional: bool
    control: bool
    horizon: bool
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    leader_epoch: int
    records: tuple[Rec, ...]
    control_type: int | None = None


def read_batches(data: bytes) -> list[Batch]:
    out = []
    records = MemoryRecords(bytes(data))
    while (b := records.next_batch()) is not None:
        assert b.magic == 2
        assert b.validate_crc()
        recs = list(b)
        assert len(recs) == b.records_count
        out.append(Batch(
            b.base_offset, b.last_offset, b.compression_type, b.timestamp_type, b.is_transactional,
            b.is_control_batch, bool(b.attributes & 0x40), b.first_timestamp, b.max_timestamp, b.producer_id,
            b.producer_epoch, b.base_sequence, b.leader_epoch,
            tuple(Rec(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in recs),
            recs[0].type if b.is_control_batch and recs else None))
    return out


def read_records(data: bytes) -> list[tuple]:
    """(offset, timestamp, key, value) of every record, any magic."""
    out = []
    records = MemoryRecords(bytes(data))
    while (b := records.next_batch()) is not None:
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value) for r in b]
    return out


def output_bytes(result: CleanResult) -> bytes:
    return b"".join(s.log for s in result.segments)


def after(sources: list[SourceSegment], result: CleanResult) -> list[SourceSegment]:
    """The partition once the cleaned segments replaced their sources."""
    replaced = set(result.replaced)
    kept = [s for s in sources if s.base_offset not in replaced]
    new = [SourceSegment(c.base_offset, c.log, last_modified_ms=c.last_modified_ms) for c in result.segments]
    return sorted(new + kept, key=lambda s: s.base_offset)


# --------------------------------------------------------------------------------- the reference model


def model_clean(segments: list[tuple[int, list[Batch]]], round_end: int, first_dirty: int, now: int,
                retention: int, expired_producers: frozenset[int] = frozenset()) -> list[Batch]:
    """Spec 8.2-8.5 written literally (klake's documented choices: markers are discardable once no
    batch of their transaction survives this round; every producer in the log is active)."""
    log = [(base, b) for base, batches in segments for b in batches]
    batches = [b for _, b in log]
    # transactions: opened by a producer's first transactional data batch, closed by its next marker
    open_txn, txn_of, aborted_txns = {}, {}, set()
    for i, b in enumerate(batches):
        if b.control and b.control_type in (CONTROL_ABORT, CONTROL_COMMIT):
            txn_of[i] = open_txn.pop(b.producer_id, None)
            if txn_of[i] is not None and b.control_type == CONTROL_ABORT:
                aborted_txns.add(txn_of[i])
        elif b.transactional and not b.control:
            txn_of[i] = open_txn.setdefault(b.producer_id, i)
    aborted = {i for i, b in enumerate(batches) if not b.control and txn_of.get(i) in aborted_txns}
    last_any, last_data = {}, {}
    for i, b in enumerate(batches):
        if b.producer_id >= 0:
            last_any[b.producer_id] = i
            if not b.control:
                last_data[b.producer_id] = i

    def last_of_producer(i: int) -> bool:
        pid = batches[i].producer_id
        if pid < 0 or pid in expired_producers:
            return False
        if pid in last_data:
            return last_data[pid] == i
        return batches[i].control and batches[i].producer_epoch == batches[last_any[pid]].producer_epoch

    in_round = [i for i, (base, _) in enumerate(log) if base < round_end]
    latest: dict[bytes, int] = {}
    for i in in_round:
        if not batches[i].control and i not in aborted:
            for r in batches[i].records:
                if r.key is not None and first_dirty <= r.offset < round_end:
                    latest[r.key] = r.offset

    def retained(b: Batch, kept: list[Rec], keep_empty: bool, empty_txn_marker: bool) -> Batch | None:
        if kept:
            needs_horizon = (any(r.value is None for r in kept) or empty_txn_marker) and not b.horizon
            if len(kept) == len(b.records) and not needs_horizon:
                return b
            horizon = now + retention if needs_horizon else (b.base_timestamp if b.horizon else None)
            max_ts = b.max_timestamp if b.timestamp_type == 1 else max([-1] + [r.timestamp for r in kept])
            return replace(b, records=tuple(kept), horizon=horizon is not None, max_timestamp=max_ts,
                           base_timestamp=kept[0].timestamp if horizon is None else horizon)
        if keep_empty:
            return replace(b, records=(), codec=0, horizon=False, base_timestamp=-1, control_type=None)
        return None

    out: dict[int, Batch | None] = {}
    for i in in_round:
        b = batches[i]
        if b.control:
            continue
        keep_empty = last_of_producer(i) or b.last_offset + 1 == round_end
        kept = [] if i in aborted else [
            r for r in b.records
            if r.offset > round_end - 1 or (
                r.key is not None and r.offset >= latest.get(r.key, -1)
                and (r.value is not None or not b.horizon or now < b.base_timestamp))]
        out[i] = retained(b, kept, keep_empty, False)
    surviving_txns = {txn_of.get(i) for i, b in out.items() if b is not None}
    for i in in_round:
        b = batches[i]
        if not b.control:
            continue
        keep_empty = last_of_producer(i) or b.last_offset + 1 == round_end
        marker = b.control_type in (CONTROL_ABORT, CONTROL_COMMIT)
        discardable = not b.records or (marker and (txn_of[i] is None or txn_of[i] not in surviving_txns))
        dropped = discardable and b.horizon and now >= b.base_timestamp
        out[i] = retained(b, [] if dropped else list(b.records), keep_empty, discardable)
    return [out[i] for i in in_round if out[i] is not None]


def model_groups(parts: list[list[tuple[bytes, int, int]]], bases: list[int], estimated_last: list[int],
                 config: TopicConfig) -> list[list[int]]:
    """Greedy grouping by brute force: build each candidate group's indexes with `SegmentIndexer`."""
    def fits(group: list[int]) -> bool:
        indexer = SegmentIndexer(bases[group[0]], config.index_interval_bytes, min_timestamp=0)
        for k in group:
            for data, last, ts in parts[k]:
                indexer.append(indexer.size, len(data), last, ts, last)
        offsets, times = indexer.snapshot()
        final_offsets, final_times = indexer.close()
        limit = config.segment_index_bytes
        return (indexer.size <= config.segment_bytes and len(final_offsets.to_bytes()) <= limit
                and len(times) <= limit // 12 - 1 and len(final_times.to_bytes()) <= limit)

    groups, k = [], 0
    while k < len(parts):
        group = [k]
        k += 1
        while k < len(parts) and fits(group + [k]) and (
                not parts[k] or estimated_last[k] - bases[group[0]] <= INT_MAX):
            group.append(k)
            k += 1
        groups.append(group)
    return groups


# --------------------------------------------------------------------------------- generated logs

NOW = 10_000
KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e"])
VALUES = st.one_of(st.none(), st.binary(min_size=0, max_size=12))
HEADERS = st.lists(st.tuples(st.sampled_from(["h", "x"]), st.one_of(st.none(), st.binary(max_size=4))), max_size=2)
CODECS = st.sampled_from([compression.NONE] * 4 + [compression.GZIP, compression.LZ4, compression.ZSTD,
                                                   compression.SNAPPY])


@dataclass
class _Gen:
    offset: int
    open_txn: dict[int, bool]
    sequence: dict[int, int]


def _data_batch(draw, g: _Gen, kind: str) -> bytes:
    n = draw(st.integers(1, 4))
    deltas = sorted(draw(st.sets(st.integers(0, n + 3), min_size=n, max_size=n)))
    if draw(st.booleans()):
        deltas = [d - deltas[0] for d in deltas]
    last_delta = deltas[-1] + draw(st.sampled_from([0, 0, 1, 2]))
    base = g.offset + draw(st.sampled_from([0, 0, 0, 1, 3]))
    keys = [draw(st.one_of(KEYS, st.just(None))) if draw(st.integers(0, 9)) == 0 else draw(KEYS) for _ in range(n)]
    values = [draw(VALUES) for _ in range(n)]
    stamps = [draw(st.integers(1_000, 9_000)) for _ in range(n)]
    headers = [draw(HEADERS) for _ in range(n)]
    lat = draw(st.sampled_from([None, None, None, draw(st.integers(1_000, 9_000))]))
    pid = epoch = seq = -1
    if kind == "idem":
        pid, epoch, seq = 7, 0, g.sequence.get(7, 0)
        g.sequence[7] = seq + last_delta + 1
    elif kind == "txn":
        pid, epoch = draw(st.sampled_from([100, 101])), 1
        g.open_txn[pid] = True
    horizon = draw(st.sampled_from([None, None, None, 5_000, NOW, 20_000]))
    g.offset = base + last_delta + 1
    return encode_batch(keys, values, stamps, headers, base_offset=base, offset_deltas=deltas,
                        codec=draw(CODECS), timestamp_type=LOG_APPEND_TIME if lat else 0, log_append_time=lat,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        partition_leader_epoch=draw(st.integers(-1, 3)), transactional=kind == "txn",
                        delete_horizon=horizon, last_offset_delta=last_delta)


def _marker(draw, g: _Gen, pid: int, kind: int | None = None) -> bytes:
    kind = draw(st.sampled_from([CONTROL_ABORT, CONTROL_COMMIT])) if kind is None else kind
    g.open_txn.pop(pid, None)
    key, value = control_record(kind, coordinator_epoch=draw(st.integers(0, 3)))
    base = g.offset + draw(st.sampled_from([0, 0, 2]))
    g.offset = base + 1
    return encode_batch([key], [value], [draw(st.integers(1_000, 9_000))], base_offset=base, producer_id=pid,
                        producer_epoch=1, transactional=True, control=True,
                        delete_horizon=draw(st.sampled_from([None, None, 5_000, 20_000])))


def _empty(draw, g: _Gen) -> bytes:
    """A header left by an earlier cleaning (recordsCount 0)."""
    base = g.offset + draw(st.sampled_from([0, 1]))
    last_delta = draw(st.integers(0, 3))
    g.offset = base + last_delta + 1
    control = draw(st.booleans())
    return encode_batch([], [], [], base_offset=base, last_offset_delta=last_delta,
                        max_timestamp=draw(st.integers(1_000, 9_000)), producer_id=draw(st.sampled_from([-1, 7, 100])),
                        producer_epoch=1, transactional=control, control=control)


@st.composite
def generated_logs(draw) -> list[SourceSegment]:
    g = _Gen(offset=draw(st.integers(0, 40)), open_txn={}, sequence={})
    n_segments = draw(st.integers(2, 5))
    segments = []
    for s in range(n_segments):
        active = s == n_segments - 1
        base = g.offset
        blobs = []
        for _ in range(draw(st.integers(1 if active else 0, 4))):
            kind = draw(st.sampled_from(["data"] * 5 + ["idem", "txn", "txn", "marker", "empty"]))
            if kind == "marker":
                pid = draw(st.sampled_from(sorted(g.open_txn) or [100, 101]))
                blobs.append(_marker(draw, g, pid))
            elif kind == "empty":
                blobs.append(_empty(draw, g))
            else:
                blobs.append(_data_batch(draw, g, kind))
        if active:  # every transaction completes (so the last stable offset is the log end offset)
            blobs += [_marker(draw, g, pid) for pid in sorted(g.open_txn)]
        if not blobs:
            g.offset += 1
        segments.append(SourceSegment(base, b"".join(blobs), is_active=active))
    return segments


def _as_model_input(segments: list[SourceSegment]) -> list[tuple[int, list[Batch]]]:
    return [(s.base_offset, read_batches(s.log)) for s in segments]


def _check_segments(result: CleanResult, sources: list[SourceSegment], config: TopicConfig) -> None:
    """Output structure: groups cover the sources in order, each written through the append path."""
    bases = [s.base_offset for s in sources]
    assert [b for c in result.segments for b in c.replaces] == list(result.replaced) == bases[:len(result.replaced)]
    for seg in result.segments:
        assert seg.base_offset == seg.replaces[0]
        headers = scan_batches(seg.log, "out").headers
        offsets = OffsetIndex.load(seg.index, seg.base_offset)
        times = TimeIndex.load(seg.timeindex, seg.base_offset, min_timestamp=0)
        assert offsets.ok and times.ok
        assert check_indexes(headers, offsets.index, times.index, "out.log") == []
        assert seg.summary.size_bytes == len(seg.log) and seg.summary.base_offset == seg.base_offset
        assert seg.summary.batch_count == len(headers)
        if len(headers):
            assert int(headers.base_offset.min()) >= seg.base_offset
            assert int(headers.last_offset.max()) - seg.base_offset <= INT_MAX
        if len(seg.replaces) > 1:
            assert len(seg.log) <= config.segment_bytes
            assert max(len(seg.index), len(seg.timeindex)) <= config.segment_index_bytes


def _check_grouping(result: CleanResult, sources: list[SourceSegment], config: TopicConfig) -> None:
    """Split the output back into its source segments by offset and regroup by brute force."""
    n = len(result.replaced)
    bases = [s.base_offset for s in sources]
    parts: list[list[tuple[bytes, int, int]]] = [[] for _ in range(n)]
    for seg in result.segments:
        h = scan_batches(seg.log, "out").headers
        for pos, size, last, ts in zip(h.position.tolist(), h.size.tolist(), h.last_offset.tolist(),
                                       h.max_timestamp.tolist(), strict=True):
            k = max(i for i in range(n) if bases[i] <= last)
            parts[k].append((seg.log[pos:pos + size], last, ts))
    estimated = [bases[i + 1] - 1 for i in range(n)]
    groups = model_groups(parts, bases, estimated, config)
    assert [[bases[k] for k in g] for g in groups] == [list(c.replaces) for c in result.segments]


CONFIGS = st.builds(
    lambda seg, idx, interval, retention: TopicConfig(
        cleanup_policy="compact", segment_bytes=seg, segment_index_bytes=idx, index_interval_bytes=interval,
        delete_retention_ms=retention),
    st.sampled_from([150, 400, 1_000, 1 << 20]), st.sampled_from([12, 24, 60, 10 << 20]),
    st.sampled_from([0, 60, 200, 4096]), st.sampled_from([0, 1_000, DAY]))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(generated_logs(), CONFIGS, st.data())
def test_cleaner_matches_the_reference_model(sources: list[SourceSegment], config: TopicConfig, data) -> None:
    round_end = sources[-1].base_offset
    first_dirty = data.draw(st.sampled_from([sources[0].base_offset, sources[0].base_offset,
                                             data.draw(st.integers(sources[0].base_offset, round_end))]))
    result = clean_log(sources, config, NOW, first_dirty)
    dirty_bytes = sum(len(s.log) for s, following in zip(sources, sources[1:], strict=False)
                      if s.base_offset < round_end and following.base_offset > first_dirty)
    if first_dirty >= round_end or dirty_bytes == 0:
        assert result.segments == [] and result.range.cleanable_bytes == 0
        return
    assert (result.end_offset, result.checkpoint, result.partial) == (round_end, round_end, False)
    expected = model_clean(_as_model_input(sources), round_end, first_dirty, NOW, config.delete_retention_ms)
    assert read_batches(output_bytes(result)) == expected
    _check_segments(result, sources, config)
    _check_grouping(result, sources, config)
    stats = result.stats
    assert stats.records_kept == sum(len(b.records) for b in expected)
    assert stats.records_read == stats.records_kept + stats.superseded + stats.tombstones_expired + \
        stats.keyless + stats.aborted + stats.markers_dropped
    assert stats.bytes_after == len(output_bytes(result))

    cleaned = after(sources, result)
    again = clean_log(cleaned, config, NOW, cleaned[0].base_offset)
    if first_dirty == sources[0].base_offset and config.delete_retention_ms > 0:  # idempotent
        if again.range.cleanable_bytes == 0:  # all that was left is empty
            assert again.segments == [] and output_bytes(result) == b""
        else:
            assert [(s.base_offset, s.log, s.index, s.timeindex) for s in again.segments] == \
                   [(s.base_offset, s.log, s.index, s.timeindex) for s in result.segments]
            assert all(s.unchanged for s in again.segments)
    later = NOW + config.delete_retention_ms + 1
    third = clean_log(cleaned, config, later, cleaned[0].base_offset)
    expected = model_clean(_as_model_input(cleaned), round_end, cleaned[0].base_offset, later,
                           config.delete_retention_ms)
    assert read_batches(output_bytes(third)) == expected
    _check_segments(third, cleaned, config)


# --------------------------------------------------------------------------------- explicit rules


def _batch(offset: int, keys: list, values: list, stamps: list[int], **kw) -> bytes:
    return encode_batch(keys, values, stamps, base_offset=offset, **kw)


def _marker_batch(offset: int, pid: int, kind: int, ts: int = 5_000, epoch: int = 1) -> bytes:
    key, value = control_record(kind)
    return encode_batch([key], [value], [ts], base_offset=offset, producer_id=pid, producer_epoch=epoch,
                        transactional=True, control=True)


def _log(*segments: tuple[int, bytes], active: bool = True) -> list[SourceSegment]:
    return [SourceSegment(base, data, is_active=active and i == len(segments) - 1)
            for i, (base, data) in enumerate(segments)]


def _records(result: CleanResult) -> list[tuple]:
    return [(r.offset, r.key, r.value) for b in read_batches(output_bytes(result)) for r in b.records]


def test_tombstone_gets_a_delete_horizon_then_goes_once_now_reaches_it() -> None:
    config = TopicConfig(cleanup_policy="compact", delete_retention_ms=1_000)
    sources = _log((0, _batch(0, [b"a", b"b"], [b"1", b"2"], [100, 101])
                    + _batch(2, [b"a", b"c"], [None, b"3"], [102, 103])), (4, _batch(4, [b"z"], [b"z"], [104])))
    first = clean_log(sources, config, NOW)
    batches = read_batches(output_bytes(first))
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 1), (2, 3)]
    tomb = batches[1]
    assert tomb.horizon and tomb.base_timestamp == NOW + 1_000  # KIP-534: baseTimestamp = now + delete.retention.ms
    assert [(r.offset, r.timestamp, r.key, r.value) for r in tomb.records] == [(2, 102, b"a", None), (3, 103, b"c", b"3")]
    assert [(r.offset, r.key) for r in batches[0].records] == [(1, b"b")]
    assert first.stats.horizons_set == 1 and first.stats.superseded == 1
    cleaned = after(sources, first)
    assert _records(clean_log(cleaned, config, NOW + 999, 0)) == _records(first)
    gone = clean_log(cleaned, config, NOW + 1_000, 0)  # now >= horizon
    assert _records(gone) == [(1, b"b", b"2"), (3, b"c", b"3")]
    assert gone.stats.tombstones_expired == 1


def test_last_batch_of_the_round_is_kept_empty_with_its_offsets() -> None:
    """KAFKA-17076: the batch ending at the round end keeps the log end offset even when nothing of it survives."""
    config = TopicConfig(cleanup_policy="compact", delete_retention_ms=0)
    last = _batch(10, [b"a", None], [None, b"x"], [300, 301], offset_deltas=[0, 3], last_offset_delta=5,
                  delete_horizon=NOW - 1)
    sources = _log((0, _batch(0, [b"a", b"b"], [b"1", b"2"], [100, 200]) + last), (16, _batch(16, [b"q"], [b"q"], [9])))
    result = clean_log(sources, config, NOW)
    out = read_batches(output_bytes(result))
    assert [(b.base_offset, b.last_offset, len(b.records)) for b in out] == [(0, 1, 1), (10, 15, 0)]
    empty = out[1]
    assert (empty.max_timestamp, empty.base_timestamp, empty.horizon) == (301, -1, False)
    assert result.stats.tombstones_expired == 1 and result.stats.keyless == 1 and result.stats.batches_emptied == 1
    middle = _batch(0, [b"a"], [b"1"], [100]) + _batch(1, [b"a"], [b"2"], [100]) + _batch(2, [b"a"], [b"3"], [100])
    result = clean_log(_log((0, middle), (3, b"")), config, NOW)
    assert [(b.base_offset, len(b.records)) for b in read_batches(output_bytes(result))] == [(2, 1)]


def test_rebuilt_batches_keep_their_header_fields_and_recompute_create_time_max() -> None:
    kw = dict(producer_id=7, producer_epoch=3, base_sequence=40, partition_leader_epoch=5, codec=compression.GZIP)
    create = _batch(0, [b"a", b"b", b"c"], [b"1", b"2", b"3"], [100, 900, 300], **kw)
    append = _batch(3, [b"b", b"e"], [b"1", b"2"], [1, 2], timestamp_type=LOG_APPEND_TIME, log_append_time=777,
                    producer_id=7, producer_epoch=3, base_sequence=43, codec=compression.LZ4)
    newer = _batch(5, [b"b", b"d"], [b"x", b"y"], [50, 60], producer_id=7, producer_epoch=3, base_sequence=45)
    sources = _log((0, create + append + newer), (7, _batch(7, [b"z"], [b"z"], [1])))
    result = clean_log(sources, COMPACT, NOW)
    out = read_batches(output_bytes(result))
    assert [(b.base_offset, b.last_offset) for b in out] == [(0, 2), (3, 4), (5, 6)]
    a, b, c = out
    assert [(r.offset, r.timestamp) for r in a.records] == [(0, 100), (2, 300)]
    assert a.max_timestamp == 300  # CreateTime: max of the retained records (went down from 900)
    assert (a.codec, a.producer_id, a.producer_epoch, a.base_sequence, a.leader_epoch) == (compression.GZIP, 7, 3, 40, 5)
    assert [(r.offset, r.timestamp) for r in b.records] == [(4, 777)]  # LogAppendTime: the append time stays
    assert (b.max_timestamp, b.timestamp_type, b.codec, b.base_sequence) == (777, 1, compression.LZ4, 43)
    assert len(c.records) == 2  # the producer's last batch, untouched
    assert output_bytes(result).endswith(newer)


def test_negative_timestamps_with_the_kip228_opt_in() -> None:
    """Kafka raises a rebuilt CreateTime max to -1 and indexes no negative time; klake's opt-in keeps both."""
    sources = _log((0, _batch(0, [b"a", b"b"], [b"1", b"2"], [-500, -200], max_timestamp=-200)
                    + _batch(2, [b"c"], [b"3"], [-900], max_timestamp=-900)
                    + _batch(3, [b"b"], [b"4"], [-300], max_timestamp=-300)), (4, _single(4)))
    for allow, max_ts in ((False, -1), (True, -500)):
        config = TopicConfig(cleanup_policy="compact", index_interval_bytes=0, allow_negative_timestamps=allow)
        result = clean_log(sources, config, NOW)
        out = read_batches(output_bytes(result))
        assert [(b.base_offset, b.max_timestamp) for b in out][0] == (0, max_ts)
        seg = result.segments[0]
        min_ts = -(2**63) + 1 if allow else 0
        times = TimeIndex.load(seg.timeindex, 0, min_timestamp=min_ts)
        assert times.ok and check_indexes(scan_batches(seg.log, "o").headers, OffsetIndex.load(seg.index, 0).index,
                                          times.index, "o.log") == []
        assert times.index.timestamps.tolist() == ([-500, -300] if allow else [])


def test_transactions_aborted_data_goes_and_markers_follow_their_data() -> None:
    config = TopicConfig(cleanup_policy="compact", delete_retention_ms=1_000)
    txn = dict(producer_id=100, producer_epoch=1, transactional=True)
    log = (_batch(0, [b"a", b"b"], [b"aborted", b"aborted"], [10, 11], **txn)
           + _batch(2, [b"c"], [b"plain"], [12])
           + _marker_batch(3, 100, CONTROL_ABORT)
           + _batch(4, [b"a"], [b"committed"], [13], **txn)
           + _marker_batch(5, 100, CONTROL_COMMIT)
           + _batch(6, [b"a"], [b"newer"], [14], **txn)
           + _marker_batch(7, 100, CONTROL_COMMIT)
           + _batch(8, [b"c"], [b"last"], [15]))
    sources = _log((0, log), (9, _batch(9, [b"z"], [b"z"], [1])))
    first = clean_log(sources, config, NOW)
    out = read_batches(output_bytes(first))
    assert [(b.base_offset, b.control, b.horizon, [r.value for r in b.records]) for b in out] == [
        (3, True, True, [None if False else b"\x00\x00\x00\x00\x00\x00"]),  # abort marker: its data is gone
        (5, True, True, [b"\x00\x00\x00\x00\x00\x00"]),  # commit marker: its only record was superseded
        (6, False, False, [b"newer"]),  # the producer's last data batch
        (7, True, False, [b"\x00\x00\x00\x00\x00\x00"]),  # its transaction still has data
        (8, False, False, [b"last"])]
    assert first.stats.aborted == 2 and first.stats.superseded == 2 and first.stats.horizons_set == 2
    later = clean_log(after(sources, first), config, NOW + 1_000, 0)
    assert [b.base_offset for b in read_batches(output_bytes(later))] == [6, 7, 8]
    assert later.stats.markers_dropped == 2


def test_kafka_clients_transaction_fixtures() -> None:
    """Java-written transactional batch (producer 42) + ABORT/COMMIT marker (spec 1.6)."""
    for name, aborted in (("txn-abort", True), ("txn-commit", False)):
        data = (FIXTURES / "kafka-clients" / f"{name}.records").read_bytes()
        golden = [json.loads(line) for line in (FIXTURES / "kafka-clients" / f"{name}.records.golden.jsonl")
                  .read_text().splitlines()]
        sources = [SourceSegment(200, data)]  # a closed log: everything is cleanable
        active = clean_log(sources, COMPACT, NOW)
        out = read_batches(output_bytes(active))
        if aborted:  # the producer's last data batch stays as an empty header, so the marker stays too
            assert [(b.base_offset, len(b.records), b.control) for b in out] == [(200, 0, False), (203, 1, True)]
        else:
            kept = [(r["offset"], b64decode(r["key"])) for r in golden if r["key"] and not r["control"]]
            assert [(r.offset, r.key) for r in out[0].records] == kept
        now = 1_800_000_000_000  # the fixtures were written at 1.7e12
        expired = clean_log(sources, COMPACT, now, producer_expiration_ms=1)
        out = read_batches(output_bytes(expired))
        if aborted:  # producer expired: aborted data dropped, marker gets a horizon (it is the round's last batch)
            assert [(b.base_offset, b.control, b.horizon) for b in out] == [(203, True, True)]
            final = clean_log(after(sources, expired), COMPACT, now + DAY, producer_expiration_ms=1)
            assert [(b.base_offset, len(b.records)) for b in read_batches(output_bytes(final))] == [(203, 0)]


def test_idempotent_producer_keeps_its_last_batch_until_it_expires() -> None:
    idem = dict(producer_id=9, producer_epoch=0)
    log = _batch(0, [b"a"], [b"1"], [100], base_sequence=0, **idem) + _batch(1, [b"a"], [b"2"], [200], base_sequence=1, **idem)
    log += _batch(2, [b"a"], [b"3"], [300]) + _batch(3, [b"b"], [b"4"], [400])
    sources = _log((0, log), (4, _batch(4, [b"z"], [b"z"], [1])))
    out = read_batches(output_bytes(clean_log(sources, COMPACT, NOW)))
    assert [(b.base_offset, len(b.records), b.base_sequence) for b in out] == [(1, 0, 1), (2, 1, -1), (3, 1, -1)]
    out = read_batches(output_bytes(clean_log(sources, COMPACT, NOW, producer_expiration_ms=NOW - 200)))
    assert [b.base_offset for b in out] == [2, 3]
    out = read_batches(output_bytes(clean_log(sources, COMPACT, NOW, producer_expiration_ms=NOW - 199)))
    assert [b.base_offset for b in out] == [1, 2, 3]


# --------------------------------------------------------------------------------- legacy and real data


def _fixture(*parts: str) -> bytes:
    return FIXTURES.joinpath(*parts).read_bytes()


@pytest.mark.parametrize("name", ["m0-gzip", "m0-lz4", "m0-snappy", "m1-gzip", "m1-lz4", "m1-snappy", "m1-none"])
def test_legacy_wrappers_are_rebuilt_in_their_own_format(name: str) -> None:
    """Java-written magic 0/1 records (offsets 1000-1004, keys k0-k4); a later v2 batch supersedes k1 and k3."""
    legacy = _fixture("kafka-clients", f"{name}.records")
    golden = [json.loads(line) for line in _fixture("kafka-clients", f"{name}.records.golden.jsonl").splitlines()]
    newer = _batch(1005, [b"k1", b"k3"], [b"new1", b"new3"], [1_800_000_000_000] * 2)
    result = clean_log([SourceSegment(1000, legacy + newer)], COMPACT, NOW)
    headers = scan_batches(output_bytes(result), "out").headers
    magic = golden[0]["magic"]
    assert set(headers.magic.tolist()) == {magic, 2}
    assert set(headers.codec[headers.magic < 2].tolist()) == {compression.IDS[golden[0]["compression"]]}
    expected = [(r["offset"], r["timestamp"], b64decode(r["key"]), b64decode(r["value"]))
                for r in golden if b64decode(r["key"]) not in (b"k1", b"k3")]
    expected += [(1005, 1_800_000_000_000, b"k1", b"new1"), (1006, 1_800_000_000_000, b"k3", b"new3")]
    assert read_records(output_bytes(result)) == expected
    assert result.stats.superseded == 2
    if name == "m0-lz4":  # KAFKA-3160: magic-0 LZ4 frames carry the descriptor checksum over magic + descriptor
        for frame in (legacy[26:], output_bytes(result)[26:]):  # the wrapper's value (v0: 26-byte prefix)
            assert frame[6] == (xxhash.xxh32_intdigest(frame[:6]) >> 8) & 0xFF


def test_kafka_go_mixed_magic_partition() -> None:
    """Broker-captured v1, v1 gzip wrappers and v2 batches in one partition: latest value per key survives."""
    name = "kafka-go__v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc__test-88-0.records"
    data = _fixture("record-sets", name)
    golden = [json.loads(line) for line in _fixture("record-sets", name + ".golden.jsonl").splitlines()]
    latest = {r["key"]: r["offset"] for r in golden}
    expected = [(r["offset"], r["timestamp"], b64decode(r["key"]), b64decode(r["value"]))
                for r in golden if latest[r["key"]] == r["offset"] or r["offset"] == golden[-1]["offset"]]
    result = clean_log([SourceSegment(0, data)], COMPACT, NOW)
    assert read_records(output_bytes(result)) == expected
    before = scan_batches(data, "in").headers
    after_ = scan_batches(output_bytes(result), "out").headers
    assert set(after_.magic.tolist()) <= set(before.magic.tolist())
    assert check_indexes(after_, OffsetIndex.load(result.segments[0].index, 0).index,
                         TimeIndex.load(result.segments[0].timeindex, 0,
                                        min_timestamp=0).index, "out.log") == []


def _v0_message(offset: int, key: bytes, value: bytes | None) -> bytes:
    builder = LegacyRecordBatchBuilder(0, 0, 1 << 20)
    builder.append(offset, None, key, value)
    return bytes(builder.build())


def test_legacy_tombstones_follow_segment_mtimes() -> None:
    """Legacy tombstones stay while the segment's mtime > mtime(last clean segment) - delete.retention.ms."""
    def message(offset: int, key: bytes, value: bytes | None) -> bytes:
        builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
        builder.append(offset, 1_000 + offset, key, value)
        return bytes(builder.build())

    config = TopicConfig(cleanup_policy="compact", delete_retention_ms=5_000)
    sources = [SourceSegment(0, message(0, b"a", None), last_modified_ms=1_000),
               SourceSegment(1, message(1, b"b", None), last_modified_ms=10_000),
               SourceSegment(2, message(2, b"c", b"3"), last_modified_ms=11_000),
               SourceSegment(3, message(3, b"d", b"4"), is_active=True, last_modified_ms=12_000)]
    result = clean_log(sources, config, NOW, first_dirty_offset=2)  # legacy horizon = 10_000 - 5_000
    assert [r[0] for r in read_records(output_bytes(result))] == [1, 2]
    assert result.stats.tombstones_expired == 1 and result.segments[-1].last_modified_ms == 11_000
    unknown = [replace(s, last_modified_ms=None) for s in sources]  # the timestamps (1000-1003) stand in for mtimes
    assert [r[0] for r in read_records(output_bytes(clean_log(unknown, config, NOW, 2)))] == [0, 1, 2]
    no_clock = [SourceSegment(0, _v0_message(0, b"a", None)), SourceSegment(1, _v0_message(1, b"b", b"1"), True)]
    assert [r[0] for r in read_records(output_bytes(clean_log(no_clock, config, NOW)))] == [0]  # kept: no mtime


@pytest.mark.parametrize("retention", [0, 4_000, 5_000, 9_000, 12_000])
def test_pre_1970_legacy_horizon_and_min_lag_age_by_the_negative_timestamps(retention: int) -> None:
    """A KIP-228 topic's segments without mtimes, all before 1970: their largest timestamps stand in for the
    mtimes of the legacy tombstone horizon (Kafka's lastModified - delete.retention.ms) and age them for
    min.compaction.lag.ms (largestTimestamp), as brute force over the same numbers says."""
    def message(offset: int, ts: int, key: bytes, value: bytes | None) -> bytes:
        builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
        builder.append(offset, ts, key, value)
        return bytes(builder.build())

    stamps = [-20_000, -11_000, -10_000, -9_000]
    values = [None, None, b"3", b"4"]
    sources = [SourceSegment(i, message(i, ts, b"k%d" % i, v), is_active=i == 3)
               for i, (ts, v) in enumerate(zip(stamps, values, strict=True))]
    config = TopicConfig(cleanup_policy="compact", delete_retention_ms=retention,
                         allow_negative_timestamps=True)
    horizon = stamps[1] - retention  # the last segment below the first dirty offset 2
    kept = [i for i in range(3) if values[i] is not None or stamps[i] > horizon]
    assert [r[0] for r in read_records(output_bytes(clean_log(sources, config, NOW, 2)))] == kept
    for lag in (NOW + 8_999, NOW + 9_000, NOW + 10_001, NOW + 10_999, NOW + 11_001, NOW + 20_001):
        lagged = replace(config, min_compaction_lag_ms=lag)
        young = [i for i in range(3) if stamps[i] > NOW - lag]
        assert clean_log(sources, lagged, NOW).range.round_end == (young[0] if young else 3), lag


def test_connect_status_topic_from_a_broker() -> None:
    """A real compacted topic (Kafka 2.1 broker, 20 keys, tombstones): the latest record of each key stays;
    tombstones get a horizon and go in a round after it."""
    data = _fixture("broker", "docker-connect-status-0", "00000000000000000000.log")
    golden = [json.loads(line) for line in
              _fixture("broker", "docker-connect-status-0", "00000000000000000000.log.golden.jsonl").splitlines()]
    latest = {r["key"]: r["offset"] for r in golden if r["key"] is not None}
    sources = [SourceSegment(0, data)]
    config = TopicConfig(cleanup_policy="compact")
    first = clean_log(sources, config, NOW)
    survivors = [r for r in golden if r["key"] is not None and latest[r["key"]] == r["offset"]]
    assert [(o, k) for o, _, k, _ in read_records(output_bytes(first))] == \
           [(r["offset"], b64decode(r["key"])) for r in survivors]
    assert first.checkpoint == golden[-1]["offset"] + 1 and first.stats.superseded == len(golden) - len(survivors)
    second = clean_log(after(sources, first), config, NOW + DAY, 0)
    values = [(r["offset"], b64decode(r["key"])) for r in survivors if r["value"] is not None]
    last = golden[-1]["offset"]
    assert [(o, k) for o, _, k, _ in read_records(output_bytes(second)) if o != last] == \
           [v for v in values if v[0] != last]
    assert scan_batches(output_bytes(second), "out").headers.last_offset[-1] == last


def test_broker_segments_merge_up_to_segment_bytes() -> None:
    """Three real 1 MiB segments (idempotent producer, unique keys) are already clean: copied byte for byte,
    merged into one segment when segment.bytes allows it, left alone at the broker's 1 MiB."""
    folder = FIXTURES / "broker" / "timeindex_test-0"
    logs = sorted(folder.glob("*.log"))
    sources = [SourceSegment(int(p.stem), p.read_bytes(), is_active=i == len(logs) - 1) for i, p in enumerate(logs)]
    merged = clean_log(sources, COMPACT, NOW)
    assert [c.replaces for c in merged.segments] == [tuple(s.base_offset for s in sources[:3])]
    assert merged.segments[0].log == b"".join(s.log for s in sources[:3])
    assert merged.stats.records_kept == merged.stats.records_read and merged.stats.batches_copied == merged.stats.batches_read
    seg = merged.segments[0]
    headers = scan_batches(seg.log, "out").headers
    assert check_indexes(headers, OffsetIndex.load(seg.index, 0).index, TimeIndex.load(seg.timeindex, 0, min_timestamp=0).index,
                         "out.log") == []
    alone = clean_log(sources, TopicConfig(cleanup_policy="compact", segment_bytes=1 << 20), NOW)
    assert [c.replaces for c in alone.segments] == [(s.base_offset,) for s in sources[:3]]
    assert all(c.unchanged for c in alone.segments)


# --------------------------------------------------------------------------------- grouping limits


def _single(offset: int, value_size: int = 20, ts: int = 100) -> bytes:
    return _batch(offset, [b"k%d" % offset], [b"v" * value_size], [ts])


def test_small_segments_merge_greedily_up_to_the_limits() -> None:
    sources = _log(*[(i, _single(i)) for i in range(10)], (10, _single(10)))
    size = len(_single(0))
    for limit, expected in ((size * 3, [3, 3, 3, 1]), (size * 4 - 1, [3, 3, 3, 1]), (size * 10, [10])):
        config = TopicConfig(cleanup_policy="compact", segment_bytes=limit)
        assert [len(c.replaces) for c in clean_log(sources, config, NOW).segments] == expected
    # segment.index.bytes = 24: 3 offset entries, 2 time entries of which the last is reserved for the final
    # one. With interval 0 every append after the first gets an offset entry, and a time entry if the max grew.
    config = TopicConfig(cleanup_policy="compact", segment_index_bytes=24, index_interval_bytes=0)
    assert [len(c.replaces) for c in clean_log(sources, config, NOW).segments] == [4, 4, 2]
    rising = _log(*[(i, _single(i, ts=100 + i)) for i in range(10)], (10, _single(10)))
    assert [len(c.replaces) for c in clean_log(rising, config, NOW).segments] == [2, 2, 2, 2, 2]


def test_offset_range_within_int_max_and_empty_segments_are_exempt() -> None:
    """A candidate joins only if (next segment's base - 1) - group base <= Int.MAX, unless it is empty (KAFKA-12889)."""
    far = INT_MAX + 5
    sources = _log((0, _single(0)), (10, _single(10)), (far, _single(far)), (far + 5, _single(far + 5)))
    result = clean_log(sources, COMPACT, NOW)
    assert [c.replaces for c in result.segments] == [(0,), (10, far)]  # far + 4 - 10 = Int.MAX - 1
    # the segment at 10 is entirely superseded (empty after cleaning): it joins despite the offset range
    sources = _log((0, _single(0)), (10, _batch(10, [b"dup"], [b"x"], [1])),
                   (far, _batch(far, [b"dup"], [b"y"], [1]) + _single(far + 1)), (far + 5, _single(far + 5)))
    result = clean_log(sources, COMPACT, NOW)
    assert [c.replaces for c in result.segments] == [(0, 10), (far,)]
    assert [r[0] for r in _records(result)] == [0, far, far + 1]


def test_partial_rounds_stop_at_a_batch_boundary_and_converge() -> None:
    """A bounded map (Kafka's dedupe buffer, KAFKA-3894) cleans up to the last fully mapped batch."""
    blobs = [_batch(2 * i, [b"k%d" % (i % 5), b"k%d" % ((i + 1) % 5)], [b"v%d" % i] * 2, [100 + i] * 2)
             for i in range(10)]
    sources = _log((0, b"".join(blobs[:5])), (10, b"".join(blobs[5:])), (20, _single(20)))
    first = clean_log(sources, COMPACT, NOW, max_map_entries=3)
    # batches 0-1 put k0, k1, k2; the first record of batch 2 finds the map full (map.size < 3 fails)
    assert (first.partial, first.end_offset, first.checkpoint, first.replaced) == (True, 4, 4, (0,))
    assert [r[0] for r in _records(first)] == [0] + list(range(2, 10))  # offset 1 (k1) superseded by 2
    full = clean_log(sources, COMPACT, NOW)
    current, checkpoint, rounds = sources, 0, 0
    while checkpoint < 20:
        result = clean_log(current, COMPACT, NOW, checkpoint, max_map_entries=3)
        current, checkpoint, rounds = after(current, result), result.checkpoint, rounds + 1
    assert rounds > 2
    assert read_records(b"".join(s.log for s in current[:-1])) == read_records(output_bytes(full))


def test_nothing_cleanable_is_a_no_op() -> None:
    sources = _log((0, _single(0)), (1, _single(1)))
    result = clean_log(sources, COMPACT, NOW, first_dirty_offset=1)
    assert (result.segments, result.replaced, result.checkpoint) == ([], (), 1)
    bounded = clean_log(sources, COMPACT, NOW, last_stable_offset=0)
    assert bounded.segments == [] and bounded.range.uncleanable_reason == UNCLEANABLE_LSO


def test_round_ends_at_the_segment_holding_the_last_stable_offset() -> None:
    sources = _log((0, _single(0) + _single(1)), (2, _single(2) + _single(3)), (4, _single(4)), (5, _single(5)))
    result = clean_log(sources, COMPACT, NOW, last_stable_offset=3)
    assert (result.range.round_end, result.checkpoint, result.replaced) == (2, 2, (0,))
    closed = [SourceSegment(s.base_offset, s.log) for s in sources]  # no active segment: all of it is cleanable
    result = clean_log(closed, COMPACT, NOW)
    assert (result.range.round_end, result.replaced) == (6, (0, 2, 4, 5))


# --------------------------------------------------------------------------------- selection (spec 8.1)


def _info(base: int, following: int, size: int, largest: int = -1, first: int = -1, active: bool = False,
          mtime: int | None = None) -> SegmentInfo:
    return SegmentInfo(base, following, size, largest, first, active, mtime)


SEGMENTS = [_info(0, 100, 1_000, 1_000, 500), _info(100, 200, 1_000, 2_000, 1_500),
            _info(200, 300, 2_000, 3_000, 2_500), _info(300, 310, 100, 3_100, 3_050, active=True)]


def _config(**kw) -> TopicConfig:
    return TopicConfig(cleanup_policy="compact", **kw)


def test_dirty_ratio_must_exceed_the_threshold() -> None:
    rng = cleanable_range(SEGMENTS, _config(), 4_000, 200)
    assert (rng.clean_bytes, rng.cleanable_bytes, rng.total_bytes, rng.dirty_ratio) == (2_000, 2_000, 4_000, 0.5)
    assert (rng.round_end, rng.uncleanable_reason) == (300, UNCLEANABLE_ACTIVE)
    assert not should_clean(SEGMENTS, _config(min_cleanable_dirty_ratio=0.5), 4_000, 200).clean  # strict
    decision = should_clean(SEGMENTS, _config(min_cleanable_dirty_ratio=0.4999), 4_000, 200)
    assert decision.clean and "dirty ratio 0.5 > min.cleanable.dirty.ratio 0.4999" in decision.reasons
    # a first dirty offset inside a segment counts that segment as clean and cleanable (Kafka's sums)
    rng = cleanable_range(SEGMENTS, _config(), 4_000, 150)
    assert (rng.clean_bytes, rng.cleanable_bytes) == (2_000, 3_000)


def test_min_compaction_lag_makes_young_segments_uncleanable() -> None:
    for lag, expected in ((1_000, 300), (2_000, 200), (2_001, 100), (4_000, 0)):
        rng = cleanable_range(SEGMENTS, _config(min_compaction_lag_ms=lag), 4_000)
        assert rng.round_end == expected, lag  # uncleanable iff largestTimestamp > now - lag (strict)
        assert rng.uncleanable_reason == (UNCLEANABLE_ACTIVE if lag == 1_000 else UNCLEANABLE_MIN_LAG)
    assert cleanable_range(SEGMENTS, _config(min_compaction_lag_ms=4_000), 4_000).cleanable_bytes == 0
    # a segment without timestamps ages by its mtime
    young = [_info(0, 10, 50, mtime=3_900), _info(10, 11, 5, active=True)]
    assert cleanable_range(young, _config(min_compaction_lag_ms=500), 4_000).round_end == 0
    assert cleanable_range(young, _config(min_compaction_lag_ms=100), 4_000).round_end == 10


def test_max_compaction_lag_forces_a_round() -> None:
    low = dict(min_cleanable_dirty_ratio=0.99)  # the ratio from offset 200 is 0.5: only the lag can trigger
    exact = should_clean(SEGMENTS, _config(max_compaction_lag_ms=1_500, **low), 4_000, 200)
    assert exact.range.earliest_dirty_first_batch_timestamp == 2_500  # dirty non-active segments only
    assert not exact.clean and exact.range.max_compaction_delay_ms == 0  # 2500 < 4000 - 1500 is false
    over = should_clean(SEGMENTS, _config(max_compaction_lag_ms=1_499, **low), 4_000, 200)
    assert over.clean and over.range.max_compaction_delay_ms == 1
    assert over.reasons == ("max.compaction.lag.ms 1 second and 499 milliseconds exceeded by 1 millisecond",)
    assert not should_clean(SEGMENTS, _config(max_compaction_lag_ms=1, **low), 4_000, 300).clean  # nothing cleanable
    ignored = [_info(0, 10, 50, first=0), _info(10, 11, 5, active=True)]  # first-batch timestamps <= 0 are ignored
    assert cleanable_range(ignored, _config(max_compaction_lag_ms=1), 4_000).max_compaction_delay_ms == 0


def test_checkpoint_reset_and_stability_bounds() -> None:
    rng = cleanable_range(SEGMENTS, _config(), 4_000, 5, log_start_offset=50)
    assert (rng.checkpoint_reset, rng.first_dirty_offset) == (True, 50)
    rng = cleanable_range(SEGMENTS, _config(), 4_000, 311)
    assert (rng.checkpoint_reset, rng.first_dirty_offset) == (True, 0)
    rng = cleanable_range(SEGMENTS, _config(), 4_000, 310)
    assert (rng.checkpoint_reset, rng.first_dirty_offset) == (False, 310)
    rng = cleanable_range(SEGMENTS, _config(), 4_000, last_stable_offset=250)
    assert (rng.first_uncleanable_offset, rng.round_end, rng.uncleanable_reason) == (250, 200, UNCLEANABLE_LSO)
    rng = cleanable_range(SEGMENTS, _config(), 4_000, last_stable_offset=250, high_watermark=150)
    assert (rng.last_stable_offset, rng.round_end) == (150, 100)
    rng = cleanable_range(SEGMENTS, _config(), 4_000, 250, last_stable_offset=120)
    assert (rng.first_uncleanable_offset, rng.cleanable_bytes) == (250, 0)  # clamped to the first dirty offset


def test_selection_without_data_or_compaction() -> None:
    assert should_clean([], _config(), 0).reasons == ("the log holds no bytes",)
    assert not should_clean(SEGMENTS, TopicConfig(), 4_000).clean  # cleanup.policy=delete
    with pytest.raises(ValueError, match="offset order"):
        cleanable_range([SEGMENTS[1], SEGMENTS[0]], _config(), 0)
