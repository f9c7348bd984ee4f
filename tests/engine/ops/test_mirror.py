"""`engine.ops.mirror`: topics copied between roots, local -> moto S3 -> local.

Truth is independent of klake's reader: every record and batch is read back with kafka-python (CRCs
validated) and compared field by field with the source; the offset map is checked against a brute-force
pairing of the source's records with the destination's, in log order.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.format.batch import scan_batches
from engine.format.builder import CONTROL_ABORT, CONTROL_COMMIT, encode_batch
from engine.log.mirror import NotAReplicaError
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.importer import import_log_dir
from engine.ops.mirror import (
    committed_offset_maps,
    mirror_partitions,
    offset_map_app_id,
    offset_maps,
)
from engine.ops.topic_store import load_topic_config, save_topic_config
from kernel.errors import KlakeError
from kernel.names import TopicPartition
from layouts.store import StorageOptions, list_objects, read_bytes
from layouts.store.bound import Store
from tests.codecs_for_tests import control_record
from tests.conftest import Backend
from tests.oracles.kafka_python import read_with_kafka_python
from tests.single_partition import append_to_partition, delete_records, truncate_partition

NOW = 1_790_000_000_000
TP = TopicPartition("orders", 0)
CONFIG = TopicConfig.from_mapping({"segment.bytes": 3000, "index.interval.bytes": 300, "max.message.bytes": 400,
                                   "message.timestamp.after.max.ms": 60_000})


def _records(n: int, first: int = 0) -> pa.Table:
    return pa.table({"key": pa.array([b"k%03d" % (i % 40) for i in range(first, first + n)], pa.binary()),
                     "value": pa.array([None if i % 7 == 3 else b"value-%05d" % i for i in range(first, first + n)],
                                       pa.binary()),
                     "headers": pa.array([[{"key": "h", "value": b"%d" % i}] for i in range(first, first + n)],
                                         pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                     "timestamp": pa.array(NOW - 100_000 + np.arange(first, first + n) * 7, pa.int64())})


def _read(root: str, catalog: Catalog, tp: TopicPartition, options: StorageOptions) -> tuple[list, list]:
    """(records, batches) of a partition's live log, read by kafka-python: every field a record and its
    batch carry (offset, timestamp and its type, key, value, headers; producer id/epoch/base sequence,
    transactional and control flags)."""
    records, batches = [], []
    for row in catalog.live_segments(tp.topic, tp.partition):
        recs, bats = read_with_kafka_python(read_bytes(row.log_key, options))
        spans = [(b.base_offset, b.base_offset + b.last_offset_delta,
                  (b.timestamp_type, b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional,
                   b.is_control_batch)) for b in bats]
        batches += spans
        records += [(offset, *fields, next(f for lo, hi, f in spans if lo <= offset <= hi))
                    for offset, *fields in recs]
    return records, batches


def _replica_facts(catalog: Catalog, tp: TopicPartition, options: StorageOptions) -> list[tuple]:
    """Each live segment's catalog facts (all but where its objects are and which job wrote it) and bytes."""
    out = []
    for row in catalog.live_segments(tp.topic, tp.partition):
        facts = {k: v for k, v in asdict(row).items() if k not in ("log_key", "index_key", "timeindex_key", "job_id")}
        out.append((facts, read_bytes(row.log_key, options), read_bytes(row.index_key, options),
                    read_bytes(row.timeindex_key, options)))
    return out


def _copied(run) -> int:
    return sum(r.step.outcome.segments_copied for r in run.results if r.step is not None)


