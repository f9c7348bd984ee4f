"""read_committed reads (`engine.ops.read`) and the `.txnindex` of an export, against a literal model of Kafka.

Logs are generated batch by batch: non-transactional and idempotent data, two or three transactional
producers whose transactions interleave and span segments, committed and aborted, empty transactions (a
marker alone), and sometimes one transaction left open at the end. The truth is the model below, written
from Kafka's code, not from klake's: the broker's aborted-transaction list and last stable offset
(`ProducerStateManager`, `ProducerAppendInfo.appendEndTxnMarker`: a marker without data completes
nothing), and the consumer's skipping (`CompletedFetch.nextFetchedRecord`: aborted producers are added as
batches pass their transaction's first offset, removed at their ABORT marker; control batches never
returned; nothing at or past the last stable offset is fetched).
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, replace

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from engine.catalog.changes import CatalogStateError
from engine.catalog.schema import CATALOG_SCHEMA, PARTITION_COLUMNS, TXN_COLUMNS, rows_to_table
from engine.format.builder import CONTROL_ABORT, CONTROL_COMMIT, encode_batch
from engine.log.topic_config import TopicConfig
from engine.ops import read as range_read
from engine.ops.catalog_table import TABLE_CONFIGURATION, Catalog
from engine.ops.export import ExportRange
from engine.ops.importer import import_log_dir
from engine.ops.recover import verify_partition
from kernel.names import TopicPartition
from layouts.store import StorageOptions, list_objects, read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import swap
from tests.codecs_for_tests import control_record
from tests.conftest import Backend
from tests.single_partition import export_log_dir

TOPIC = "txn"


@dataclass(frozen=True)
class Gen:
    """One generated batch: offsets, producer, kind ("data", "txn", "marker") and the marker's type."""

    base: int
    last: int
    pid: int
    kind: str
    control_type: int | None
    blob: bytes


def generate(rnd: random.Random) -> tuple[list[list[Gen]], bool]:
    """Segments of batches; whether a transaction was left open."""
    offset, batches, open_txn = rnd.randint(0, 30), [], set()
    producers = [100, 101, 102][:rnd.randint(2, 3)]
    for _ in range(rnd.randint(20, 60)):
        kind = rnd.choice(["data", "data", "txn", "txn", "txn", "marker"])
        if kind == "marker":
            pid = rnd.choice(sorted(open_txn) if open_txn and rnd.random() < 0.85 else producers)
            open_txn.discard(pid)
            control_type = rnd.choice([CONTROL_ABORT, CONTROL_COMMIT])
            key, value = control_record(control_type)
            blob = encode_batch([key], [value], [1000 + offset], base_offset=offset, producer_id=pid,
                                producer_epoch=0, transactional=True, control=True)
            batches.append(Gen(offset, offset, pid, kind, control_type, blob))
            offset += 1 + rnd.choice([0, 0, 3])
            continue
        n = rnd.randint(1, 4)
        pid = rnd.choice(producers) if kind == "txn" else rnd.choice([-1, 7])
        if kind == "txn":
            open_txn.add(pid)
        blob = encode_batch([b"k%d" % (offset + i) for i in range(n)], [b"v%d" % (offset + i) for i in range(n)],
                            [1000 + offset + i for i in range(n)], base_offset=offset, producer_id=pid,
                            producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                            transactional=kind == "txn")
        batches.append(Gen(offset, offset + n - 1, pid, kind, None, blob))
        offset += n
    left_open = bool(open_txn) and rnd.random() < 0.5
    for pid in sorted(open_txn) if not left_open else sorted(open_txn)[1:]:
        key, value = control_record(rnd.choice([CONTROL_ABORT, CONTROL_COMMIT]))
        blob = encode_batch([key], [value], [1000 + offset], base_offset=offset, producer_id=pid,
                            producer_epoch=0, transactional=True, control=True)
        control_type = struct.unpack(">hh", key)[1]
        batches.append(Gen(offset, offset, pid, "marker", control_type, blob))
        offset += 1
    cuts = sorted(rnd.sample(range(1, len(batches)), rnd.randint(1, 4)))
    segments = [batches[a:b] for a, b in zip([0, *cuts], [*cuts, len(batches)], strict=True)]
    return segments, left_open


