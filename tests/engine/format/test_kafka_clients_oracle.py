"""Oracle: Apache kafka-clients 4.1.1 (the broker's own record classes) reads what klake writes, and back.

One bare JVM is started for the module with py4j (the `py4j` that pyspark depends on; no Spark
session is needed) on the `kafka` set that `tests/oracles/fetch_jvm.py` resolves into `.cache/jvm/kafka/`;
without the jars or `java` the module fails under `CI` and skips, saying why, elsewhere.

- klake -> Java: batches of every codec (null keys/values, headers with null values, offset gaps,
  LogAppendTime, producer state, transactional data and control batches, empty and delete-horizon
  batches) pass `RecordBatch.ensureValid()` and Java reads exactly the records and header fields
  klake wrote, from `MemoryRecords` and from a `.log` file through `FileRecords`.
- Java -> klake: batches that `MemoryRecordsBuilder` writes with every codec decode in klake to the
  records Java was given.
- Uncompressed batches klake writes are byte-identical to `MemoryRecordsBuilder`'s.

Large batches are re-encoded on the Java side without a py4j round trip per record: a `Consumer`
made from a `MethodHandle` to `MemoryRecordsBuilder.append(Record)` is fed by a stream over the batch.
"""

from __future__ import annotations

import functools
import struct
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from engine.format import compression
from engine.format.batch import CREATE_TIME, LOG_APPEND_TIME, scan_batches
from engine.format.builder import CONTROL_ABORT, CONTROL_COMMIT, encode_batch, encode_batches
from engine.format.records import decode_records
from tests.codecs_for_tests import control_record
from tests.oracles import fetch_jvm

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]
JAVA_CODEC = {compression.NONE: "NONE", compression.GZIP: "GZIP", compression.SNAPPY: "SNAPPY",
              compression.LZ4: "LZ4", compression.ZSTD: "ZSTD"}
