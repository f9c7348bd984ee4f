"""Partition verify and recovery on local storage and S3 (moto): planted defects are found by (object,
byte), repaired in one commit with cut bytes quarantined (nothing lost), and re-runs are no-ops."""

from __future__ import annotations

from dataclasses import dataclass, replace

import crc32c
import numpy as np
import pytest

from engine.catalog.schema import Layout, SegmentRow, SegmentState
from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.format.records import decode_records
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.summary import summarize_segment
from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.recover import quarantine_key, recover_partition, verify_partition
from engine.ops.verify import valid_prefix
from engine.ops.versions import segment_row, store_segment_version
from kernel.names import TopicPartition
from layouts.object_layout import SegmentKeys, new_segment_id, object_segment_keys, put_segment_objects
from layouts.store import list_objects, read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import add_segments, all_segments
from tests.conftest import Backend

T0 = 1_790_000_000_000
TP = TopicPartition("events", 0)
BATCHES_PER_SEGMENT = 8
CONFIG = TopicConfig.from_mapping({"index.interval.bytes": 200})


def _segments(n_segments: int = 6):
    """`n_segments` segments of 8 batches x 4 records (rolled by time), indexes every ~200 bytes."""
    writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=BATCHES_PER_SEGMENT * 1000 - 1, index_interval_bytes=200)),
                           min_timestamp=0)
    offset = 0
    for b in range(n_segments * BATCHES_PER_SEGMENT):
        ts = [T0 + b * 1000 + i for i in range(4)]
        data = encode_batch([b"k%d" % (offset + i) for i in range(4)], [b"v%d" % (offset + i) for i in range(4)],
                            ts, base_offset=offset)
        writer.append(Append(data, offset, offset + 3, ts[-1], offset + 3), now_ms=T0)
        offset += 4
    return all_segments(writer)


def _build(backend: Backend, catalog: Catalog, n_segments: int = 6) -> list[SegmentRow]:
    rows = []
    segments = _segments(n_segments)
    for i, seg in enumerate(segments):
        segment_id = new_segment_id()
        keys = object_segment_keys(backend.uri("root"), TP, seg.base_offset, segment_id)
        put_segment_objects(keys, seg.log, seg.index, seg.timeindex, backend.store())
        state = SegmentState.ACTIVE if i == len(segments) - 1 else SegmentState.ROLLED
        rows.append(segment_row(TP, segment_id, keys, Layout.OBJECT, summarize_segment(seg.log, seg.base_offset,
                                                                                       min_timestamp=0),
                                state, "build", created_at_ms=T0,
                                index_size_bytes=len(seg.index), timeindex_size_bytes=len(seg.timeindex)))
    add_segments(catalog, rows)
    return rows


def _records(data: bytes, start: int = 0) -> set[tuple]:
    """Brute force: every record of the batches that are valid (framing, CRC, records) at byte >= `start`."""
    scan = scan_batches(data, strict=False)
    good = set()
    for row in range(len(scan.headers)):
        one = scan.headers.take(np.array([row]))
        if int(one.position[0]) < start or any(p.position == int(one.position[0]) for p in scan.problems):
            continue
        try:
            records = decode_records(data, one)
        except Exception:  # noqa: BLE001 - a corrupt batch's records are simply not readable
            continue
        good |= set(zip(records.offset.tolist(), records.timestamp.tolist(), records.key.to_pylist(),
                        records.value.to_pylist(), strict=True))
    return good


def _readable(backend: Backend, catalog: Catalog) -> set[tuple]:
    out: set[tuple] = set()
    for row in catalog.live_segments(TP.topic, TP.partition):
        out |= _records(read_bytes(row.log_key, backend.options))
    return out


def _batches(data: bytes) -> list[tuple[int, int]]:
    h = scan_batches(data).headers
    return list(zip(h.position.tolist(), h.size.tolist(), strict=True))


def _with_crc(batch: bytearray) -> bytes:
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


@dataclass
class Planted:
    rows: list[SegmentRow]
    originals: list[bytes]
    cuts: dict[int, int]  # segment index -> valid bytes after the defect
    defected: dict[int, bytes]  # segment index -> the .log bytes after planting
    padded_timeindex_size: int


