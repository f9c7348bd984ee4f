"""Kafka's side of the benchmarks (issue 27, item 4): klake beside the tools a user would otherwise pick, in
one run, on one machine, with a real broker (a single KRaft node on loopback, the pinned `kafka` set).

Setup (untimed): `append_bench`'s records (~`--mb` MiB of 100-byte values, keys k0..k99999, timestamps over
one day) generated as Parquet; a topic `kbench` with `--partitions` partitions in the broker.
Timed:
(a) ingest: kafka-clients' producer (`tests/oracles/jvm/BenchProducer.java`: acks=all, the codec of
    `--codec`, 64 KiB batches, Kafka's default partitioner) sends those records into the broker, from the first
    send to the last acknowledgement; `klake append` appends the same Parquet records into a local root (the
    whole job, in this process's warm Spark session, as `append_bench` times it). Reported: the ratio of times,
    append / producer (no goal: the broker writes one copy to its page cache, klake segments, indexes, a catalog
    commit; the figure says what an archive's ingest costs beside a cluster's).
(b) read: the same records read back, after the broker's log dir for `kbench` is imported (`--copy`) into the
    root: Spark's Kafka source from the live broker (`spark.read.format("kafka")`, offsets earliest to the end
    offsets, `includeHeaders`), counted and written to Parquet; `klake read` of the imported topic, counted and
    to Parquet (the whole job, forced onto Spark with `jobs.driver_max_bytes=0`). Both in one warm session,
    `--rounds` interleaved rounds, the best of each kept. Goal (issue 27): klake >= 2x the Kafka source's
    throughput, the broker being the cost klake removes. Every count is checked against the records produced.

Run: .venv/bin/python benchmarks/kafka_bench.py [--mb 256] [--partitions 4] [--rounds 2] [--workdir DIR]
(`make bench-kafka` resolves the JVM sets first). Compaction against the broker's LogCleaner is not measured
here yet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from append_bench import DAY_MS, START_MS, VALUE_BYTES, append_input, generate_input  # noqa: E402

from jobs import import_log, read  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.job_runner import main  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402
from tests.kafka_broker import KafkaBroker  # noqa: E402
from tests.oracles import fetch_jvm  # noqa: E402
from tests.oracles.kafka_tools import run_java_helper  # noqa: E402

TOPIC = "kbench"
PRODUCER_BATCH_BYTES = 65_536


def config_file(workdir: Path, partitions: int, codec: str) -> Path:
    """klake's config: local[2], a root under `workdir`, Spark's Kafka source on the session's classpath;
    topic `bench` (the append's) in the producer's codec and batch size."""
    jars = ",".join(str(j) for j in fetch_jvm.jars("spark-kafka") or ())
    if not jars:
        raise SystemExit("the spark-kafka JVM set is missing: run .venv/bin/python tests/oracles/fetch_jvm.py")
    conf = workdir / "bench.yaml"
    conf.write_text(f"storage: {{root: {workdir / 'store'}}}\n"
                    f"spark: {{master: 'local[2]', conf: {{spark.ui.enabled: 'false', spark.jars: '{jars}'}}}}\n"
                    f"jobs: {{batch_bytes: {PRODUCER_BATCH_BYTES}, driver_max_bytes: 0}}\n"
                    "topic_defaults: {message.timestamp.before.max.ms: 9223372036854775807, "
                    f"compression.type: {'uncompressed' if codec == 'none' else codec}}}\n"
                    f"topics: {{bench: {{partitions: {partitions}}}}}\n")
    return conf


def produce(broker: KafkaBroker, records: int, codec: str) -> float:
    """Seconds kafka-clients' producer took (first send to last acknowledgement)."""
    out = run_java_helper("BenchProducer", broker.bootstrap, TOPIC, codec, str(records), str(VALUE_BYTES),
                          str(START_MS), str(DAY_MS), str(PRODUCER_BATCH_BYTES), timeout=3600)
    words = out.split()
    if words[:2] != ["records", str(records)]:
        raise SystemExit(f"BenchProducer: {out!r}")
    return int(words[3]) / 1000


def end_offsets(broker: KafkaBroker, partitions: int) -> dict[str, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
        return {str(tp.partition): offset for tp, offset in consumer.end_offsets(tps).items()}
    finally:
        consumer.close()


def klake_read(conf: Path, report: Path, output: Path | None) -> tuple[float, int]:
    started = time.perf_counter()
    code = main(read.SPEC, ["--conf", str(conf), "--topic", TOPIC, "--report", str(report), "--no-progress",
                            *(["--output", str(output)] if output else [])])
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"klake read failed with exit code {code}; see {report}")
    return seconds, json.loads(report.read_text())["results"]["read"]["records"]


def run(mb: int, workdir: Path, partitions: int = 4, rounds: int = 2, codec: str = "none") -> dict:
    records = mb * 1024 * 1024 // VALUE_BYTES
    conf = config_file(workdir, partitions, codec)
    spark = spark_session(load_config(conf))
    generate_input(spark, workdir / "input", records)
    broker = KafkaBroker(workdir / "broker", fetch_jvm.classpath("kafka"))
    broker.configure()
    broker.start()
    try:
        broker.create_topic(TOPIC, partitions=partitions, retention_ms=-1, segment_bytes=64 << 20,
                            message_timestamp_before_max_ms=9223372036854775807)
        producer_s = produce(broker, records, codec)
        started = time.perf_counter()
        appended = append_input(conf, workdir / "input", workdir / "append.json")
        append_s = time.perf_counter() - started
        if appended["results"]["records_appended"] != records:
            raise SystemExit(f"append: {appended['results']['records_appended']} of {records} records appended")
        ends = end_offsets(broker, partitions)
        if sum(ends.values()) != records:
            raise SystemExit(f"the broker holds {sum(ends.values())} records, not {records}")
        with broker.stopped():  # a clean copy of the broker's log dir for the topic
            logs = workdir / "kafka-logs"
            for partition in range(partitions):
                broker.copy_topic(TOPIC, logs, partition)
        if main(import_log.SPEC, [str(logs), "--conf", str(conf), "--copy", "--no-progress"]) != 0:
            raise SystemExit("klake import failed")
        source = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                  .option("subscribe", TOPIC).option("includeHeaders", "true")
                  .option("startingOffsets", "earliest").option("endingOffsets", json.dumps({TOPIC: ends})))
        runs: dict[str, list[float]] = {"kafka_count": [], "klake_count": [], "kafka_parquet": [], "klake_parquet": []}
        for _ in range(rounds):  # interleaved, best of each: the machine may be shared
            started = time.perf_counter()
            counted = source.load().count()
            runs["kafka_count"].append(time.perf_counter() - started)
            seconds, ours = klake_read(conf, workdir / "count.json", None)
            runs["klake_count"].append(seconds)
            started = time.perf_counter()
            source.load().write.mode("overwrite").parquet(str(workdir / "kafka-parquet"))
            runs["kafka_parquet"].append(time.perf_counter() - started)
            seconds, written = klake_read(conf, workdir / "parquet.json", workdir / "klake-parquet")
            runs["klake_parquet"].append(seconds)
            if not counted == ours == written == records:
                raise SystemExit(f"counts differ: Kafka source {counted}, klake {ours} / {written}, produced {records}")
        parquet_rows = [spark.read.parquet(str(workdir / d)).count() for d in ("kafka-parquet", "klake-parquet")]
        if parquet_rows != [records, records]:
            raise SystemExit(f"Parquet outputs hold {parquet_rows} rows, not {records}")
    finally:
        broker.stop()
    best = {name: min(times) for name, times in runs.items()}
    value_mb = records * VALUE_BYTES / 1e6
    return {"records": records, "partitions": partitions, "codec": codec, "rounds": rounds,
            "producer_s": round(producer_s, 2), "append_s": round(append_s, 2),
            "ingest_ratio_append_over_producer": round(append_s / producer_s, 2),
            **{f"{name}_s": round(seconds, 2) for name, seconds in best.items()},
            **{f"{name}_mb_per_s": round(value_mb / seconds, 1) for name, seconds in best.items()},
            "read_count_klake_over_kafka_source": round(best["kafka_count"] / best["klake_count"], 2),
            "read_parquet_klake_over_kafka_source": round(best["kafka_parquet"] / best["klake_parquet"], 2),
            "runs": {name: [round(s, 2) for s in times] for name, times in runs.items()}}


def cli() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="MiB of 100-byte values (default 256)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="klake-kafka-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = run(args.mb, workdir, args.partitions, args.rounds, args.codec)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    print(f"read, counted: klake {result['klake_count_mb_per_s']} MB/s vs Spark's Kafka source "
          f"{result['kafka_count_mb_per_s']} MB/s: {result['read_count_klake_over_kafka_source']}x (goal >= 2x)")
    print(f"read, to Parquet: klake {result['klake_parquet_mb_per_s']} MB/s vs Spark's Kafka source "
          f"{result['kafka_parquet_mb_per_s']} MB/s: {result['read_parquet_klake_over_kafka_source']}x (goal >= 2x)")
    print(f"ingest: klake append {result['append_s']} s vs kafka-clients producer (acks=all) "
          f"{result['producer_s']} s: {result['ingest_ratio_append_over_producer']}x the time")
    return result


if __name__ == "__main__":
    cli()
