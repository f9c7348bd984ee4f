"""Every format defect is reported with the file, the byte position and the field at fault."""

from __future__ import annotations

import struct

import crc32c
import pytest

from engine.format.batch import scan_batches
from engine.format.builder import encode_batch
from engine.format.records import decode_records
from kernel.errors import CorruptRecordError, TruncatedBatchError

SOURCE = "seg.log"


def _batches() -> bytes:
    first = encode_batch([b"a", b"b"], [b"1", b"2"], [10, 11], base_offset=0)
    second = encode_batch([b"c"], [b"3"], [12], base_offset=2)
    return first + second


def _recrc(batch: bytearray, at: int = 0) -> bytearray:
    struct.pack_into(">I", batch, at + 17, crc32c.crc32c(bytes(batch[at + 21:])))
    return batch


def _decode(data: bytes):
    scan = scan_batches(data, SOURCE)
    return decode_records(data, scan.headers, SOURCE)


def test_crc_mismatch_names_batch_position() -> None:
    data = bytearray(_batches())
    second = len(encode_batch([b"a", b"b"], [b"1", b"2"], [10, 11]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError) as err:
        scan_batches(bytes(data), SOURCE)
    assert (err.value.source, err.value.position, err.value.field) == (SOURCE, second, "crc")
    lenient = scan_batches(bytes(data), SOURCE, strict=False)
    assert lenient.valid_bytes == second and len(lenient.problems) == 1


def test_partial_trailing_batch_is_reported_not_dropped() -> None:
    data = _batches()
    cut = data[:-5]
    with pytest.raises(TruncatedBatchError) as err:
        scan_batches(cut, SOURCE)
    first_size = len(encode_batch([b"a", b"b"], [b"1", b"2"], [10, 11]))
    assert err.value.position == first_size
    assert "partial trailing batch" in str(err.value)
    lenient = scan_batches(cut, SOURCE, strict=False)
    assert len(lenient.headers) == 1 and lenient.valid_bytes == first_size


def test_fewer_bytes_than_a_batch_prefix_are_reported() -> None:
    data = _batches() + b"\x00" * 10
    with pytest.raises(TruncatedBatchError, match="10 trailing bytes"):
        scan_batches(data, SOURCE)


def test_declared_size_below_minimum() -> None:
    data = bytearray(_batches())
    struct.pack_into(">i", data, 8, 13)
    with pytest.raises(CorruptRecordError) as err:
        scan_batches(bytes(data), SOURCE)
    assert (err.value.position, err.value.field) == (0, "size")


def test_declared_batch_size_larger_than_its_records() -> None:
    """Extra bytes after the last record: Kafka's "Incorrect declared batch size"."""
    batch = bytearray(encode_batch([b"a"], [b"1"], [10]))
    batch += b"\x00\x00"
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    data = bytes(_recrc(batch))
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size") as err:
        _decode(data)
    assert err.value.position == 0


def test_record_count_larger_than_records() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], [b"1", b"2"], [10, 11]))
    struct.pack_into(">i", batch, 57, 3)
    with pytest.raises(CorruptRecordError, match="declares 3 records") as err:
        _decode(bytes(_recrc(batch)))
    assert (err.value.position, err.value.field) == (0, "recordsCount")


def test_record_count_smaller_than_records() -> None:
    batch = bytearray(encode_batch([b"a", b"b"], [b"1", b"2"], [10, 11]))
    struct.pack_into(">i", batch, 57, 1)
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size"):
        _decode(bytes(_recrc(batch)))


def test_bad_varint_names_record_and_field() -> None:
    batch = bytearray(encode_batch([b"a"], [b"1"], [10]))
    # record = length, attributes, timestampDelta ...: make the timestamp delta a never-ending varint
    records_at = 61
    length = batch[records_at]
    body = bytes([0x00]) + b"\xff" * ((length >> 1) - 1)
    batch[records_at + 1:records_at + 1 + len(body)] = body
    with pytest.raises(CorruptRecordError) as err:
        _decode(bytes(_recrc(batch)))
    assert err.value.field == "timestampDelta"
    assert err.value.position == records_at
    assert "record 0 of batch at byte 0" in str(err.value)


def test_record_length_mismatch() -> None:
    batch = bytearray(encode_batch([b"ab"], [b"1"], [10]))
    batch[61] += 2  # length says one more byte than the fields use
    batch += b"\x00"
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    with pytest.raises(CorruptRecordError, match="record length does not match its fields"):
        _decode(bytes(_recrc(batch)))


def test_corrupt_compressed_records_name_the_batch() -> None:
    batch = bytearray(encode_batch([b"a"] * 50, [b"x" * 100] * 50, list(range(50)), codec=4))
    batch[70] ^= 0x55
    with pytest.raises(CorruptRecordError) as err:
        _decode(bytes(_recrc(batch)))
    assert err.value.position == 0 and err.value.field == "records"


def test_unknown_magic() -> None:
    data = bytearray(_batches())
    data[16] = 7
    with pytest.raises(CorruptRecordError, match="unknown magic 7"):
        scan_batches(bytes(data), SOURCE)