JAVA_TIMESTAMP_TYPE = {CREATE_TIME: "CREATE_TIME", LOG_APPEND_TIME: "LOG_APPEND_TIME"}
T0 = 1_700_000_000_000
INT32_MAX = 2**31 - 1

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Rec:
    """One record as a reader sees it (LogAppendTime already applied)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    sequence: int = -1


@dataclass
class JavaBatch:
    """A batch as kafka-clients reports it: header fields and records (`java_records` for Java calls)."""

    fields: dict[str, Any]
    records: list[Rec]
    java_records: list[Any] = field(repr=False, default_factory=list)


# ---------------------------------------------------------------------------------------------- JVM


class KafkaClients:
    """kafka-clients in a JVM reached through py4j."""

    def __init__(self, gateway) -> None:
        self.gateway = gateway
        self.jvm = jvm = gateway.jvm
        self.record = jvm.org.apache.kafka.common.record
        self.utils = jvm.org.apache.kafka.common.utils.Utils
        self.compression = jvm.org.apache.kafka.common.compress.Compression
        self.magic = self.record.RecordBatch.CURRENT_MAGIC_VALUE
        cls = jvm.java.lang.Class.forName
        append_type = jvm.java.lang.invoke.MethodType.methodType(
            jvm.java.lang.Void.TYPE, cls("org.apache.kafka.common.record.Record"))
        self._append_handle = jvm.java.lang.invoke.MethodHandles.publicLookup().findVirtual(
            cls("org.apache.kafka.common.record.MemoryRecordsBuilder"), "append", append_type)
        self._consumer_class = cls("java.util.function.Consumer")

    # -- helpers
    @staticmethod
    def iterate(java_iterable) -> Iterator[Any]:
        """Every element; a Java exception while reading one fails loudly (py4j's iterator wrapper turns
        it into StopIteration, which a plain `for` loop would take for the end)."""
        it = java_iterable.iterator()
        while it.hasNext():
            try:
                element = it.next()
            except StopIteration as exc:
                raise AssertionError(f"kafka-clients failed while iterating: {exc}") from None
            yield element

    def to_bytes(self, buffer) -> bytes | None:
        return None if buffer is None else bytes(self.utils.toArray(buffer))

    def codec(self, codec: int):
        return self.compression.of(self.record.CompressionType.forId(codec)).build()

    def timestamp_type(self, timestamp_type: int):
        return self.record.TimestampType.valueOf(JAVA_TIMESTAMP_TYPE[timestamp_type])

    def header_array(self, headers: Headers):
        array = self.gateway.new_array(self.jvm.org.apache.kafka.common.header.Header, len(headers))
        for i, (key, value) in enumerate(headers):
            array[i] = self.jvm.org.apache.kafka.common.header.internals.RecordHeader(key, value)
        return array

    def memory_records(self, data: bytes):
        return self.record.MemoryRecords.readableRecords(self.jvm.java.nio.ByteBuffer.wrap(data))

    # -- reading
    def read_batch(self, batch) -> JavaBatch:
        batch.ensureValid()  # raises CorruptRecordException on a bad size or CRC
        horizon = batch.deleteHorizonMs()
        fields = {
            "valid": batch.isValid(),
            "magic": batch.magic(),
            "size": batch.sizeInBytes(),
            "checksum": batch.checksum(),
            "base_offset": batch.baseOffset(),
            "last_offset": batch.lastOffset(),
            "next_offset": batch.nextOffset(),
            "count": batch.countOrNull(),
            "max_timestamp": batch.maxTimestamp(),
            "timestamp_type": batch.timestampType().name(),
            "compression": batch.compressionType().name(),
            "compressed": batch.isCompressed(),
            "transactional": batch.isTransactional(),
            "control": batch.isControlBatch(),
            "producer_id": batch.producerId(),
            "producer_epoch": batch.producerEpoch(),
            "base_sequence": batch.baseSequence(),
            "last_sequence": batch.lastSequence(),
            "partition_leader_epoch": batch.partitionLeaderEpoch(),
            "delete_horizon": horizon.getAsLong() if horizon.isPresent() else None,
        }
        records, java_records = [], []
        for r in self.iterate(batch):  # iterating to the end also checks for trailing bytes
            r.ensureValid()
            headers = tuple((h.key(), None if h.value() is None else bytes(h.value())) for h in r.headers())
            records.append(Rec(r.offset(), r.timestamp(), self.to_bytes(r.key()), self.to_bytes(r.value()),
                               headers, r.sequence()))
            java_records.append(r)
        return JavaBatch(fields, records, java_records)

    def read(self, data: bytes) -> list[JavaBatch]:
        memory_records = self.memory_records(data)
        assert memory_records.sizeInBytes() == len(data)
        assert memory_records.validBytes() == len(data)
        return [self.read_batch(b) for b in self.iterate(memory_records.batches())]

    # -- writing
    def builder(self, codec: int = compression.NONE, *, base_offset: int = 0, timestamp_type: int = CREATE_TIME,
                log_append_time: int = -1, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, transactional: bool = False, control: bool = False,
                partition_leader_epoch: int = -1, delete_horizon: int = -1, capacity: int = 1024):
        """`MemoryRecordsBuilder`'s full constructor (the one the log cleaner uses)."""
        stream = self.jvm.org.apache.kafka.common.utils.ByteBufferOutputStream(capacity)
        return self.record.MemoryRecordsBuilder(
            stream, self.magic, self.codec(codec), self.timestamp_type(timestamp_type), base_offset,
            log_append_time, producer_id, producer_epoch, base_sequence, transactional, control,
            partition_leader_epoch, INT32_MAX, delete_horizon)

    def built_bytes(self, builder) -> bytes:
        return self.to_bytes(builder.build().buffer())

    def write(self, records: list[Rec], codec: int = compression.NONE, **kwargs) -> bytes:
        """One batch written by `MemoryRecordsBuilder.appendWithOffset`, record by record."""
        builder = self.builder(codec, **kwargs)
        for r in records:
            builder.appendWithOffset(r.offset, r.timestamp, r.key, r.value, self.header_array(r.headers))
        return self.built_bytes(builder)

    def rewrite(self, data: bytes, codec: int) -> bytes:
        """Every batch of `data` read by kafka-clients and written again with `codec`, all on the Java side
        (one builder per batch; same base offset, timestamp type and producer fields)."""
        out = []
        stream_support, spliterators = self.jvm.java.util.stream.StreamSupport, self.jvm.java.util.Spliterators
        proxies = self.jvm.java.lang.invoke.MethodHandleProxies
        for batch in self.iterate(self.memory_records(data).batches()):
            batch.ensureValid()
            builder = self.record.MemoryRecords.builder(
                self.jvm.java.nio.ByteBuffer.allocate(1024), self.magic, self.codec(codec), batch.timestampType(),
                batch.baseOffset(), -1, batch.producerId(), batch.producerEpoch(), batch.baseSequence(),
                batch.isTransactional(), batch.partitionLeaderEpoch())
            append = proxies.asInterfaceInstance(self._consumer_class, self._append_handle.bindTo(builder))
            stream_support.stream(spliterators.spliteratorUnknownSize(batch.iterator(), 0), False).forEach(append)
            out.append(self.built_bytes(builder))
        return b"".join(out)


