"""`klake archive` of a live topic against Spark's Kafka source writing the same records as Parquet, in one run on
one machine (issue 30: goal <= 1.2x the Kafka source's time).

Setup (untimed): a single KRaft broker on loopback (the pinned `kafka` set, `tests/kafka_broker.py`); a topic
`archive` with `--partitions` partitions, `compression.type` = `--codec` (so the broker keeps the producer's
batches and klake's archive encodes in the same codec), no retention; kafka-clients' producer
(`tests/oracles/jvm/ArchiveBenchProducer.java`) fills it with ~`--mb` MiB of keys and values: keys user-N (50,000
users), JSON values of `--value-bytes` bytes that compress as event payloads do, one `trace-id` header each,
timestamps over one day, 64 KiB batches in `--codec`.

Untimed, `--warmup` rounds of each (A B; default 1): the Kafka source's JVM code warms (JIT) and so do klake's
Python workers (their imports; Spark reuses them), the same warm-up for both. Then timed, alternating `--rounds`
times (A B A B ...), in the same Spark session (`local[2]`, the spark-sql-kafka jars):
(a) Spark's Kafka source (`spark.read.format("kafka")`: the topic assigned, earliest to the broker's end offsets,
    `includeHeaders`, `read_committed` as the archive reads) written as Parquet (Spark's default snappy) into a
    fresh directory;
(b) `klake archive --bootstrap-servers ... --topic archive` into a fresh root (local disk): the whole job, from
    its cluster metadata to the catalog commit and the consumer-group snapshot.
Both must hold every record: the Parquet output's row count, and the archive's per-partition record counts and
last offsets against the broker's end offsets. Reported: every round's wall seconds (warm-up rounds apart), the
median of each side, MiB/s of keys and values at the median, records, the ratio archive / Kafka source of the
medians and of each round, and the archive's Arrow batches (rows per batch and the largest record sampled,
`jobs.ingest.arrow_batches`).

Run: .venv/bin/python benchmarks/archive_bench.py [--mb 1024] [--partitions 4] [--rounds 3] [--warmup 1]
[--codec lz4] [--value-bytes 1024] [--workdir DIR] (`make bench-archive` resolves the JVM sets first).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jobs import archive  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.job_runner import main  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402
from tests.kafka_broker import KafkaBroker  # noqa: E402
from tests.oracles import fetch_jvm  # noqa: E402
from tests.oracles.kafka_tools import run_java_helper  # noqa: E402

TOPIC = "archive"
DAY_MS = 86_400_000
START_MS = 1_790_000_000_000
KEY_BYTES = 9  # "user-N": about 9 bytes on average, for the record count of `--mb`


def config_file(path: Path, root: Path) -> Path:
    """klake's config: local[2], `root`, Spark's Kafka source on the session's classpath. The topic is not
    declared: the archive takes the cluster's partition count and configs, as a user's first run does."""
    jars = ",".join(str(j) for j in fetch_jvm.jars("spark-kafka") or ())
    if not jars:
        raise SystemExit("the spark-kafka JVM set is missing: run .venv/bin/python tests/oracles/fetch_jvm.py")
    path.write_text(f"storage: {{root: {root}}}\n"
                    f"spark: {{master: 'local[2]', conf: {{spark.ui.enabled: 'false', spark.jars: '{jars}'}}}}\n")
    return path


def produce(broker: KafkaBroker, records: int, codec: str, value_bytes: int) -> tuple[float, int]:
    """Seconds kafka-clients' producer took (first send to last acknowledgement), and the key and value bytes."""
    out = run_java_helper("ArchiveBenchProducer", broker.bootstrap, TOPIC, codec, str(records), str(value_bytes),
                          str(START_MS), str(DAY_MS), timeout=3600)
    words = out.split()
    if words[:2] != ["records", str(records)]:
        raise SystemExit(f"ArchiveBenchProducer: {out!r}")
    return int(words[3]) / 1000, int(words[5])


