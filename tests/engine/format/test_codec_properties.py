"""Property tests: klake's v2 codec against kafka-python, an independent implementation.

Random records (null keys/values, headers with null values, offset gaps, out-of-order and extreme
timestamps, every codec) written by klake are read back identically by kafka-python, and bytes
kafka-python writes are read identically by klake.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from engine.format import compression
from engine.format.batch import LOG_APPEND_TIME, scan_batches
from engine.format.builder import encode_batch, encode_batches
from engine.format.records import decode_records
from tests.oracles.kafka_python import read_with_kafka_python

TS = st.one_of(st.integers(0, 2**41), st.just(-1), st.integers(-(2**62), 2**62))
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
RECORD = st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300)),
                   TS, HEADERS)
CODECS = st.sampled_from(sorted(compression.NAMES))
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def record_batches(draw):
    records = draw(st.lists(RECORD, min_size=1, max_size=40))
    gaps = draw(st.lists(st.integers(1, 1000), min_size=len(records), max_size=len(records)))
    start = draw(st.integers(0, 10))
    deltas = np.cumsum([start] + gaps[1:])
    return records, deltas, draw(st.integers(0, 2**40)), draw(CODECS)


def _columns(records):
    keys, values, ts, headers = zip(*records, strict=True)
    return list(keys), list(values), list(ts), [list(h) for h in headers]


def _klake_read(data: bytes) -> list[tuple]:
    scan = scan_batches(data, "prop")
    table = decode_records(data, scan.headers, "prop").to_arrow(scan.headers).to_pydict()
    return [(o, t, k, v, [(h["key"], h["value"]) for h in hs]) for o, t, k, v, hs in
            zip(table["offset"], table["timestamp"], table["key"], table["value"], table["headers"], strict=True)]


def _kafka_python_read(data: bytes) -> list[tuple]:
    return [(o, t, k, v, list(h)) for o, t, k, v, h in read_with_kafka_python(data)[0]]


@SETTINGS
@given(record_batches())
def test_klake_writes_what_kafka_python_reads(case) -> None:
    records, deltas, base_offset, codec = case
    keys, values, ts, headers = _columns(records)
    data = encode_batch(keys, values, ts, headers, base_offset=base_offset, offset_deltas=deltas, codec=codec)
    expected = [(base_offset + int(d), t, k, v, h) for d, (k, v, t, h) in zip(deltas, records, strict=True)]
    assert _kafka_python_read(data) == expected
    assert _klake_read(data) == expected


@SETTINGS
@given(record_batches())
def test_klake_reads_what_kafka_python_writes(case) -> None:
    records, deltas, base_offset, codec = case
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 10**9)
    for (key, value, ts, headers), delta in zip(records, deltas, strict=True):
        builder.append(int(delta), ts, key, value, headers)
    data = bytearray(builder.build())
    data[0:8] = base_offset.to_bytes(8, "big")  # kafka-python writes base offset 0 and epoch 0: not under the CRC
    data[12:16] = (-1).to_bytes(4, "big", signed=True)
    expected = [(base_offset + int(d), t, k, v, h) for d, (k, v, t, h) in zip(deltas, records, strict=True)]
    assert _klake_read(bytes(data)) == expected


@SETTINGS
@given(st.lists(RECORD, min_size=1, max_size=60), st.data())
def test_encode_batches_equals_one_batch_at_a_time(records, data) -> None:
    keys, values, ts, headers = _columns(records)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(records) - 1), max_size=5))) if len(records) > 1 else []
    lengths = np.diff([0, *cuts, len(records)])
    codec = data.draw(CODECS)
    together = encode_batches(keys, values, ts, headers, batch_lengths=lengths, base_offset=7, codec=codec)
    one_by_one, start = [], 0
    for n in lengths:
        sl = slice(start, start + n)
        one_by_one.append(encode_batch(keys[sl], values[sl], ts[sl], headers[sl], base_offset=7 + start, codec=codec))
        start += n
    if codec == compression.NONE:
        assert together == one_by_one
    assert _klake_read(b"".join(together)) == _klake_read(b"".join(one_by_one))


@pytest.mark.parametrize("codec", sorted(compression.NAMES))
def test_log_append_time_batches_report_the_append_time(codec: int) -> None:
    data = encode_batch([b"k1", b"k2"], [b"v1", b"v2"], [5, 3], base_offset=100, codec=codec,
                        timestamp_type=LOG_APPEND_TIME, log_append_time=1_700_000_000_123)
    expected = [1_700_000_000_123, 1_700_000_000_123]
    assert [t for _, t, *_ in _kafka_python_read(data)] == expected
    assert [t for _, t, *_ in _klake_read(data)] == expected


def test_empty_retained_batch_keeps_offsets_and_max_timestamp() -> None:
    """The cleaner keeps a batch header with no records (spec 8.4, KAFKA-17076)."""
    data = encode_batch([], [], [], base_offset=40, last_offset_delta=9, max_timestamp=1234)
    scan = scan_batches(data, "empty")
    assert (int(scan.headers.base_offset[0]), int(scan.headers.last_offset[0])) == (40, 49)
    assert int(scan.headers.max_timestamp[0]) == 1234 and int(scan.headers.records_count[0]) == 0
    assert _klake_read(data) == [] and _kafka_python_read(data) == []
