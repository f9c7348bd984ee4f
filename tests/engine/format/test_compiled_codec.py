"""The compiled v2 decoder (`engine/format/_codec.pyx`) against the pure-Python reference decoder it
replaced (`tests/oracles/reference_decoder.py`), and under fuzzing.

- Random batches (every codec, null keys/values/header values, headers, several batches) decode to
  the same columns through both.
- Mutated batches (random bytes changed, inserted or removed inside the records, record counts and
  sizes changed) make the compiled decoder either return exactly what the reference returns or raise
  klake's `CorruptRecordError` when the reference does; it never crashes the process (a read out of
  bounds would show as a crash or as garbage differing from the reference).
- A broken install (the extension missing) is one line and exit code 2 from the CLI.
"""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.format import compression
from engine.format.batch import V2_HEADER_SIZE, scan_batches
from engine.format.builder import encode_batch
from engine.format.records import decode_records
from kernel.errors import CorruptRecordError, KlakeError
from tests.conftest import PROJECT_ROOT
from tests.engine.format.logs import encode_log
from tests.oracles.reference_decoder import decode_v2 as reference_decode

TS = st.one_of(st.integers(0, 2**41), st.just(-1), st.integers(-(2**62), 2**62))
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3)
RECORD = st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=300)),
                   TS, HEADERS)
BATCH = st.tuples(st.lists(RECORD, min_size=1, max_size=30), st.sampled_from(sorted(compression.NAMES)))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])



def _both(data: bytes) -> tuple[object, object]:
    """(compiled, reference) results: the record columns, or the error class (None: the framing itself
    is broken, which is `scan_batches`' business, not the record decoder's)."""
    try:
        headers = scan_batches(data, "fuzz", verify_crc=False).headers
    except KlakeError:
        return None, None
    results = []
    for decode in (lambda: decode_records(data, headers, "fuzz"), lambda: reference_decode(data, headers, "fuzz")):
        try:
            table = decode()
        except KlakeError as exc:
            results.append(type(exc))
            continue
        results.append(table.to_arrow(headers))
    return results[0], results[1]


@SETTINGS
@given(st.lists(BATCH, min_size=1, max_size=4))
def test_compiled_and_reference_decoders_agree(batches) -> None:
    compiled, reference = _both(encode_log(batches))
    assert isinstance(compiled, pa.Table) and compiled.equals(reference)


def _mutations(data: bytes, rng: random.Random) -> list[bytes]:
    """Corruptions of one uncompressed batch's records (read without the CRC check, so that only the
    record layer judges them)."""
    out = []
    for _ in range(60):
        body = bytearray(data[V2_HEADER_SIZE:])
        kind = rng.randrange(4)
        if kind == 0 and body:
            for _ in range(rng.randint(1, 3)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif kind == 1:
            body.insert(rng.randrange(len(body) + 1), rng.randrange(256))
        elif kind == 2 and body:
            del body[rng.randrange(len(body))]
        header = bytearray(data[:V2_HEADER_SIZE])
        if kind == 3:
            struct.pack_into(">i", header, 57, rng.choice([0, 1, 2**31 - 1, -1, -(2**31), rng.randrange(100)]))
        struct.pack_into(">i", header, 8, V2_HEADER_SIZE - 12 + len(body))
        out.append(bytes(header + body))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORD, min_size=1, max_size=12), st.integers(0, 2**32))
def test_mutated_batches_fail_like_the_reference_and_never_crash(records, seed) -> None:
    rng = random.Random(seed)
    for data in _mutations(encode_log([(records, compression.NONE)]), rng):
        compiled, reference = _both(data)
        if reference is None:
            continue
        if isinstance(reference, pa.Table):
            assert isinstance(compiled, pa.Table) and compiled.equals(reference)
        else:
            assert compiled is CorruptRecordError and reference is CorruptRecordError


