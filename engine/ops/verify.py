"""Verify a catalogued partition against its objects: what `klake recover` would repair, and why.

For every live segment (catalog rows, offset order) the `.log` must exist with the row's size; every
batch must be valid; the row's facts must be what the log says; the sidecars must be present,
consistent and of the sizes the row records (if it does); a row's `.batchindex` (if it has one) must be
exactly the one its log and `.timeindex` make (`engine.index.batch_index`: a lookup reads the batch it
names without searching); and offsets must increase across segments.
Each problem names the object, the byte position and the defect.

The valid prefix of a log is Kafka's recovery rule (`LogSegment.recover`, spec 7.2) made stricter:
Kafka stops at the first batch failing `ensureValid` (framing, size, CRC) or with an offset outside
`[base, base + Int.MAX]`; klake also stops at a batch whose offsets do not increase over the previous
batch's, and at a batch whose records do not decode although its CRC matches (Kafka's recovery never
decompresses records, so it keeps such a batch and fails only when a consumer fetches it). Index
files are validated rather than trusted (KAFKA-10207, KAFKA-7283).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.catalog.schema import TXN_COLUMNS, SegmentRow, SegmentState
from engine.format.batch import BatchHeaders, scan_batches
from engine.format.records import decode_records
from engine.index.batch_index import batch_index_bytes
from engine.index.checks import check_sidecars, sidecar_names
from engine.index.common import INT32_MAX
from engine.log.summary import SegmentSummary, summarize_segment
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog
from kernel.errors import CorruptRecordError
from kernel.names import TopicPartition
from layouts.object_layout import batch_index_key
from layouts.store.bound import Store

FACT_FIELDS = ("last_offset", "next_offset", "record_count", "batch_count", "first_batch_timestamp",
               "base_timestamp", "largest_timestamp", "offset_of_largest_timestamp", "timestamp_type", "magic")
_BYTE = re.compile(r"byte (?P<position>\d+): (?P<what>.*)", re.DOTALL)


@dataclass(frozen=True)
class Problem:
    """One defect: the object, the byte position in it (None: the whole object) and what is wrong."""

    object: str
    position: int | None
    kind: str  # missing | size | batch | offsets | records | facts | sidecar | batchindex | overlap
    what: str

    def __str__(self) -> str:
        where = "" if self.position is None else f"byte {self.position}: "
        return f"{self.object}: {where}{self.what}"

    def to_dict(self) -> dict[str, Any]:
        return {"object": self.object, "position": self.position, "kind": self.kind, "what": self.what,
                "line": str(self)}


@dataclass
class LogPrefix:
    """The longest valid prefix of a `.log`: its end, its batches, and every problem found in the log."""

    valid_bytes: int
    headers: BatchHeaders
    problems: list[Problem]


@dataclass
class SegmentCheck:
    """What verifying one catalogued segment found. `data` (the `.log` bytes) is kept only on request."""

    row: SegmentRow
    log_size: int | None  # None: the `.log` object is missing
    valid_bytes: int
    problems: list[Problem] = field(default_factory=list)
    sidecars_valid: bool = False
    facts_valid: bool = False
    summary: SegmentSummary | None = None  # of the valid prefix
    prefix_headers: BatchHeaders | None = field(default=None, repr=False)
    data: bytes | None = field(default=None, repr=False)

    @property
    def log_missing(self) -> bool:
        return self.log_size is None

    @property
    def tail_bytes(self) -> int:
        """Bytes after the valid prefix (a corrupt or partial tail)."""
        return 0 if self.log_size is None else self.log_size - self.valid_bytes

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        row = self.row
        return {"segment_id": row.segment_id, "base_offset": row.base_offset, "next_offset": row.next_offset,
                "state": row.state, "layout": row.layout, "log_key": row.log_key, "size_bytes": row.size_bytes,
                "log_size": self.log_size, "valid_bytes": self.valid_bytes, "tail_bytes": self.tail_bytes,
                "sidecars_valid": self.sidecars_valid, "facts_valid": self.facts_valid, "ok": self.ok,
                "problems": [p.to_dict() for p in self.problems]}


@dataclass(frozen=True)
class OffsetGap:
    """Offsets no live segment holds, between two consecutive segments (information, not a defect)."""

    after_segment: str
    before_segment: str
    from_offset: int
    to_offset: int  # exclusive

    def to_dict(self) -> dict[str, Any]:
        return {"after_segment": self.after_segment, "before_segment": self.before_segment,
                "from_offset": self.from_offset, "to_offset": self.to_offset}


@dataclass
class PartitionCheck:
    """The verification of one partition: per-segment checks, gaps (info) and partition-level problems."""

    topic: str
    partition: int
    segments: list[SegmentCheck] = field(default_factory=list)
    gaps: list[OffsetGap] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def all_problems(self) -> list[Problem]:
        return [p for s in self.segments for p in s.problems] + self.problems

    @property
    def ok(self) -> bool:
        return not self.all_problems

    def lines(self) -> list[str]:
        """One line per problem: `object: byte N: what`."""
        return [str(p) for p in self.all_problems]

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "ok": self.ok,
                "segments": [s.to_dict() for s in self.segments], "gaps": [g.to_dict() for g in self.gaps],
                "problems": [p.to_dict() for p in self.problems], "lines": self.lines()}


def _problem(error: CorruptRecordError, kind: str) -> Problem:
    return Problem(error.source, error.position, kind, f"{error.field}: {error.message}")


def _offset_problems(h: BatchHeaders, base_offset: int, source: str) -> list[Problem]:
    """Kafka's `lastOffset - base` in `[0, Int.MAX]` (spec 7.2), and klake's: offsets increase from
    batch to batch (else the offset index cannot be built and lookups go wrong)."""
    problems = []
    first = np.where(h.base_offset >= 0, h.base_offset, h.last_offset)
    previous = np.concatenate(([np.iinfo(np.int64).min], h.last_offset[:-1]))
    relative = h.last_offset - base_offset
    for i in np.flatnonzero((first <= previous) | (relative < 0) | (relative > INT32_MAX)).tolist():
        pos, low, high = int(h.position[i]), int(first[i]), int(h.last_offset[i])
        if low <= int(previous[i]):
            what = f"offsets: offset {low} does not follow the previous batch's last offset {int(previous[i])}"
        else:
            what = (f"offsets: last offset {high} is not in [base, base + Int.MAX] for the segment base offset "
                    f"{base_offset}")
        problems.append(Problem(source, pos, "offsets", what))
    return problems


def record_problems(data: bytes, h: BatchHeaders, source: str) -> list[tuple[int, Problem]]:
    """(batch row, problem) for every batch whose records do not decode.

    Decoding is vectorized over many batches and stops at the first error, which is not always in
    the earliest bad batch (checks run field by field), so the rows before a bad one are re-checked.
    """
    found: list[tuple[int, Problem]] = []
    todo = [(0, len(h))]
    while todo:
        lo, hi = todo.pop()
        if lo >= hi:
            continue
        part = h.take(np.arange(lo, hi))
        try:
            decode_records(data, part, source)
        except CorruptRecordError as exc:
            row = lo + max(int(np.searchsorted(part.position, exc.position, side="right")) - 1, 0)
            found.append((row, _problem(exc, "records")))
            todo += [(row + 1, hi), (lo, row)]
    return sorted(found, key=lambda item: item[0])


def valid_prefix(data: bytes, base_offset: int, source: str) -> LogPrefix:
    """Where the valid prefix of a `.log` ends, and every problem in the log (see the module docs)."""
    scan = scan_batches(data, source, strict=False)
    problems = [_problem(p, "batch") for p in scan.problems]
    headers = scan.headers
    ordering = _offset_problems(headers, base_offset, source)
    bad = {p.position for p in problems + ordering}
    decodable = np.flatnonzero(~np.isin(headers.position, list(bad))) if bad else np.arange(len(headers))
    records = [(int(decodable[row]), p) for row, p in record_problems(data, headers.take(decodable), source)]
    ends = [scan.valid_bytes] + [p.position for p in ordering]
    ends += [int(headers.position[row]) for row, _ in records]
    valid = min(ends)
    problems = sorted(problems + ordering + [p for _, p in records], key=lambda p: p.position)
    return LogPrefix(valid, headers.take(headers.next_position <= valid), problems)


def read_if_present(uri: str, store: Store) -> bytes | None:
    """The object's bytes, or None if it does not exist."""
    try:
        return store.read(uri)
    except FileNotFoundError:
        return None


