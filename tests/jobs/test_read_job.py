"""`read` (jobs/read.py) and the "klake" data source against a brute-force decode of every live segment.

The store holds a CreateTime topic (3 partitions, several small segments each, out-of-order timestamps,
null keys, headers, a log start offset raised by DeleteRecords inside a segment), a LogAppendTime topic
appended at several times, and broker-written bytes imported as a third topic (a transaction with its
ABORT marker, gzip v1 wrappers, magic-0 records without timestamps). Every read must return exactly
the records the brute force selects, whatever the split size (task-side or driver-side seeks).
"""

from __future__ import annotations

import itertools
import json
import random
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from engine.catalog.schema import SegmentRow, partition_log_start_offset, table_to_rows
from engine.format.batch import scan_batches
from engine.format.records import decode_records
from engine.index.time_index import TimeIndex
from engine.log.topic_config import TopicConfig
from engine.ops import read as range_read
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from jobs import read
from jobs.klake_source import KlakeReader
from jobs.runtime.config import load_config
from jobs.runtime.embedded_s3 import create_bucket
from jobs.runtime.job_runner import main
from kernel.errors import ConfigError
from kernel.names import TopicPartition
from layouts.metering import metered
from layouts.store import StorageOptions, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.single_partition import append_to_partition, delete_records

NOW = 1_790_000_000_000
EVENTS, STAMPED, ARCHIVE = "events", "stamped", "archive"
SMALL = {"segment.bytes": 2500, "index.interval.bytes": 200, "max.message.bytes": 700}
EVENTS_CONFIG = TopicConfig.from_mapping(SMALL)
STAMPED_CONFIG = TopicConfig.from_mapping({**SMALL, "message.timestamp.type": "LogAppendTime"})
LOG_START = {TopicPartition(EVENTS, 1): 70}
IMPORTS = {0: ("txn-abort.records", 200), 1: ("m1-gzip.records", 1000), 2: ("m0-none.records", 1000)}
Record = tuple  # (topic, partition, offset, timestamp ms, timestampType, key, value, headers)


def _records(rnd: random.Random, n: int, start_ms: int) -> pa.Table:
    """Timestamps rising 1.5 s a record with +-15 s of disorder, ~20 % null keys, headers with null values."""
    keys = [None if rnd.random() < 0.2 else b"k%d" % rnd.randrange(50) for _ in range(n)]
    values = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(5, 60))) for _ in range(n)]
    headers = [[{"key": f"h{j}", "value": None if rnd.random() < 0.3 else b"x" * j} for j in range(rnd.randrange(3))]
               for _ in range(n)]
    stamps = [start_ms + 1500 * i + rnd.randrange(-15_000, 15_000) for i in range(n)]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
                     "headers": pa.array(headers, pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                     "timestamp": pa.array(stamps, pa.int64())})


def _build(backend: Backend, kafka_fixtures: Path) -> str:
    """Write the store under `root` (catalog at root/_catalog) and return the root."""
    root = backend.uri("root")
    catalog = Catalog.create(Store(f"{root}/_catalog", backend.options))
    rnd = random.Random(7)
    for partition in range(3):
        for step in range(3):
            append_to_partition(catalog, root, TopicPartition(EVENTS, partition),
                                _records(rnd, 60, NOW - 600_000 + step * 90_000), EVENTS_CONFIG, NOW, backend.options)
    for step in range(3):
        append_to_partition(catalog, root, TopicPartition(STAMPED, 0), _records(rnd, 40, NOW), STAMPED_CONFIG,
                            NOW - 300_000 + step * 100_000, backend.options)
    for tp, offset in LOG_START.items():
        delete_records(catalog, root, tp, offset, NOW, backend.options)
    for partition, (name, base) in IMPORTS.items():
        data = (kafka_fixtures / "kafka-clients" / name).read_bytes()
        backend.put(backend.uri("src", f"{ARCHIVE}-{partition}", f"{base:020d}.log"), data)
    import_log_dir(backend.store("src"), Store(root, backend.options), catalog)
    return root


