"""`archive`: copy a live cluster's topics into klake at the cluster's own offsets (issue 30, item 2).

    klake archive --conf C --bootstrap-servers HOST:PORT --topic orders [--from earliest|TIME] [--until TIME]

- Each partition is read with Spark's Kafka source from where the archive's log ends to the cluster's end
  at the start of the run (or the first offset at `--until`); a partition klake does not hold yet starts at
  `--from` (`earliest`, the default, or the first offset at a time). Records are appended by `append` keeping
  their offsets, timestamps, timestamp types, keys, values and headers (`engine.log.kept_offsets`), so an
  offset means the same record in the archive and in the cluster. Each partition is appended by the Spark
  task that reads it from the cluster (one task per partition, as Spark's Kafka source splits): nothing is
  staged, so the archive costs about what the Kafka source's own write to Parquet does (issue 30's benchmark,
  `benchmarks/archive_bench.py`). Spark hands the records to the tasks in Arrow batches sized from the largest
  record of each range's first fetch (`Cluster.largest_record`, `jobs.ingest.arrow_batches`): within Spark's
  byte bound without its per-row check.
- A topic new to klake is declared with the cluster's partition count and the topic configs the cluster
  reports (Admin DescribeConfigs; those klake knows), unless the config file declares it.
- `read_committed` by default: a consumer's records carry no producer id, transactional flag or control
  marker, so an archive that read aborted records could never tell them apart from committed ones
  afterwards; reading committed records only (up to the last stable offset) keeps aborted ones out and
  leaves their offsets as gaps. `--isolation-level read_uncommitted` copies everything a plain consumer sees.
- Exactly once across runs and crashes: the job id names the cluster, the topics and each partition's
  start (the archive's log end at the start of the run), so a re-run after a kill before the commit is the
  same job (the job ledger and leases take it over) and one after the commit starts where it ended (taking
  over the leases a run killed after its commit left, `engine.ops.run.lease_is_spent`); and an offset already
  in the archive is never appended again (the kept-offsets rule rejects it).
- Records the cluster no longer holds (its log start passed the archive's log end) are a gap: reported with
  their offset range, and the run exits 1 unless `--allow-gaps`. Never hidden: Spark's Kafka source keeps
  `failOnDataLoss`, so records retention removes during the run fail it.
- Kafka client settings pass through as `--kafka-option kafka.KEY=VALUE`, to Spark's Kafka source as they
  are and to the job's metadata client (kafka-python) when it knows `KEY`; a value `env:NAME` or `file:PATH`
  is read from the environment or a file, and a secret (`*password*`, `sasl.jaas.config`) must be given so.
  No value is printed or reported.
- The report gives per partition: records, bytes, first and last offset appended, and lag behind the cluster
  at the end of the run.
- Each run snapshots the committed offsets of the consumer groups on the archived topics into `_groups`
  (`engine.ops.groups_table`; `klake groups` answers where a group stood).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.log.topic_config import TopicConfig
from engine.ops.groups_table import GroupOffset, snapshot_groups
from jobs import append
from jobs.ingest.arrow_batches import sized_batches
from jobs.ingest.source import InputSettings
from jobs.runtime.config import TopicSettings
from jobs.runtime.job_runner import JobContext, JobSpec, main, time_argument
from jobs.runtime.report import plural
from kernel.errors import KlakeError
from kernel.names import TopicPartition

EARLIEST = "earliest"
JOB_PREFIX = "archive-"  # of an archive run's default job id (`archive_job_id`)
SECRET_MARKERS = ("password", "sasl.jaas.config", "secret")
CLIENT_TIMEOUT_MS = 15_000
SAMPLE_SECONDS = 5.0  # longest the run waits for its partitions' first fetches (`Cluster.largest_record`)
JAAS_CREDENTIAL = re.compile(r'\b(username|password)\s*=\s*"([^"]*)"')
KAFKA_PYTHON_LOGGER = "kafka"  # kafka-python's package logger: each of its modules logs under it
# topic configs klake takes from the cluster (Kafka's names; the others are broker-side or klake's own)
CLUSTER_CONFIGS = ("cleanup.policy", "compression.type", "retention.ms", "retention.bytes", "segment.bytes",
                   "segment.ms", "segment.jitter.ms", "segment.index.bytes", "index.interval.bytes",
                   "max.message.bytes", "message.timestamp.type", "min.cleanable.dirty.ratio",
                   "delete.retention.ms", "min.compaction.lag.ms", "max.compaction.lag.ms")


def _start(text: str) -> int | str:
    return EARLIEST if text == EARLIEST else time_argument(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOSTS", help="the cluster to archive")
    parser.add_argument("--from", dest="start_from", type=_start, default=EARLIEST, metavar="earliest|TIME",
                        help="where a new partition starts (default earliest)")
    parser.add_argument("--until", type=time_argument, metavar="TIME",
                        help="stop at this time (default: the cluster's end)")
    parser.add_argument("--allow-gaps", action="store_true",
                        help="report lost records but exit 0")
    parser.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"), default="read_committed",
                        help="default read_committed: no aborted records")
    parser.add_argument("--kafka-option", dest="kafka_options", action="append", default=[], metavar="kafka.K=V",
                        help="a client setting; V env:NAME or file:PATH (secrets only so)")


def client_options(items: list[str]) -> dict[str, str]:
    """`--kafka-option kafka.KEY=VALUE` items as Spark's Kafka source takes them, values resolved
    (`env:NAME`, `file:PATH`); a secret given literally is refused, naming only its key."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("kafka.") or len(key) <= len("kafka."):
            raise KlakeError(f"--kafka-option {key}: expected kafka.KEY=VALUE")
        if value.startswith("env:"):
            if value[4:] not in os.environ:
                raise KlakeError(f"--kafka-option {key}: environment variable {value[4:]} is not set")
            value = os.environ[value[4:]]
        elif value.startswith("file:"):
            try:
                value = Path(value[5:]).read_text().strip()
            except OSError as exc:
                raise KlakeError(f"--kafka-option {key}: cannot read {value[5:]}: {exc.strerror}") from None
        elif any(marker in key for marker in SECRET_MARKERS):
            raise KlakeError(f"--kafka-option {key}: a secret is taken only as env:NAME or file:PATH, never on "
                             "the command line")
        out[key] = value
    return out