@pytest.mark.s3
def test_replica_round_trip_local_s3_local_is_exact_and_incremental(tmp_path: Path, s3_backend: Backend) -> None:
    options = s3_backend.options
    roots = {"a": str(tmp_path / "a"), "b": s3_backend.uri("b"), "c": str(tmp_path / "c")}
    cats = {name: Catalog.create(Store(f"{root}/_catalog", options)) for name, root in roots.items()}
    save_topic_config(Store(roots["a"], options), TP.topic, CONFIG)
    append_to_partition(cats["a"], roots["a"], TP, _records(300), CONFIG, NOW, options)
    source = _replica_facts(cats["a"], TP, options)
    assert len(source) >= 4

    def mirror(src: str, dst: str, now: int = NOW):
        return mirror_partitions(Store(roots[src], options), cats[src], Store(roots[dst], options), cats[dst], [TP], now_ms=now)

    first = mirror("a", "b")
    assert first.failures == {} and _copied(first) == len(source)
    assert all(r.step.outcome.mode == "preserve" for r in first.results)
    assert _replica_facts(cats["b"], TP, options) == source
    assert load_topic_config(Store(roots["b"], options), TP.topic) == CONFIG  # a replica is configured as its source

    # the source's active segment grows (a new version of it) and rolls: only those versions are copied
    append_to_partition(cats["a"], roots["a"], TP, _records(120, first=300), CONFIG, NOW + 1, options)
    grown = _replica_facts(cats["a"], TP, options)
    lacking = [f for f in grown if f not in source]
    again = mirror("a", "b", NOW + 1)
    assert _copied(again) == len(lacking) and again.results[0].step.outcome.segments_replaced == 1
    assert _replica_facts(cats["b"], TP, options) == grown
    idle = mirror("a", "b", NOW + 2)
    assert _copied(idle) == 0 and idle.commit is None  # a re-run copies nothing

    back = mirror("b", "c")
    assert back.failures == {} and _replica_facts(cats["c"], TP, options) == grown
    assert _read(roots["c"], cats["c"], TP, options) == _read(roots["a"], cats["a"], TP, options)


def test_preserve_refuses_a_destination_that_is_no_replica_and_writes_nothing(backend: Backend) -> None:
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a, cat_b = Catalog.create(Store(f"{a}/_catalog", options)), Catalog.create(Store(f"{b}/_catalog", options))
    append_to_partition(cat_a, a, TP, _records(50), CONFIG, NOW, options)
    append_to_partition(cat_b, b, TP, _records(10, first=500), CONFIG, NOW, options)
    before = cat_b.version
    with pytest.raises(NotAReplicaError):
        mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="preserve", now_ms=NOW,
                          execute=lambda prepare: lambda items: [_strict(prepare, i) for i in items])
    assert cat_b.version == before
    lat = TopicConfig.from_mapping({"message.timestamp.type": "LogAppendTime"})
    c = backend.uri("c")
    save_topic_config(Store(c, options), TP.topic, lat)
    run = mirror_partitions(Store(a, options), cat_a, Store(c, options), Catalog.create(Store(f"{c}/_catalog", options)), [TP], mode="preserve",
                            now_ms=NOW)
    assert "message.timestamp.type" in run.failures[str(TP)] and run.commit is None