def _plant(backend: Backend, rows: list[SegmentRow]) -> Planted:
    """Segment 0: `.index` deleted; 1: `.timeindex` zero-padded (KAFKA-10207); 2: a CRC broken in the
    middle; 3: a record broken under a valid CRC; 4: intact; 5 (ACTIVE): truncated mid-batch."""
    opts = backend.options
    originals = [read_bytes(r.log_key, opts) for r in rows]
    backend.store().delete(rows[0].index_key)
    timeindex = read_bytes(rows[1].timeindex_key, opts)
    backend.put(rows[1].timeindex_key, timeindex + bytes(12 * 40))

    data = bytearray(originals[2])
    pos2, size2 = _batches(originals[2])[4]
    data[pos2 + size2 - 3] ^= 0xFF
    backend.put(rows[2].log_key, bytes(data))

    data = bytearray(originals[3])
    pos3, size3 = _batches(originals[3])[3]
    batch = bytearray(data[pos3:pos3 + size3])
    key = b"k%d" % int.from_bytes(batch[:8], "big")
    assert batch[61 + 3] == 0 and batch[61 + 4] == 2 * len(key)  # record 0's offsetDelta and keyLength
    batch[61 + 4] = 2 * 50  # keyLength 50: the key runs past the end of its record
    data[pos3:pos3 + size3] = _with_crc(batch)
    backend.put(rows[3].log_key, bytes(data))

    pos5, _ = _batches(originals[5])[-1]
    backend.put(rows[5].log_key, originals[5][:pos5 + 30])
    defected = {2: read_bytes(rows[2].log_key, opts), 3: read_bytes(rows[3].log_key, opts),
                5: read_bytes(rows[5].log_key, opts)}
    return Planted(rows, originals, {2: pos2, 3: pos3, 5: pos5}, defected, len(timeindex))


@pytest.fixture
def planted(backend: Backend):
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    rows = _build(backend, catalog)
    before = _readable(backend, catalog)
    return backend, catalog, before, _plant(backend, rows)


def _listing(backend: Backend) -> dict[str, int]:
    return {o.uri: o.size for o in list_objects(backend.uri("root"), backend.options)}


def test_verify_names_each_defect_and_recover_repairs_it_without_losing_a_byte(planted) -> None:
    backend, catalog, before, p = planted
    rows, root = p.rows, backend.uri("root")
    check = verify_partition(catalog, TP)
    found = {(x.kind, x.object, x.position) for x in check.all_problems}
    assert ("sidecar", rows[0].index_key, None) in found
    assert ("sidecar", rows[1].timeindex_key, p.padded_timeindex_size) in found
    assert ("batch", rows[2].log_key, p.cuts[2]) in found
    assert ("records", rows[3].log_key, p.cuts[3] + 61) in found
    assert ("batch", rows[5].log_key, p.cuts[5]) in found and ("size", rows[5].log_key, p.cuts[5] + 30) in found
    assert [s.ok for s in check.segments] == [False, False, False, False, True, False]
    assert [s.valid_bytes for s in check.segments][2:] == [p.cuts[2], p.cuts[3], rows[4].size_bytes, p.cuts[5]]
    assert any("crc" in line and line.startswith(f"{rows[2].log_key}: byte {p.cuts[2]}: ") for line in check.lines())
    assert check.to_dict()["ok"] is False and len(check.to_dict()["lines"]) == len(check.lines())

    version, objects = catalog.version(), _listing(backend)
    dry = recover_partition(catalog, Store(root, backend.options), TP, dry_run=True, config=CONFIG, now_ms=T0)
    assert catalog.version() == version and _listing(backend) == objects
    assert [r.action for r in dry.repairs] == ["rebuild-sidecars"] * 2 + ["cut-tail"] * 2 + ["cut-tail"]

    report = recover_partition(catalog, Store(root, backend.options), TP, config=CONFIG, now_ms=T0)
    assert [r.new_segment_id for r in report.repairs] == [r.new_segment_id for r in dry.repairs]
    assert report.rows_removed == 5 and report.rows_added == 5 and report.commit_version == version + 1
    assert report.to_dict()["quarantined"] == {quarantine_key(root, TP, rows[i], p.cuts[i]): len(p.defected[i]) - p.cuts[i]
                                               for i in (2, 3, 5)}
    for i in (2, 3, 5):  # the quarantine object holds exactly the cut bytes
        assert read_bytes(quarantine_key(root, TP, rows[i], p.cuts[i]), backend.options) == p.defected[i][p.cuts[i]:]

    live = catalog.live_segments(TP.topic, TP.partition)
    assert [r.base_offset for r in live] == [r.base_offset for r in rows]
    assert live[0].log_key == rows[0].log_key and live[0].index_key != rows[0].index_key  # .log stays, new sidecars
    assert live[4] == rows[4] and live[5].state == SegmentState.ACTIVE
    assert [r.size_bytes for r in live[2:]] == [p.cuts[2], p.cuts[3], rows[4].size_bytes, p.cuts[5]]
    lost = set().union(*(_records(p.originals[i], p.cuts[i]) for i in (2, 3, 5)))
    assert len(lost) == 4 * (2 * BATCHES_PER_SEGMENT - 4 - 3 + 1)
    assert _readable(backend, catalog) == before - lost
    assert [(g.from_offset, g.to_offset) for g in report.gaps_after] == [
        (live[2].next_offset, rows[3].base_offset), (live[3].next_offset, rows[4].base_offset)]

    again = verify_partition(catalog, TP)
    assert again.ok, again.lines()
    assert [(g.from_offset, g.to_offset) for g in again.gaps] == [(g.from_offset, g.to_offset) for g in report.gaps_after]
    second = recover_partition(catalog, Store(root, backend.options), TP, config=CONFIG)
    assert second.nothing_to_do and second.repairs == [] and second.commit_version is None
    assert catalog.version() == version + 1