def kafka_model(batches: list[Gen]) -> tuple[list[tuple[int, int, int, int]], int]:
    """The broker's AbortedTxn entries (producer, first, last, last stable offset) and the partition's last
    stable offset, from `ProducerStateManager`'s rules."""
    ongoing: dict[int, int] = {}  # producer -> first offset of its ongoing transaction
    entries = []
    for b in batches:
        if b.kind == "txn":
            ongoing.setdefault(b.pid, b.base)
        elif b.kind == "marker" and b.pid in ongoing:
            first = ongoing.pop(b.pid)
            if b.control_type == CONTROL_ABORT:
                lso = min(ongoing.values(), default=b.last + 1)
                entries.append((b.pid, first, b.last, lso))
    return entries, min(ongoing.values(), default=batches[-1].last + 1)


def stable_prefix_end(batches: list[Gen]) -> int:
    """Where a read_committed export ends: the greatest offset <= the last stable offset below which every
    transaction started has its marker (so the exported log holds no open transaction)."""
    ongoing: dict[int, int] = {}
    spans = []  # (first offset, marker offset) of every transaction, open ones to infinity
    for b in batches:
        if b.kind == "txn":
            ongoing.setdefault(b.pid, b.base)
        elif b.kind == "marker" and b.pid in ongoing:
            spans.append((ongoing.pop(b.pid), b.last))
    spans += [(first, float("inf")) for first in ongoing.values()]
    cut = kafka_model(batches)[1]
    while straddling := [first for first, end in spans if first < cut <= end]:
        cut = min(straddling)
    return cut


def consumer_model(batches: list[Gen]) -> list[int]:
    """The offsets a read_committed consumer returns from the first offset on."""
    entries, lso = kafka_model(batches)
    pending = sorted((first, pid) for pid, first, _, _ in entries)
    aborted_producers: set[int] = set()
    out = []
    for b in batches:
        if b.base >= lso:
            break
        while pending and pending[0][0] <= b.last:
            aborted_producers.add(pending.pop(0)[1])
        if b.kind == "marker":
            if b.control_type == CONTROL_ABORT:
                aborted_producers.discard(b.pid)
            continue
        if b.kind == "txn" and b.pid in aborted_producers:
            continue
        out += range(b.base, b.last + 1)
    return out


def build(backend, segments: list[list[Gen]], name: str, partitions: int = 1) -> Catalog:
    for partition in range(partitions):
        for batches in segments:
            backend.store().write(backend.uri(name, f"{TOPIC}-{partition}", f"{batches[0].base:020d}.log"),
                                  b"".join(b.blob for b in batches))
    catalog = Catalog.create(Store(backend.uri(f"{name}-root", "_catalog"), backend.options))
    assert not import_log_dir(backend.store(name), backend.store(f"{name}-root"), catalog).failed
    return catalog


def read_offsets(catalog: Catalog, backend, isolation: range_read.IsolationLevel, split_bytes: int = 1 << 30,
                 **bounds) -> list[int]:
    rng = range_read.ReadRange(**{"floor": 0, **bounds})
    plan = range_read.plan_read(catalog, TOPIC, rng, backend.store(), None, split_bytes, isolation=isolation)
    batches = [b for item in plan.items for b in range_read.read_item(item, backend.store())]
    return pa.Table.from_batches(batches, range_read.KAFKA_ARROW_SCHEMA).column("offset").to_pylist()