@pytest.mark.parametrize("kind", ["CreateTime", "LogAppendTime"])
def test_a_killed_replica_of_an_imported_compacted_topic_is_finished_by_a_rerun_and_follows_the_broker(
        tmp_path: Path, backend: Backend, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker writes a second segment after the first import: re-importing demotes the first one to
    ROLLED (the same version, a state change), and the replica follows with a transition and one copy."""
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a, cat_b = Catalog.create(Store(f"{a}/_catalog", options)), Catalog.create(Store(f"{b}/_catalog", options))
    save_topic_config(Store(a, options), TP.topic, TopicConfig.from_mapping({"cleanup.policy": "compact", "message.timestamp.type": kind}))
    broker = _compacted_log_dir(tmp_path / "broker")
    later = broker / TP.dir_name / f"{20:020d}.log"
    held = later.read_bytes()
    later.unlink()
    import_log_dir(Store(str(broker), options), Store(a, options), cat_a, copy=True)
    with monkeypatch.context() as patch:
        patch.setattr(Catalog, "apply", _killing)
        with pytest.raises(RuntimeError, match="killed"):
            mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)
    assert cat_b.live_segments(TP.topic, TP.partition) == []
    done = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)  # the objects are there
    assert _copied(done) == 1 and done.results[0].step.outcome.mode == "preserve"
    assert _replica_facts(cat_b, TP, options) == _replica_facts(cat_a, TP, options)

    later.write_bytes(held)
    import_log_dir(Store(str(broker), options), Store(a, options), cat_a, copy=True)
    assert [r.state for r in cat_a.live_segments(TP.topic, TP.partition)] == ["ROLLED", "ACTIVE"]
    again = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)
    assert _copied(again) == 1 and again.commit.transitioned == 1
    assert _replica_facts(cat_b, TP, options) == _replica_facts(cat_a, TP, options)
    assert _read(b, cat_b, TP, options) == _read(a, cat_a, TP, options)


def _killing(self, change, operation="change", job_id="", finished=(), **more):  # noqa: ANN001, ANN003, ANN202
    raise RuntimeError(f"driver killed during the {operation} commit")


def test_a_replica_follows_delete_records_and_stays_a_replica_when_the_source_is_truncated(backend: Backend) -> None:
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a, cat_b = Catalog.create(Store(f"{a}/_catalog", options)), Catalog.create(Store(f"{b}/_catalog", options))
    append_to_partition(cat_a, a, TP, _records(200), CONFIG, NOW, options)
    mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)
    rows = cat_a.live_segments(TP.topic, TP.partition)
    delete_records(cat_a, a, TP, rows[1].base_offset + 1, NOW, options)  # a new version of segment 1
    followed = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)
    assert followed.results[0].step.outcome.segments_replaced == 1
    kept = _replica_facts(cat_b, TP, options)  # the destination keeps segment 0, which the source deleted
    assert kept[1:] == _replica_facts(cat_a, TP, options) and kept[0][0]["base_offset"] == rows[0].base_offset

    truncate_partition(cat_a, a, TP, rows[-1].base_offset - 5, CONFIG, NOW, options)
    before = cat_b.version
    cut = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)
    assert "no version of a source segment" in cut.failures[str(TP)] and cat_b.version == before
    assert _replica_facts(cat_b, TP, options) == kept  # auto did not append the source again after it


def _strict(prepare, item):
    from engine.ops.run import run_prepare
    return run_prepare(prepare, item, catch=False)


# ------------------------------------------------------------------ a compacted topic with transactions


def _compacted_log_dir(where: Path) -> Path:
    """A compacted partition as a broker's cleaner leaves it, in two segments: tombstones, gaps between
    batches and inside one, a committed and an aborted transaction with their markers, compressed batches."""
    ts = NOW - 50_000
    batches = [
        encode_batch([b"a", b"b"], [b"1", b"2"], [ts, ts + 1], base_offset=0),
        encode_batch([b"c", b"a"], [None, b"3"], [ts + 5, ts + 9], base_offset=4, offset_deltas=[0, 2],
                     last_offset_delta=3),  # a cleaned batch: a gap inside, lastOffset kept
        encode_batch([b"t1", b"t2"], [b"x", None], [ts + 10, ts + 11], base_offset=8, producer_id=42,
                     producer_epoch=3, base_sequence=0, transactional=True),
        encode_batch(*map(lambda v: [v], control_record(CONTROL_COMMIT, 5)), [ts + 12], base_offset=10,
                     producer_id=42, producer_epoch=3, transactional=True, control=True),
    ]
    second = [
        encode_batch([b"t3"], [b"y"], [ts + 20], base_offset=20, producer_id=43, producer_epoch=0, base_sequence=7,
                     transactional=True, codec=1, headers=[[("hk", b"hv")]]),
        encode_batch(*map(lambda v: [v], control_record(CONTROL_ABORT, 6)), [ts + 21], base_offset=21,
                     producer_id=43, producer_epoch=0, transactional=True, control=True),
        encode_batch([b"d", b"e", b"a"], [b"4", None, b"5"], [ts + 30, ts + 25, ts + 31], base_offset=25, codec=1),
    ]
    part = where / f"{TP.topic}-{TP.partition}"
    part.mkdir(parents=True)
    (part / f"{0:020d}.log").write_bytes(b"".join(bytes(b) for b in batches))
    (part / f"{20:020d}.log").write_bytes(b"".join(bytes(b) for b in second))
    return where


def _offset_map(root: str, tp: TopicPartition, catalog: Catalog, options: StorageOptions) -> pa.Table:
    """The partition's committed maps, concatenated; every map file left is a committed one."""
    recorded = catalog.transaction_versions([offset_map_app_id(tp)]).get(offset_map_app_id(tp))
    maps = committed_offset_maps(Store(root, options), tp, recorded)
    assert maps == offset_maps(Store(root, options), tp)
    return pa.concat_tables([pq.read_table(pa.BufferReader(read_bytes(uri, options))) for _, uri in maps])


def _mapped(table: pa.Table, offset: int) -> int:
    """Look `offset` up in an offset map (one row per batch)."""
    hit = [i for i, (lo, hi) in enumerate(zip(table["source_base_offset"].to_pylist(),
                                              table["source_last_offset"].to_pylist(), strict=True)) if lo <= offset <= hi]
    assert len(hit) == 1, offset
    row = hit[0]
    return table["destination_base_offset"][row].as_py() + offset - table["source_base_offset"][row].as_py()


@pytest.mark.s3
def test_remapped_round_trip_keeps_tombstones_transactions_and_maps_every_offset(tmp_path: Path,
                                                                                s3_backend: Backend) -> None:
    options = s3_backend.options
    roots = {"a": str(tmp_path / "a"), "b": s3_backend.uri("b"), "c": str(tmp_path / "c")}
    cats = {name: Catalog.create(Store(f"{root}/_catalog", options)) for name, root in roots.items()}
    compacted = TopicConfig.from_mapping({"cleanup.policy": "compact", "segment.bytes": 400,
                                          "index.interval.bytes": 100})
    save_topic_config(Store(roots["a"], options), TP.topic, compacted)
    import_log_dir(Store(str(_compacted_log_dir(tmp_path / "broker")), options), Store(roots["a"], options), cats["a"], copy=True)
    # B already holds records of its own: the mirror appends after them, with new offsets
    save_topic_config(Store(roots["b"], options), TP.topic, compacted)
    append_to_partition(cats["b"], roots["b"], TP, _records(13).filter(pa.array([i % 7 != 3 for i in range(13)])),
                        compacted, NOW, options)
    own, _ = _read(roots["b"], cats["b"], TP, options)
    source, source_batches = _read(roots["a"], cats["a"], TP, options)
    assert any(r[3] is None for r in source) and any(f[5] for *_, f in source_batches)

    first = mirror_partitions(Store(roots["a"], options), cats["a"], Store(roots["b"], options), cats["b"], [TP], now_ms=NOW)
    assert first.failures == {} and first.results[0].step.outcome.mode == "remap"
    mirrored, b_batches = _read(roots["b"], cats["b"], TP, options)
    assert mirrored[:len(own)] == own
    copied_batches = b_batches[-len(source_batches):]  # re-assigned offsets run on without gaps
    assert copied_batches[0][0] == own[-1][0] + 1
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in zip(copied_batches, copied_batches[1:], strict=False))
    copied = mirrored[len(own):]
    # every field but the offset is the source's; offsets follow the map, which brute force confirms
    assert [r[1:] for r in copied] == [r[1:] for r in source]
    ab = _offset_map(roots["b"], TP, cats["b"], options)
    assert [_mapped(ab, r[0]) for r in source] == [r[0] for r in copied]
    assert ab.num_rows == len(source_batches) and ab["destination_base_offset"][0].as_py() == own[-1][0] + 1
    spans = [hi - lo for lo, hi, _ in source_batches]
    assert (pa.compute.subtract(ab["source_last_offset"], ab["source_base_offset"]).to_pylist() == spans)

    rerun = mirror_partitions(Store(roots["a"], options), cats["a"], Store(roots["b"], options), cats["b"], [TP], now_ms=NOW)
    assert _copied(rerun) == 0 and rerun.commit is None
    assert _read(roots["b"], cats["b"], TP, options)[0] == mirrored

    back = mirror_partitions(Store(roots["b"], options), cats["b"], Store(roots["c"], options), cats["c"], [TP], mode="remap", now_ms=NOW)
    assert back.failures == {}
    in_c, _ = _read(roots["c"], cats["c"], TP, options)
    bc = _offset_map(roots["c"], TP, cats["c"], options)
    assert [r[1:] for r in in_c] == [r[1:] for r in mirrored]
    by_offset = {r[0]: r for r in in_c}
    for rec in source:  # A -> B -> C: C holds every record of A at A's offset mapped twice
        assert by_offset[_mapped(bc, _mapped(ab, rec[0]))][1:] == rec[1:]