def test_a_crash_before_the_commit_is_redone_identically(planted, monkeypatch) -> None:
    backend, catalog, before, p = planted
    root = backend.uri("root")

    def crash(*args, **kwargs):
        raise RuntimeError("killed before the commit")

    with monkeypatch.context() as m:
        m.setattr(Catalog, "apply", crash)
        with pytest.raises(RuntimeError):
            recover_partition(catalog, Store(root, backend.options), TP, config=CONFIG)
    written = _listing(backend)
    report = recover_partition(catalog, Store(root, backend.options), TP, config=CONFIG)  # lease released by the crash
    assert report.rows_added == 5 and all(not r.objects_written for r in report.repairs)  # all already there
    assert _listing(backend) == written
    assert verify_partition(catalog, TP).ok
    lost = set().union(*(_records(p.originals[i], p.cuts[i]) for i in (2, 3, 5)))
    assert _readable(backend, catalog) == before - lost


def test_an_empty_valid_prefix_leaves_the_log_and_an_active_one_stays_empty(backend: Backend) -> None:
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    rows = _build(backend, catalog, n_segments=3)
    root = backend.uri("root")
    for row in (rows[1], rows[2]):  # break the first batch's CRC: nothing of the segment is valid
        data = bytearray(read_bytes(row.log_key, backend.options))
        data[30] ^= 0xFF
        backend.put(row.log_key, bytes(data))
    report = recover_partition(catalog, Store(root, backend.options), TP, now_ms=T0 + 5)
    assert [r.action for r in report.repairs] == ["remove", "cut-tail"]
    assert [r.quarantined_bytes for r in report.repairs] == [rows[1].size_bytes, rows[2].size_bytes]
    live = catalog.live_segments(TP.topic, TP.partition)
    assert [(r.base_offset, r.next_offset, r.size_bytes, r.state) for r in live] == [
        (0, rows[0].next_offset, rows[0].size_bytes, "ROLLED"), (rows[2].base_offset, rows[2].base_offset, 0, "ACTIVE")]
    assert live[1].created_at_ms == T0 + 5  # an emptied segment's creation time resets, as in Kafka
    assert [(g.from_offset, g.to_offset) for g in report.gaps_after] == [(rows[1].base_offset, rows[2].base_offset)]
    assert verify_partition(catalog, TP).ok
    assert recover_partition(catalog, Store(root, backend.options), TP).nothing_to_do


def test_a_kafka_layout_row_keeps_its_log_and_missing_objects_are_left_for_the_operator(backend: Backend) -> None:
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    root = backend.uri("root")
    segments = _segments(2)
    broker = [backend.uri("broker", TP.dir_name, f"{s.base_offset:020d}") for s in segments]
    for stem, seg in zip(broker, segments, strict=True):
        backend.put(f"{stem}.log", seg.log)
        backend.put(f"{stem}.index", seg.index)
    rows = []
    for i, (stem, seg) in enumerate(zip(broker, segments, strict=True)):
        keys = SegmentKeys(f"{stem}.log", f"{stem}.index", f"{stem}.timeindex")  # no .timeindex copied
        state = SegmentState.ACTIVE if i else SegmentState.ROLLED
        rows.append(segment_row(TP, f"imported{i}", keys, Layout.KAFKA, summarize_segment(seg.log, seg.base_offset,
                                                                                          min_timestamp=0),
                                state, "import", created_at_ms=T0,
                                index_size_bytes=len(seg.index), timeindex_size_bytes=None))
    add_segments(catalog, rows)
    backend.store().delete(rows[1].log_key)

    check = verify_partition(catalog, TP)
    assert {(x.kind, x.object) for x in check.all_problems} == {("sidecar", rows[0].timeindex_key),
                                                                 ("missing", rows[1].log_key)}
    report = recover_partition(catalog, Store(root, backend.options), TP)
    assert [r.action for r in report.repairs] == ["rebuild-sidecars", "left-for-operator"]
    live = catalog.live_segments(TP.topic, TP.partition)
    assert live[0].layout == "kafka" and live[0].log_key == rows[0].log_key
    assert live[0].index_key.startswith(root + "/") and live[0].timeindex_key.startswith(root + "/")
    assert live[1] == rows[1]
    assert read_bytes(rows[0].log_key, backend.options) == segments[0].log  # the broker copy is untouched
    assert [x.kind for x in verify_partition(catalog, TP).all_problems] == ["missing"]
    assert [r.action for r in recover_partition(catalog, Store(root, backend.options), TP).repairs] == ["left-for-operator"]


