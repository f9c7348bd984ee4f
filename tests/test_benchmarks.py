"""The benchmarks still run: a tiny codec_bench run prints its table and passes its correctness checks.

Nothing here is timed or compared for speed; it keeps `benchmarks/codec_bench.py` and its JVM side
(`benchmarks/KafkaCodecBench.java`) from rotting between the runs that fill benchmarks/RESULTS.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import PROJECT_ROOT
from tests.oracles import fetch_kafka_clients as fetch


def test_codec_bench_prints_its_table_and_passes_its_checks() -> None:
    if not fetch.jars_present():
        pytest.skip(f"kafka-clients {fetch.KAFKA_CLIENTS_VERSION} jars are not in {fetch.CACHE_DIR} "
                    f"({fetch.fetch_error() or 'they have not been fetched'}); run tests/oracles/fetch_kafka_clients.py")
    if shutil.which("java") is None:
        pytest.skip("no `java` on PATH: codec_bench's kafka-clients side needs a JDK 17")
    done = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "codec_bench.py"), "--batches", "2",
                           "--runs", "1", "--codecs", "none,lz4", "--values", "100", "--warmup", "0.1"],
                          capture_output=True, text=True, timeout=300, check=False)
    out = done.stdout
    assert done.returncode in (0, 1), out + done.stderr  # 1 = a speed target missed, which is not this test's business
    for codec in ("none", "lz4"):
        for op in ("decode", "encode"):
            assert re.search(rf"^{codec} +100 {op} +[\d,]+ +[\d,]+ +[\d.]+x  >= 1\.0x (ok|MISSED)$", out, re.M), out
    assert "checks: all passed (4 on kafka-clients, 2 on klake)" in out, out