@pytest.fixture(scope="module", params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, kafka_fixtures: Path
          ) -> tuple[Backend, str, Catalog, list[Record]]:
    """The `backend` fixture's two stores (local dir, moto bucket), built once for this module's tests,
    with their brute-force decode."""
    if request.param == "local":
        backend = Backend("local", str(tmp_path_factory.mktemp("read") / "store"), StorageOptions())
    else:
        request.getfixturevalue("moto_server")
        backend = Backend("s3", create_bucket(f"klake-read-{uuid.uuid4().hex[:8]}"), StorageOptions.from_env())
    root = _build(backend, kafka_fixtures)
    catalog = Catalog.open(Store(f"{root}/_catalog", backend.options))
    return backend, root, catalog, brute_force(catalog, backend)


def brute_force(catalog: Catalog, backend: Backend) -> list[Record]:
    """Every readable record: all batches of every live segment decoded, minus control records and
    records below the partition's log start offset."""
    rows = table_to_rows(catalog.segments())
    out = []
    for row in rows:
        start = partition_log_start_offset(r for r in rows if (r.topic, r.partition) == (row.topic, row.partition))
        data = read_bytes(row.log_key, backend.options)
        headers = scan_batches(data, row.log_key).headers
        table = decode_records(data, headers, row.log_key).to_arrow(headers).to_pylist()
        out += [(row.topic, row.partition, r["offset"], r["timestamp"], r["timestamp_type"], r["key"], r["value"],
                 tuple((h["key"], h["value"]) for h in r["headers"]))
                for r in table if not r["control"] and r["offset"] >= start]
    return sorted(out)


def expected(everything: Iterable[Record], topic: str, from_ms=None, to_ms=None, from_offset=None, to_offset=None,
             partitions=None) -> list[Record]:
    timed = from_ms is not None or to_ms is not None
    return [r for r in everything if r[0] == topic and (partitions is None or r[1] in partitions)
            and (not timed or (r[3] >= (from_ms or 0) and (to_ms is None or r[3] < to_ms)))
            and (from_offset is None or r[2] >= from_offset) and (to_offset is None or r[2] < to_offset)]


def as_records(table: pa.Table) -> list[Record]:
    """Kafka source rows (Arrow) as brute-force tuples: timestamps back to milliseconds."""
    micros = table["timestamp"].cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    columns = {name: table[name].to_pylist() for name in ("topic", "partition", "offset", "timestampType", "key",
                                                           "value", "headers")}
    assert [] not in columns["headers"], "a record without headers has headers null, as in Spark's Kafka source"
    return sorted((columns["topic"][i], columns["partition"][i], columns["offset"][i], micros[i] // 1000,
                   columns["timestampType"][i], columns["key"][i], columns["value"][i],
                   tuple((h["key"], h["value"]) for h in columns["headers"][i] or ())) for i in range(table.num_rows))


def read_locally(catalog: Catalog, backend: Backend, topic: str, split_bytes: int, **bounds) -> list[Record]:
    """`read`'s planner and task code without Spark (the same functions the Spark tasks run)."""
    partitions = bounds.pop("partitions", None)
    rng = range_read.ReadRange(**{"floor": 0, **bounds})
    plan = range_read.plan_read(catalog, topic, rng, backend.store(),
                          None if partitions is None else set(partitions).__contains__, split_bytes)
    batches = [b for item in plan.items for b in range_read.read_item(item, backend.store())]
    return as_records(pa.Table.from_batches(batches, range_read.KAFKA_ARROW_SCHEMA))


def random_bounds(rnd: random.Random, records: list[Record]) -> dict:
    """A range drawn from the data: often an exact record timestamp or offset, sometimes open or empty."""
    stamps = sorted({r[3] for r in records if r[3] >= 0})
    offsets = sorted({r[2] for r in records})

    def pick(values: list[int]) -> int:
        return rnd.choice(values) + rnd.choice([0, 0, 1, -1])

    bounds: dict = {}
    if rnd.random() < 0.7:
        lo, hi = sorted((pick(stamps), pick(stamps)))
        bounds.update(from_ms=lo if rnd.random() < 0.8 else None, to_ms=hi if rnd.random() < 0.8 else None)
    if rnd.random() < 0.5:
        lo, hi = sorted((pick(offsets), pick(offsets)))
        bounds.update(from_offset=max(lo, 0) if rnd.random() < 0.7 else None,
                      to_offset=max(hi, 0) if rnd.random() < 0.7 else None)
    if rnd.random() < 0.3:
        bounds["partitions"] = {rnd.randrange(3)}
    return bounds