def test_valid_prefix_finds_every_record_level_defect_in_order() -> None:
    """Vectorized decoding stops at the first failing field check, not the first bad batch."""
    seg = _segments(1)[0]
    data = bytearray(seg.log)
    batches = _batches(seg.log)
    pos, size = batches[5]  # keyLength too large: found by an early field check
    batch = bytearray(data[pos:pos + size])
    batch[61 + 4] = 2 * 50
    data[pos:pos + size] = _with_crc(batch)
    pos, size = batches[2]  # headerCount of the first record too large: found by a later check
    batch = bytearray(data[pos:pos + size])
    header_count_at = 61 + batch[61] // 2  # the record's last byte (1-byte length varint)
    assert batch[header_count_at] == 0
    batch[header_count_at] = 2 * 60
    data[pos:pos + size] = _with_crc(batch)
    prefix = valid_prefix(bytes(data), 0, "seg.log")
    assert prefix.valid_bytes == batches[2][0]
    assert [x.kind for x in prefix.problems] == ["records", "records"]
    assert [batches[2][0] <= x.position < batches[3][0] for x in prefix.problems] == [True, False]
    assert len(prefix.headers) == 2


def test_valid_prefix_ends_where_offsets_stop_increasing() -> None:
    first = encode_batch([b"a", b"b"], [b"1", b"2"], [T0, T0 + 1], base_offset=10)
    again = encode_batch([b"c"], [b"3"], [T0 + 2], base_offset=11)  # offset 11 is already in the first batch
    prefix = valid_prefix(first + again, 10, "seg.log")
    assert prefix.valid_bytes == len(first) and len(prefix.headers) == 1
    assert [str(x) for x in prefix.problems] == [
        f"seg.log: byte {len(first)}: offsets: offset 11 does not follow the previous batch's last offset 11"]
    below = valid_prefix(first, 12, "seg.log")  # last offset 11 below the segment base 12 (spec 7.2)
    assert below.valid_bytes == 0 and below.problems[0].kind == "offsets"


def test_a_sidecar_of_another_size_than_its_row_says_is_reported_and_rebuilt_with_its_size(backend: Backend) -> None:
    """The sidecar sizes a row records are checked like the `.log`'s: a valid `.timeindex` whose row says it
    holds an entry more than it does is a `size` problem, recovery rebuilds the sidecars and the new row
    records the sizes of the new objects; a row without the sizes (an older catalog's) has nothing to
    disagree with."""
    catalog = Catalog.create(Store(backend.uri("catalog"), backend.options))
    root = backend.uri("root")
    rows = []
    for i, seg in enumerate(_segments(3)):
        state = SegmentState.ACTIVE if i == 2 else SegmentState.ROLLED
        rows.append(store_segment_version(Store(root, backend.options), TP, seg.base_offset, seg.log, seg.index, seg.timeindex, state, "build", T0, min_timestamp=0))
    assert rows[0].timeindex_size_bytes == (size := len(read_bytes(rows[0].timeindex_key, backend.options)))
    rows[0] = replace(rows[0], timeindex_size_bytes=size + 12)
    rows[1] = replace(rows[1], index_size_bytes=None, timeindex_size_bytes=None)
    add_segments(catalog, rows)

    check = verify_partition(catalog, TP, CONFIG)
    assert [(x.kind, x.object, x.position) for x in check.all_problems] == [("size", rows[0].timeindex_key, size)]
    assert f"the object holds {size} bytes but the catalog row says {size + 12}" in check.lines()[0]
    report = recover_partition(catalog, Store(root, backend.options), TP, config=CONFIG, now_ms=T0)
    assert [r.action for r in report.repairs] == ["rebuild-sidecars"]
    live = catalog.live_segments(TP.topic, TP.partition)
    assert live[1:] == rows[1:] and live[0].log_key == rows[0].log_key
    assert (live[0].index_size_bytes, live[0].timeindex_size_bytes) == (
        len(read_bytes(live[0].index_key, backend.options)), len(read_bytes(live[0].timeindex_key, backend.options)))
    assert verify_partition(catalog, TP, CONFIG).ok
