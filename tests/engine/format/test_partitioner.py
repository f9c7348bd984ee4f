"""klake's vectorized murmur2 partitioner against kafka-python's port of Kafka's `Utils.murmur2`."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2

from engine.format.partitioner import murmur2, partition_for_keys


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=50))
def test_murmur2_matches_kafka(keys: list[bytes]) -> None:
    ours = murmur2(pa.array(keys, pa.binary())).tolist()
    assert ours == [kafka_murmur2(k) & 0xFFFFFFFF for k in keys]


def test_known_java_values() -> None:
    """Values from Kafka's UtilsTest.testMurmur2 (as signed ints)."""
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    ours = murmur2(pa.array(list(cases), pa.binary())).astype("int64")
    assert [(v - (1 << 32)) if v >= 1 << 31 else v for v in ours.tolist()] == list(cases.values())


def test_partition_for_keys_positive_modulo_and_null_keys() -> None:
    keys = pa.array([b"21", None, b"foobar", b""], pa.binary())
    parts = partition_for_keys(keys, 7).tolist()
    expected = [(kafka_murmur2(k) & 0x7FFFFFFF) % 7 for k in (b"21", b"foobar", b"")]
    assert parts == [expected[0], -1, expected[1], expected[2]]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=2, max_size=60), st.integers(0, 10))
def test_murmur2_of_a_sliced_column_with_nulls_matches_kafka(keys: list[bytes | None], skip: int) -> None:
    """The compiled hash reads an Arrow slice (offset into the buffers) and its validity bitmap: a null
    key hashes as an empty one."""
    column = pa.array([b"x" * 7] * skip + keys, pa.binary()).slice(skip)
    assert murmur2(column).tolist() == [kafka_murmur2(k or b"") & 0xFFFFFFFF for k in keys]
    assert murmur2(column.cast(pa.large_binary())).tolist() == murmur2(column).tolist()