def test_log_append_time_destination_restamps_monotonically(backend: Backend) -> None:
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a, cat_b = Catalog.create(Store(f"{a}/_catalog", options)), Catalog.create(Store(f"{b}/_catalog", options))
    save_topic_config(Store(a, options), TP.topic, CONFIG)
    append_to_partition(cat_a, a, TP, _records(40), CONFIG, NOW, options)
    lat = TopicConfig.from_mapping({**CONFIG.to_mapping(), "message.timestamp.type": "LogAppendTime",
                                    "klake.log.append.time.monotonic": "true"})
    save_topic_config(Store(b, options), TP.topic, lat)
    run = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW + 5_000)
    assert run.results[0].step.outcome.mode == "remap"  # auto: a LogAppendTime destination re-stamps
    source, _ = _read(a, cat_a, TP, options)
    mirrored, batches = _read(b, cat_b, TP, options)
    assert [r[0] for r in mirrored] == [r[0] for r in source]  # an empty destination: the same offsets
    assert {r[1] for r in mirrored} == {NOW + 5_000} and {f[0] for *_, f in batches} == {1}
    assert [r[2:5] for r in mirrored] == [r[2:5] for r in source]

    append_to_partition(cat_a, a, TP, _records(10, first=40), CONFIG, NOW, options)
    mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)  # the clock went back
    more, _ = _read(b, cat_b, TP, options)
    assert more[:len(mirrored)] == mirrored and len(more) == 50
    assert {r[1] for r in more[len(mirrored):]} == {NOW + 5_000}  # max(last appended, now)


