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
(c) compaction (`run_compaction`): one partition of `--compact-mb` MiB (the same generator: ~27 updates per
    key at 256 MiB) produced into a topic of a second broker (one cleaner thread, a 256 MiB dedupe buffer: one
    pass), copied after a clean shutdown, then cleaned by the broker's LogCleaner up to the active segment; its
    own statistics (`LogCleaner.recordStats` in the broker's log) give its time. The copy imported into a local
    root and cleaned by `klake compact --force` in a `local[1]` session (a Spark session of its own, started
    before timing), the whole job timed, best of `--rounds`. Goal (issue 27): >= 1.0x per core. Both sides'
    record counts (read, kept) must agree.

Run: .venv/bin/python benchmarks/kafka_bench.py [--mb 256] [--compact-mb 256] [--partitions 4] [--rounds 2]
[--parts read,compaction] [--workdir DIR] (`make bench-kafka` resolves the JVM sets first).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from append_bench import DAY_MS, START_MS, VALUE_BYTES, append_input, generate_input  # noqa: E402

from engine.log.kafka_files import KafkaFileError, parse_offset_checkpoint  # noqa: E402
from jobs import compact, import_log, read  # noqa: E402
from jobs.runtime.config import load_config  # noqa: E402
from jobs.runtime.job_runner import main  # noqa: E402
from jobs.runtime.spark_session import spark_session  # noqa: E402
from kernel.names import TopicPartition  # noqa: E402
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


def produce(broker: KafkaBroker, records: int, codec: str, topic: str = TOPIC) -> float:
    """Seconds kafka-clients' producer took (first send to last acknowledgement)."""
    out = run_java_helper("BenchProducer", broker.bootstrap, topic, codec, str(records), str(VALUE_BYTES),
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


COMPACT_TOPIC = "kcompact"
CLEANER_CONFIGS = {"log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": str(256 << 20)}
CLEANER_HEAP = "1g"  # the dedupe buffer lives on the broker's heap
CLEANER_TIMEOUT_S = 3600
# LogCleaner.recordStats (Kafka 4.1): MB are MiB, '%,.1f' groups thousands with commas
_NUMBER = r"[\d,]+(?:\.\d+)?"
_CLEANER_STATS = re.compile(
    rf"Log cleaner thread \d+ cleaned log (?P<log>\S+) \(dirty section = \[(?P<start>\d+), (?P<end>\d+)\]\)\s+"
    rf"(?P<mb>{_NUMBER}) MB of log processed in (?P<seconds>{_NUMBER}) seconds "
    rf"\((?P<mb_per_s>{_NUMBER}) MB/sec\)\.\s+"
    rf"Indexed (?P<indexed_mb>{_NUMBER}) MB in (?P<index_seconds>{_NUMBER}) seconds.*?"
    rf"Start size: (?P<start_mb>{_NUMBER}) MB \((?P<start_messages>[\d,]+) messages\)\s+"
    rf"End size: (?P<end_mb>{_NUMBER}) MB \((?P<end_messages>[\d,]+) messages\)", re.S)


def cleaner_runs(log_text: str, log_name: str) -> list[dict[str, float]]:
    """The broker's LogCleaner statistics for each clean of `log_name` (`<topic>-<partition>`) in its log."""
    return [{key: float(value.replace(",", "")) for key, value in match.groupdict().items() if key != "log"}
            for match in _CLEANER_STATS.finditer(log_text) if match["log"] == log_name]


def broker_clean(broker: KafkaBroker, topic: str, active_base: int) -> dict[str, float]:
    """Turn `topic` into a compacted one and wait until the broker's cleaner has cleaned it up to its active
    segment (`cleaner-offset-checkpoint`); that clean's statistics, which must be one pass (a dedupe buffer
    too small for the dirty section's keys would clean it in several)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    log_start = broker.log_file.stat().st_size
    admin = broker.admin()
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})],
            incremental=True)
    finally:
        admin.close()
    checkpoint = broker.log_dir / "cleaner-offset-checkpoint"
    deadline = time.monotonic() + CLEANER_TIMEOUT_S
    cleaned_to = None
    while cleaned_to != active_base:
        if time.monotonic() > deadline:
            raise SystemExit(f"the broker's cleaner reached {cleaned_to}, not {active_base}, in {CLEANER_TIMEOUT_S} s")
        time.sleep(0.5)
        with contextlib.suppress(FileNotFoundError, KafkaFileError):  # not yet written, or empty at first
            cleaned_to = parse_offset_checkpoint(checkpoint.read_bytes(), str(checkpoint)).get(TopicPartition(topic, 0))
    deadline = time.monotonic() + 30  # the statistics are logged once the checkpoint is written
    while not (runs := cleaner_runs(broker.log_file.read_bytes()[log_start:].decode(errors="replace"), f"{topic}-0")):
        if time.monotonic() > deadline:
            raise SystemExit(f"no LogCleaner statistics for {topic}-0 in {broker.log_file}")
        time.sleep(0.5)
    if len(runs) != 1 or runs[0]["end"] != active_base:
        raise SystemExit(f"the broker cleaned {topic}-0 in {len(runs)} passes, not one: {runs}")
    return runs[0]


def compact_config(workdir: Path, root: Path) -> Path:
    """klake's config for the compaction side: one core (`local[1]`), the compacted topic."""
    conf = workdir / "compact.yaml"
    conf.write_text(f"storage: {{root: {root}}}\n"
                    "spark: {master: 'local[1]', conf: {spark.ui.enabled: 'false'}}\n"
                    "topic_defaults: {message.timestamp.before.max.ms: 9223372036854775807}\n"
                    f"topics: {{{COMPACT_TOPIC}: {{partitions: 1, cleanup.policy: compact}}}}\n")
    return conf


def run_compaction(mb: int, workdir: Path, rounds: int = 2, codec: str = "none") -> dict:
    """Compaction (issue 27, item 4): the same pre-clean partition (`--compact-mb` MiB of 100-byte values, keys
    k0..k99999, so ~27 updates per key at 256 MiB, in 16 segments) cleaned by the broker's
    LogCleaner (one cleaner thread, a 256 MiB dedupe buffer: one pass) and by `klake compact --force` on a local
    root in a `local[1]` session, up to the same cleaning point (the active segment's base). The broker's time
    is its cleaner's own figure (`LogCleaner.recordStats`: index and clean, swap included); klake's is the whole
    job (planning, the Spark task, the catalog commit), best of `rounds`, each on a fresh import of the copy.
    Both count the records they read and kept; the counts must agree."""
    records = mb * 1024 * 1024 // VALUE_BYTES
    segment_bytes = max(mb << 20 >> 4, 128 << 10)
    broker = KafkaBroker(workdir / "cleaner-broker", fetch_jvm.classpath("kafka"), extra_configs=CLEANER_CONFIGS,
                         heap=CLEANER_HEAP)
    broker.configure()
    broker.start()
    try:
        broker.create_topic(COMPACT_TOPIC, segment_bytes=segment_bytes, retention_ms=-1, cleanup_policy="delete",
                            message_timestamp_before_max_ms=9223372036854775807)
        produce(broker, records, codec, COMPACT_TOPIC)
        with broker.stopped():  # a clean copy of the pre-clean log, all of it flushed
            pre = broker.copy_topic(COMPACT_TOPIC, workdir / "pre-clean")
        active_base = max(int(p.stem) for p in pre.glob("*.log"))
        if active_base == 0:
            raise SystemExit(f"{COMPACT_TOPIC}: one segment only, nothing for a cleaner to clean")
        kafka = broker_clean(broker, COMPACT_TOPIC, active_base)
    finally:
        broker.stop()
    root = workdir / "compact-root"
    conf = compact_config(workdir, root)
    spark_session(load_config(conf)).range(1).count()  # the session started, untimed
    times = []
    for _ in range(rounds):
        if main(import_log.SPEC, [str(pre.parent), "--conf", str(conf), "--copy", "--no-progress",
                                  "--report", str(workdir / "compact-import.json")]) != 0:
            raise SystemExit("klake import of the pre-clean copy failed")
        report_path = workdir / "compact.json"
        started = time.perf_counter()
        code = main(compact.SPEC, ["--conf", str(conf), "--force", "--now", str(START_MS + DAY_MS),
                                   "--report", str(report_path), "--no-progress"])
        times.append(time.perf_counter() - started)
        if code != 0:
            raise SystemExit(f"klake compact failed with exit code {code}; see {report_path}")
        results = json.loads(report_path.read_text())["results"]
        if (results["records_read"], results["records_kept"]) != (kafka["start_messages"], kafka["end_messages"]):
            raise SystemExit(f"klake compact read/kept {results['records_read']}/{results['records_kept']} records, "
                             f"the broker's cleaner {kafka['start_messages']:.0f}/{kafka['end_messages']:.0f}")
        shutil.rmtree(root)
    klake_s = min(times)
    kafka_s = kafka["mb"] / kafka["mb_per_s"]  # its seconds are printed to 0.1 s, its MB/s to 0.1 MB/s
    return {"compact_records": records, "compact_segment_bytes": segment_bytes, "cleaned_offsets": active_base,
            "cleaned_mib": kafka["mb"], "records_kept": int(kafka["end_messages"]),
            "logcleaner_s": round(kafka_s, 2), "logcleaner_index_s": kafka["index_seconds"],
            "logcleaner_mb_per_s": kafka["mb_per_s"], "klake_compact_s": round(klake_s, 2),
            "klake_compact_mb_per_s": round(kafka["mb"] / klake_s, 1),
            "compact_klake_over_logcleaner_per_core": round(kafka_s / klake_s, 2),
            "klake_compact_runs": [round(s, 2) for s in times]}


def cli() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256, help="MiB of 100-byte values read and ingested (default 256)")
    parser.add_argument("--compact-mb", type=int, default=256, help="MiB of the compacted partition (default 256)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--parts", default="read,compaction",
                        help="comma-separated: read (read and ingest), compaction (default both)")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - {"read", "compaction"}:
        parser.error(f"--parts: read and/or compaction, not {args.parts!r}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="klake-kafka-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    try:
        if "read" in parts:
            result |= run(args.mb, workdir, args.partitions, args.rounds, args.codec)
            from pyspark.sql import SparkSession

            SparkSession.getActiveSession().stop()  # the compaction runs in a local[1] session of its own
        if "compaction" in parts:
            result |= run_compaction(args.compact_mb, workdir, args.rounds, args.codec)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if "read" in parts:
        print(f"read, counted: klake {result['klake_count_mb_per_s']} MB/s vs Spark's Kafka source "
              f"{result['kafka_count_mb_per_s']} MB/s: {result['read_count_klake_over_kafka_source']}x (goal >= 2x)")
        print(f"read, to Parquet: klake {result['klake_parquet_mb_per_s']} MB/s vs Spark's Kafka source "
              f"{result['kafka_parquet_mb_per_s']} MB/s: {result['read_parquet_klake_over_kafka_source']}x (goal >= 2x)")
        print(f"ingest: klake append {result['append_s']} s vs kafka-clients producer (acks=all) "
              f"{result['producer_s']} s: {result['ingest_ratio_append_over_producer']}x the time")
    if "compaction" in parts:
        print(f"compaction: klake compact (local[1]) {result['klake_compact_mb_per_s']} MB/s vs the broker's "
              f"LogCleaner (1 thread) {result['logcleaner_mb_per_s']} MB/s on {result['cleaned_mib']} MiB: "
              f"{result['compact_klake_over_logcleaner_per_core']}x per core (goal >= 1.0x)")
    return result


if __name__ == "__main__":
    cli()