def _py4j_jar() -> str:
    from py4j.java_gateway import find_jar_path

    path = find_jar_path()
    if path:
        return path
    import py4j
    import pyspark

    candidates = sorted((Path(pyspark.__file__).parent / "jars").glob(f"py4j-{py4j.__version__}.jar"))
    if not candidates:
        pytest.skip(f"py4j {py4j.__version__} jar not found (neither py4j's own nor pyspark's)")
    return str(candidates[0])


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaClients]:
    classpath = fetch_jvm.require("kafka")
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    port, token, proc = launch_gateway(jarpath=_py4j_jar(), classpath=classpath, javaopts=["-Xmx512m"],
                                       die_on_exit=True, enable_auth=True, return_proc=True)
    # No memory management: py4j then registers no finalizers, so no Python object reaches into the JVM
    # when it is garbage collected. (A finalizer running after the gateway closed, during pytest's
    # `ast.parse` of a late import, made CPython 3.11.7 raise "AST constructor recursion depth
    # mismatch".) The JVM keeps what the module creates, a few tens of MB, until it exits.
    gateway = JavaGateway(gateway_parameters=GatewayParameters(
        port=port, auth_token=token, auto_convert=False, enable_memory_management=False))
    try:
        clients = KafkaClients(gateway)
        version = gateway.jvm.org.apache.kafka.common.utils.AppInfoParser.getVersion()
        assert version == fetch_jvm.pinned_version("kafka"), version
        yield clients
    finally:
        gateway.close()
        proc.stdin.close()  # die_on_exit: the JVM exits when its stdin closes
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


# ------------------------------------------------------------------------------------------- inputs


def rich_records(n: int = 48, *, base_offset: int = 0, deltas: list[int] | None = None,
                 seed: int = 0) -> list[Rec]:
    """Records with every shape a batch can hold: null / empty keys and values, a 70 KB value, unsorted
    timestamps (negative deltas), headers (none, several, duplicate keys, empty and non-ASCII keys, null
    and empty values)."""
    rng = np.random.default_rng(seed)
    deltas = list(range(n)) if deltas is None else deltas
    header_shapes: list[Headers] = [
        (),
        (("trace-id", b"abc-123"),),
        (("n", None), ("", b""), ("ключ", b"\x00\xff\x80")),
        (("dup", b"1"), ("dup", b"2"), ("dup", None)),
    ]
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"" if i % 11 == 5 else f"key-{i}".encode()
        if i % 5 == 2:
            value = None
        elif i == 17:
            value = bytes(rng.integers(0, 256, 70_000, dtype=np.uint8))  # 3-byte length varint
        elif i % 3 == 0:
            value = (f"value {i} " * int(rng.integers(1, 40))).encode()
        else:
            value = bytes(rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8))
        timestamp = T0 + int(rng.integers(-50_000, 50_000))
        out.append(Rec(base_offset + deltas[i], timestamp, key, value, header_shapes[i % 4]))
    return out


def bulk_records(n: int) -> list[Rec]:
    """Many mid-sized, partly compressible records (several compression blocks per batch)."""
    return list(_bulk_records(6_000)[:n])