def test_unknown_topic_and_bad_mode_are_bad_input(backend: Backend) -> None:
    a, b = backend.uri("a"), backend.uri("b")
    cat = Catalog.create(Store(f"{a}/_catalog", backend.options))
    with pytest.raises(KlakeError, match="offsets mode"):
        mirror_partitions(Store(a, backend.options), cat, Store(b, backend.options), cat, [TP], mode="keep", now_ms=NOW)
    with pytest.raises(KlakeError, match="same root"):
        mirror_partitions(Store(a, backend.options), cat, Store(a, backend.options), cat, [TP], now_ms=NOW)
    assert list_objects(b, backend.options) == []


def test_legacy_batches_are_replicated_but_not_moved(tmp_path: Path, kafka_fixtures: Path) -> None:
    """Magic-1 messages (written by Apache kafka-clients) copy byte for byte; moving them would need the
    broker's conversion, so a remap of them fails its partition, naming the segment, and writes nothing."""
    options = StorageOptions()
    part = tmp_path / "broker" / TP.dir_name
    part.mkdir(parents=True)
    (part / f"{1000:020d}.log").write_bytes((kafka_fixtures / "kafka-clients" / "m1-none.records").read_bytes())
    a, b, c = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "c")
    cat_a, cat_b, cat_c = (Catalog.create(Store(f"{root}/_catalog", options)) for root in (a, b, c))
    import_log_dir(Store(str(tmp_path / "broker"), options), Store(a, options), cat_a, copy=True)
    replica = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], now_ms=NOW)
    assert replica.failures == {} and _replica_facts(cat_b, TP, options) == _replica_facts(cat_a, TP, options)
    moved = mirror_partitions(Store(a, options), cat_a, Store(c, options), cat_c, [TP], mode="remap", now_ms=NOW)
    assert "magic-1" in moved.failures[str(TP)] and f"{1000:020d}" in moved.failures[str(TP)]
    assert moved.commit is None and not (tmp_path / "c" / TP.dir_name).exists()