def sasl_credentials(options: Mapping[str, str]) -> dict[str, str]:
    """kafka-python's `sasl_plain_username`/`sasl_plain_password` (its PLAIN and SCRAM settings) out of the Java
    client's `kafka.sasl.jaas.config`, the one setting Spark's Kafka source takes credentials in (its login
    modules' `username="..." password="..."` options)."""
    jaas = options.get("kafka.sasl.jaas.config")
    return {} if jaas is None else {f"sasl_plain_{k}": v for k, v in JAAS_CREDENTIAL.findall(jaas)}


class _Refusals(logging.Handler):
    """The brokers' refusals of the client's credentials, by the error's type (`SaslAuthenticationFailedError`,
    Kafka's SASL_AUTHENTICATION_FAILED). kafka-python (3.0.12, and its master) raises it only after bootstrap:
    its bootstrap loop catches the failed connection's error, logs it and retries until its timeout, then raises
    `KafkaTimeoutError`, which alone would say only that the cluster is out of reach. The error instance is an
    argument of its log records: read from any record under the package's logger, whichever module logs it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.refused = False

    def emit(self, record: logging.LogRecord) -> None:
        from kafka.errors import SaslAuthenticationFailedError

        carried = [*(record.args if isinstance(record.args, tuple) else ()), *(record.exc_info or ())]
        self.refused |= any(isinstance(arg, SaslAuthenticationFailedError) for arg in carried)


class Cluster:
    """The cluster's metadata through kafka-python (a consumer for offsets, an admin client for configs),
    with the pass-through settings kafka-python knows."""

    def __init__(self, bootstrap: str, options: Mapping[str, str], isolation: str) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer
        from kafka.errors import KafkaError, SaslAuthenticationFailedError

        settings: dict[str, Any] = {"bootstrap_servers": bootstrap.split(","), "request_timeout_ms": CLIENT_TIMEOUT_MS,
                                    "bootstrap_timeout_ms": CLIENT_TIMEOUT_MS}
        known = set(KafkaConsumer.DEFAULT_CONFIG) & set(KafkaAdminClient.DEFAULT_CONFIG)
        settings |= {name: value for key, value in options.items()
                     if (name := key[len("kafka."):].replace(".", "_")) in known}
        settings |= sasl_credentials(options)
        self.bootstrap = bootstrap
        refusals, log = _Refusals(), logging.getLogger(KAFKA_PYTHON_LOGGER)
        log.addHandler(refusals)
        try:
            self.consumer = KafkaConsumer(isolation_level=isolation, enable_auto_commit=False, **settings)
            self.admin = KafkaAdminClient(**settings)
        except KafkaError as exc:
            if refusals.refused or isinstance(exc, SaslAuthenticationFailedError):
                raise KlakeError(f"--bootstrap-servers {bootstrap}: the cluster refused the credentials (SASL "
                                 f"{settings.get('sasl_mechanism')} authentication failed; check kafka.sasl.*)") \
                    from None
            raise KlakeError(f"--bootstrap-servers {bootstrap}: cannot reach the cluster ({type(exc).__name__})") \
                from None
        finally:
            log.removeHandler(refusals)

    def close(self) -> None:
        self.consumer.close()
        self.admin.close()

    def group_offsets(self, topics: set[str]) -> list[GroupOffset]:
        """The committed offsets of every consumer group on `topics` (ListGroups, then OffsetFetch)."""
        groups = sorted(g["group_id"] for g in self.admin.list_groups())
        if not groups:
            return []
        found = self.admin.list_group_offsets(dict.fromkeys(groups))
        return [GroupOffset(group, tp.topic, tp.partition, meta.offset,
                            None if meta.leader_epoch is None or meta.leader_epoch < 0 else meta.leader_epoch,
                            meta.metadata or None)
                for group in groups for tp, meta in sorted(found.get(group, {}).items())
                if tp.topic in topics and meta.offset >= 0]

    def partitions(self, topic: str) -> int:
        found = self.consumer.partitions_for_topic(topic)
        if not found:
            raise KlakeError(f"topic {topic}: not in the cluster at {self.bootstrap}")
        return len(found)

    def topic_config(self, topic: str) -> TopicConfig:
        """The settings klake knows of those the cluster reports for `topic` (DescribeConfigs)."""
        from kafka.admin import ConfigResource, ConfigResourceType

        response = self.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        entries = {key: data.get("value") for key, data in response["topic"][topic].items()}
        return TopicConfig.from_mapping({k: entries[k] for k in CLUSTER_CONFIGS if entries.get(k) is not None}, topic)

    def largest_record(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> int | None:
        """The largest record (key, value and headers' keys and values, uncompressed) among each range's first
        fetch (up to `max.partition.fetch.bytes` from its start), as the archive's Arrow batches will hold them
        (`jobs.ingest.arrow_batches`); None if no record came. A range with no record to read (aborted ones
        only, under read_committed) counts as fetched once the consumer's position passes its end."""
        from kafka import TopicPartition as KafkaTP

        ends = {KafkaTP(tp.topic, tp.partition): end for tp, (_, end) in ranges.items()}
        self.consumer.assign(list(ends))
        for tp, (start, _) in ranges.items():
            self.consumer.seek(KafkaTP(tp.topic, tp.partition), start)
        sizes: list[int] = []
        deadline = time.monotonic() + SAMPLE_SECONDS
        try:
            while ends and time.monotonic() < deadline:
                for key, records in self.consumer.poll(timeout_ms=100).items():
                    sizes += [max(r.serialized_key_size, 0) + max(r.serialized_value_size, 0)
                              + max(r.serialized_header_size, 0) for r in records if r.offset < ends.get(key, -1)]
                    ends.pop(key, None)
                for key in [key for key, end in ends.items() if self.consumer.position(key) >= end]:
                    ends.pop(key)
                self.consumer.pause(*[key for key in self.consumer.assignment() if key not in ends])
        finally:
            self.consumer.unsubscribe()
        return max(sizes, default=None)

    def offsets(self, tps: list[TopicPartition], at_ms: int | None = None) -> tuple[dict, dict, dict | None]:
        """Each partition's log start, its end (the last stable offset under read_committed) and, with
        `at_ms`, the first offset at or after that time (the end if none)."""
        from kafka import TopicPartition as KafkaTP

        keys = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        begin = self.consumer.beginning_offsets(keys)
        end = self.consumer.end_offsets(keys)
        pairs = list(zip(tps, keys, strict=True))
        found = None
        if at_ms is not None:
            answers = self.consumer.offsets_for_times(dict.fromkeys(keys, at_ms))
            found = {tp: answers[k].offset if answers.get(k) is not None else end[k] for tp, k in pairs}
        return {tp: begin[k] for tp, k in pairs}, {tp: end[k] for tp, k in pairs}, found


def archive_job_id(bootstrap: str, starts: Mapping[TopicPartition, int]) -> str:
    """One run's job id: the cluster, and each partition's start. A re-run after a kill before the commit
    has the same starts, so it is the same job; one after the commit starts later, a new one."""
    digest = hashlib.sha256(json.dumps([bootstrap, sorted((str(tp), s) for tp, s in starts.items())]).encode())
    return f"{JOB_PREFIX}{digest.hexdigest()[:24]}"


def _declare(ctx: JobContext, cluster: Cluster, topics: list[str]) -> dict[str, int]:
    """Each topic's partition count, the cluster's; a topic the config file does not declare is declared
    with the cluster's configs (stored beside the data by the append, as a declared topic's are)."""
    counts, declared = {}, dict(ctx.config.topics)
    catalogued: dict[str, int] = {}
    for tp in ctx.catalogued_partitions():
        catalogued[tp.topic] = max(catalogued.get(tp.topic, 0), tp.partition + 1)
    for topic in topics:
        counts[topic] = cluster.partitions(topic)
        if counts[topic] < catalogued.get(topic, 0):
            raise KlakeError(f"topic {topic}: the cluster has {counts[topic]} partitions but the archive holds "
                             f"{catalogued[topic]}")
        own = declared.get(topic)
        config = own.config if own is not None else cluster.topic_config(topic)
        declared[topic] = TopicSettings(config, counts[topic])
    ctx.config = replace(ctx.config, topics=declared)
    return counts


def _kafka_frame(ctx: JobContext, options: Mapping[str, str], ranges: Mapping[TopicPartition, tuple[int, int]]) -> Any:
    """Spark's Kafka source over exactly `ranges` (start inclusive, end exclusive)."""
    from pyspark.sql import functions as F

    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for tp, (start, end) in ranges.items():
        starting.setdefault(tp.topic, {})[str(tp.partition)] = start
        ending.setdefault(tp.topic, {})[str(tp.partition)] = end
    reader = (ctx.spark.read.format("kafka").option("kafka.bootstrap.servers", ctx.args.bootstrap_servers)
              .option("assign", json.dumps({t: sorted(int(p) for p in ps) for t, ps in starting.items()}))
              .option("startingOffsets", json.dumps(starting)).option("endingOffsets", json.dumps(ending))
              .option("includeHeaders", "true").option("kafka.isolation.level", ctx.args.isolation_level))
    for key, value in options.items():
        reader = reader.option(key, value)
    try:
        frame = reader.load()
    except Exception as exc:  # a missing spark-sql-kafka package is Spark's AnalysisException
        if "kafka" in str(exc).lower() and "data source" in str(exc).lower():
            raise KlakeError("Spark's Kafka source is not on the session: add org.apache.spark:spark-sql-kafka-0-10 "
                             "(spark-submit --packages, or --set spark.conf.spark.jars.packages=...)") from None
        raise
    # epoch ms, as the record holds it (the append takes a timestamp column as epoch ms too)
    return frame.withColumn("timestamp", F.unix_millis("timestamp"))


def run(ctx: JobContext) -> None:
    args = ctx.args
    if not args.topics:
        raise KlakeError("name the topic(s) to archive: --topic NAME")
    options = client_options(args.kafka_options)
    cluster = Cluster(args.bootstrap_servers, options, args.isolation_level)
    try:
        counts = _declare(ctx, cluster, list(dict.fromkeys(args.topics)))
        tps = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)
               if not args.partition_ids or p in args.partition_ids]
        begin, end, until = cluster.offsets(tps, args.until)
        at = None if args.start_from == EARLIEST else cluster.offsets(tps, args.start_from)[2]
        stop = until or end
        ranges, gaps = {}, {}
        for tp in tps:
            rows = ctx.catalog.live_segments(tp.topic, tp.partition) if ctx.catalogued_partitions() else []
            if rows:
                start = rows[-1].next_offset
                if start < begin[tp]:
                    gaps[tp] = (start, begin[tp] - 1)
                    start = begin[tp]
            else:
                start = begin[tp] if at is None else max(at[tp], begin[tp])
            ranges[tp] = (start, max(start, stop[tp]))
        _report_gaps(ctx, gaps, args.allow_gaps)
        todo = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        if todo:
            view = f"klake_archive_{uuid.uuid4().hex[:12]}"
            _kafka_frame(ctx, options, todo).createOrReplaceTempView(view)
            ctx.job_id = ctx.report.job_id = args.job_id or archive_job_id(
                args.bootstrap_servers, {tp: r[0] for tp, r in todo.items()})
            largest = cluster.largest_record(todo)
            with sized_batches(ctx.spark, largest) as rows:
                ctx.report.results["arrow_batches"] = {"records": rows, "largest_record_bytes": largest}
                append.append_input(ctx, InputSettings(
                    input=None, table=view, format="kafka", input_options=(), topics=tuple(sorted(counts)),
                    partition_ids=tuple(sorted({tp.partition for tp in todo})) if args.partition_ids else (),
                    keep_offsets=True, rejects=None, known_topics=tuple(sorted({tp.topic for tp in todo})),
                    by_partition=True))
        lag_end = cluster.offsets(tps)[1]
        positions = cluster.group_offsets(set(counts))
    finally:
        cluster.close()
    _report_partitions(ctx, tps, ranges, lag_end)
    rows = snapshot_groups(ctx.store, positions, ctx.now_ms)
    ctx.report.results["group_offsets"] = rows
    ctx.report.summary.append(f"archive: {plural(rows, 'committed offset')} of "
                              f"{plural(len({p.group for p in positions}), 'consumer group')} snapshotted")


