"""Decode/encode throughput of klake's v2 record codec against Apache kafka-clients on the JVM (issue 13).

Both sides run in one invocation on the same pinned core, their timed passes interleaved: this process
pins all its threads to `--core` and starts `benchmarks/KafkaCodecBench.java` (kafka-clients of the
pinned `kafka` set that `tests/oracles/fetch_jvm.py` resolves; 3.9.1 until issue 27, 4.1.1 since) under `taskset -c CORE` as one long-lived process that
takes commands on stdin. For each cell (codec, value size, op) the JVM is warmed up (JIT, `--warmup`
seconds) and klake makes one untimed pass; then `--runs` rounds, each a kafka-clients pass then a klake
pass, so that the two sides' passes lie seconds apart and see the same machine (a shared machine's load
changes from minute to minute; one side timed all at once and the other later did not). Neither side
gets a second core the other lacks. The workload is written once to a file both sides read: batches of
1,000 records, 16-byte keys, values of each `--values` size (text of words drawn from a fixed vocabulary
of random letters, so the codecs compress it as they would real data), CreateTime timestamps. The JVM
decodes exactly the bytes klake decodes (klake's batches) and encodes exactly the records klake encodes.

- encode: klake's `encode_batches` from Arrow columns (what a Spark task hands it), all batches in one
  call; kafka-clients' `MemoryRecordsBuilder`, one per batch, record by record.
- decode: klake's `scan_batches(verify_crc=False)` + `decode_checked` (as the read job: each batch's CRC
  checked by the decoder just before its records are decoded) + `.to_arrow(...)`; kafka-clients' `ensureValid()` + the streaming record
  iterator, key and value copied into byte arrays.

Checks, before timing: klake and kafka-clients both decode klake's batches to the input records, and
both decode kafka-clients' own batches to them too; its uncompressed ones are byte-identical to klake's
(failures are reported, not raised). Prints one table of records per CPU-second (the best of the rounds
on each side; klake: this process's CPU time, kafka-clients: its timing thread's, which leaves out its
serial collector's pauses) and the klake/kafka-clients ratio of the two bests, which is what the targets
judge; next to it the spread (min/median/max) of the per-round ratios (each round's klake pass against
the kafka-clients pass just before it) and the wall-clock ratio of the bests. Exits 1 if a target is missed
(decode and encode >= 1.0x for every codec), 2 if a check failed or the JVM side could not run.

Run: .venv/bin/python benchmarks/codec_bench.py [--batches N] [--runs N] [--codecs none,lz4] [--values 100,1000]
     [--core N] [--warmup SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.format import compression  # noqa: E402
from engine.format.batch import scan_batches  # noqa: E402
from engine.format.builder import encode_batches  # noqa: E402
from engine.format.records import decode_checked  # noqa: E402
from tests.oracles import fetch_jvm  # noqa: E402

BATCH = 1000
KEY_SIZE = 16
TARGETS = {"decode": 1.0, "encode": 1.0}
JAVA_SOURCE = Path(__file__).resolve().parent / "KafkaCodecBench.java"
T0 = 1_700_000_000_000


def _text(rng: np.random.Generator, vocab: np.ndarray, letters: np.ndarray, size: int) -> np.ndarray:
    """`size` bytes of words drawn uniformly from `vocab` (rows padded to 12; `letters` marks a word's bytes)."""
    ids = rng.integers(0, len(vocab), size=size // 2 + 1)  # words have >= 2 bytes: enough to fill `size`
    return vocab[ids][letters[ids]][:size]


def workload(batches: int, value_size: int) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Keys `key-%012d`; values cut from text of words (1-11 random letters and a space) drawn from a
    fixed 1,000-word vocabulary: compressible like text, with no long repeats any codec finds for free."""
    n = batches * BATCH
    rng = np.random.default_rng(13)
    word_len = rng.integers(2, 13, size=1000)
    vocab = rng.integers(ord("a"), ord("z") + 1, size=(1000, 12), dtype=np.uint8)
    vocab[np.arange(1000), word_len - 1] = ord(" ")
    letters = np.arange(12) < word_len[:, None]
    stream = np.concatenate([_text(rng, vocab, letters, BATCH * value_size) for _ in range(batches)])
    value_offsets = np.arange(n + 1, dtype=np.int32) * value_size
    values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(stream)])
    keys = pa.array([b"key-%012d" % i for i in range(n)], pa.binary())
    return keys, values, T0 + np.arange(n, dtype=np.int64) * 7


def _column(arr: pa.Array) -> bytes:
    """int32 big-endian lengths, then the bytes: the layout KafkaCodecBench.java reads."""
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1, offset=arr.offset * 4)
    data = arr.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]
    return np.diff(offsets).astype(">i4").tobytes() + data


def write_workload(path: Path, value_size: int, keys: pa.Array, values: pa.Array, timestamps: np.ndarray,
                   encoded: dict[int, bytes]) -> None:
    with path.open("wb") as f:
        f.write(b"KLBENCH1" + struct.pack(">iii", value_size, BATCH, len(keys)))
        f.write(_column(keys))
        f.write(_column(values))
        f.write(timestamps.astype(">i8").tobytes())
        f.write(struct.pack(">i", len(encoded)))
        for codec, data in encoded.items():
            f.write(struct.pack(">ii", codec, len(data)))
            f.write(data)


def klake_encode(keys: pa.Array, values: pa.Array, timestamps: np.ndarray, codec: int) -> list[bytes]:
    return encode_batches(keys, values, timestamps, batch_lengths=[BATCH] * (len(keys) // BATCH), codec=codec)


def klake_decode(data: bytes) -> pa.Table:
    headers = scan_batches(data, "bench", verify_crc=False).headers
    return decode_checked(data, headers, np.arange(len(headers)), "bench").to_arrow(headers)


def klake_check(table: pa.Table, keys: pa.Array, values: pa.Array, timestamps: np.ndarray) -> str | None:
    """Why klake's decoded records differ from the input, or None."""
    if len(table) != len(keys):
        return f"decoded {len(table)} records, expected {len(keys)}"
    same = (np.array_equal(table.column("offset").to_numpy(), np.arange(len(keys)))
            and np.array_equal(table.column("timestamp").to_numpy(), timestamps)
            and table.column("key").combine_chunks().equals(keys)
            and table.column("value").combine_chunks().equals(values))
    return None if same else "decoded records differ from the input"


def cpu_and_wall(fn: Callable[[], object]) -> tuple[int, int]:
    """(CPU ns of this process, wall-clock ns) of one call."""
    c0, t0 = time.process_time_ns(), time.perf_counter_ns()
    fn()
    return time.process_time_ns() - c0, time.perf_counter_ns() - t0


def pin(core: int) -> None:
    """Pin every thread of this process (numpy's and Arrow's pools too); threads started later, klake's
    compression pool included, and the JVM child inherit it."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {core})


class Jvm:
    """KafkaCodecBench.java as one long-lived process on `core`: a command line in, a JSON line out."""

    def __init__(self, files: list[Path], core: int) -> None:
        command = ["java", "-Xmx2g", "-cp", fetch_jvm.classpath("kafka"), str(JAVA_SOURCE),
                   *map(str, files)]
        if shutil.which("taskset"):
            command = ["taskset", "-c", str(core), *command]
        else:
            print(f"note: no taskset; the JVM inherits this process's pinning to core {core}")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1)
        self.info: dict = {}
        self.checks: list[dict] = []
        for line in self.process.stdout:
            answer = json.loads(line)
            if answer.get("ready"):
                return
            if "jvm" in answer:
                self.info = answer
            elif "check" in answer:
                self.checks.append(answer)
        raise RuntimeError(self.failure())

    def failure(self) -> str:
        self.process.kill()
        _, err = self.process.communicate()
        return f"the JVM exited with code {self.process.returncode}: {err.strip()[-2000:]}"

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(self.failure())
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"kafka-clients side: {answer['error']}")
        return answer

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def jvm_missing() -> str | None:
    """Why the kafka-clients side cannot run here, or None."""
    if fetch_jvm.jars("kafka") is None:
        return f"the kafka jars are not in {fetch_jvm.set_dir('kafka')}; run .venv/bin/python tests/oracles/fetch_jvm.py"
    if shutil.which("java") is None:
        return "no `java` on PATH (the kafka-clients side needs a JDK 17 with its source launcher)"
    return None


Rounds = list[tuple[int, int, int, int]]  # per round: kafka-clients CPU ns, wall ns; klake CPU ns, wall ns


def interleaved(jvm: Jvm, cell: str, op: str, runs: int, warmup_s: float, fn: Callable[[], object]) -> Rounds:
    """Warm both sides up, then `runs` rounds of a kafka-clients pass followed by a klake pass."""
    jvm.ask(f"warm {cell} {op} {int(warmup_s * 1000)}")
    fn()
    rounds = []
    for _ in range(runs):
        theirs = jvm.ask(f"run {cell} {op}")
        rounds.append((theirs["cpu_ns"], theirs["wall_ns"], *cpu_and_wall(fn)))
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100, help="1000-record batches per run (default 100)")
    parser.add_argument("--runs", type=int, default=5, help="best of N runs on each side (default 5)")
    parser.add_argument("--codecs", default=",".join(compression.NAMES.values()),
                        help="comma-separated codec names (default: all)")
    parser.add_argument("--values", default="100,1000", help="comma-separated value sizes in bytes (default 100,1000)")
    parser.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)),
                        help="the core both sides run on (default: the highest this process may use)")
    parser.add_argument("--warmup", type=float, default=2.0,
                        help="JIT warm-up seconds per codec, size and op on the JVM (default 2)")
    args = parser.parse_args()
    codecs = [compression.codec_id(name.strip()) for name in args.codecs.split(",")]
    sizes = [int(v) for v in args.values.split(",")]
    pin(args.core)
    n = args.batches * BATCH
    problems: list[str] = []
    timed: dict[tuple[str, int, str], Rounds] = {}
    klake_bytes: dict[tuple[str, int], int] = {}
    jvm_bytes: dict[tuple[str, int], int] = {}
    jvm_info: dict = {}
    jvm_checks: list[dict] = []
    klake_checks = 0
    with tempfile.TemporaryDirectory(prefix="klake-codec-bench-") as tmp:
        files = [Path(tmp) / f"workload-{size}.bin" for size in sizes]
        inputs = {}
        for size, file in zip(sizes, files, strict=True):
            keys, values, ts = workload(args.batches, size)
            encoded = {codec: b"".join(klake_encode(keys, values, ts, codec)) for codec in codecs}
            write_workload(file, size, keys, values, ts, encoded)
            inputs[size] = keys, values, ts, encoded
        missing = jvm_missing()
        try:
            jvm = None if missing else Jvm(files, args.core)
        except RuntimeError as exc:
            jvm, missing = None, str(exc)
        if missing:
            problems.append(missing)
        else:
            jvm_info, jvm_checks = jvm.info, jvm.checks
        failed = {(c["codec"], c["value_size"], c["check"]) for c in jvm_checks if not c["ok"]}
        try:
            for size in sizes:
                keys, values, ts, encoded = inputs[size]
                for codec, data in encoded.items():
                    name = compression.NAMES[codec]
                    klake_bytes[name, size] = len(data)
                    problem = klake_check(klake_decode(data), keys, values, ts)
                    klake_checks += 1
                    if problem:
                        problems.append(f"klake {name} {size} B: {problem}")
                    if jvm is None:
                        continue
                    theirs = Path(tmp) / f"kafka-clients-{name}-{size}.bin"
                    jvm_bytes[name, size] = jvm.ask(f"dump {codec} {size} {theirs}")["bytes"]
                    if (name, size, "encode") not in failed and (name, size, "run") not in failed:
                        problem = klake_check(klake_decode(theirs.read_bytes()), keys, values, ts)
                        klake_checks += 1
                        if problem:
                            problems.append(f"klake on kafka-clients' {name} {size} B batches: {problem}")
                    for op, fn in (("decode", lambda d=data: klake_decode(d)),
                                   ("encode", lambda c=codec, k=keys, v=values, t=ts: klake_encode(k, v, t, c))):
                        if (name, size, op) not in failed and (name, size, "run") not in failed:
                            timed[name, size, op] = interleaved(jvm, f"{codec} {size}", op, args.runs, args.warmup, fn)
        except RuntimeError as exc:  # the JVM died or refused a command: what was measured is still printed
            problems.append(str(exc))
        if jvm is not None:
            jvm.close()
    problems += [f"kafka-clients {c['check']} {c['codec']} {c['value_size']} B: {c['detail']}"
                 for c in jvm_checks if not c["ok"]]

    print(f"records per run: {n:,} in {args.batches} batches of {BATCH}, {KEY_SIZE}-byte keys; {args.runs} rounds "
          f"(a kafka-clients pass, then a klake pass), best of each side; core {args.core}; "
          f"{jvm_info.get('jvm', 'no JVM')} ({jvm_info.get('gc', '?')} GC, {jvm_info.get('cpus', '?')} cpu)")
    print(f"{'codec':6} {'value':>6} {'op':6} {'kafka-clients rec/cpu-s':>23} {'klake rec/cpu-s':>15} {'ratio':>6}  "
          f"{'rounds min/median/max':>21}  {'wall ratio':>10}  target")
    missed = False
    for size in sizes:
        for codec in codecs:
            name = compression.NAMES[codec]
            for op, target in TARGETS.items():
                rounds = timed.get((name, size, op))
                if rounds is None:
                    print(f"{name:6} {size:6} {op:6} {'-':>23} {'-':>15} {'-':>6}  {'-':>21}  {'-':>10}  "
                          f"no kafka-clients figure")
                    missed = True
                    continue
                theirs_cpu, theirs_wall, mine_cpu, mine_wall = (min(r[i] for r in rounds) for i in range(4))
                ratio = theirs_cpu / mine_cpu
                per_round = sorted(r[0] / r[2] for r in rounds)
                spread = f"{per_round[0]:.2f}/{per_round[len(per_round) // 2]:.2f}/{per_round[-1]:.2f}x"
                missed |= ratio < target
                verdict = f">= {target:.1f}x " + ("ok" if ratio >= target else "MISSED")
                print(f"{name:6} {size:6} {op:6} {n / theirs_cpu * 1e9:23,.0f} {n / mine_cpu * 1e9:15,.0f} {ratio:5.2f}x  "
                      f"{spread:>21}  {theirs_wall / mine_wall:9.2f}x  {verdict}")
    sizes_line = ", ".join(f"{name} {size} B {jvm_bytes[name, size] / n:.1f}/{klake_bytes[name, size] / n:.1f}"
                           for (name, size) in klake_bytes if (name, size) in jvm_bytes)
    print(f"encoded bytes per record, kafka-clients/klake: {sizes_line}")
    if problems:
        print("checks FAILED:\n  " + "\n  ".join(problems))
        return 2
    print(f"checks: all passed ({len(jvm_checks)} on kafka-clients, {klake_checks} on klake)")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
