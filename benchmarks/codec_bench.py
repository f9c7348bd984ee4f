"""Encode/decode throughput of klake's v2 codec against kafka-python's, measured in the same run.

Workload (issue 2): 1000-record batches, 16-byte keys, 100-byte values, uncompressed and lz4.
klake encodes all batches of a run in one vectorized call (as an append task does) from Arrow
columns (what Spark hands a task) and, as a second figure, from Python
lists (conversion included); kafka-python encodes from Python bytes. Decoding is from one buffer of
back-to-back batches into usable records: Arrow columns for klake, record objects whose key and
value are touched for kafka-python. Prints records/s and the ratios; exits 1 if a target is missed
(encode >= 10x, decode >= 3x).

Run: .venv/bin/python benchmarks/codec_bench.py [--batches N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine.format import compression  # noqa: E402
from engine.format.batch import scan_batches  # noqa: E402
from engine.format.builder import encode_batches  # noqa: E402
from engine.format.records import decode_records  # noqa: E402

BATCH = 1000
VALUE = 100
KAFKA_PYTHON_CODEC = {compression.NONE: 0, compression.LZ4: 3}


def workload(batches: int) -> tuple[list[list[bytes]], list[list[bytes]], np.ndarray]:
    rng = np.random.default_rng(42)
    raw = rng.integers(0, 26, size=(batches * BATCH, VALUE), dtype=np.uint8) + ord("a")
    values = [row.tobytes() for row in raw]
    keys = [b"key-%012d" % i for i in range(batches * BATCH)]
    ts = 1_700_000_000_000 + np.arange(batches * BATCH, dtype=np.int64) * 7
    return [keys[i:i + BATCH] for i in range(0, len(keys), BATCH)], \
        [values[i:i + BATCH] for i in range(0, len(values), BATCH)], ts


def best_of(runs: int, fn) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def kafka_python_encode(keys, values, ts, codec) -> list[bytes]:
    out = []
    for b, (ks, vs) in enumerate(zip(keys, values, strict=True)):
        builder = DefaultRecordBatchBuilder(2, KAFKA_PYTHON_CODEC[codec], False, -1, -1, -1, 10 ** 9)
        base = b * BATCH
        for i, (k, v) in enumerate(zip(ks, vs, strict=True)):
            builder.append(i, int(ts[base + i]), k, v, [])
        out.append(bytes(builder.build()))
    return out


def klake_encode_arrow(keys_pa, values_pa, ts, codec) -> list[bytes]:
    lengths = [BATCH] * (len(keys_pa) // BATCH)
    return encode_batches(keys_pa, values_pa, ts, batch_lengths=lengths, codec=codec)


def klake_encode_lists(keys, values, ts, codec) -> list[bytes]:
    flat_keys = [k for batch in keys for k in batch]
    flat_values = [v for batch in values for v in batch]
    return encode_batches(flat_keys, flat_values, ts, batch_lengths=[BATCH] * len(keys), codec=codec)


def kafka_python_decode(buf: bytes) -> int:
    records = MemoryRecords(buf)
    n = 0
    while records.has_next():
        batch = records.next_batch()
        for rec in batch:
            _ = (rec.offset, rec.timestamp, rec.key, rec.value)
            n += 1
    return n


def klake_decode(buf: bytes) -> int:
    scan = scan_batches(buf, "bench")
    return len(decode_records(buf, scan.headers, "bench").to_arrow(scan.headers))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100, help="1000-record batches per run (default 100)")
    parser.add_argument("--runs", type=int, default=3, help="best of N runs (default 3)")
    args = parser.parse_args()
    keys, values, ts = workload(args.batches)
    keys_pa = pa.array([k for batch in keys for k in batch], pa.binary())
    values_pa = pa.array([v for batch in values for v in batch], pa.binary())
    n = args.batches * BATCH
    ok = True
    print(f"records per run: {n:,} in {args.batches} batches of {BATCH}, {VALUE}-byte values; best of {args.runs}")
    print(f"{'codec':6} {'op':7} {'kafka-python rec/s':>19} {'klake rec/s':>14} {'ratio':>7}  target")
    for codec in (compression.NONE, compression.LZ4):
        name = compression.NAMES[codec]
        ours = klake_encode_arrow(keys_pa, values_pa, ts, codec)
        theirs = kafka_python_encode(keys, values, ts, codec)
        buf = b"".join(ours)
        assert kafka_python_decode(buf) == n and klake_decode(b"".join(theirs)) == n, "codecs disagree"
        t_ref = best_of(args.runs, lambda c=codec: kafka_python_encode(keys, values, ts, c))
        t_arrow = best_of(args.runs, lambda c=codec: klake_encode_arrow(keys_pa, values_pa, ts, c))
        t_lists = best_of(args.runs, lambda c=codec: klake_encode_lists(keys, values, ts, c))
        t_dref = best_of(args.runs, lambda b=buf: kafka_python_decode(b))
        t_dec = best_of(args.runs, lambda b=buf: klake_decode(b))
        rows = [("encode", t_ref, t_arrow, 10.0), ("enc*", t_ref, t_lists, None), ("decode", t_dref, t_dec, 3.0)]
        for op, ref, mine, target in rows:
            ratio = ref / mine
            verdict = "" if target is None else (f">= {target:g}x " + ("ok" if ratio >= target else "MISSED"))
            ok &= target is None or ratio >= target
            print(f"{name:6} {op:7} {n / ref:19,.0f} {n / mine:14,.0f} {ratio:6.1f}x  {verdict}")
    print("enc* = klake encoding from Python lists (Arrow conversion included), for reference")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