def end_offsets(broker: KafkaBroker, partitions: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        return {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def kafka_to_parquet(spark, broker: KafkaBroker, ends: dict[int, int], out: Path) -> float:  # noqa: ANN001
    started = time.perf_counter()
    (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("assign", json.dumps({TOPIC: sorted(ends)})).option("startingOffsets", "earliest")
     .option("endingOffsets", json.dumps({TOPIC: {str(p): e for p, e in ends.items()}}))
     .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed")
     .load().write.parquet(str(out)))
    return time.perf_counter() - started


def klake_archive(conf: Path, broker: KafkaBroker, report: Path, ends: dict[int, int]) -> tuple[float, dict | None]:
    """The whole `archive` job's seconds and its Arrow batches; the archive checked complete against the broker's
    end offsets."""
    started = time.perf_counter()
    code = main(archive.SPEC, ["--conf", str(conf), "--bootstrap-servers", broker.bootstrap, "--topic", TOPIC,
                               "--report", str(report), "--no-progress"])
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"klake archive failed with exit code {code}; see {report}")
    results = json.loads(report.read_text())["results"]
    rows = results["archive"]
    got = {int(name.rsplit("-", 1)[1]): (row["records"], row["last_offset"], row["lag"]) for name, row in rows.items()}
    want = {p: (end, end - 1, 0) for p, end in ends.items()}
    if got != want:
        raise SystemExit(f"the archive is not the cluster's: (records, last offset, lag) {got}, the broker's {want}")
    return seconds, results.get("arrow_batches")


def run(mb: int, workdir: Path, partitions: int = 4, rounds: int = 3, codec: str = "lz4",
        value_bytes: int = 1024, warmup: int = 1) -> dict:
    records = mb * 1024 * 1024 // (value_bytes + KEY_BYTES)
    spark = spark_session(load_config(config_file(workdir / "session.yaml", workdir / "unused-root")))
    broker = KafkaBroker(workdir / "broker", fetch_jvm.classpath("kafka"))
    broker.configure()
    broker.start()
    try:
        broker.create_topic(TOPIC, partitions=partitions, retention_ms=-1, segment_bytes=256 << 20,
                            compression_type=codec, message_timestamp_before_max_ms=9223372036854775807)
        producer_s, data_bytes = produce(broker, records, codec, value_bytes)
        ends = end_offsets(broker, partitions)
        if sum(ends.values()) != records:
            raise SystemExit(f"the broker holds {sum(ends.values())} records, not {records}")
        broker_mb = sum(f.stat().st_size for p in range(partitions) for f in broker.topic_dir(TOPIC, p).glob("*.log")) / 2**20
        spark.range(1).count()  # the session started, untimed
        runs: dict[str, list[float]] = {"spark": [], "archive": []}
        warm: dict[str, list[float]] = {"spark": [], "archive": []}
        sizes = {}
        batches = None
        for index in range(warmup + rounds):  # A B A B: the machine is shared, so each round pairs the two
            into = warm if index < warmup else runs
            out = workdir / f"parquet-{index}"
            into["spark"].append(kafka_to_parquet(spark, broker, ends, out))
            sizes["parquet_mb"] = round(_dir_bytes(out) / 2**20, 1)
            written = spark.read.parquet(str(out)).count()
            if written != records:
                raise SystemExit(f"Spark's Parquet output holds {written} rows, not {records}")
            shutil.rmtree(out)
            root = workdir / f"root-{index}"
            conf = config_file(workdir / f"archive-{index}.yaml", root)
            seconds, batches = klake_archive(conf, broker, workdir / f"archive-{index}.json", ends)
            into["archive"].append(seconds)
            sizes["archive_mb"] = round(_dir_bytes(root) / 2**20, 1)
            shutil.rmtree(root)
    finally:
        broker.stop()
    median = {name: statistics.median(times) for name, times in runs.items()}
    data_mb = data_bytes / 2**20
    return {"records": records, "partitions": partitions, "codec": codec, "value_bytes": value_bytes,
            "key_value_mb": round(data_mb, 1), "broker_log_mb": round(broker_mb, 1), **sizes,
            "producer_s": round(producer_s, 2), "warmup_rounds": warmup, "rounds": rounds,
            "spark_s": round(median["spark"], 2), "archive_s": round(median["archive"], 2),
            "spark_mb_per_s": round(data_mb / median["spark"], 1),
            "archive_mb_per_s": round(data_mb / median["archive"], 1),
            "ratio_archive_over_spark": round(median["archive"] / median["spark"], 2),
            "ratio_per_round": [round(a / s, 2) for s, a in zip(runs["spark"], runs["archive"], strict=True)],
            "runs": {name: [round(s, 2) for s in times] for name, times in runs.items()},
            "warmup_runs": {name: [round(s, 2) for s in times] for name, times in warm.items()},
            "arrow_batches": batches, "load_avg_1m": round(os.getloadavg()[0], 2)}


def cli() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=1024, help="MiB of keys and values in the topic (default 1024)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds of each first (default 1)")
    parser.add_argument("--codec", default="lz4", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="klake-archive-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    try:
        result = run(args.mb, workdir, args.partitions, args.rounds, args.codec, args.value_bytes, args.warmup)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result["load_avg_1m_at_start"] = round(load, 2)
    print(json.dumps(result, indent=2))
    print(f"archive: klake {result['archive_mb_per_s']} MB/s ({result['archive_s']} s) vs Spark's Kafka source to "
          f"Parquet {result['spark_mb_per_s']} MB/s ({result['spark_s']} s), {result['records']} records, medians of "
          f"{result['rounds']} rounds after {result['warmup_rounds']} warm-up: {result['ratio_archive_over_spark']}x "
          f"the time (goal <= 1.2x; rounds {', '.join(f'{r}x' for r in result['ratio_per_round'])})")
    return result


if __name__ == "__main__":
    cli()
