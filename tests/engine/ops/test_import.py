"""`klake import` of the broker fixtures, on a local directory and on moto S3.

Truth is computed independently of klake: offsets, counts and timestamps from the golden dumps
(`*.log.golden.jsonl`, kafka-python and kafka-clients agree on them), batch facts from kafka-python's
own decoder, sizes from the files, batch positions by walking the size fields.
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable
from kafka.record.memory_records import MemoryRecords

from engine.catalog.schema import COLUMNS, table_to_rows
from engine.ops.catalog_table import Catalog
from engine.ops.importer import _PartitionImporter, import_log_dir
from engine.ops.lease import acquire_lease, lease_uri, read_lease
from engine.ops.versions import segment_object_keys
from jobs.cli.main import main as klake
from jobs.runtime.embedded_s3 import FAKE_AWS_ENV
from kernel.names import TopicPartition
from layouts.store import filesystem, list_objects, object_info, read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import offset_bounds
from tests.golden import golden_text

BROKER_PARTITIONS = ("_confluent-command-0", "_confluent-controlcenter-5-1-2-1-actual-group-consumption-rekey-0",
                     "docker-connect-status-0", "timeindex_test-0")
TIMEINDEX_BASES = (0, 7729, 15363, 22964)


@dataclass(frozen=True)
class Expected:
    """A segment's catalog facts, computed without klake."""

    base_offset: int
    last_offset: int
    next_offset: int
    record_count: int
    batch_count: int
    size_bytes: int
    first_batch_timestamp: int
    base_timestamp: int
    largest_timestamp: int
    offset_of_largest_timestamp: int
    timestamp_type: str
    magic: int


def batch_starts(data: bytes) -> list[int]:
    """Byte positions of the batches of a well-framed log: walk `offset int64 | size int32`."""
    starts, pos = [], 0
    while pos + 12 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if pos + 12 + size > len(data):
            break
        starts.append(pos)
        pos += 12 + size
    return starts


def kafka_python_batches(data: bytes) -> list:
    records, batches = MemoryRecords(data), []
    while (batch := records.next_batch()) is not None:
        batches.append(batch)
    return batches


@cache
def expected_segment(log_path: Path) -> Expected:
    golden = [json.loads(line) for line in golden_text(log_path).splitlines()]
    data = log_path.read_bytes()
    batches = kafka_python_batches(data)
    largest = max(r["timestamp"] for r in golden)
    first_carrier = next(b for b in batches if b.max_timestamp == largest)
    (kind,) = {r["timestamp_type"] for r in golden}
    return Expected(
        base_offset=int(log_path.stem), last_offset=max(r["offset"] for r in golden),
        next_offset=max(r["offset"] for r in golden) + 1, record_count=len(golden), batch_count=len(batches),
        size_bytes=len(data), first_batch_timestamp=batches[0].max_timestamp,
        base_timestamp=min(r["timestamp"] for r in golden if r["timestamp"] >= 0), largest_timestamp=largest,
        offset_of_largest_timestamp=first_carrier.base_offset + first_carrier.last_offset_delta,
        timestamp_type=kind, magic=max(r["magic"] for r in golden))


def expected_partition(kafka_fixtures: Path, dir_name: str) -> list[Expected]:
    return [expected_segment(p) for p in sorted((kafka_fixtures / "broker" / dir_name).glob("*.log"))]


def facts(row) -> Expected:
    return Expected(**{f: getattr(row, f) for f in Expected.__dataclass_fields__})


@pytest.fixture
def broker_src(backend, kafka_fixtures) -> str:
    return backend.upload_tree(kafka_fixtures / "broker", backend.uri("src"))