def test_random_bytes_as_decompressed_records_never_crash() -> None:
    """Compressed batches whose records are garbage: the compiled decoder reads only inside them."""
    rng = np.random.default_rng(7)
    for trial in range(300):
        garbage = rng.integers(0, 256, rng.integers(0, 200), dtype=np.uint8).tobytes()
        batch = bytearray(encode_batch([b"k"], [b"v"], [0], codec=compression.LZ4))
        records = compression.compress(compression.LZ4, garbage)
        batch = batch[:V2_HEADER_SIZE] + records
        struct.pack_into(">i", batch, 8, V2_HEADER_SIZE - 12 + len(records))
        struct.pack_into(">i", batch, 57, int(rng.integers(0, 50)))
        compiled, reference = _both(bytes(batch))
        if isinstance(reference, pa.Table):
            assert isinstance(compiled, pa.Table) and compiled.equals(reference), trial
        else:
            assert compiled is CorruptRecordError and reference is CorruptRecordError, trial


def test_a_missing_extension_is_one_line_and_exit_2() -> None:
    hide = ("import sys\n"
            "class Hide:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'engine.format._codec':\n"
            "            raise ImportError('No module named engine.format._codec')\n"
            "sys.meta_path.insert(0, Hide())\n"
            "from jobs.cli.main import main\n")
    done = subprocess.run([sys.executable, "-c", hide], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)})
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert "compiled record codec (engine.format._codec) is not built" in done.stderr


@pytest.mark.parametrize("count", [2**31 - 1, 10**6])
def test_a_huge_declared_count_allocates_by_the_bytes_not_the_count(count: int) -> None:
    batch = bytearray(encode_batch([b"k"] * 3, [b"v"] * 3, [0, 1, 2]))
    struct.pack_into(">i", batch, 57, count)
    with pytest.raises(CorruptRecordError, match="declares"):
        decode_records(bytes(batch), scan_batches(bytes(batch), "big", verify_crc=False).headers, "big")


def _large_log(seed: int) -> tuple[bytes, list, list]:
    """About 10 MiB of uncompressed batches, beyond the size from which the decoder writes its value
    column with streaming stores (`STREAM_FROM` in `_codec.pyx`, 8 MiB, records of 512 bytes on average,
    on CPUs with AVX-512BW): lengths 0-3000 bytes and nulls, so that values start and end anywhere in a
    cache line."""
    rng = np.random.default_rng(seed)
    n = 10_000

    def column(null_share: float, longest: int) -> list:
        lengths = np.where(rng.random(n) < 0.3, rng.integers(0, 70, n), rng.integers(0, longest + 1, n))
        return [None if rng.random() < null_share else rng.integers(0, 256, k, dtype=np.uint8).tobytes()
                for k in lengths]
    keys, values = column(0.1, 200), column(0.05, 3000)
    ts = list(range(n))
    cuts = [0, 1, 2, 700, 3001, 3002, 5555, 9000, n]
    data = b"".join(encode_batch(keys[a:b], values[a:b], ts[a:b], base_offset=a) for a, b in zip(cuts[:-1], cuts[1:], strict=True))
    return data, keys, values


@pytest.mark.parametrize("seed", [1, 2])
def test_a_log_larger_than_the_cache_decodes_to_its_input(seed: int) -> None:
    data, keys, values = _large_log(seed)
    assert len(data) > 9 << 20
    headers = scan_batches(data, "large", verify_crc=False).headers
    table = decode_records(data, headers, "large", verify_crc=True).to_arrow(headers)
    assert table.column("key").combine_chunks().equals(pa.array(keys, pa.binary()))
    assert table.column("value").combine_chunks().equals(pa.array(values, pa.binary()))
    assert table.column("offset").to_pylist() == list(range(len(keys)))


def test_a_bad_record_late_in_a_large_log_fails_like_the_reference() -> None:
    data, keys, _ = _large_log(3)
    bad = bytearray(data)
    last = scan_batches(data, "large", verify_crc=False).headers
    start = int(last.position[-1]) + V2_HEADER_SIZE
    bad[start] = 0x7F  # the last batch's first record length: -64, negative
    compiled, reference = _both(bytes(bad))
    assert compiled is CorruptRecordError and reference is CorruptRecordError
