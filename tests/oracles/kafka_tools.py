"""Apache Kafka's own command-line tools (the pinned `kafka` set) as test oracles (issue 27).

`dump_log_segments` runs `kafka.tools.DumpLogSegments` (what `kafka-dump-log.sh` runs) and returns its output
with the errors it reports picked out. The tool exits 0 whatever it finds: it prints its findings, so they
are matched by the phrases its source prints (DumpLogSegments.scala, Kafka 4.1).

`run_java_helper` runs one of the small Java programs of `tests/oracles/jvm/` on kafka-clients (or on another
pinned set: BouncyCastle for `BcWrapKeys`), compiled with `javac` into `.cache/jvm-classes/` once per version
of the directory's sources: a helper may use the classes beside it (`Producers`, the producer set-up the
producers share), which javac finds on the directory as its -sourcepath.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.oracles import fetch_jvm

# What DumpLogSegments prints when a log or an index is wrong. "Non-consecutive offsets" is reported apart:
# a compacted log has offset gaps by design.
ERROR_PHRASES = (
    "invalid bytes at the end of",
    "Found out of order timestamp in",
    "Found timestamp mismatch in",
    "Mismatches in",
    "The following indexed offsets are not found in the log",
    "Error at",
    "Found an error",
    "isvalid: false",
    "Exception",
    "failed",
)
GAP_PHRASE = "Non-consecutive offsets in"
SOUND = (" passed sanity check.", " is empty.")  # what the sanity check prints of a sound index


@dataclass(frozen=True)
class Dump:
    """DumpLogSegments' output and the lines in it that report a problem."""

    output: str

    @property
    def errors(self) -> list[str]:
        return [line for line in self.output.splitlines() if any(p in line for p in ERROR_PHRASES)]

    @property
    def gaps(self) -> list[str]:
        return [line for line in self.output.splitlines() if GAP_PHRASE in line]

    def sound_indexes(self) -> set[str]:
        """The index files the `--index-sanity-check` found sound (an empty one is reported as such)."""
        return {line[:line.rindex(end)] for line in self.output.splitlines() for end in SOUND if line.endswith(end)}


def dump_log_segments(files: list[Path], *flags: str) -> Dump:
    """`DumpLogSegments --files F1,F2,... FLAGS` in one JVM (fails the test when the tool itself fails)."""
    command = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", fetch_jvm.require("kafka"),
               "kafka.tools.DumpLogSegments", "--files", ",".join(str(f) for f in files), *flags]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"DumpLogSegments exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return Dump(done.stdout + done.stderr)


JAVA_SOURCES = fetch_jvm.PROJECT_ROOT / "tests" / "oracles" / "jvm"
CLASSES = fetch_jvm.PROJECT_ROOT / ".cache" / "jvm-classes"


def run_java_helper(name: str, *args: str, timeout: int = 300, jvm_set: str = "kafka") -> str:
    """Run `tests/oracles/jvm/<name>.java` with `args` on the pinned `jvm_set`; its stdout (fails the test on an
    error)."""
    classpath = fetch_jvm.require(jvm_set)
    source = JAVA_SOURCES / f"{name}.java"
    sources = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sorted(JAVA_SOURCES.glob("*.java"))))
    out = CLASSES / f"{name}-{sources.hexdigest()[:16]}"
    if not (out / f"{name}.class").is_file():
        staging = out.with_name(out.name + f".{os.getpid()}")
        command = ["javac", "-proc:none", "-cp", classpath, "-sourcepath", str(JAVA_SOURCES), "-d", str(staging),
                   str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        assert done.returncode == 0, f"javac {source.name} failed:\n{done.stdout}{done.stderr}"
        if not out.exists():  # another session may have compiled the same source meanwhile
            os.replace(staging, out)
    done = subprocess.run(["java", "-Xmx256m", "-cp", f"{classpath}{os.pathsep}{out}", name, *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout
