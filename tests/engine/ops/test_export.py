"""`klake export` of imported broker data, on a local directory and on moto S3.

Truth is independent of the export: the broker's own files (`tests/fixtures/kafka/broker/`), their
golden dumps (kafka-python and kafka-clients agree on them), kafka-python reading every exported `.log`
with CRC checks, and `klake import` of the export giving back the source catalog's facts.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from engine.log.kafka_files import derived_topic_id, parse_offset_checkpoint
from engine.log.lookup import list_offsets
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.export import ExportRange
from engine.ops.importer import import_log_dir
from engine.ops.stored_segment import stored_segment
from jobs.cli.inspect import load_partition_dir
from kernel.names import TopicPartition
from layouts.store import list_objects, read_bytes
from layouts.store.bound import Store
from tests.codecs_for_tests import parse_leader_epoch_checkpoint
from tests.engine.ops.test_import import BROKER_PARTITIONS, facts
from tests.golden import golden_text
from tests.oracles.kafka_python import read_with_kafka_python
from tests.single_partition import export_log_dir

BROKER_TOPIC_ID = "p59PN4qkR8y176nhuDDPPA"  # timeindex_test-0/partition.metadata


def golden(kafka_fixtures: Path, dir_name: str) -> list[dict]:
    return [json.loads(line) for path in sorted((kafka_fixtures / "broker" / dir_name).glob("*.log"))
            for line in golden_text(path).splitlines()]


def exported_records(backend, output: str, dir_name: str) -> list[tuple]:
    """(offset, timestamp, key, value) of every record in the exported directory, read by kafka-python."""
    logs = sorted(info.uri for info in list_objects(backend.uri(output, dir_name), backend.options)
                  if info.uri.endswith(".log"))
    return [r[:4] for log in logs for r in read_with_kafka_python(read_bytes(log, backend.options))[0]]


def as_records(entries: list[dict]) -> list[tuple]:
    import base64

    def raw(value: str | None) -> bytes | None:
        return None if value is None else base64.b64decode(value)

    return [(e["offset"], e["timestamp"], raw(e["key"]), raw(e["value"])) for e in entries]


@pytest.fixture
def imported(backend, kafka_fixtures) -> Catalog:
    source = backend.upload_tree(kafka_fixtures / "broker", backend.uri("src"))
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    assert not import_log_dir(Store(source, backend.options), backend.store("root"), catalog).failed
    return catalog


def configs(catalog: Catalog) -> dict[TopicPartition, TopicConfig]:
    return dict.fromkeys(catalog.partitions(), TopicConfig())


def test_an_imported_broker_dir_exports_as_the_brokers_bytes_and_imports_back_the_same(
        backend, imported, kafka_fixtures) -> None:
    out = backend.uri("out")
    report = export_log_dir(imported, backend.uri("root"), configs(imported), out,
                            topic_ids={"timeindex_test": BROKER_TOPIC_ID}, options=backend.options)
    assert report.failures == {} and len(report.partitions) == len(BROKER_PARTITIONS)
    broker = kafka_fixtures / "broker" / "timeindex_test-0"
    names = sorted(p.name for p in broker.iterdir() if not p.name.endswith((".jsonl", ".jsonl.gz", ".snapshot")))
    exported = {info.uri.rsplit("/", 1)[1]: info.uri for info in list_objects(backend.uri("out", "timeindex_test-0"),
                                                                                backend.options)}
    assert sorted(exported) == names  # .log/.index/.timeindex of 4 segments, leader-epoch-checkpoint, partition.metadata
    for name in names:  # every byte, indexes and checkpoint files included
        assert read_bytes(exported[name], backend.options) == (broker / name).read_bytes(), name

    ends = {}
    for dir_name in BROKER_PARTITIONS:
        entries = golden(kafka_fixtures, dir_name)
        assert exported_records(backend, "out", dir_name) == as_records(entries)
        segments = load_partition_dir(backend.store("out", dir_name))
        assert all(s.index_problems == [] for s in segments)  # the rebuilt sidecars check out against the log
        topic, partition = dir_name.rsplit("-", 1)
        ends[TopicPartition(topic, int(partition))] = entries[-1]["offset"] + 1
        metadata = read_bytes(backend.uri("out", dir_name, "partition.metadata"), backend.options).decode()
        assert metadata.endswith(BROKER_TOPIC_ID if topic == "timeindex_test" else derived_topic_id(topic))
    for name, expected in (("recovery-point-offset-checkpoint", ends), ("replication-offset-checkpoint", ends),
                           ("log-start-offset-checkpoint", dict.fromkeys(ends, 0))):
        uri = backend.uri("out", name)
        assert parse_offset_checkpoint(read_bytes(uri, backend.options), uri) == expected

    # klake import of the export reproduces the source catalog, row for row
    again = Catalog.create(Store(backend.uri("catalog2"), backend.options))
    assert not import_log_dir(Store(out, backend.options), backend.store("root2"), again).failed
    for tp in imported.partitions():
        source = imported.live_segments(tp.topic, tp.partition)
        copy = again.live_segments(tp.topic, tp.partition)
        assert [(facts(r), r.state, r.log_start_offset) for r in copy] == \
               [(facts(r), r.state, r.log_start_offset) for r in source]
        assert [read_bytes(r.index_key, backend.options) for r in copy] == \
               [read_bytes(r.index_key, backend.options) for r in source]

    # a re-run writes nothing; an interrupted one (a file missing, one cut short, a stale one) is finished
    rerun = export_log_dir(imported, backend.uri("root"), configs(imported), out,
                           topic_ids={"timeindex_test": BROKER_TOPIC_ID}, options=backend.options)
    assert [p.written for p in rerun.partitions] == [[]] * 4 and rerun.checkpoints_written == []
    backend.store().delete(exported["00000000000000007729.index"])
    backend.store().write(exported["00000000000000015363.log"], (broker / "00000000000000015363.log").read_bytes()[:999])
    stale = backend.uri("out", "timeindex_test-0", "00000000000000099999.log")
    backend.store().write(stale, b"from an earlier export")
    backend.store().delete(backend.uri("out", "log-start-offset-checkpoint"))
    finished = export_log_dir(imported, backend.uri("root"), configs(imported), out,
                              topic_ids={"timeindex_test": BROKER_TOPIC_ID}, options=backend.options)
    part = next(p for p in finished.partitions if p.topic == "timeindex_test")
    assert sorted(u.rsplit("/", 1)[1] for u in part.written) == ["00000000000000007729.index",
                                                                  "00000000000000015363.log"]
    assert part.deleted == [stale] and finished.checkpoints_written == [backend.uri("out", "log-start-offset-checkpoint")]
    for name in names:
        assert read_bytes(exported[name], backend.options) == (broker / name).read_bytes(), name


def test_a_rerun_removes_the_temporaries_a_killed_export_left(backend, imported) -> None:
    """Issue 26: a local export killed while publishing a file leaves `.<name>.tmp-<hex>` beside it (in a
    partition directory, or beside the log dir's checkpoints); the re-run's output is a clean export's,
    file for file and byte for byte. Temporaries of names the export does not own stay."""
    clean = backend.uri("clean")
    export_log_dir(imported, backend.uri("root"), configs(imported), clean, options=backend.options)
    expected = {info.uri[len(clean):]: read_bytes(info.uri, backend.options)
                for info in list_objects(clean, backend.options)}
    out = backend.uri("out")
    export_log_dir(imported, backend.uri("root"), configs(imported), out, options=backend.options)
    left = [backend.uri("out", "timeindex_test-0", f".00000000000000007729.log.tmp-{'a' * 32}"),
            backend.uri("out", "timeindex_test-0", f".leader-epoch-checkpoint.tmp-{'b' * 32}"),
            backend.uri("out", f".replication-offset-checkpoint.tmp-{'c' * 32}")]
    foreign = [backend.uri("out", f".meta.properties.tmp-{'d' * 32}"),  # a broker's log dir file, not the export's
               backend.uri("out", "other-0", f".00000000000000000000.log.tmp-{'e' * 32}")]
    for uri in left + foreign:
        backend.store().write(uri, b"cut short")
    rerun = export_log_dir(imported, backend.uri("root"), configs(imported), out, options=backend.options)
    assert rerun.failures == {}
    got = {info.uri[len(out):]: read_bytes(info.uri, backend.options) for info in list_objects(out, backend.options)
           if info.uri not in foreign}
    assert got == expected
    assert [read_bytes(uri, backend.options) for uri in foreign] == [b"cut short"] * 2


def test_a_range_is_cut_at_batches_with_the_brokers_recovery_indexes(backend, imported, kafka_fixtures) -> None:
    """timeindex_test-0 holds single-record batches: [7000, 16000) keeps the end of segment 0, segment 7729
    whole and the start of segment 15363; a time range becomes the offsets a consumer's offsetsForTimes gives."""
    tp = TopicPartition("timeindex_test", 0)
    entries = golden(kafka_fixtures, "timeindex_test-0")
    out = backend.uri("out")
    report = export_log_dir(imported, backend.uri("root"), {tp: TopicConfig()}, out,
                            ExportRange(from_offset=7000, to_offset=16000), options=backend.options)
    (part,) = report.partitions
    assert [(s.base_offset, s.next_offset, s.cut, s.indexes) for s in part.segments] == [
        (7000, 7729, True, "rebuilt"), (7729, 15363, False, "stored"), (15363, 16000, True, "rebuilt")]
    assert (part.log_start_offset, part.log_end_offset) == (7000, 16000)
    assert exported_records(backend, "out", "timeindex_test-0") == as_records(
        [e for e in entries if 7000 <= e["offset"] < 16000])
    epochs = read_bytes(backend.uri("out", "timeindex_test-0", "leader-epoch-checkpoint"), backend.options)
    assert epochs == b"0\n1\n0 7000\n"  # truncateFromStart moved epoch 0's start to the log start
    assert part.leader_epochs == [(0, 7000)]

    # the exported indexes answer every lookup as the source does (and as brute force over the records)
    segments = load_partition_dir(backend.store("out", "timeindex_test-0"))
    assert [s.base_offset for s in segments] == [7000, 7729, 15363] and all(not s.index_problems for s in segments)
    source = [stored_segment(r, backend.store()) for r in imported.live_segments("timeindex_test", 0)]
    kept = [e for e in entries if 7000 <= e["offset"] < 16000]
    for target in sorted({e["timestamp"] for e in kept[::97]} | {kept[0]["timestamp"] - 1, kept[-1]["timestamp"]}):
        brute = next(((e["offset"], e["timestamp"]) for e in kept if e["timestamp"] >= target), (-1, -1))
        answer = list_offsets(segments, target, min_timestamp=0)
        assert (answer.offset, answer.timestamp) == brute
        if brute[0] != -1 and brute[0] < 15363:
            assert list_offsets(source, target, 7000, min_timestamp=0).offset == brute[0]
    for target in (-1, -2, -3):
        assert (list_offsets(segments, target, min_timestamp=0).offset
                == list_offsets(segments, target, 7000, min_timestamp=0).offset)

    # times: [first offset with ts >= from, first offset with ts >= to)
    t0, t1 = entries[1234]["timestamp"], entries[20000]["timestamp"]
    low = next(e["offset"] for e in entries if e["timestamp"] >= t0)
    high = next(e["offset"] for e in entries if e["timestamp"] >= t1)
    timed = export_log_dir(imported, backend.uri("root"), {tp: TopicConfig()}, backend.uri("out-times"),
                           ExportRange(from_ms=t0, to_ms=t1), options=backend.options)
    (part,) = timed.partitions
    assert (part.log_start_offset, part.log_end_offset) == (low, high)
    assert exported_records(backend, "out-times", "timeindex_test-0") == as_records(entries[low:high])
    assert parse_leader_epoch_checkpoint(read_bytes(backend.uri("out-times", "timeindex_test-0",
                                                                "leader-epoch-checkpoint"), backend.options),
                                         "leader-epoch-checkpoint")[0].start_offset == low


def test_an_output_inside_the_root_is_refused_and_an_empty_range_writes_nothing(backend, imported) -> None:
    tp = TopicPartition("timeindex_test", 0)
    with pytest.raises(Exception, match="overlaps the klake root"):
        export_log_dir(imported, backend.uri("root"), {tp: TopicConfig()}, backend.uri("root", "kafka"),
                       options=backend.options)
    report = export_log_dir(imported, backend.uri("root"), {tp: TopicConfig()}, backend.uri("o"),
                            ExportRange(from_offset=40_000), options=backend.options)
    assert report.partitions[0].log_end_offset is None and report.checkpoints_written == []


def test_a_partition_with_an_aborted_transaction_gets_kafkas_txnindex_and_a_recovery_point_at_its_end(
        backend, kafka_fixtures) -> None:
    """The segment holding an ABORT marker gets the `.txnindex` entry `LogSegment.updateTxnIndex` writes
    (version 0, producer, first offset, the marker's offset, last stable offset: 34 bytes, big-endian), so
    the recovery point is the log end offset: a broker loading the dir has nothing to rebuild."""
    records = kafka_fixtures / "kafka-clients"  # producer 42's transaction at 200-202, its marker at 203
    for dir_name, name in (("aborted-0", "txn-abort.records"), ("committed-0", "txn-commit.records")):
        backend.store().write(backend.uri("src", dir_name, f"{200:020d}.log"), (records / name).read_bytes())
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    assert not import_log_dir(backend.store("src"), backend.store("root"), catalog).failed
    report = export_log_dir(catalog, backend.uri("root"), configs(catalog), backend.uri("out"),
                            options=backend.options)
    assert {(p.topic, p.recovery_point, p.log_end_offset) for p in report.partitions} == {
        ("aborted", 204, 204), ("committed", 204, 204)}
    txnindex = f"{200:020d}.txnindex"
    assert read_bytes(backend.uri("out", "aborted-0", txnindex), backend.options) == \
        struct.pack(">hqqqq", 0, 42, 200, 203, 204)
    assert txnindex not in {info.name for info in list_objects(backend.uri("out", "committed-0"), backend.options)}
    uri = backend.uri("out", "recovery-point-offset-checkpoint")
    assert read_bytes(uri, backend.options) == b"0\n2\naborted 0 204\ncommitted 0 204\n"
    assert read_bytes(backend.uri("out", "replication-offset-checkpoint"), backend.options) == \
        b"0\n2\naborted 0 204\ncommitted 0 204\n"
