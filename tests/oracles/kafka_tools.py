"""Apache Kafka's own command-line tools (the pinned `kafka` set) as test oracles (issue 27).

`dump_log_segments` runs `kafka.tools.DumpLogSegments` (what `kafka-dump-log.sh` runs) and returns its output
with the errors it reports picked out. The tool exits 0 whatever it finds: it prints its findings, so they
are matched by the phrases its source prints (DumpLogSegments.scala, Kafka 4.1).
"""

from __future__ import annotations

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