@pytest.mark.parametrize("earlier_runs", [0, 1])
def test_a_remap_killed_after_writing_its_map_then_an_append_loses_and_duplicates_nothing(
        backend: Backend, earlier_runs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remap run dies after writing its offset map but before its commit; records are then appended
    to the destination, past the map's first offset. The map names offsets that other records now hold:
    only the catalog's record says it never committed, and the re-run copies those batches (once)."""
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a, cat_b = Catalog.create(Store(f"{a}/_catalog", options)), Catalog.create(Store(f"{b}/_catalog", options))
    save_topic_config(Store(a, options), TP.topic, CONFIG)
    save_topic_config(Store(b, options), TP.topic, CONFIG)
    append_to_partition(cat_a, a, TP, _records(60), CONFIG, NOW, options)
    append_to_partition(cat_b, b, TP, _records(5, first=1000), CONFIG, NOW, options)  # B's own records
    if earlier_runs:
        assert mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW).failures == {}
        append_to_partition(cat_a, a, TP, _records(50, first=60), CONFIG, NOW, options)
    with monkeypatch.context() as patch:
        patch.setattr(Catalog, "apply", _killing)
        with pytest.raises(RuntimeError, match="killed"):
            mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW)
    recorded = cat_b.transaction_versions([offset_map_app_id(TP)]).get(offset_map_app_id(TP))
    (stale, _), = [m for m in offset_maps(Store(b, options), TP)
                   if m not in committed_offset_maps(Store(b, options), TP, recorded)]
    append_to_partition(cat_b, b, TP, _records(30, first=2000), CONFIG, NOW, options)  # past the stale map
    assert cat_b.live_segments(TP.topic, TP.partition)[-1].next_offset > stale

    rerun = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW)
    assert rerun.failures == {} and rerun.results[0].step.outcome.offset_map is not None
    source, _ = _read(a, cat_a, TP, options)
    mirrored, _ = _read(b, cat_b, TP, options)
    own = [r for r in mirrored if int(r[4][0][1]) >= 1000]  # header h: the record's number
    copied = [r for r in mirrored if r not in own]
    assert len(own) == 5 + 30
    assert [r[1:] for r in copied] == [r[1:] for r in source]  # every source record exactly once, in order
    ab = _offset_map(b, TP, cat_b, options)  # the stale map is gone; the committed ones cover each record once
    assert [_mapped(ab, r[0]) for r in source] == [r[0] for r in copied]
    idle = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW)
    assert _copied(idle) == 0 and idle.commit is None and _read(b, cat_b, TP, options)[0] == mirrored


def test_remap_refuses_a_batch_larger_than_the_destination_takes_and_writes_nothing(backend: Backend) -> None:
    """Kafka's append rule (RecordTooLargeException): a batch above the destination's max.message.bytes
    fails its partition, naming the source segment and offset; segments already uploaded are deleted.
    A batch exactly at the limit moves."""
    options = backend.options
    a = backend.uri("a")
    cat_a = Catalog.create(Store(f"{a}/_catalog", options))
    roomy = TopicConfig.from_mapping({**CONFIG.to_mapping(), "max.message.bytes": 1200})
    append_to_partition(cat_a, a, TP, _records(150), CONFIG, NOW, options)  # batches of at most 400 bytes
    append_to_partition(cat_a, a, TP, _records(60, first=150), roomy, NOW, options)
    rows = cat_a.live_segments(TP.topic, TP.partition)
    sizes = []
    for row in rows:
        headers = scan_batches(read_bytes(row.log_key, options), row.log_key).headers
        sizes += [(int(size), row.log_key, int(base)) for size, base in zip(headers.size, headers.base_offset,
                                                                                strict=True)]
    largest = max(sizes)[0]
    size, segment, offset = next(s for s in sizes if s[0] > 400)  # the first batch too large for CONFIG
    assert largest > 400 and segment != rows[0].log_key

    b = backend.uri("b")
    cat_b = Catalog.create(Store(f"{b}/_catalog", options))
    save_topic_config(Store(b, options), TP.topic, CONFIG)
    refused = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW)
    reason = refused.failures[str(TP)]
    assert segment in reason and f"offset {offset} is a {size}-byte batch" in reason
    assert "max.message.bytes = 400" in reason and refused.commit is None
    assert [o.name for o in list_objects(b, options) if o.name.endswith((".log", ".index", ".timeindex"))] == []
    assert cat_b.live_segments(TP.topic, TP.partition) == [] and offset_maps(Store(b, options), TP) == []

    c = backend.uri("c")
    cat_c = Catalog.create(Store(f"{c}/_catalog", options))
    save_topic_config(Store(c, options), TP.topic, TopicConfig.from_mapping({**CONFIG.to_mapping(), "max.message.bytes": largest}))
    fits = mirror_partitions(Store(a, options), cat_a, Store(c, options), cat_c, [TP], mode="remap", now_ms=NOW)
    assert fits.failures == {} and _read(c, cat_c, TP, options)[0] == _read(a, cat_a, TP, options)[0]