def _fact_problems(row: SegmentRow, summary: SegmentSummary, h: BatchHeaders) -> list[Problem]:
    """The row's facts against the log's; the position is the batch the fact comes from."""
    last = int(h.position[-1]) if len(h) else 0
    at_max = h.position[h.last_offset == summary.offset_of_largest_timestamp]
    where = {"last_offset": last, "next_offset": last, "first_batch_timestamp": 0,
             "largest_timestamp": int(at_max[0]) if at_max.size else None}
    where["offset_of_largest_timestamp"] = where["largest_timestamp"]
    # a transaction column may be unknown (null: scanned whole); a wrong known one hides transactions
    wrong = [name for name in FACT_FIELDS if getattr(row, name) != getattr(summary, name)] + [
        name for name in TXN_COLUMNS if getattr(row, name) is not None and getattr(row, name) != getattr(summary, name)]
    return [Problem(row.log_key, where.get(name), "facts",
                    f"facts: catalog row {row.segment_id} says {name} {getattr(row, name)!r} but the log "
                    f"says {getattr(summary, name)!r}"
                    + (" (read_committed reads would miss transactions)" if name in TXN_COLUMNS else ""))
            for name in wrong]


def _sidecar_problems(row: SegmentRow, lines: list[str]) -> list[Problem]:
    """`check_sidecars` names sidecars after the `.log`; name the row's actual keys instead."""
    problems = []
    for line in lines:
        for name, key in zip(sidecar_names(row.log_key), (row.index_key, row.timeindex_key), strict=True):
            if line.startswith(name + ": "):
                rest = line[len(name) + 2:]
                match = _BYTE.fullmatch(rest)
                position = int(match["position"]) if match else None
                problems.append(Problem(key, position, "sidecar", match["what"] if match else rest))
                break
        else:
            problems.append(Problem(row.log_key, None, "sidecar", line))
    return problems