@functools.cache
def _bulk_records(n: int) -> tuple[Rec, ...]:
    rng = np.random.default_rng(1)
    words = np.frombuffer(b"abcdefgh", dtype=np.uint8)
    out = []
    for i in range(n):
        value = bytes(rng.choice(words, int(rng.integers(0, 400))))
        out.append(Rec(i, T0 + i * 3 - int(rng.integers(0, 5)), f"k{i % 97}".encode(), value,
                       (("i", str(i).encode()),) if i % 10 == 0 else ()))
    return tuple(out)


def klake_batch(records: list[Rec], codec: int = compression.NONE, *, base_offset: int | None = None,
                **kwargs) -> bytes:
    base = records[0].offset if base_offset is None else base_offset
    deltas = np.array([r.offset - base for r in records], dtype=np.int64)
    return encode_batch([r.key for r in records], [r.value for r in records], [r.timestamp for r in records],
                        [list(r.headers) for r in records], base_offset=base, offset_deltas=deltas, codec=codec,
                        **kwargs)


def as_read(records: list[Rec], *, log_append_time: int | None = None, base_sequence: int = -1,
            base_offset: int | None = None) -> list[Rec]:
    """What a reader reports for `records` written in one batch."""
    base = records[0].offset if base_offset is None else base_offset
    out = []
    for r in records:
        sequence = -1 if base_sequence < 0 else (base_sequence + r.offset - base) % 2**31
        timestamp = r.timestamp if log_append_time is None else log_append_time
        out.append(Rec(r.offset, timestamp, r.key, r.value, r.headers, sequence))
    return out


def klake_read(data: bytes):
    """(batch header columns, records) as klake decodes `data`."""
    scan = scan_batches(data, "kafka-clients")
    table = decode_records(data, scan.headers, "kafka-clients").to_arrow(scan.headers)
    records = [Rec(row["offset"], row["timestamp"], row["key"], row["value"],
                   tuple((h["key"], h["value"]) for h in row["headers"] or ()))
               for row in table.to_pylist()]
    return scan.headers, table, records