def test_reads_match_a_brute_force_decode(store, spark) -> None:
    backend, root, catalog, everything = store
    assert {r[0] for r in everything} == {EVENTS, STAMPED, ARCHIVE}
    assert all(r[2] >= 70 for r in everything if r[:2] == (EVENTS, 1))
    assert {r[4] for r in everything if r[0] == STAMPED} == {1} and {-1, 0} <= {r[4] for r in everything}
    rnd = random.Random(11)
    for n in range(30 if backend.name == "local" else 12):  # the S3 runs test ranged GETs, not more logic
        topic = rnd.choice([EVENTS, EVENTS, STAMPED, ARCHIVE])
        bounds = random_bounds(rnd, [r for r in everything if r[0] == topic])
        split = rnd.choice([300, 1000, range_read.DEFAULT_SPLIT_BYTES])
        want = expected(everything, topic, **bounds)
        assert read_locally(catalog, backend, topic, split, **bounds) == want, (n, topic, bounds, split)
    config = load_config(None, [], root=root)
    frame = read.read_records(spark, config, EVENTS, from_ms=NOW - 500_000, to_ms=NOW - 350_000, partitions=[0, 1])
    assert as_records(frame.toArrow()) == expected(everything, EVENTS, NOW - 500_000, NOW - 350_000, partitions={0, 1})
    assert frame.schema == spark.createDataFrame([], read.KAFKA_SCHEMA).schema


def _sql_time(ms: int, micros: int = 0) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return f"TIMESTAMP'{moment:%Y-%m-%d %H:%M:%S}.{ms % 1000:03d}{micros:03d}'"


def test_cli_job_writes_parquet_and_reports_pruning(store, spark, tmp_path: Path) -> None:
    backend, root, catalog, everything = store
    lo, hi = NOW - 520_000, NOW - 470_000
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    args = ["--root", root, "--topic", EVENTS, "--partition", "0", "--partition", "1", "--from", str(lo),
            "--to", datetime.fromtimestamp(hi / 1000, UTC).isoformat(), "--from-offset", "5", "--output", str(out),
            "--report", str(report_path), "--split-bytes", "1000", "--no-progress"]
    assert main(read.SPEC, args) == 0
    want = expected(everything, EVENTS, lo, hi, from_offset=5, partitions={0, 1})
    assert as_records(pq.read_table(out)) == want
    result = json.loads(report_path.read_text())["results"]["read"]
    live = [r for r in table_to_rows(catalog.segments(topic=EVENTS)) if r.partition in (0, 1)]
    segments = result["segments"]
    assert segments["live"] == len(live) and segments["pruned"] > 0 and segments["read"] + segments["pruned"] == len(live)
    assert segments["split"] > 0 and result["work_items"] > segments["read"]
    assert result["records"] == len(want) == sum(result["records_by_partition"].values())
    assert result["get_requests"] >= segments["read"] and result["bytes_read"] > 0

    if backend.name != "local":
        return  # the JSON writer does not depend on where the segments are
    json_out = tmp_path / "json"
    assert main(read.SPEC, ["--root", root, "--topic", STAMPED, "--to-offset", "50", "--output", str(json_out),
                            "--output-format", "json", "--no-progress"]) == 0
    lines = [json.loads(line) for f in sorted(json_out.glob("part-*.json")) for line in f.read_text().splitlines()]
    assert sorted(r["offset"] for r in lines) == [r[2] for r in expected(everything, STAMPED, to_offset=50)]


def test_a_negative_bound_or_no_topic_is_a_usage_error(store) -> None:
    root = store[1]
    assert main(read.SPEC, ["--root", root, "--topic", EVENTS, "--from", "-5", "--no-progress"]) == 2
    assert main(read.SPEC, ["--root", root, "--from-offset", "3", "--no-progress"]) == 2
    with pytest.raises(SystemExit):
        main(read.SPEC, ["--root", root, "--topic", EVENTS, "--to-offset", "-1"])


