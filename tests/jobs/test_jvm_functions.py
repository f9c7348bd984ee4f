"""klake's JVM functions (`jobs/runtime/jvm/`, the package's jar) against independent truth.

- `klake_kafka_partition(key, n)`, as the append job calls it in a Spark plan, gives kafka-python's
  `murmur2(key) & 0x7fffffff % n` for random keys: empty, 1-3 tail bytes, non-ASCII, long, and null
  for a null key (Kafka's sticky partitioner decides those).
- The same class, run in a bare JVM next to Apache kafka-clients 3.9.1, gives
  `Utils.toPositive(Utils.murmur2(key)) % n` (skipped, saying why, without the jars; see
  `tests/oracles/fetch_kafka_clients.py`).
- A klake whose jar is missing refuses to start a job's session, in one line that says how to rebuild.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_murmur2

from engine.errors import KlakeError
from jobs.runtime import spark_session as session_module
from tests.conftest import PROJECT_ROOT

KAFKA_JARS = PROJECT_ROOT / ".cache" / "kafka-clients-jars"
PARTITION_COUNTS = (1, 2, 3, 7, 8, 100, 2**31 - 1)


def _keys(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", "clé-ü-日本".encode(), bytes(range(256)), b"\xff" * 4099]
    keys += [rng.randbytes(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 13, 64, 1000])) for _ in range(400)]
    keys += ["".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(1, 40))).encode() for _ in range(100)]
    return keys


def _kafka_python(key: bytes, n: int) -> int:
    return (kafka_murmur2(key) & 0x7FFFFFFF) % n


@pytest.mark.spark
def test_the_sql_function_partitions_keys_as_kafka_python_does(spark) -> None:
    from pyspark.sql import functions as F

    keys = _keys(1)
    rows = [(i, key, n) for i, key in enumerate(keys) for n in PARTITION_COUNTS] + [(len(keys), None, 3)]
    df = spark.createDataFrame(rows, "i int, key binary, n int")
    got = {(r["i"], r["n"]): r["p"] for r in
           df.select("i", "n", F.call_udf(session_module.KAFKA_PARTITION, "key", "n").alias("p")).collect()}
    assert got == {(i, n): (None if key is None else _kafka_python(key, n)) for i, key, n in rows}


def _spark_sql_api_jar() -> Path:
    import pyspark

    return next((Path(pyspark.__file__).parent / "jars").glob("spark-sql-api_*.jar"))


HARNESS = """
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.common.utils.Utils;

public class Harness {
    public static void main(String[] args) throws Exception {
        klake.KafkaPartition partition = new klake.KafkaPartition();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] fields = line.split(" ", -1);
            int n = Integer.parseInt(fields[0]);
            byte[] key = HexFormat.of().parseHex(fields[1]);
            System.out.println(partition.call(key, n) + " " + Utils.toPositive(Utils.murmur2(key)) % n);
        }
    }
}
"""


def test_the_jar_partitions_keys_as_kafka_clients_does(tmp_path: Path) -> None:
    jars = [KAFKA_JARS / "kafka-clients.jar", KAFKA_JARS / "slf4j-api.jar"]
    if not all(jar.is_file() for jar in jars):
        pytest.skip(f"kafka-clients jars are not in {KAFKA_JARS}: run `.venv/bin/python "
                    "tests/oracles/fetch_kafka_clients.py`")
    if shutil.which("javac") is None:
        pytest.skip("no `javac` on PATH")
    classpath = ":".join(str(p) for p in [session_module.KLAKE_JAR, _spark_sql_api_jar(), *jars])
    (tmp_path / "Harness.java").write_text(HARNESS)
    subprocess.run(["javac", "-cp", classpath, "-d", str(tmp_path), str(tmp_path / "Harness.java")], check=True)
    keys = _keys(2)
    lines = [f"{n} {key.hex()}" for key in keys for n in PARTITION_COUNTS]
    done = subprocess.run(["java", "-cp", f"{tmp_path}:{classpath}", "Harness"], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, check=True, timeout=120)
    pairs = [tuple(map(int, line.split())) for line in done.stdout.splitlines()]
    assert len(pairs) == len(lines)
    assert all(ours == theirs for ours, theirs in pairs)
    assert [ours for ours, _ in pairs] == [_kafka_python(key, n) for key in keys for n in PARTITION_COUNTS]


def test_a_klake_without_its_jar_refuses_to_start_a_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(session_module, "KLAKE_JAR", tmp_path / "klake-jvm.jar")
    with pytest.raises(KlakeError, match=r"klake-jvm.jar is missing: rebuild klake with a JDK's javac"):
        session_module.add_jvm_functions(None)