def run_klake(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = klake(list(argv))
    return code, capsys.readouterr().out


def test_import_in_place_registers_every_segment_exactly(backend, broker_src, kafka_fixtures) -> None:
    backend.put(backend.uri("src", "timeindex_test-0.0123456789abcdef0123456789abcdef-delete",
                            "00000000000000000000.log"), b"not imported")
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    report = import_log_dir(Store(broker_src, backend.options), backend.store("root"), catalog)
    assert not report.failed and report.rows_added == 7 and report.commit_version == 1
    assert report.skipped_dirs == {"timeindex_test-0.0123456789abcdef0123456789abcdef-delete":
                                   "scheduled for deletion, moving or stray"}
    for dir_name in BROKER_PARTITIONS:
        topic, partition = dir_name.rsplit("-", 1)
        rows = catalog.live_segments(topic, int(partition))
        assert [facts(r) for r in rows] == expected_partition(kafka_fixtures, dir_name)
        assert [r.log_key for r in rows] == [backend.uri("src", dir_name, f"{r.base_offset:020d}.log") for r in rows]
        assert {r.layout for r in rows} == {"kafka"}
        assert [r.state for r in rows] == ["ROLLED"] * (len(rows) - 1) + ["ACTIVE"]
    # the broker's own indexes are valid, and its small batches get a `.batchindex`, which is never written
    # into a broker's dir: the sidecars are copied under root, byte for byte, with it beside them; the other
    # partitions had none: rebuilt under root
    ti_rows = catalog.live_segments("timeindex_test", 0)
    for row, base in zip(ti_rows, TIMEINDEX_BASES, strict=True):
        assert row.index_key.startswith(backend.uri("root", "timeindex_test-0") + "/") and row.batchindex_size_bytes
        for key, suffix in ((row.index_key, "index"), (row.timeindex_key, "timeindex")):
            assert read_bytes(key, backend.options) == (
                kafka_fixtures / "broker" / "timeindex_test-0" / f"{base:020d}.{suffix}").read_bytes()
    rebuilt = [s for p in report.partitions for s in p.segments if s.sidecars == "rebuilt"]
    assert len(rebuilt) == 3 and report.sidecars_rebuilt == 3
    assert all(any(p.endswith(".index: missing") for p in s.sidecar_problems) for s in rebuilt)
    command = catalog.live_segments("_confluent-command", 0)[0]
    assert command.index_key.startswith(backend.uri("root", "_confluent-command-0") + "/")
    assert object_info(command.timeindex_key, backend.options) is not None

    rerun = import_log_dir(Store(broker_src, backend.options), backend.store("root"), catalog)
    assert (rerun.rows_added, rerun.already_registered, rerun.commit_version) == (0, 7, None)
    assert catalog.version() == 1


def test_other_engines_read_the_same_rows(backend, broker_src, tmp_path) -> None:
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    import_log_dir(Store(broker_src, backend.options), backend.store("root"), catalog)
    catalog.create_checkpoint()
    home = catalog.root + "/"  # keys are stored relative to the catalog's directory (issue 26), absolute outside it
    ours = sorted(({**r, **{k: r[k].removeprefix(home) for k in ("log_key", "index_key", "timeindex_key")}}
                   for r in catalog.all_rows().to_pylist()), key=lambda r: (r["topic"], r["base_offset"]))
    assert any(r["log_key"].startswith("src/") for r in ours)
    delta_options = backend.options.delta_storage_options() if backend.name == "s3" else None

    polars_rows = pl.read_delta(catalog.uri, storage_options=delta_options).select(COLUMNS).to_dicts()
    assert sorted(polars_rows, key=lambda r: (r["topic"], r["base_offset"])) == ours

    # DuckDB's own Parquet reader over the files the Delta log lists, partition column from the
    # hive-style path, on S3 too (its `delta_scan` reads local catalogs: test_catalog_engines.py)
    fs, _ = filesystem(catalog.uri, backend.options)
    local_files = []
    for uri in DeltaTable(catalog.uri, storage_options=delta_options).file_uris():
        relative = uri[len(catalog.uri) + 1:]
        target = tmp_path / "duck" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(read_bytes(uri, backend.options))
        local_files.append(str(target))
    query = f"SELECT {', '.join(COLUMNS)} FROM read_parquet(?, hive_partitioning = true) ORDER BY topic, base_offset"
    duck = duckdb.connect().execute(query, [local_files])
    names = [d[0] for d in duck.description]
    assert [dict(zip(names, row, strict=True)) for row in duck.fetchall()] == ours


def test_import_with_copy_writes_the_object_layout(backend, broker_src, kafka_fixtures) -> None:
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    report = import_log_dir(Store(broker_src, backend.options), backend.store("root"), catalog, copy=True)
    assert not report.failed and report.rows_added == 7
    rows = table_to_rows(catalog.segments())
    for row in rows:
        dir_name = f"{row.topic}-{row.partition}"
        source = kafka_fixtures / "broker" / dir_name / f"{row.base_offset:020d}.log"
        assert row.layout == "object"
        assert row.log_key == backend.uri("root", dir_name, f"{row.base_offset:020d}-{row.segment_id}.log")
        assert read_bytes(row.log_key, backend.options) == source.read_bytes()
        assert facts(row) == expected_segment(source)
        if row.topic == "timeindex_test":
            assert read_bytes(row.index_key, backend.options) == source.with_suffix(".index").read_bytes()
            assert read_bytes(row.timeindex_key, backend.options) == source.with_suffix(".timeindex").read_bytes()
    objects = list_objects(backend.uri("root"), backend.options)
    # Kafka's three files of each segment, and a `.batchindex` where it pays (these fixtures' batches are
    # smaller than the index interval)
    written = sorted(o.uri for o in objects if "/_leases/" not in o.uri)
    assert written == sorted(key for row in rows for key in segment_object_keys(row))
    assert len(written) - 21 == sum(row.batchindex_size_bytes is not None for row in rows) > 0
    again = import_log_dir(Store(broker_src, backend.options), backend.store("root"), catalog, copy=True)
    assert (again.rows_added, again.already_registered) == (0, 7)
    assert list_objects(backend.uri("root"), backend.options) == objects


def _damage(data: bytes, kind: str) -> tuple[bytes, int]:
    """Corrupt the log: flip a byte inside batch 100 (CRC) or cut the last batch short; return the bad batch."""
    starts = batch_starts(data)
    if kind == "crc":
        bad = starts[100]
        flipped = bytearray(data)
        flipped[bad + 70] ^= 0xFF
        return bytes(flipped), bad
    return data[:starts[-1] + 30], starts[-1]


@pytest.mark.parametrize("copy", [False, True], ids=["in-place", "copy"])
@pytest.mark.parametrize("damage", ["crc", "truncated"])
def test_a_corrupt_segment_stops_its_partition_and_keeps_what_precedes(backend, kafka_fixtures, capsys, tmp_path,
                                                                       damage: str, copy: bool) -> None:
    part_dir = kafka_fixtures / "broker" / "timeindex_test-0"
    for base in TIMEINDEX_BASES[:3]:
        for suffix in (".log", ".index", ".timeindex"):
            backend.put(backend.uri("src", "timeindex_test-0", f"{base:020d}{suffix}"),
                        (part_dir / f"{base:020d}{suffix}").read_bytes())
    backend.upload_tree(kafka_fixtures / "broker" / "_confluent-command-0", backend.uri("src", "_confluent-command-0"))
    good = (part_dir / "00000000000000007729.log").read_bytes()
    damaged, bad_batch = _damage(good, damage)
    backend.put(backend.uri("src", "timeindex_test-0", "00000000000000007729.log"), damaged)

    argv = ["import", backend.uri("src"), "--root", backend.uri("root"), "--catalog", backend.uri("catalog"),
            "--report", str(tmp_path / "import.json")]
    code, out = run_klake(capsys, *argv, *(["--copy"] if copy else []))
    job_report = json.loads((tmp_path / "import.json").read_text())
    report = job_report["results"]["import"]
    assert code == 1 and report["failed"] and job_report["status"] == "failed"
    assert "00000000000000007729.log" in out and "timeindex_test-0" in job_report["failures"][0]["partition"]
    part = next(p for p in report["partitions"] if p["topic"] == "timeindex_test")
    assert "00000000000000007729.log" in part["error"] and f"byte {bad_batch}" in part["error"]
    assert [(s["base_offset"], s["status"]) for s in part["segments"]] == [(0, "registered"), (7729, "corrupt")]
    assert part["segments"][1]["byte_position"] == bad_batch

    catalog = Catalog.open(Store(backend.uri("catalog"), backend.options))
    rows = catalog.live_segments("timeindex_test", 0)
    assert facts(rows[0]) == expected_segment(part_dir / "00000000000000000000.log")
    if copy:
        prefix = good[:bad_batch]
        assert [r.base_offset for r in rows] == [0, 7729]
        assert rows[1].size_bytes == bad_batch == part["segments"][1]["kept_bytes"]
        assert read_bytes(rows[1].log_key, backend.options) == prefix
        assert rows[1].record_count == sum(len(list(b)) for b in kafka_python_batches(prefix))
        assert rows[1].next_offset == kafka_python_batches(prefix)[-1].next_offset
    else:
        assert [r.base_offset for r in rows] == [0]
    assert len(catalog.live_segments("_confluent-command", 0)) == 1


def test_missing_and_invalid_indexes_are_rebuilt_without_touching_the_source(backend, kafka_fixtures) -> None:
    part_dir = kafka_fixtures / "broker" / "timeindex_test-0"
    src = backend.upload_tree(part_dir, backend.uri("src", "timeindex_test-0"))
    fs, path = filesystem(src, backend.options)
    fs.rm_file(f"{path}/00000000000000007729.index")
    untrimmed = (part_dir / "00000000000000015363.timeindex").read_bytes() + b"\x00" * 12 * 500
    backend.put(f"{src}/00000000000000015363.timeindex", untrimmed)
    index0 = bytearray((part_dir / "00000000000000000000.index").read_bytes())
    index0[8 * 10 + 4:8 * 10 + 8] = struct.pack(">i", 12345)  # entry 10 points inside a batch
    backend.put(f"{src}/00000000000000000000.index", bytes(index0))
    before = {o.uri: read_bytes(o.uri, backend.options) for o in list_objects(src, backend.options)}

    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    report = import_log_dir(backend.store("src"), backend.store("root"), catalog)
    outcomes = {s.base_offset: s for s in report.partitions[0].segments}
    assert {b: outcomes[b].sidecars for b in TIMEINDEX_BASES} == {
        0: "rebuilt", 7729: "rebuilt", 15363: "rebuilt", 22964: "valid"}
    assert any("00000000000000007729.index: missing" in p for p in outcomes[7729].sidecar_problems)
    assert any("00000000000000015363.timeindex" in p for p in outcomes[15363].sidecar_problems)
    assert any("00000000000000000000.index: byte 80" in p for p in outcomes[0].sidecar_problems)
    assert {o.uri: read_bytes(o.uri, backend.options) for o in list_objects(src, backend.options)} == before

    for row in catalog.live_segments("timeindex_test", 0):
        log = (part_dir / f"{row.base_offset:020d}.log").read_bytes()
        starts = batch_starts(log)
        last_offsets = {start: b.base_offset + b.last_offset_delta
                        for start, b in zip(starts, kafka_python_batches(log), strict=True)}
        index = read_bytes(row.index_key, backend.options)
        entries = [struct.unpack_from(">ii", index, i) for i in range(0, len(index), 8)]
        assert entries and all(pos in last_offsets and row.base_offset + rel == last_offsets[pos]
                               for rel, pos in entries)
        timeindex = read_bytes(row.timeindex_key, backend.options)
        last_ts, last_rel = struct.unpack_from(">qi", timeindex, len(timeindex) - 12)
        assert (last_ts, row.base_offset + last_rel) == (row.largest_timestamp, row.offset_of_largest_timestamp)
        # rebuilt ones, and the valid one that a `.batchindex` joins (never in the broker's dir), are under root
        assert row.index_key.startswith(backend.uri("root", "timeindex_test-0") + "/")


def test_reimport_after_the_broker_rolled_adds_the_new_segment(backend, kafka_fixtures) -> None:
    part_dir = kafka_fixtures / "broker" / "timeindex_test-0"
    for base in TIMEINDEX_BASES[:2]:
        backend.put(backend.uri("src", "timeindex_test-0", f"{base:020d}.log"),
                    (part_dir / f"{base:020d}.log").read_bytes())
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    import_log_dir(backend.store("src"), backend.store("root"), catalog)
    assert [r.state for r in catalog.live_segments("timeindex_test", 0)] == ["ROLLED", "ACTIVE"]
    backend.put(backend.uri("src", "timeindex_test-0", "00000000000000015363.log"),
                (part_dir / "00000000000000015363.log").read_bytes())
    report = import_log_dir(backend.store("src"), backend.store("root"), catalog)
    assert (report.rows_added, report.already_registered) == (1, 2)
    rows = catalog.live_segments("timeindex_test", 0)
    assert [(r.base_offset, r.state) for r in rows] == [(0, "ROLLED"), (7729, "ROLLED"), (15363, "ACTIVE")]
    assert offset_bounds(catalog, "timeindex_test", 0).log_end_offset == 22964


def test_two_concurrent_imports_register_each_segment_once(backend, broker_src, kafka_fixtures) -> None:
    catalog_uri = backend.uri("catalog")
    Catalog.create(Store(catalog_uri, backend.options))
    barrier = threading.Barrier(2)
    reports = [None, None]

    def run(i: int) -> None:
        catalog = Catalog.open(Store(catalog_uri, backend.options))
        barrier.wait()
        reports[i] = import_log_dir(Store(broker_src, backend.options), backend.store("root"), catalog, job_id=f"import-{i}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for dir_name in BROKER_PARTITIONS:
        topic, partition = dir_name.rsplit("-", 1)
        outcomes = [next(p for p in r.partitions if (p.topic, p.partition) == (topic, int(partition)))
                    for r in reports]
        registered = [o for o in outcomes if o.segments and o.segments[0].status == "registered"]
        assert len(registered) == 1, outcomes
        loser = outcomes[1 - outcomes.index(registered[0])]
        assert ("is leased by job 'import-" in (loser.error or "")
                or {s.status for s in loser.segments} == {"already-registered"}), loser
    rows = table_to_rows(Catalog.open(Store(catalog_uri, backend.options)).all_rows())
    assert len(rows) == 7 == len({(r.topic, r.partition, r.base_offset) for r in rows})
    assert list_objects(backend.uri("root", "_leases"), backend.options) == []


def test_segments_command_lists_live_segments_pruned_by_time(backend, broker_src, kafka_fixtures, capsys) -> None:
    code, out = run_klake(capsys, "import", broker_src, "--root", backend.uri("root"),
                          "--catalog", backend.uri("catalog"))
    assert code == 0 and "rows added: 7" in out
    assert FAKE_AWS_ENV["AWS_SECRET_ACCESS_KEY"] not in out
    golden = {}
    for base in TIMEINDEX_BASES:
        lines = golden_text(kafka_fixtures / "broker" / "timeindex_test-0" / f"{base:020d}.log")
        golden[base] = [json.loads(line)["timestamp"] for line in lines.splitlines()]
    frm, to = 1753819150000, 1753819200000
    code, out = run_klake(capsys, "segments", "--catalog", backend.uri("catalog"), "--topic", "timeindex_test",
                          "--from", str(frm), "--to", str(to), "--json")
    listed = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [s["base_offset"] for s in listed] == [b for b in TIMEINDEX_BASES if any(frm <= t <= to for t in golden[b])]
    assert set(listed[0]) == {"topic", "partition", "base_offset", "next_offset", "record_count", "size_bytes",
                              "base_timestamp", "largest_timestamp", "state", "log_key"}
    # the same range in ISO-8601: UTC when no zone is named, or any zone
    code, out = run_klake(capsys, "segments", "--catalog", backend.uri("catalog"), "--topic", "timeindex_test",
                          "--from", "2025-07-29T19:59:10", "--to", "2025-07-29T21:00:00+01:00", "--json")
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == listed
    capsys.readouterr()
    assert klake(["segments", "--catalog", backend.uri("catalog"), "--to", "1969-12-31T00:00:00Z"]) == 2
    assert "times before 1970 need klake.timestamps.allow.negative" in capsys.readouterr().err
    code, out = run_klake(capsys, "segments", "--catalog", backend.uri("catalog"), "--keys")
    lines = out.splitlines()
    assert lines[0].split() == ["topic", "partition", "base_offset", "next_offset", "record_count", "size_bytes",
                                "base_timestamp", "largest_timestamp", "state", "log_key"]
    assert len(lines) == 8 and any(line.startswith("docker-connect-status ") for line in lines)
    first = next(line.split() for line in lines if line.startswith("timeindex_test "))
    assert (min(golden[0]), max(golden[0])) == (1753819116820, 1753819153914)
    assert first[6:8] == ["2025-07-29T19:58:36.820Z", "2025-07-29T19:59:13.914Z"]  # the table prints ISO-8601 UTC


def test_an_empty_active_segment_with_preallocated_indexes_is_registered(backend, kafka_fixtures) -> None:
    log = (kafka_fixtures / "broker" / "docker-connect-status-0" / "00000000000000000000.log").read_bytes()
    backend.put(backend.uri("src", "status-0", "00000000000000000000.log"), log)
    backend.put(backend.uri("src", "status-0", "00000000000000000135.log"), b"")
    backend.put(backend.uri("src", "status-0", "00000000000000000135.index"), b"\x00" * 8 * 1000)
    backend.put(backend.uri("src", "status-0", "00000000000000000135.timeindex"), b"\x00" * 12 * 1000)
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    report = import_log_dir(backend.store("src"), backend.store("root"), catalog)
    empty = report.partitions[0].segments[1]
    assert (empty.status, empty.sidecars) == ("registered", "rebuilt")
    assert any("zero bytes" in p for p in empty.sidecar_problems)
    rows = catalog.live_segments("status", 0)
    assert [(r.base_offset, r.next_offset, r.record_count, r.state) for r in rows] == [
        (0, 135, 135, "ROLLED"), (135, 135, 0, "ACTIVE")]
    assert (rows[1].size_bytes, rows[1].largest_timestamp, rows[1].base_timestamp) == (0, -1, -1)
    assert read_bytes(rows[1].index_key, backend.options) == b""
    assert read_bytes(rows[1].timeindex_key, backend.options) == b""
    assert offset_bounds(catalog, "status", 0).log_end_offset == 135


def test_a_partition_whose_lease_was_taken_over_is_not_committed(backend, kafka_fixtures, monkeypatch) -> None:
    for name in ("_confluent-command-0", "docker-connect-status-0"):
        backend.upload_tree(kafka_fixtures / "broker" / name, backend.uri("src", name))
    root = backend.uri("root")
    import_partition = _PartitionImporter.run

    def run_then_lose_the_lease(self) -> None:
        import_partition(self)
        if self.part.tp.topic == "_confluent-command":  # another job takes the lease over meanwhile
            assert backend.store().delete(lease_uri(Store(root), self.part.tp))
            acquire_lease(Store(root, backend.options), self.part.tp, "thief", "job-x", 60_000)

    monkeypatch.setattr(_PartitionImporter, "run", run_then_lose_the_lease)
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    report = import_log_dir(backend.store("src"), Store(root, backend.options), catalog)
    command = next(p for p in report.partitions if p.topic == "_confluent-command")
    assert report.failed and "taken over" in command.error and "not committed" in command.error
    assert catalog.live_segments("_confluent-command", 0) == []
    assert len(catalog.live_segments("docker-connect-status", 0)) == 1
    assert read_lease(Store(root, backend.options), TopicPartition("_confluent-command", 0)).owner == "thief"