def test_read_committed_leaves_out_an_aborted_transaction_and_a_bad_level_is_refused(store, tmp_path: Path) -> None:
    """archive-0 is kafka-clients' transaction of producer 42 (offsets 200-202) and its ABORT marker (203)."""
    backend, root = store[0], store[1]
    counts = {}
    for level in ("read_uncommitted", "read_committed"):
        report = tmp_path / f"{level}.json"
        assert main(read.SPEC, ["--root", root, "--topic", ARCHIVE, "--partition", "0", "--isolation-level", level,
                                "--report", str(report), "--no-progress"]) == 0
        result = json.loads(report.read_text())["results"]["read"]
        counts[level] = (result["isolation_level"], result["records"])
    assert counts == {"read_uncommitted": ("read_uncommitted", 3), "read_committed": ("read_committed", 0)}
    with pytest.raises(SystemExit):
        main(read.SPEC, ["--root", root, "--topic", ARCHIVE, "--isolation-level", "committed"])
    with pytest.raises(ConfigError, match="kafka.isolation.level"):
        KlakeReader({"root": root, "topic": ARCHIVE, "kafka.isolation.level": "committed"}, backend.options)


def test_data_source_pushes_filters_down_exactly(store, klake_source) -> None:
    spark = klake_source
    backend, root, catalog, everything = store
    lo, hi = NOW - 420_000, NOW - 380_000

    def source(topic: str, **options: str):  # noqa: ANN202
        return spark.read.format("klake").options(root=root, topic=topic, splitBytes="1000", packBytes="1", includeHeaders="true", **options).load()

    narrow = source(EVENTS).where(f"timestamp > {_sql_time(lo - 1, 500)} AND timestamp < {_sql_time(hi)} "
                                  f"AND partition IN (0, 1) AND offset >= 10 AND topic = '{EVENTS}'")
    assert as_records(narrow.toArrow()) == expected(everything, EVENTS, lo, hi, from_offset=10, partitions={0, 1})
    pruned = range_read.plan_read(catalog, EVENTS, range_read.ReadRange(lo, hi, 10, floor=0), backend.store(), {0, 1}.__contains__, 1000)
    unpruned = range_read.plan_read(catalog, EVENTS, range_read.ReadRange(floor=0), backend.store(), None, 1000)
    assert narrow.rdd.getNumPartitions() == len(pruned.items) < len(unpruned.items)

    cut = NOW  # after every archived timestamp: `timestamp < cut` alone also holds for -1 (no timestamp)
    mixed = source(ARCHIVE).where(f"timestamp < {_sql_time(cut)} AND (offset = 1002 OR key IS NULL)")
    assert as_records(mixed.toArrow()) == [r for r in everything
                                           if r[0] == ARCHIVE and r[3] < cut and (r[2] == 1002 or r[5] is None)]


def _micros(ms: int, extra: int = 0) -> datetime:
    return datetime.fromtimestamp(0, UTC) + timedelta(milliseconds=ms, microseconds=extra)


def test_pushed_filters_become_exact_bounds(store) -> None:
    """The reader without Spark: which filters it keeps, and that partitions() + read() then return
    exactly the rows the filters select (µs literals round to the right millisecond)."""
    backend, root, _, everything = store
    lo, hi = NOW - 450_000, NOW - 420_000

    def reader(topic: str, **options: str) -> KlakeReader:
        return KlakeReader({"root": root, "topic": topic, "splitBytes": "800", "includeHeaders": "true", **options},
                           backend.options)

    def rows(r: KlakeReader) -> list[Record]:
        return as_records(pa.Table.from_batches([b for p in r.partitions() for b in r.read(p)],
                                                range_read.KAFKA_ARROW_SCHEMA))

    kept = [GreaterThan(("timestamp",), _micros(lo - 1, 999)), LessThanOrEqual(("timestamp",), _micros(hi - 1, 1)),
            In(("partition",), (0, 2)), GreaterThanOrEqual(("offset",), 3), LessThan(("offset",), 150),
            EqualTo(("topic",), EVENTS), IsNotNull(("offset",))]
    unkept = [IsNotNull(("key",)), Not(EqualTo(("partition",), 1)), EqualTo(("offset",), "3")]
    events = reader(EVENTS)
    assert events.pushFilters(kept + unkept) == unkept
    assert rows(events) == expected(everything, EVENTS, lo, hi, 3, 150, {0, 2})

    alone = reader(ARCHIVE)  # an upper time bound alone also holds for -1 (no timestamp): Spark applies it
    upper = [LessThan(("timestamp",), _micros(NOW)), EqualTo(("offset",), 1002)]
    assert alone.pushFilters(upper) == upper[:1]
    assert rows(alone) == [r for r in everything if r[0] == ARCHIVE and r[2] == 1002]
    bounded = reader(ARCHIVE, startingTimestamp="0")  # ... unless the read is already bounded in time
    assert bounded.pushFilters(upper) == []
    assert rows(bounded) == expected(everything, ARCHIVE, 0, NOW, 1002, 1003)

    other = reader(EVENTS, startingOffset="20")
    assert other.pushFilters([EqualTo(("topic",), STAMPED)]) == [] and other.partitions() == []