def _report_gaps(ctx: JobContext, gaps: Mapping[TopicPartition, tuple[int, int]], allowed: bool) -> None:
    """Each gap with its offset range: a failure of its partition (exit 1) unless allowed."""
    ctx.report.results["gaps"] = {str(tp): {"first": a, "last": b, "records": b - a + 1} for tp, (a, b) in gaps.items()}
    for tp, (first, last) in sorted(gaps.items()):
        line = (f"gap: {tp} offsets {first}..{last} ({plural(last - first + 1, 'record')}) are no longer in the "
                "cluster (its log start passed the archive's end)")
        if allowed:
            ctx.report.summary.append(f"archive: {line}; --allow-gaps")
        else:
            ctx.report.fail(str(tp), f"{line}; re-run with --allow-gaps to accept it")


def _report_partitions(ctx: JobContext, tps: list[TopicPartition], ranges: Mapping[TopicPartition, tuple[int, int]],
                       cluster_end: Mapping[TopicPartition, int]) -> None:
    """Per partition: records and bytes appended, first and last offset, lag behind the cluster now. A
    partition that did not fail was read to its range's end, which may lie past its last record (a
    transaction's commit marker, aborted records): the lag counts from there (its archive ends at or before
    it). A failed one was read to where its archive ends, which only the catalog knows."""
    outcomes = {p["partition"]: p.get("outcome") or {} for p in ctx.report.partitions}
    failed = {f["partition"] for f in ctx.report.failures}
    rows = {}
    for tp in tps:
        outcome = outcomes.get(str(tp), {})
        log_end = read_to = ranges[tp][1]
        if str(tp) in failed or "*" in failed:
            live = ctx.catalog.live_segments(tp.topic, tp.partition) if ctx.catalogued_partitions() else []
            log_end = read_to = live[-1].next_offset if live else ranges[tp][0]
        records = outcome.get("records_accepted", 0)
        rows[str(tp)] = {"records": records, "bytes": outcome.get("bytes", 0),
                         "first_offset": outcome.get("first_offset") if records else None,
                         "last_offset": outcome.get("log_end_offset", log_end) - 1 if records else None,
                         "lag": max(cluster_end[tp] - read_to, 0)}
    ctx.report.results["archive"] = rows
    for name, row in rows.items():
        span = f"{row['first_offset']}..{row['last_offset']}" if row["records"] else "nothing new"
        ctx.report.details.append(f"archive: {name}: {plural(row['records'], 'record')}, {row['bytes']} bytes, "
                                  f"{span}, lag {row['lag']}")


SPEC = JobSpec("archive", "archive a live Kafka cluster's topics at the cluster's offsets", run, add_arguments,
               dry_run=False, retires=False,
               example="klake archive --conf demo-output/demo.yaml --bootstrap-servers localhost:9092 --topic orders")

if __name__ == "__main__":
    sys.exit(main(SPEC))