@pytest.mark.parametrize("mode", ["preserve", "remap"])
def test_a_dry_run_says_what_the_run_copies_and_writes_nothing(backend: Backend, mode: str) -> None:
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a = Catalog.create(Store(f"{a}/_catalog", options))
    save_topic_config(Store(a, options), TP.topic, CONFIG)
    append_to_partition(cat_a, a, TP, _records(150), CONFIG, NOW, options)
    source, batches = _read(a, cat_a, TP, options)
    sizes = [len(read_bytes(r.log_key, options)) for r in cat_a.live_segments(TP.topic, TP.partition)]

    planned = mirror_partitions(Store(a, options), cat_a, Store(b, options), None, [TP], mode=mode, now_ms=NOW, dry_run=True)
    assert planned.failures == {} and planned.commit is None and list_objects(b, options) == []  # not even a catalog
    would = planned.results[0].step.outcome
    assert would.dry_run and would.mode == mode and would.offset_map is None and would.segments_written == []
    assert (would.source_first_offset, would.source_last_offset) == (source[0][0], source[-1][0])
    assert would.batches_copied == len(batches) and would.bytes_copied == sum(sizes)
    assert would.log_end_offset == source[-1][0] + 1

    cat_b = Catalog.create(Store(f"{b}/_catalog", options))
    done = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode=mode, now_ms=NOW).results[0].step.outcome
    assert {k: v for k, v in done.to_dict().items() if k not in ("dry_run", "offset_map", "segments_written")} == {
        k: v for k, v in would.to_dict().items() if k not in ("dry_run", "offset_map", "segments_written")}
    assert done.segments_copied == len(cat_b.live_segments(TP.topic, TP.partition))
    before, version = list_objects(b, options), cat_b.version()
    idle = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode=mode, now_ms=NOW, dry_run=True)
    assert idle.results[0].step.outcome.source_first_offset is None
    assert list_objects(b, options) == before and cat_b.version() == version


def test_a_recorded_map_that_is_missing_fails_the_partition(backend: Backend) -> None:
    """The catalog records a committed map that is gone: where the mirror stopped is unknown, so the
    partition fails naming it rather than copying its batches again."""
    options = backend.options
    a, b = backend.uri("a"), backend.uri("b")
    cat_a, cat_b = Catalog.create(Store(f"{a}/_catalog", options)), Catalog.create(Store(f"{b}/_catalog", options))
    for root in (a, b):
        save_topic_config(Store(root, options), TP.topic, CONFIG)
    append_to_partition(cat_a, a, TP, _records(40), CONFIG, NOW, options)
    append_to_partition(cat_b, b, TP, _records(10, first=1000), CONFIG, NOW, options)
    assert mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW).failures == {}
    (first, uri), = offset_maps(Store(b, options), TP)
    assert first == 10
    Store(b, options).delete(uri)
    before, version = list_objects(b, options), cat_b.version()
    lost = mirror_partitions(Store(a, options), cat_a, Store(b, options), cat_b, [TP], mode="remap", now_ms=NOW)
    assert uri in lost.failures[str(TP)] and "missing" in lost.failures[str(TP)]
    assert list_objects(b, options) == before and cat_b.version() == version
