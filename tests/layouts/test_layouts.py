"""Layouts and storage: name validation, key formats, put-if-absent, listing, deletes, Kafka dir scans.

Storage tests run on a local directory and on a moto_server bucket (the `backend` fixture).
"""

from __future__ import annotations

import string
import threading

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.names import (
    InvalidNameError,
    TopicPartition,
    parse_partition_dir,
    validate_partition,
    validate_segment_id,
    validate_topic,
)
from layouts.kafka_layout import KafkaFileKind, classify_kafka_file, kafka_segment_keys, scan_log_dir
from layouts.metering import metered
from layouts.object_layout import (
    batch_index_key,
    batch_index_keys,
    new_segment_id,
    object_segment_keys,
    parse_object_segment_name,
    put_segment_objects,
)
from layouts.store import (
    ObjectConflictError,
    StorageOptions,
    ensure_object,
    filesystem,
    list_objects,
    object_info,
    read_bytes,
)

TOPIC_CHARS = string.ascii_letters + string.digits + "._-"


# --- names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("topic", ["a", "orders", "my.topic_v2-x", "_confluent-command", "x" * 249, "...", ".a"])
def test_valid_topics_pass(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize("topic", ["", ".", "..", "x" * 250, "a/b", "../etc", "a b", "t\x00", "é", "a*", "s3://x"])
def test_invalid_topics_are_rejected(topic: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_topic(topic)


@given(st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=249).filter(lambda t: t not in (".", "..")))
def test_every_kafka_legal_topic_is_accepted(topic: str) -> None:
    assert validate_topic(topic) == topic


@given(st.text(min_size=1, max_size=60).filter(lambda t: any(c not in TOPIC_CHARS for c in t)))
def test_any_character_outside_kafkas_set_is_rejected(topic: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_topic(topic)


@pytest.mark.parametrize("partition", [-1, 2**31, "3", 1.0, True, None])
def test_invalid_partitions_are_rejected(partition: object) -> None:
    with pytest.raises(InvalidNameError):
        validate_partition(partition)  # type: ignore[arg-type]


@pytest.mark.parametrize("segment_id", ["", "ABC", "a/b", "a-b", "x" * 65, "a.log"])
def test_invalid_segment_ids_are_rejected(segment_id: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_segment_id(segment_id)


@pytest.mark.parametrize(("name", "expected"), [
    ("orders-0", TopicPartition("orders", 0)),
    ("my-topic-12", TopicPartition("my-topic", 12)),
    ("a.b_c-3", TopicPartition("a.b_c", 3)),
    ("orders-0.5c3f1d1e9a4b4f0e8d3c2b1a0f9e8d7c-delete", None),
    ("orders-0.5c3f1d1e9a4b4f0e8d3c2b1a0f9e8d7c-future", None),
    ("orders-0.5c3f1d1e9a4b4f0e8d3c2b1a0f9e8d7c-stray", None),
    ("orders", None),
    ("orders-x", None),
    ("-0", None),
    ("..-0", None),
    ("orders-99999999999", None),
    ("bad topic-0", None),
])
def test_partition_directory_names(name: str, expected: TopicPartition | None) -> None:
    assert parse_partition_dir(name) == expected


@pytest.mark.parametrize(("name", "kind", "offset"), [
    ("00000000000000000000.log", KafkaFileKind.LOG, 0),
    ("00000000000000368769.index", KafkaFileKind.INDEX, 368769),
    ("00000000000000368769.timeindex", KafkaFileKind.TIMEINDEX, 368769),
    ("00000000000000368769.txnindex", KafkaFileKind.TXNINDEX, 368769),
    ("00000000000000022964.snapshot", KafkaFileKind.SNAPSHOT, 22964),
    ("00000000000000000042.log.deleted", KafkaFileKind.TEMPORARY, None),
    ("00000000000000000042.log.cleaned", KafkaFileKind.TEMPORARY, None),
    ("00000000000000000042.index.swap", KafkaFileKind.TEMPORARY, None),
    ("leader-epoch-checkpoint", KafkaFileKind.METADATA, None),
    ("partition.metadata", KafkaFileKind.METADATA, None),
    ("0000000000000000042.log", KafkaFileKind.UNKNOWN, None),
    ("00000000000000000042-abc.log", KafkaFileKind.UNKNOWN, None),
    ("notes.txt", KafkaFileKind.UNKNOWN, None),
])
def test_kafka_file_classification(name: str, kind: KafkaFileKind, offset: int | None) -> None:
    assert classify_kafka_file(name) == (kind, offset)


def test_key_formats_of_both_layouts() -> None:
    tp = TopicPartition("orders", 7)
    keys = object_segment_keys("s3://bucket/root", tp, 368769, "0a1b2c3d4e5f6a7b")
    assert keys.log == "s3://bucket/root/orders-7/00000000000000368769-0a1b2c3d4e5f6a7b.log"
    assert keys.index.endswith("/orders-7/00000000000000368769-0a1b2c3d4e5f6a7b.index")
    assert keys.timeindex.endswith("/orders-7/00000000000000368769-0a1b2c3d4e5f6a7b.timeindex")
    kafka = kafka_segment_keys("/data/kafka", tp, 368769)
    assert kafka.all() == ("/data/kafka/orders-7/00000000000000368769.log",
                           "/data/kafka/orders-7/00000000000000368769.index",
                           "/data/kafka/orders-7/00000000000000368769.timeindex")
    parsed = parse_object_segment_name(keys.log.rsplit("/", 1)[1])
    assert (parsed.base_offset, parsed.segment_id, parsed.suffix) == (368769, "0a1b2c3d4e5f6a7b", "log")
    assert parse_object_segment_name("00000000000000368769.log") is None
    with pytest.raises(InvalidNameError):
        object_segment_keys("/r", tp, 0, "../../etc")
    with pytest.raises(ValueError):
        object_segment_keys("/r", tp, -1, new_segment_id())


def test_new_segment_ids_are_valid_and_distinct() -> None:
    ids = {new_segment_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(validate_segment_id(i) for i in ids)


# --- storage, on both backends ---------------------------------------------------------------

def test_put_if_absent_never_overwrites(backend) -> None:
    uri = backend.uri("t-0", "00000000000000000000-aa.log")
    backend.store().put_if_absent(uri, b"first")
    with pytest.raises(FileExistsError):
        backend.store().put_if_absent(uri, b"second")
    assert read_bytes(uri, backend.options) == b"first"
    assert ensure_object(uri, b"first", backend.options) is False
    with pytest.raises(ObjectConflictError):
        ensure_object(uri, b"other", backend.options)
    assert read_bytes(uri, backend.options) == b"first"
    assert object_info(uri, backend.options).size == 5
    assert object_info(backend.uri("t-0", "missing"), backend.options) is None


def test_an_object_in_parts_is_written_as_their_concatenation(backend) -> None:
    """`Parts` (a segment's batches, not joined) make the same object as their bytes joined, counted as
    one PUT of all of them, and a re-run compares them as one."""
    parts = [b"batch-0 " * 3000, b"", b"b1", bytearray(b"batch-2" * 5), memoryview(b"tail")]
    joined = b"".join(parts)
    keys = object_segment_keys(backend.base, TopicPartition("t", 0), 0, "parts")
    with metered() as meter:
        put_segment_objects(keys, parts, b"I" * 8, b"T" * 12, backend.store())
    assert read_bytes(keys.log, backend.options) == joined
    assert meter.bytes["written"] == len(joined) + 20 and meter.requests["PUT"] == 3
    assert ensure_object(keys.log, parts, backend.options) is False
    with pytest.raises(ObjectConflictError):
        ensure_object(keys.log, [*parts[:-1], b"TAIL"], backend.options)
    assert read_bytes(keys.log, backend.options) == joined


def test_read_view_holds_the_range_and_outlives_the_object(backend) -> None:
    """`read_view` gives the bytes `read_bytes` gives for a range (a local file's mapped, at offsets that are
    not page-aligned, past the end cut short), one GET each; a local view stays readable after the
    file is deleted (staged rows are deleted while their last batches may still be in use)."""
    data = bytes(range(256)) * 300
    uri = backend.uri("staging", "x.arrow")
    backend.store().put_if_absent(uri, data)
    for start, end in ((0, len(data)), (5000, 70_001), (len(data) - 3, len(data) + 100), (9, 9)):
        with metered() as meter:
            view = backend.store().read_view(uri, start, end)
        assert bytes(view) == read_bytes(uri, backend.options, start, min(end, len(data)))
        assert meter.requests == {"GET": 1} and meter.bytes.get("read", 0) == len(bytes(view))
    view = backend.store().read_view(uri, 4097, 9000)
    backend.store().delete_many([uri])
    assert bytes(view) == data[4097:9000]


def test_concurrent_put_if_absent_has_exactly_one_winner(backend) -> None:
    uri = backend.uri("_leases", "race.lease")
    barrier = threading.Barrier(6)
    winners: list[int] = []
    losers: list[int] = []

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            backend.store().put_if_absent(uri, f"writer {i}".encode())
            winners.append(i)
        except FileExistsError:
            losers.append(i)

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 5
    assert read_bytes(uri, backend.options) == f"writer {winners[0]}".encode()


def test_write_segment_writes_three_objects_and_is_rerunnable(backend) -> None:
    keys = object_segment_keys(backend.base, TopicPartition("t", 0), 10, "abc")
    put_segment_objects(keys, b"L" * 100, b"I" * 8, b"T" * 12, backend.store())
    put_segment_objects(keys, b"L" * 100, b"I" * 8, b"T" * 12, backend.store())
    assert [object_info(k, backend.options).size for k in keys.all()] == [100, 8, 12]
    with pytest.raises(ObjectConflictError):
        put_segment_objects(keys, b"X" * 100, b"I" * 8, b"T" * 12, backend.store())


def test_the_batch_index_key_sits_beside_the_timeindex_and_is_written_last(backend) -> None:
    """klake's `.batchindex` (`engine.index.batch_index`): named after its `.timeindex`, a klake object name scrub
    recognises, one key per row as Arrow (null where a row has none), written after Kafka's three files."""
    keys = object_segment_keys(backend.base, TopicPartition("t", 0), 10, "abc")
    assert keys.batchindex == keys.log.removesuffix(".log") + ".batchindex" == batch_index_key(keys.timeindex)
    parsed = parse_object_segment_name(keys.batchindex.rsplit("/", 1)[1])
    assert (parsed.base_offset, parsed.segment_id, parsed.suffix) == (10, "abc", "batchindex")
    times = pa.chunked_array([[keys.timeindex, "/k/00000000000000000000.timeindex", "/x/other"]])
    assert batch_index_keys(times, pa.chunked_array([[40, None, 40]], pa.int64())).to_pylist() == [
        keys.batchindex, None, None]
    put_segment_objects(keys, b"L" * 100, b"I" * 8, b"T" * 12, backend.store(), batchindex=b"B" * 20)
    put_segment_objects(keys, b"L" * 100, b"I" * 8, b"T" * 12, backend.store(), batchindex=b"B" * 20)
    assert [object_info(k, backend.options).size for k in (*keys.all(), keys.batchindex)] == [100, 8, 12, 20]
    with pytest.raises(ObjectConflictError):
        put_segment_objects(keys, b"L" * 100, b"I" * 8, b"T" * 12, backend.store(), batchindex=b"C" * 20)


def test_listing_and_bulk_delete(backend) -> None:
    names = [f"t-{p}/{i:020d}-ab.log" for p in range(2) for i in range(3)]
    for n, name in enumerate(names):
        backend.put(backend.uri(name), b"x" * n)
    listed = list_objects(backend.base, backend.options)
    assert [o.uri for o in listed] == sorted(backend.uri(n) for n in names)
    assert {o.uri: o.size for o in listed} == {backend.uri(n): i for i, n in enumerate(names)}
    assert backend.store().list_dirs(backend.base) == [backend.uri("t-0"), backend.uri("t-1")]
    result = backend.store().delete_many([backend.uri(n) for n in names[:4]])
    assert sorted(result.deleted) == sorted(backend.uri(n) for n in names[:4])
    assert not result.failed
    assert [o.uri for o in list_objects(backend.base, backend.options)] == sorted(backend.uri(n) for n in names[4:])
    assert list_objects(backend.uri("nothing-here"), backend.options) == []


@pytest.mark.s3
def test_s3_bulk_delete_sends_at_most_1000_keys_per_request(s3_backend) -> None:
    backend = s3_backend
    fs, bucket = filesystem(backend.base, backend.options)
    keys = [f"{bucket}/t-0/{i:020d}-ab.index" for i in range(1001)]
    stored = keys[::100]  # S3 reports deleting an absent key as success, so only a few need to exist
    fs.pipe({k: b"" for k in stored})
    calls: list[int] = []
    real_call = fs.call_s3

    def counting_call(method: str, *args, **kwargs):
        if method == "delete_objects":
            calls.append(len(kwargs["Delete"]["Objects"]))
        return real_call(method, *args, **kwargs)

    fs.call_s3 = counting_call
    try:
        result = backend.store().delete_many([f"s3://{k}" for k in keys])
    finally:
        del fs.call_s3
    assert calls == [1000, 1]
    assert result.requests == 2 and len(result.deleted) == 1001 and not result.failed
    assert list_objects(backend.base, backend.options) == []


def test_scan_log_dir_recognises_every_non_segment_file(backend, kafka_fixtures) -> None:
    src = backend.uri("logdir")
    tp_dir = kafka_fixtures / "broker" / "timeindex_test-0"
    backend.upload_tree(tp_dir, backend.uri("logdir", "timeindex_test-0"))
    extra = {
        "timeindex_test-0/00000000000000030565.txnindex": b"",
        "timeindex_test-0/00000000000000040000.log.deleted": b"x",
        "timeindex_test-0/00000000000000040000.log.cleaned": b"x",
        "timeindex_test-0/00000000000000040000.log.swap": b"x",
        "timeindex_test-0/00000000000000050000.index": b"\x00" * 8,
        "timeindex_test-0.0123456789abcdef0123456789abcdef-delete/00000000000000000000.log": b"x",
        "other-3.0123456789abcdef0123456789abcdef-future/00000000000000000000.log": b"x",
        "other-4.0123456789abcdef0123456789abcdef-stray/00000000000000000000.log": b"x",
        "not a partition/00000000000000000000.log": b"x",
        "recovery-point-offset-checkpoint": b"0\n",
        "empty-2/00000000000000000100.log": b"",
    }
    for name, data in extra.items():
        backend.put(backend.uri("logdir", name), data)
    log_dir = scan_log_dir(src, backend.options)
    assert [p.tp for p in log_dir.partitions] == [TopicPartition("empty", 2), TopicPartition("timeindex_test", 0)]
    part = log_dir.partitions[1]
    assert [s.base_offset for s in part.segments] == [0, 7729, 15363, 22964]
    assert all(s.index is not None and s.timeindex is not None for s in part.segments)
    assert [s.log.size for s in part.segments] == [
        (tp_dir / f"{b:020d}.log").stat().st_size for b in (0, 7729, 15363, 22964)]
    assert [o.name for o in part.orphan_indexes] == ["00000000000000050000.index"]
    kinds = {kind: sorted(i.name for i in infos) for kind, infos in part.other_files.items()}
    assert kinds == {
        KafkaFileKind.SNAPSHOT: ["00000000000000007729.snapshot", "00000000000000015363.snapshot",
                                 "00000000000000022964.snapshot"],
        KafkaFileKind.METADATA: ["leader-epoch-checkpoint", "partition.metadata"],
        KafkaFileKind.TXNINDEX: ["00000000000000030565.txnindex"],
        KafkaFileKind.TEMPORARY: ["00000000000000040000.log.cleaned", "00000000000000040000.log.deleted",
                                  "00000000000000040000.log.swap"],
    }
    assert sorted(log_dir.skipped_dirs) == [
        "not a partition", "other-3.0123456789abcdef0123456789abcdef-future",
        "other-4.0123456789abcdef0123456789abcdef-stray",
        "timeindex_test-0.0123456789abcdef0123456789abcdef-delete"]
    assert log_dir.partitions[0].segments[0].log.size == 0


def test_storage_options_come_from_the_environment_and_hide_secrets(monkeypatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-value")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("KLAKE_S3_ENDPOINT_URL", "http://127.0.0.1:9999")
    options = StorageOptions.from_env()
    assert options.delta_storage_options() == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9999", "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY",
        "AWS_SECRET_ACCESS_KEY": "very-secret-value", "AWS_SESSION_TOKEN": "session-token-value",
        "AWS_REGION": "eu-west-1"}
    assert options.s3fs_kwargs()["client_kwargs"] == {"endpoint_url": "http://127.0.0.1:9999",
                                                      "region_name": "eu-west-1"}
    assert StorageOptions.from_env("https://s3.example.com").delta_storage_options()["AWS_ENDPOINT_URL"] == \
        "https://s3.example.com"
    assert "AWS_ALLOW_HTTP" not in StorageOptions.from_env("https://s3.example.com").delta_storage_options()
    shown = repr(options) + str(options)
    assert "very-secret-value" not in shown and "session-token-value" not in shown and "AKIAEXAMPLEKEY" not in shown