def _sidecar_size_problems(row: SegmentRow, index: bytes | None, timeindex: bytes | None) -> list[Problem]:
    """Each present sidecar whose length is not the one its row records (lookups place their ranged reads
    by it); a row without the sizes (an older catalog's) records none."""
    return [Problem(key, min(len(data), size), "size",
                    f"size: the object holds {len(data)} bytes but the catalog row says {size}")
            for key, data, size in ((row.index_key, index, row.index_size_bytes),
                                    (row.timeindex_key, timeindex, row.timeindex_size_bytes))
            if data is not None and size is not None and len(data) != size]


def _batch_index_problems(row: SegmentRow, timeindex: bytes | None, headers: BatchHeaders,
                          store: Store, min_timestamp: int) -> list[Problem]:
    """The row's `.batchindex` against the one its log's batches and its `.timeindex` make
    (`engine.index.batch_index.batch_index_bytes`): missing, of another size than the row says, not made at all
    (it does not pay), or other bytes. A row without one (null) has none to check."""
    if row.batchindex_size_bytes is None:
        return []
    key = batch_index_key(row.timeindex_key)
    data = read_if_present(key, store)
    if data is None:
        return [Problem(key, None, "batchindex", "missing: the catalog row's .batchindex object does not exist")]
    wanted = batch_index_bytes(len(headers), timeindex or b"", row.base_offset, lambda: headers,
                               min_timestamp=min_timestamp)
    if wanted is None:
        return [Problem(key, None, "batchindex", "batchindex: the catalog row has one, but its log and .timeindex "
                                                 "make none (it does not pay)")]
    problems = []
    if len(data) != row.batchindex_size_bytes:
        problems.append(Problem(key, min(len(data), row.batchindex_size_bytes), "batchindex",
                                f"size: the object holds {len(data)} bytes but the catalog row says "
                                f"{row.batchindex_size_bytes}"))
    if data != wanted:
        common = min(len(data), len(wanted))
        differs = np.flatnonzero(np.frombuffer(data, np.uint8, common) != np.frombuffer(wanted, np.uint8, common))
        problems.append(Problem(key, int(differs[0]) if differs.size else common, "batchindex",
                                f"batchindex: the object is not the one its log and .timeindex make ({len(wanted)} "
                                "bytes)"))
    return problems