@pytest.mark.parametrize("seed", range(6))
def test_read_committed_returns_what_a_read_committed_consumer_fetches(tmp_path, seed: int) -> None:
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    rnd = random.Random(seed)
    segments, left_open = generate(rnd)
    batches = [b for s in segments for b in s]
    catalog = build(backend, segments, "src")
    every = [o for b in batches if b.kind != "marker" for o in range(b.base, b.last + 1)]
    committed = consumer_model(batches)
    assert read_offsets(catalog, backend, range_read.IsolationLevel.READ_UNCOMMITTED) == every
    assert read_offsets(catalog, backend, range_read.IsolationLevel.READ_COMMITTED) == committed
    assert read_offsets(catalog, backend, range_read.IsolationLevel.READ_COMMITTED, split_bytes=200) == committed
    low, high = batches[len(batches) // 3].base, batches[2 * len(batches) // 3].base
    assert read_offsets(catalog, backend, range_read.IsolationLevel.READ_COMMITTED, from_offset=low,
                        to_offset=high) == [o for o in committed if low <= o < high]

    # the export's .txnindex: the broker's entries, each in the segment holding its marker
    tp = TopicPartition(TOPIC, 0)
    export_log_dir(catalog, backend.uri("src-root"), {tp: TopicConfig()}, backend.uri("out"),
                   options=backend.options)
    entries, _ = kafka_model(batches)
    expected = {}
    for pid, first, last, lso in entries:
        holder = next(s[0].base for s in segments if s[0].base <= last <= s[-1].last)
        expected.setdefault(holder, b"")
        expected[holder] += struct.pack(">hqqqq", 0, pid, first, last, lso)
    found = {int(info.name.split(".")[0]): read_bytes(info.uri, backend.options)
             for info in list_objects(backend.uri("out", f"{TOPIC}-0"), backend.options)
             if info.name.endswith(".txnindex")}
    assert found == expected

    # a read_committed export ends where no transaction is open: its own last stable offset is its end
    report = export_log_dir(catalog, backend.uri("src-root"), {tp: TopicConfig()}, backend.uri("out-rc"),
                            ExportRange(isolation=range_read.IsolationLevel.READ_COMMITTED), options=backend.options)
    end = stable_prefix_end(batches)
    assert report.partitions[0].log_end_offset == (end if left_open else batches[-1].last + 1)
    kept = [b for b in batches if b.last < end]
    assert kafka_model(kept)[1] == kept[-1].last + 1


def test_the_seeds_hold_open_transactions_and_aborted_ones_across_segments() -> None:
    """What the test above is about is in its data: some logs end inside a transaction, and aborted
    transactions start in one segment and end in another."""
    logs = [generate(random.Random(seed)) for seed in range(6)]
    assert sum(left_open for _, left_open in logs) >= 2
    spanning = 0
    for segments, _ in logs:
        entries, _ = kafka_model([b for s in segments for b in s])
        firsts = {b.base: i for i, s in enumerate(segments) for b in s}
        lasts = {b.last: i for i, s in enumerate(segments) for b in s}
        spanning += sum(firsts[first] != lasts[last] for _, first, last, _ in entries)
    assert spanning >= 2


# --- what planning reads: only the segments that hold transactional or control batches ---------------


def batch(offset: int, n: int, pid: int, kind: str, control_type: int | None = None) -> Gen:
    """One batch of `kind` ("data": non-transactional, idempotent if `pid` >= 0; "txn"; "marker")."""
    if kind == "marker":
        key, value = control_record(control_type)
        blob = encode_batch([key], [value], [1000 + offset], base_offset=offset, producer_id=pid,
                            producer_epoch=0, transactional=True, control=True)
        return Gen(offset, offset, pid, kind, control_type, blob)
    blob = encode_batch([b"k%d" % (offset + i) for i in range(n)], [b"v%d" % (offset + i) for i in range(n)],
                        [1000 + offset + i for i in range(n)], base_offset=offset, producer_id=pid,
                        producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                        transactional=kind == "txn")
    return Gen(offset, offset + n - 1, pid, kind, None, blob)


DATA_ONLY = [[batch(0, 5, -1, "data"), batch(5, 5, 7, "data")], [batch(10, 6, -1, "data")],
             [batch(16, 4, 7, "data"), batch(20, 5, -1, "data")]]
"""Segments without a transaction (plain and idempotent producers)."""
MIXED = [
    [batch(0, 5, -1, "data"), batch(5, 5, 7, "data")],
    [batch(10, 3, -1, "data"), batch(13, 3, 100, "txn"), batch(16, 2, 101, "txn"),
     batch(18, 1, 100, "marker", CONTROL_ABORT), batch(19, 1, -1, "data")],
    [batch(20, 5, -1, "data"), batch(25, 5, 7, "data")],  # inside 101's open transaction, holding none of it
    [batch(30, 2, 101, "txn"), batch(32, 1, 101, "marker", CONTROL_ABORT), batch(33, 2, 100, "txn"),
     batch(35, 1, 100, "marker", CONTROL_COMMIT), batch(36, 4, -1, "data")],
    [batch(40, 5, -1, "data")],
    [batch(45, 2, 102, "txn"), batch(47, 3, -1, "data")],  # 102's transaction is left open: the LSO is 45
    [batch(50, 5, -1, "data")],
]
"""Aborted transactions spanning a segment without transactional batches, a committed one, an open one."""


def transaction_span(segment: list[Gen]) -> tuple[int, int] | None:
    """The bytes from a segment's first transactional or control batch to the end of its last one."""
    ends = [sum(len(b.blob) for b in segment[:i + 1]) for i in range(len(segment))]
    marked = [i for i, b in enumerate(segment) if b.kind != "data"]
    return (ends[marked[0]] - len(segment[marked[0]].blob), ends[marked[-1]]) if marked else None


def committed_plan(catalog: Catalog, backend) -> tuple[range_read.ReadPlan, dict[int, list[int]]]:
    """The read_committed plan of the whole topic and the offsets its items return per partition."""
    plan = range_read.plan_read(catalog, TOPIC, range_read.ReadRange(floor=0), backend.store(),
                                isolation=range_read.IsolationLevel.READ_COMMITTED)
    out: dict[int, list[int]] = {}
    for item in plan.items:
        for rows in range_read.read_item(item, backend.store()):
            out.setdefault(item.row.partition, []).extend(rows.column("offset").to_pylist())
    return plan, out


def test_the_rows_count_each_segments_transactional_and_control_batches(tmp_path) -> None:
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    rows = build(backend, MIXED, "src").live_segments(TOPIC, 0)
    assert [r.txn_batch_count for r in rows] == [sum(b.kind != "data" for b in s) for s in MIXED] == [0, 3, 0, 4, 0, 1, 0]
    assert [(r.txn_start_position, r.txn_end_position) if r.txn_batch_count else None for r in rows] == [
        transaction_span(s) for s in MIXED]
    assert {(r.txn_start_position, r.txn_end_position) for r in rows if not r.txn_batch_count} == {(None, None)}
    assert rows[1].txn_start_position > 0 and rows[1].txn_end_position < rows[1].size_bytes


def test_a_read_committed_plan_of_a_topic_without_transactions_reads_no_segment(backend: Backend) -> None:
    catalog = build(backend, DATA_ONLY, "src", partitions=3)
    plan, offsets = committed_plan(catalog, backend)
    assert plan.bytes["read"] == 0 and plan.requests["GET"] == 0
    every = [o for s in DATA_ONLY for b in s for o in range(b.base, b.last + 1)]
    assert offsets == {0: every, 1: every, 2: every} == {p: consumer_model([b for s in DATA_ONLY for b in s])
                                                           for p in range(3)}


def test_a_read_committed_plan_reads_only_the_segments_holding_transactions(backend: Backend) -> None:
    """Of each of three partitions (scanned on threads, their reads all counted), the three segments with
    transactional batches, from their first such batch to the end of their last; the result is the
    consumer's."""
    catalog = build(backend, MIXED, "src", partitions=3)
    plan, offsets = committed_plan(catalog, backend)
    transactional = sum(end - start for s in MIXED if (span := transaction_span(s)) for start, end in [span])
    assert plan.bytes["read"] == 3 * transactional and plan.requests["GET"] == 3 * 3
    truth = consumer_model([b for s in MIXED for b in s])
    assert truth[-1] == 44 and 13 not in truth and 30 not in truth and 33 in truth and 10 in truth
    assert offsets == {0: truth, 1: truth, 2: truth}


def test_rows_of_an_older_catalog_without_the_count_are_scanned_as_before(backend: Backend) -> None:
    """A catalog written before `txn_batch_count` reads it as null: unknown, so every segment is scanned,
    and the aborted transactions are still dropped."""
    rows = build(backend, MIXED, "src").live_segments(TOPIC, 0)
    uri = backend.uri("old-cat")
    old_schema = pa.schema([f for f in CATALOG_SCHEMA if f.name not in TXN_COLUMNS])
    storage = Catalog._storage_options(Store(uri, backend.options))
    DeltaTable.create(uri, schema=old_schema, partition_by=PARTITION_COLUMNS, name="klake_segments",
                      configuration=TABLE_CONFIGURATION, storage_options=storage)
    write_deltalake(uri, rows_to_table(rows).select(old_schema.names).cast(old_schema), mode="append",
                    storage_options=storage)
    old = Catalog.open(Store(uri, backend.options))
    assert {r.txn_batch_count for r in old.live_segments(TOPIC, 0)} == {None}
    plan, offsets = committed_plan(old, backend)
    assert plan.bytes["read"] == sum(r.size_bytes for r in rows)
    truth = consumer_model([b for s in MIXED for b in s])
    assert offsets == {0: truth}

    # its next commit adds the columns: a partition imported now has them, the old rows stay null
    for batches in MIXED:
        backend.store().write(backend.uri("src1", f"{TOPIC}-1", f"{batches[0].base:020d}.log"),
                              b"".join(b.blob for b in batches))
    assert not import_log_dir(backend.store("src1"), backend.store("src-root"), old).failed
    assert set(TXN_COLUMNS) <= {f.name for f in DeltaTable(uri, storage_options=storage).schema().fields}
    assert [r.txn_batch_count for r in old.live_segments(TOPIC, 1)] == [0, 3, 0, 4, 0, 1, 0]
    plan, offsets = committed_plan(old, backend)
    spans = sum(end - start for s in MIXED if (span := transaction_span(s)) for start, end in [span])
    assert plan.bytes["read"] == sum(r.size_bytes for r in rows) + spans
    assert offsets == {0: truth, 1: truth}


def test_verify_names_a_row_whose_transaction_columns_disagree_with_its_log(tmp_path) -> None:
    """A row saying "no transactional batch" over a segment holding some would let aborted records through
    read_committed planning: verify compares the columns with the log, as it does the other facts."""
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    catalog = build(backend, MIXED, "src")
    assert verify_partition(catalog, TopicPartition(TOPIC, 0)).ok
    row = catalog.live_segments(TOPIC, 0)[1]
    swap(catalog, [row.ref], [replace(row, segment_id=row.segment_id + "x", txn_batch_count=0,
                                      txn_start_position=None, txn_end_position=None)])
    problems = verify_partition(catalog, TopicPartition(TOPIC, 0)).all_problems
    assert [(p.object, p.kind) for p in problems] == [(row.log_key, "facts")]
    assert "txn_batch_count 0" in problems[0].what and "says 3" in problems[0].what


@pytest.mark.parametrize(("count", "start", "end"), [(-1, None, None), (2, None, None), (0, 10, 20),
                                                      (1, 20, 20), (1, -1, 20), (1, 0, 10**9)])
def test_a_row_whose_transaction_columns_name_no_span_of_its_log_is_refused(tmp_path, count, start, end) -> None:
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    catalog = build(backend, MIXED, "src")
    row = catalog.live_segments(TOPIC, 0)[1]
    with pytest.raises(CatalogStateError, match="transaction columns"):
        swap(catalog, [row.ref], [replace(row, segment_id=row.segment_id + "x", txn_batch_count=count,
                                          txn_start_position=start, txn_end_position=end)])