def without_sequence(records: list[Rec]) -> list[Rec]:
    return [Rec(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]


def assert_fields(batch: JavaBatch, data: bytes, **expected) -> None:
    """Fields every batch must have, plus `expected` ones."""
    f = batch.fields
    assert f["valid"] and f["magic"] == 2
    assert f["size"] == len(data)
    assert f["checksum"] == struct.unpack_from(">I", data, 17)[0]
    assert f["next_offset"] == f["last_offset"] + 1
    for name, value in expected.items():
        assert f[name] == value, (name, f[name], value)


# ---------------------------------------------------------------------------------- klake -> Java


@pytest.mark.parametrize("codec", CODECS, ids=compression.NAMES.get)
def test_kafka_clients_reads_klake_batches(kafka: KafkaClients, codec: int) -> None:
    contiguous = rich_records(base_offset=1_000_000_000_123)
    gaps = [3, 4, 9, 10, 11, 30, 31, 100, 101, 102, 500, 501] + list(range(600, 636))
    gapped = rich_records(base_offset=5_000, deltas=gaps, seed=1)
    log_append = rich_records(20, base_offset=9_000, seed=2)
    lat = T0 + 123_456
    data = [
        klake_batch(contiguous, codec, partition_leader_epoch=7),
        klake_batch(gapped, codec, base_offset=5_000, last_offset_delta=640),
        klake_batch(log_append, codec, timestamp_type=LOG_APPEND_TIME, log_append_time=lat),
    ]
    batches = kafka.read(b"".join(data))
    assert len(batches) == 3
    common = {"compression": JAVA_CODEC[codec], "compressed": codec != compression.NONE, "transactional": False,
              "control": False, "producer_id": -1, "producer_epoch": -1, "base_sequence": -1,
              "last_sequence": -1, "delete_horizon": None}

    first, second, third = batches
    assert_fields(first, data[0], base_offset=1_000_000_000_123, last_offset=1_000_000_000_123 + 47, count=48,
                  max_timestamp=max(r.timestamp for r in contiguous), timestamp_type="CREATE_TIME",
                  partition_leader_epoch=7, **common)
    assert first.records == as_read(contiguous)

    assert_fields(second, data[1], base_offset=5_000, last_offset=5_640, count=48,
                  max_timestamp=max(r.timestamp for r in gapped), timestamp_type="CREATE_TIME",
                  partition_leader_epoch=-1, **common)
    assert second.records == as_read(gapped, base_offset=5_000)

    assert_fields(third, data[2], base_offset=9_000, last_offset=9_019, count=20, max_timestamp=lat,
                  timestamp_type="LOG_APPEND_TIME", partition_leader_epoch=-1, **common)
    assert third.records == as_read(log_append, log_append_time=lat)


@pytest.mark.parametrize("codec", [compression.NONE, compression.ZSTD, compression.LZ4], ids=compression.NAMES.get)
def test_kafka_clients_reads_klake_transactions(kafka: KafkaClients, codec: int) -> None:
    pid, epoch, coordinator_epoch = 4242, 3, 17
    records = rich_records(30, base_offset=100, seed=3)
    base_sequence = INT32_MAX - 9  # the sequence wraps inside the second batch
    data_batches = encode_batches([r.key for r in records], [r.value for r in records],
                                  [r.timestamp for r in records], [list(r.headers) for r in records],
                                  batch_lengths=[1, 12, 17], base_offset=100, codec=codec, producer_id=pid,
                                  producer_epoch=epoch, base_sequence=base_sequence, partition_leader_epoch=2,
                                  transactional=True)
    markers = []
    for offset, kind in ((130, CONTROL_COMMIT), (131, CONTROL_ABORT)):
        key, value = control_record(kind, coordinator_epoch)
        markers.append(encode_batch([key], [value], [T0 + offset], base_offset=offset, producer_id=pid,
                                    producer_epoch=epoch, partition_leader_epoch=2, transactional=True,
                                    control=True))
    batches = kafka.read(b"".join(data_batches + markers))
    assert len(batches) == 5

    start = 0
    for batch, raw, length in zip(batches[:3], data_batches, [1, 12, 17], strict=True):
        first_sequence = (base_sequence + start) % 2**31
        part = records[start:start + length]
        assert_fields(batch, raw, base_offset=100 + start, last_offset=100 + start + length - 1, count=length,
                      transactional=True, control=False, producer_id=pid, producer_epoch=epoch,
                      base_sequence=first_sequence, last_sequence=(first_sequence + length - 1) % 2**31,
                      partition_leader_epoch=2, compression=JAVA_CODEC[codec])
        assert batch.records == as_read(part, base_sequence=first_sequence)
        start += length

    control_record_type = kafka.record.ControlRecordType
    end_marker = kafka.record.EndTransactionMarker
    for batch, raw, offset, name in zip(batches[3:], markers, (130, 131), ("COMMIT", "ABORT"), strict=True):
        assert_fields(batch, raw, base_offset=offset, last_offset=offset, count=1, transactional=True, control=True,
                      producer_id=pid, producer_epoch=epoch, base_sequence=-1, partition_leader_epoch=2,
                      compression="NONE", max_timestamp=T0 + offset)
        (record,) = batch.records
        assert record.offset == offset and record.timestamp == T0 + offset
        key_buffer = kafka.jvm.java.nio.ByteBuffer.wrap(record.key)
        assert control_record_type.parse(key_buffer).name() == name
        marker = end_marker.deserialize(batch.java_records[0])
        assert marker.controlType().name() == name
        assert marker.coordinatorEpoch() == coordinator_epoch


def test_kafka_clients_reads_klake_empty_and_delete_horizon_batches(kafka: KafkaClients) -> None:
    # An empty batch the cleaner keeps to preserve producer state (spec 8.4-8.5).
    empty = encode_batch([], [], [], base_offset=50, last_offset_delta=9, max_timestamp=T0, producer_id=77,
                         producer_epoch=1, base_sequence=5, transactional=True, partition_leader_epoch=4)
    records = rich_records(12, base_offset=60, deltas=[0, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233], seed=4)
    horizon = T0 + 86_400_000
    cleaned = klake_batch(records, compression.GZIP, delete_horizon=horizon)
    empty_batch, cleaned_batch = kafka.read(empty + cleaned)

    assert_fields(empty_batch, empty, base_offset=50, last_offset=59, count=0, max_timestamp=T0, producer_id=77,
                  producer_epoch=1, base_sequence=5, last_sequence=14, transactional=True, control=False,
                  partition_leader_epoch=4, delete_horizon=None)
    assert empty_batch.records == []

    assert_fields(cleaned_batch, cleaned, base_offset=60, last_offset=60 + 233, count=12,
                  max_timestamp=max(r.timestamp for r in records), delete_horizon=horizon, compression="GZIP")
    assert cleaned_batch.records == as_read(records)


@pytest.mark.parametrize("codec", CODECS, ids=compression.NAMES.get)
def test_kafka_clients_reads_large_klake_batches(kafka: KafkaClients, codec: int) -> None:
    """~1.4 MB in three batches: many snappy/lz4/zstd/gzip blocks. Java decodes them and writes the
    records again uncompressed; that must equal klake's own uncompressed encoding of the same records."""
    records = bulk_records(6_000)
    columns = ([r.key for r in records], [r.value for r in records], [r.timestamp for r in records],
               [list(r.headers) for r in records])
    lengths = [1, 2_499, 3_500]
    compressed = encode_batches(*columns, batch_lengths=lengths, base_offset=10, codec=codec)
    plain = encode_batches(*columns, batch_lengths=lengths, base_offset=10)

    memory_records = kafka.memory_records(b"".join(compressed))
    counts = []
    for batch, raw in zip(kafka.iterate(memory_records.batches()), compressed, strict=True):
        batch.ensureValid()
        assert batch.sizeInBytes() == len(raw)
        assert batch.compressionType().name() == JAVA_CODEC[codec]
        counts.append(batch.countOrNull())
    assert counts == lengths
    assert kafka.rewrite(b"".join(compressed), compression.NONE) == b"".join(plain)


@pytest.mark.parametrize("codec", [compression.LZ4, compression.ZSTD], ids=compression.NAMES.get)
def test_kafka_clients_reads_batches_encoded_from_chunked_values(kafka: KafkaClients, codec: int) -> None:
    """Values in chunks that batches straddle (as an append's chunk of Arrow batches comes from Spark): each
    compressed batch is encoded from its own slice of the chunks. Java decodes them to the records of the
    values in one array, and the bytes are those of the values in one array."""
    records = bulk_records(6_000)
    values = [r.value for r in records]
    chunked = pa.chunked_array([pa.array(values[i:i + 1_000], pa.binary()) for i in range(0, 6_000, 1_000)])
    columns = ([r.key for r in records], [r.timestamp for r in records], [list(r.headers) for r in records])
    lengths = [1, 2_499, 3_500]  # batches 2 and 3 start and end inside chunks
    compressed = encode_batches(columns[0], chunked, *columns[1:], batch_lengths=lengths, base_offset=10,
                                codec=codec)
    plain = encode_batches(columns[0], values, *columns[1:], batch_lengths=lengths, base_offset=10)

    for batch in kafka.iterate(kafka.memory_records(b"".join(compressed)).batches()):
        batch.ensureValid()
    assert kafka.rewrite(b"".join(compressed), compression.NONE) == b"".join(plain)
    assert b"".join(compressed) == b"".join(encode_batches(columns[0], values, *columns[1:], batch_lengths=lengths,
                                                           base_offset=10, codec=codec))


def test_file_records_reads_a_klake_log(kafka: KafkaClients, tmp_path: Path) -> None:
    """The broker's path: a `.log` file opened with `FileRecords` (`FileLogInputStream` batches)."""
    parts, offset = [], 0
    for codec in CODECS:
        records = rich_records(10, base_offset=offset, seed=codec)
        parts.append(klake_batch(records, codec))
        offset += 10
    key, value = control_record(CONTROL_COMMIT, 1)
    parts.append(encode_batch([key], [value], [T0], base_offset=offset, producer_id=9, producer_epoch=0,
                              transactional=True, control=True))
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(b"".join(parts))

    file_records = kafka.record.FileRecords.open(kafka.jvm.java.io.File(str(log)))
    try:
        assert file_records.sizeInBytes() == log.stat().st_size
        found = []
        for batch in kafka.iterate(file_records.batches()):
            batch.ensureValid()
            found.append((batch.position(), batch.sizeInBytes(), batch.baseOffset(), batch.lastOffset(),
                          batch.compressionType().name(), batch.isControlBatch()))
            assert len(kafka.read_batch(batch).records) == batch.countOrNull()
    finally:
        file_records.closeHandlers()
    scan = scan_batches(log.read_bytes(), str(log))
    h = scan.headers
    assert found == [(int(h.position[i]), int(h.size[i]), int(h.base_offset[i]), int(h.last_offset[i]),
                      JAVA_CODEC[int(h.codec[i])], bool(h.is_control[i])) for i in range(len(h))]
    assert [f[4] for f in found] == [JAVA_CODEC[c] for c in CODECS] + ["NONE"]


# ---------------------------------------------------------------------------------- Java -> klake


@pytest.mark.parametrize("codec", CODECS, ids=compression.NAMES.get)
def test_klake_reads_kafka_clients_batches(kafka: KafkaClients, codec: int) -> None:
    gapped = rich_records(40, base_offset=700, deltas=[3 * i + (i % 3) for i in range(40)], seed=5)
    log_append = rich_records(15, base_offset=800, seed=6)
    lat = T0 + 999
    pid_records = rich_records(9, base_offset=900, seed=7)
    java = [
        kafka.write(gapped, codec, base_offset=700, partition_leader_epoch=3),
        kafka.write(log_append, codec, base_offset=800, timestamp_type=LOG_APPEND_TIME, log_append_time=lat),
        kafka.write(pid_records, codec, base_offset=900, producer_id=31, producer_epoch=2, base_sequence=40,
                    transactional=True),
    ]
    bulk = bulk_records(4_000)
    bulk_plain = klake_batch(bulk)
    java.append(kafka.rewrite(bulk_plain, codec))  # Java's compressors, many blocks
    data = b"".join(java)

    headers, table, records = klake_read(data)
    assert len(headers) == 4
    assert headers.codec.tolist() == [codec] * 4
    assert headers.position.tolist() == np.cumsum([0] + [len(b) for b in java[:-1]]).tolist()
    assert headers.base_offset.tolist() == [700, 800, 900, 0]
    assert headers.last_offset.tolist() == [gapped[-1].offset, 814, 908, 3_999]
    assert headers.records_count.tolist() == [40, 15, 9, 4_000]
    assert headers.partition_leader_epoch.tolist() == [3, -1, -1, -1]
    assert headers.producer_id.tolist() == [-1, -1, 31, -1]
    assert headers.producer_epoch.tolist() == [-1, -1, 2, -1]
    assert headers.base_sequence.tolist() == [-1, -1, 40, -1]
    assert headers.is_transactional.tolist() == [False, False, True, False]
    assert headers.timestamp_type.tolist() == [CREATE_TIME, LOG_APPEND_TIME, CREATE_TIME, CREATE_TIME]
    assert headers.max_timestamp.tolist() == [max(r.timestamp for r in gapped), lat,
                                              max(r.timestamp for r in pid_records), max(r.timestamp for r in bulk)]
    expected = (without_sequence(as_read(gapped)) + without_sequence(as_read(log_append, log_append_time=lat))
                + without_sequence(as_read(pid_records)) + bulk)
    assert records == expected
    assert table.column("compression").to_pylist() == [codec] * len(expected)


# ------------------------------------------------------------------------------ byte identity


def _scenarios() -> dict[str, tuple[list[Rec], dict[str, Any], dict[str, Any]]]:
    """name -> (records, encode_batch kwargs, builder kwargs)."""
    plain = rich_records(48, seed=8)
    no_ts = [Rec(r.offset, -1 if i % 9 == 4 else r.timestamp, r.key, r.value, r.headers)
             for i, r in enumerate(rich_records(20, base_offset=3, seed=9))]
    gaps = rich_records(10, base_offset=2**40, deltas=[1, 2, 4, 8, 16, 32, 64, 128, 256, 70_000], seed=10)
    return {
        "defaults": (plain, {}, {}),
        "base-offset-and-gaps": (gaps, {"base_offset": 2**40}, {"base_offset": 2**40}),
        "no-timestamp-records": (no_ts, {}, {"base_offset": 3}),
        "log-append-time": (plain, {"timestamp_type": LOG_APPEND_TIME, "log_append_time": T0 + 5},
                            {"timestamp_type": LOG_APPEND_TIME, "log_append_time": T0 + 5}),
        "idempotent": (plain, {"producer_id": 2**40 + 1, "producer_epoch": 7, "base_sequence": INT32_MAX - 3,
                               "partition_leader_epoch": 12},
                       {"producer_id": 2**40 + 1, "producer_epoch": 7, "base_sequence": INT32_MAX - 3,
                        "partition_leader_epoch": 12}),
        "transactional": (plain, {"producer_id": 5, "producer_epoch": 0, "base_sequence": 0, "transactional": True},
                          {"producer_id": 5, "producer_epoch": 0, "base_sequence": 0, "transactional": True}),
        "delete-horizon": (gaps, {"base_offset": 2**40, "delete_horizon": T0 + 86_400_000},
                           {"base_offset": 2**40, "delete_horizon": T0 + 86_400_000}),
    }


@pytest.mark.parametrize("scenario", list(_scenarios()))
def test_uncompressed_bytes_match_memory_records_builder(kafka: KafkaClients, scenario: str) -> None:
    records, klake_kwargs, java_kwargs = _scenarios()[scenario]
    ours = klake_batch(records, **klake_kwargs)
    theirs = kafka.write(records, **java_kwargs)
    assert ours == theirs


def test_default_builder_matches_encode_batch_defaults(kafka: KafkaClients) -> None:
    """`MemoryRecords.builder(buffer, magic, compression, CREATE_TIME, baseOffset)` with `append(...)`: what a
    plain (non-idempotent) producer writes; its partition leader epoch is -1 (NO_PARTITION_LEADER_EPOCH)."""
    records = rich_records(30, base_offset=42, seed=11)
    assert kafka.record.RecordBatch.NO_PARTITION_LEADER_EPOCH == -1
    builder = kafka.record.MemoryRecords.builder(
        kafka.jvm.java.nio.ByteBuffer.allocate(256), kafka.magic, kafka.compression.NONE,
        kafka.record.TimestampType.CREATE_TIME, 42)
    for r in records:
        builder.append(r.timestamp, r.key, r.value, kafka.header_array(r.headers))
    theirs = kafka.built_bytes(builder)
    assert kafka.read(theirs)[0].fields["partition_leader_epoch"] == -1
    ours = encode_batch([r.key for r in records], [r.value for r in records], [r.timestamp for r in records],
                        [list(r.headers) for r in records], base_offset=42)
    assert ours == theirs


@pytest.mark.parametrize("kind", [CONTROL_COMMIT, CONTROL_ABORT], ids=["commit", "abort"])
def test_control_batch_bytes_match_end_txn_marker(kafka: KafkaClients, kind: int) -> None:
    builder = kafka.builder(base_offset=77, producer_id=1234, producer_epoch=5, transactional=True, control=True,
                            partition_leader_epoch=9)
    control_type = kafka.record.ControlRecordType.valueOf("COMMIT" if kind == CONTROL_COMMIT else "ABORT")
    builder.appendEndTxnMarker(T0, kafka.record.EndTransactionMarker(control_type, 21))
    theirs = kafka.built_bytes(builder)
    key, value = control_record(kind, 21)
    ours = encode_batch([key], [value], [T0], base_offset=77, producer_id=1234, producer_epoch=5,
                        partition_leader_epoch=9, transactional=True, control=True)
    assert ours == theirs


def test_empty_batch_bytes_match_write_empty_header(kafka: KafkaClients) -> None:
    """The cleaner's retained empty batch (`MemoryRecords.filterTo`, BatchRetention.RETAIN_EMPTY)."""
    buffer = kafka.jvm.java.nio.ByteBuffer.allocate(61)
    kafka.record.DefaultRecordBatch.writeEmptyHeader(
        buffer, kafka.magic, 77, 1, 5, 50, 59, 4, kafka.record.TimestampType.CREATE_TIME, T0, True, False)
    theirs = bytes(buffer.array())
    ours = encode_batch([], [], [], base_offset=50, last_offset_delta=9, max_timestamp=T0, producer_id=77,
                        producer_epoch=1, base_sequence=5, transactional=True, partition_leader_epoch=4)
    assert ours == theirs
