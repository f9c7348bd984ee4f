"""The CRC-32C checked in the decoder's pass (`decode_records(verify_crc=True)`, `decode_checked`).

- The compiled CRC-32C equals the `crc32c` package's on every length and alignment (the 3-way
  interleaved path starts at 768 bytes, the long one at 24 KiB).
- a scan without CRCs then `decode_checked` (as the read job's chunks are read) gives exactly what
  `scan_batches` (strict, CRC checked) followed by `decode_records` gives, for all batches and for every
  other one (the skipped ones' CRCs still checked): the same headers and records, or the same error
  (class, file, byte position, field, message),
  on random logs of every codec with random bytes changed anywhere (headers, CRCs and records), with and
  without the CRC recomputed after the change.
- `decode_records(verify_crc=True)` raises a bad batch's CRC error, naming its position, for compressed
  and uncompressed batches alike; without it the same bytes decode (the check is the decoder's).
"""

from __future__ import annotations

import os
import random
import struct

import crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.format import compression
from engine.format.batch import V2_CRC_START, scan_batches
from engine.format.builder import encode_batch
from engine.format.compiled import codec
from engine.format.records import decode_checked, decode_records
from kernel.errors import CorruptRecordError
from tests.engine.format.logs import encode_log

RECORD = st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300)),
                   st.integers(0, 2**41),
                   st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=10))),
                            max_size=2))
BATCH = st.tuples(st.lists(RECORD, min_size=1, max_size=20), st.sampled_from(sorted(compression.NAMES)))



def _outcome(read) -> object:
    """The records as a table, or the error's class and text (file, byte position, field, message)."""
    try:
        headers, records = read()
    except Exception as exc:  # any difference, klake's errors or not, must show
        return type(exc), str(exc)
    return records.to_arrow(headers)


def _pair(data: bytes, step: int) -> tuple:
    headers = scan_batches(data, "crc").headers
    taken = headers.take(np.arange(0, len(headers), step))
    return taken, decode_records(data, taken, "crc")


def _fused(data: bytes, step: int) -> tuple:
    scan = scan_batches(data, "crc", verify_crc=False, strict=False)
    if scan.problems:  # as `StoredSegment._chunks`: the CRC-checking scan names the first problem
        scan_batches(data, "crc")
    rows = np.arange(0, len(scan.headers), step)
    return scan.headers.take(rows), decode_checked(data, scan.headers, rows, "crc")


def _same(data: bytes) -> None:
    for step in (1, 2):
        fused, pair = _outcome(lambda: _fused(data, step)), _outcome(lambda: _pair(data, step))  # noqa: B023
        if isinstance(pair, pa.Table):
            assert isinstance(fused, pa.Table) and fused.equals(pair)
        else:
            assert fused == pair


@pytest.mark.parametrize("length", [*range(0, 40), 767, 768, 769, 1000, 24575, 24576, 24577, 100_003, 1 << 20])
def test_compiled_crc32c_is_crc32c(length: int) -> None:
    data = os.urandom(length + 7)
    for skip in range(8):
        view = memoryview(data)[skip:skip + length]
        assert codec.crc32c(view) == crc32c.crc32c(view)


def test_the_decoder_checks_on_the_cpu_instruction_on_x86_64() -> None:
    if os.uname().machine == "x86_64" and os.environ.get("KLAKE_CODEC_PORTABLE", "") in ("", "0"):
        assert codec.cpu_paths()["crc32c_instruction"]


def _mutated(data: bytes, rng: random.Random) -> list[bytes]:
    out = []
    for _ in range(25):
        changed = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            changed[rng.randrange(len(changed))] = rng.randrange(256)
        out.append(bytes(changed))
        if rng.random() < 0.5:  # make the first v2 batch's CRC right again: the records' checks judge it
            recrc = bytearray(changed)
            size = struct.unpack_from(">i", recrc, 8)[0] + 12
            if 61 <= size <= len(recrc) and recrc[16] == 2:
                struct.pack_into(">I", recrc, 17, crc32c.crc32c(bytes(recrc[V2_CRC_START:size])))
                out.append(bytes(recrc))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BATCH, min_size=1, max_size=4), st.integers(0, 2**32))
def test_decode_checked_is_scan_then_decode(batches, seed) -> None:
    data = encode_log(batches)
    _same(data)
    for changed in _mutated(data, random.Random(seed)):
        _same(changed)


@pytest.mark.parametrize("codec_id", sorted(compression.NAMES))
def test_verify_crc_raises_the_bad_batch_before_its_records(codec_id: int) -> None:
    first = encode_batch([b"k"] * 3, [b"v" * 50] * 3, [1, 2, 3], codec=codec_id)
    second = bytearray(encode_batch([b"k"] * 3, [b"w" * 50] * 3, [4, 5, 6], base_offset=3, codec=codec_id))
    struct.pack_into(">I", second, 17, struct.unpack_from(">I", second, 17)[0] ^ 1)  # only the stored CRC
    data = first + bytes(second)
    headers = scan_batches(data, "crc", verify_crc=False).headers
    assert len(decode_records(data, headers, "crc")) == 6
    with pytest.raises(CorruptRecordError) as err:
        decode_records(data, headers, "crc", verify_crc=True)
    assert (err.value.source, err.value.position, err.value.field) == ("crc", len(first), "crc")
    assert len(decode_records(data, headers.take(slice(0, 1)), "crc", verify_crc=True)) == 3
