"""The codec's portable paths (`KLAKE_CODEC_PORTABLE=1`: the byte-table CRC-32C, plain copies) are the code
a CPU without SSE4.2 / AVX-512 runs; this machine takes the fast paths, so the codec's tests (each against
an independent truth: the `crc32c` package, `encode_batch`, kafka-python-written batches) run again in a
process with them off, where the codec must say they are off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SUITES = ["tests/engine/format/test_encoder_crc.py", "tests/engine/format/test_compiled_codec.py",
          "tests/engine/format/test_crc_in_decoder.py"]


def _run(args: list[str], portable: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "KLAKE_CODEC_PORTABLE": "1" if portable else "0"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_switch_turns_every_cpu_specific_path_off() -> None:
    probe = ["-c", "import json; from engine.format.compiled import codec; print(json.dumps(codec.cpu_paths()))"]
    assert not any(json.loads(_run(probe, portable=True).stdout).values())
    fast = json.loads(_run(probe, portable=False).stdout)
    if os.uname().machine == "x86_64":
        assert fast["crc32c_instruction"]


def test_the_codec_tests_pass_on_the_portable_paths() -> None:
    done = _run(["-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES], portable=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