def test_seeks_through_a_brokers_own_indexes(tmp_path: Path, kafka_fixtures: Path) -> None:
    """A broker's `.index`/`.timeindex` (imported in place): ranges starting exactly at, just before and
    just after time-index entries, and at indexed offsets, read what the brute force selects."""
    backend = Backend("local", str(tmp_path / "store"), StorageOptions())
    root = backend.uri("root")
    catalog = Catalog.create(Store(f"{root}/_catalog", backend.options))
    import_log_dir(Store(str(kafka_fixtures / "broker"), backend.options), Store(root, backend.options), catalog)
    topic = "timeindex_test"
    everything = [r for r in brute_force(catalog, backend) if r[0] == topic]
    rows = table_to_rows(catalog.segments(topic=topic))
    entries = [TimeIndex.load(read_bytes(r.timeindex_key), r.base_offset,
                              min_timestamp=0).index for r in rows]
    stamps = [int(t) for index in entries for t in index.timestamps[::60]]
    offsets = [int(o) for index in entries for o in index.offsets[::120]]
    rnd = random.Random(5)
    for n, stamp in enumerate(stamps):
        lo = stamp + rnd.choice([-1, 0, 1])
        hi = lo + rnd.choice([1, 2, 5_000])
        bounds = {"from_ms": lo, "to_ms": hi} if n % 2 else {"from_ms": lo, "to_offset": rnd.choice(offsets)}
        split = rnd.choice([300_000, range_read.DEFAULT_SPLIT_BYTES])  # seek on the driver, or in the task
        assert read_locally(catalog, backend, topic, split, **bounds) == expected(everything, topic, **bounds), bounds
    for offset in offsets:
        bounds = {"from_offset": offset + rnd.choice([-1, 0, 1]), "to_offset": offset + 50}
        split = rnd.choice([300_000, range_read.DEFAULT_SPLIT_BYTES])
        with metered() as meter:
            assert read_locally(catalog, backend, topic, split, **bounds) == expected(everything, topic, **bounds)
        assert meter.bytes["read"] < 64 * 1024, (bounds, meter)  # the indexes and a few batches, not a 1 MiB segment


@pytest.mark.parametrize("seed", range(20))
def test_packs_keep_plan_order_and_share_bytes_evenly_over_whole_waves(seed: int) -> None:
    """`pack_items` against the rule it states: order kept; the count the smallest multiple of `min_packs`
    whose even share is within the target (at most one pack per item, empty packs dropped); every pack
    within one item of its share; a pack's items are those whose middle byte falls in its share."""
    rnd = random.Random(seed)
    row = SegmentRow.__new__(SegmentRow)
    items = [range_read.WorkItem(row, rnd.choice([None, 0, 10]), rnd.randint(11, rnd.choice([50, 5000, 10**6])),
                                 range_read.ReadRange(floor=0)) for _ in range(rnd.randint(0, 60))]
    target, min_packs = rnd.choice([1, 100, 3000, 10**9]), rnd.randint(1, 8)
    packs = range_read.pack_items(items, target, min_packs)
    assert [i for p in packs for i in p] == items and all(packs)
    if not items:
        return
    sizes = [i.end - (i.start or 0) for i in items]
    total = sum(sizes)
    count = next(k for k in range(min_packs, 10**9, min_packs) if total <= k * target or k >= len(items))
    count = min(count, len(items))
    share = total / count
    assert len(packs) <= count
    ends = list(itertools.accumulate(len(p) for p in packs))
    for pack, end in zip(packs, ends, strict=True):
        pack_sizes = sizes[end - len(pack):end]
        assert sum(pack_sizes) <= share + max(pack_sizes) or len(pack) == 1
    middle = 0.0
    slot_of = []
    for size in sizes:
        slot_of.append(min(int((middle + size / 2) * count / total), count - 1))
        middle += size
    assert [len(list(g)) for _, g in itertools.groupby(slot_of)] == [len(p) for p in packs]