def check_segment(row: SegmentRow, store: Store, keep_data: bool = False, *,
                  min_timestamp: int) -> SegmentCheck:
    """Verify one catalogued segment: its `.log`, its row's facts and its sidecars; `min_timestamp` is
    the topic's (`engine.log.topic_config.min_timestamp`)."""
    data = read_if_present(row.log_key, store)
    if data is None:
        return SegmentCheck(row, None, 0, [Problem(row.log_key, None, "missing",
                                                   "missing: the catalog row's .log object does not exist")])
    check = SegmentCheck(row, len(data), 0, data=data if keep_data else None)
    if len(data) != row.size_bytes:
        check.problems.append(Problem(row.log_key, min(len(data), row.size_bytes), "size",
                                      f"size: the object holds {len(data)} bytes but the catalog row says "
                                      f"{row.size_bytes}"))
    prefix = valid_prefix(data, row.base_offset, row.log_key)
    check.valid_bytes, check.prefix_headers = prefix.valid_bytes, prefix.headers
    check.problems += prefix.problems
    whole = prefix.valid_bytes == len(data)
    check.problems.sort(key=lambda p: -1 if p.position is None else p.position)
    check.summary = summarize_segment(data if whole else data[:prefix.valid_bytes], row.base_offset, row.log_key,
                                      min_timestamp=min_timestamp)
    if whole:
        facts = _fact_problems(row, check.summary, prefix.headers)
        check.facts_valid = not facts
        index, timeindex = read_if_present(row.index_key, store), read_if_present(row.timeindex_key, store)
        sidecars = check_sidecars(prefix.headers, row.base_offset, index, timeindex, row.log_key,
                                  active=row.state == SegmentState.ACTIVE, min_timestamp=min_timestamp)
        sizes = _sidecar_size_problems(row, index, timeindex)
        batch = _batch_index_problems(row, timeindex, prefix.headers, store, min_timestamp) if sidecars.valid else []
        check.sidecars_valid = sidecars.valid and not sizes and not batch
        check.problems += facts + _sidecar_problems(row, sidecars.problems) + sizes + batch
    else:  # the segment is rewritten from its prefix anyway; only say which sidecars are gone
        check.problems += [Problem(key, None, "sidecar", "missing")
                           for key in (row.index_key, row.timeindex_key) if store.info(key) is None]
    return check


def offset_continuity(rows: list[SegmentRow]) -> tuple[list[OffsetGap], list[Problem]]:
    """Gaps (information) and overlaps (problems) between consecutive segments in offset order."""
    gaps, problems = [], []
    for before, after in zip(rows, rows[1:], strict=False):
        if after.base_offset > before.next_offset:
            gaps.append(OffsetGap(before.segment_id, after.segment_id, before.next_offset, after.base_offset))
        elif after.base_offset < before.next_offset:
            problems.append(Problem(after.log_key, None, "overlap",
                                    f"overlap: segment {after.segment_id} starts at offset {after.base_offset}, "
                                    f"below the previous segment {before.segment_id}'s next offset "
                                    f"{before.next_offset}"))
    return gaps, problems


def verify_partition(catalog: Catalog, tp: TopicPartition, config: TopicConfig | None = None) -> PartitionCheck:
    """Verify every live segment of `tp` (with its topic's `config`) and the offset order across them, reading
    them through the catalog's store (which reaches the objects its rows name)."""
    rows = catalog.live_segments(tp.topic, tp.partition)
    gaps, problems = offset_continuity(rows)
    floor = min_timestamp(config or TopicConfig())
    return PartitionCheck(tp.topic, tp.partition, [check_segment(row, catalog.store, min_timestamp=floor)
                                                   for row in rows],
                          gaps, problems)
