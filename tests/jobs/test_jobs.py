"""The jobs end to end on local Spark (`local[2]`), in-process through their spark-submit entry point
(`jobs.runtime.job_runner.main`), on a local directory and on a moto_server S3 bucket.

Truth is computed without klake's code paths: kafka-python's murmur2 partitioner for keyed records,
kafka-python's decoder for every live segment's records (offsets, timestamps, keys, values, headers),
Kafka's retention walk over the catalog rows read before the run, a brute-force "latest record per
key" for compaction and a brute-force ListOffsets over the decoded records.
"""

from __future__ import annotations

import io
import itertools
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from kafka.partitioner.default import murmur2 as kafka_murmur2
from pyspark.sql.datasource import GreaterThanOrEqual

import engine.ops.run
from engine.catalog.schema import SegmentRow, SegmentState, table_to_rows
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from engine.ops.lease import lease_uri
from engine.times import format_time, parse_time
from jobs import (
    append,
    catalog_maintenance,
    compact,
    export,
    offsets_for_times,
    read,
    recover,
    retention,
    roll,
    scrub,
)
from jobs import truncate as truncate_job
from jobs.cli.main import main as klake
from jobs.klake_source import KlakeReader
from jobs.runtime.job_runner import JobSpec, main
from layouts.store import StorageOptions, list_objects, object_info, read_bytes
from layouts.store.bound import Store
from tests.catalog_rows import kafka_time_retention, offset_bounds
from tests.conftest import Backend
from tests.oracles.kafka_python import read_with_kafka_python
from tests.scrub_findings import scrub_findings

pytestmark = pytest.mark.spark

NOW = 1_790_000_000_000  # the jobs' clock (--now): a fixed instant, so every run is reproducible
HOUR = 3_600_000
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


# --- fixtures and helpers ----------------------------------------------------------------------------


class Jobs:
    """One test's store: its config file, and the jobs run against it (reports kept as dicts)."""

    def __init__(self, tmp_path: Path, backend: Backend, topics: dict, jobs: dict | None = None) -> None:
        self.tmp, self.backend = tmp_path, backend
        self.root = backend.uri("root")
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.conf = tmp_path / "klake.yaml"
        document = {"storage": {"root": self.root}, "topics": topics}
        if jobs:
            document["jobs"] = jobs
        self.conf.write_text(yaml.safe_dump(document))
        self.runs = itertools.count()

    def run(self, spec: JobSpec, *args: str, now: int | None = NOW, conf: bool = True) -> tuple[int, dict]:
        """Run `spec` with `args` (plus --conf, --now, --report); its exit code and JSON report."""
        report = self.tmp / f"report-{next(self.runs)}-{spec.name}.json"
        argv = [*args, "--no-progress", "--report", str(report)]
        if conf:
            argv += ["--conf", str(self.conf)]
        if now is not None:
            argv += ["--now", str(now)]
        code = main(spec, argv)
        return code, json.loads(report.read_text()) if report.exists() else {}

    @property
    def catalog(self) -> Catalog:
        return Catalog.open(Store(f"{self.root}/_catalog", self.backend.options))

    def rows(self, topic: str, partition: int) -> list[SegmentRow]:
        return self.catalog.live_segments(topic, partition)

    def records(self, topic: str, partition: int) -> list[tuple]:
        """(offset, timestamp, key, value, headers) of every record in the partition's live segments,
        decoded by kafka-python (every batch CRC-checked), from the log start offset on."""
        rows = self.rows(topic, partition)
        start = max([rows[0].base_offset, *(r.log_start_offset for r in rows)]) if rows else 0
        out = []
        for row in rows:
            found, _ = read_with_kafka_python(read_bytes(row.log_key, self.backend.options))
            out += [r for r in found if r[0] >= start]
        return out

    def objects(self) -> set[str]:
        return {o.uri for o in list_objects(self.root, self.backend.options)}

    def exists(self, uri: str) -> bool:
        return object_info(uri, self.backend.options) is not None


def local_backend(tmp_path: Path) -> Backend:
    return Backend("local", str(tmp_path / "store"), StorageOptions())


def write_parquet(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def kafka_partition(key: bytes, partitions: int) -> int:
    """kafka-python's DefaultPartitioner: murmur2(key) made positive, modulo the partition count."""
    return (kafka_murmur2(key) & 0x7FFFFFFF) % partitions


def input_table(n: int, *, topic: str | None = None, seed: int = 0, keys: int = 40, null_key_every: int = 0,
                start_ts: int = NOW - 2 * HOUR, step_ms: int = 1000, value_bytes: tuple[int, int] = (20, 60),
                tag: str = "r") -> pa.Table:
    """`n` records with unique values (`{tag}-{i:05d}|...`), increasing timestamps and `keys` distinct keys."""
    rng = np.random.default_rng(seed)
    key_list = [None if null_key_every and i % null_key_every == 0 else b"key-%03d" % rng.integers(keys)
                for i in range(n)]
    values = [f"{tag}-{i:05d}|".encode() + b"x" * int(rng.integers(*value_bytes)) for i in range(n)]
    columns = {"key": pa.array(key_list, pa.binary()), "value": pa.array(values, pa.binary()),
               "timestamp": pa.array([start_ts + i * step_ms for i in range(n)], pa.int64())}
    if topic is not None:
        columns = {"topic": pa.array([topic] * n, pa.string()), **columns}
    return pa.table(columns)


# --- 1. append ---------------------------------------------------------------------------------------


def test_append_partitions_like_the_producer_keeps_order_and_timestamps_and_reports_rejects(
        spark, backend: Backend, tmp_path: Path) -> None:
    jobs = Jobs(tmp_path, backend, {
        "clicks": {"partitions": 4, "segment.bytes": 3000, "max.message.bytes": 600,
                   "message.timestamp.before.max.ms": 6 * HOUR, "message.timestamp.after.max.ms": HOUR},
        "spread": {"partitions": 3, "segment.bytes": 3000}},
        jobs={"sticky_batch_bytes": 1000})
    # two files: input order is the files' path order, then row order
    clicks = input_table(300, topic="clicks", seed=1, null_key_every=7)
    partition = [None] * 300
    partition[10], partition[11] = 2, 3                # explicit partitions win over the key
    partition[20] = 4                                  # outside the topic's 4 partitions
    ts = clicks["timestamp"].to_pylist()
    ts[30] = NOW - 7 * HOUR                            # older than message.timestamp.before.max.ms
    ts[31] = NOW + 2 * HOUR                            # newer than message.timestamp.after.max.ms
    values = clicks["value"].to_pylist()
    values[40] = b"r-00040|" + b"y" * 700              # larger than max.message.bytes
    headers = [[{"key": "h", "value": b"%d" % i}] if i % 5 == 0 else [] for i in range(300)]
    clicks = pa.table({"topic": clicks["topic"], "partition": pa.array(partition, pa.int32()),
                       "key": clicks["key"], "value": pa.array(values, pa.binary()),
                       "timestamp": pa.array(ts, pa.timestamp("ms", tz="UTC")),
                       "headers": pa.array(headers, HEADERS_TYPE)})
    spread = input_table(200, topic="spread", seed=2, null_key_every=1, tag="s", value_bytes=(50, 150))
    spread = pa.table({"topic": spread["topic"], "partition": pa.nulls(200, pa.int32()), "key": spread["key"],
                       "value": spread["value"], "timestamp": spread["timestamp"].cast(pa.timestamp("ms", tz="UTC")),
                       "headers": pa.array([[]] * 200, HEADERS_TYPE)})
    write_parquet(tmp_path / "in" / "part-0.parquet", clicks.slice(0, 150))
    write_parquet(tmp_path / "in" / "part-1.parquet", pa.concat_tables([clicks.slice(150), spread]))

    code, report = jobs.run(append.SPEC, "--input", str(tmp_path / "in"))
    assert code == 0, report.get("failures")
    rejected = {20: "UNKNOWN_PARTITION", 30: "INVALID_TIMESTAMP", 31: "INVALID_TIMESTAMP", 40: "RECORD_TOO_LARGE"}
    assert report["status"] == "succeeded"
    assert report["results"]["records_in"] == 500
    assert report["results"]["records_appended"] == 500 - len(rejected)
    assert report["rejected"]["count"] == len(rejected)
    assert report["rejected"]["by_reason"] == {"UNKNOWN_PARTITION": 1, "INVALID_TIMESTAMP": 2, "RECORD_TOO_LARGE": 1}
    rejects_path = report["rejected"]["path"]
    assert rejects_path == str(tmp_path / "report-0-append.rejects")   # next to the report
    rejects = pq.read_table(rejects_path)                                # one Parquet file per partition
    got = {int(v.split(b"|")[0].split(b"-")[1]): r for v, r in
           zip(rejects["value"].to_pylist(), rejects["reason"].to_pylist(), strict=True)}
    assert got == rejected
    assert all(rejects["message"].to_pylist()) and set(rejects["topic"].to_pylist()) == {"clicks"}
    unknown = rejects.filter(pc.equal(rejects["reason"], "UNKNOWN_PARTITION")).to_pylist()[0]
    assert unknown["partition"] == 4 and unknown["file"].endswith("part-0.parquet")

    # keyed records: the partition Kafka's producer picks; explicit partitions as given
    expected: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(clicks.to_pylist()):
        if i in rejected:
            continue
        if row["partition"] is not None:
            expected[row["partition"]].append(i)
        elif row["key"] is not None:
            expected[kafka_partition(row["key"], 4)].append(i)
    null_rows = {i for i, row in enumerate(clicks.to_pylist()) if row["key"] is None and row["partition"] is None}
    input_rows = clicks.to_pylist()
    seen_null = set()
    for p in range(4):
        records = jobs.records("clicks", p)
        assert [r[0] for r in records] == list(range(len(records)))         # offsets 0..n-1
        rows = [int(r[3].split(b"|")[0].split(b"-")[1]) for r in records]
        assert rows == sorted(rows)                                           # input order kept
        keyed = [i for i in rows if i not in null_rows]
        assert keyed == expected[p]
        seen_null |= set(rows) & null_rows
        for (_, ts_, key, value, hdrs), i in zip(records, rows, strict=True):
            source = input_rows[i]
            assert (ts_, key, value) == (ts[i], source["key"], source["value"])
            assert hdrs == [(h["key"], h["value"]) for h in source["headers"]]
    assert seen_null == null_rows                                            # no null-key record lost

    # null keys: sticky runs of about sticky_batch_bytes, moving on to the next partition
    spread_rows = spread.to_pylist()
    placed = {}
    for p in range(3):
        records = jobs.records("spread", p)
        assert [r[0] for r in records] == list(range(len(records)))
        for r in records:
            placed[int(r[3].split(b"|")[0].split(b"-")[1])] = p
    assert sorted(placed) == list(range(200)) and set(placed.values()) == {0, 1, 2}
    runs = [(p, [i for i, _ in group]) for p, group in itertools.groupby(sorted(placed.items()), key=lambda x: x[1])]
    assert len(runs) > 3
    biggest = max(len(r["value"]) for r in spread_rows)
    for (p, rows), (q, _) in itertools.pairwise(runs):
        assert q == (p + 1) % 3
        assert 1000 - biggest <= sum(len(spread_rows[i]["value"]) for i in rows) <= 1000 + biggest


def test_append_rejects_negative_explicit_partitions(spark, tmp_path: Path) -> None:
    """A negative `partition` is outside the topic like any other; it is not a request to pick one."""
    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 2}})
    table = input_table(10, topic="t", seed=3)
    table = table.append_column("partition", pa.array([None] * 5 + [-1, -3, None, None, None], pa.int32()))
    write_parquet(tmp_path / "in.parquet", table)
    code, report = jobs.run(append.SPEC, "--input", str(tmp_path / "in.parquet"))
    assert code == 0, report.get("failures")
    assert report["rejected"]["count"] == 2 and report["results"]["records_appended"] == 8
    assert report["rejected"]["by_reason"] == {"UNKNOWN_PARTITION": 2}


def test_one_job_or_three_give_the_same_log_and_a_killed_append_rerun_loses_and_duplicates_nothing(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One record per batch (max.message.bytes), so every job boundary is a produce-request boundary:
    the segments (bases and bytes) must be those of one job. The middle job dies in its catalog commit
    with its leases left behind (a killed driver): another job id finds them held and is told how to
    take them over; a re-run (same input: same default job id) takes them over at once and appends
    everything once; re-running a committed job appends nothing."""
    topics = {"orders": {"partitions": 3, "segment.bytes": 1200, "max.message.bytes": 130,
                         "index.interval.bytes": 200}}
    whole = Jobs(tmp_path / "whole", local_backend(tmp_path / "whole"), topics)
    split = Jobs(tmp_path / "split", local_backend(tmp_path / "split"), topics)
    table = input_table(240, topic="orders", seed=4, keys=25, value_bytes=(5, 30))
    table = table.append_column("partition", pa.array([i % 3 if i % 11 == 0 else None for i in range(240)],
                                                      pa.int32()))
    assert whole.run(append.SPEC, "--input", str(write_parquet(tmp_path / "whole.parquet", table)))[0] == 0
    parts = [write_parquet(tmp_path / f"split-{n}.parquet", table.slice(start, stop - start))
             for n, (start, stop) in enumerate([(0, 90), (90, 91), (91, 240)])]

    assert split.run(append.SPEC, "--input", str(parts[0]))[0] == 0
    with monkeypatch.context() as patch:
        patch.setattr(Catalog, "apply", killing("append"))
        patch.setattr(engine.ops.run, "release_lease", lambda store, lease: False)
        code, report = split.run(append.SPEC, "--input", str(parts[1]))
    assert code == 1 and report["status"] == "failed"
    assert "driver killed" in report["failures"][0]["error"]
    assert len(split.records("orders", 0)) + len(split.records("orders", 1)) + len(split.records("orders", 2)) == 90
    killed_job = report["job_id"]
    held = {json.loads(read_bytes(lease_uri(Store(split.root), TopicPartition("orders", p))))["job_id"] for p in range(3)}
    assert held == {killed_job}  # the killed job's leases are still there
    code, report = split.run(append.SPEC, "--input", str(parts[1]), "--job-id", "someone-else")
    assert code == 1 and len(report["failures"]) == 3, report["failures"]
    assert all(f"leased by job {killed_job!r}" in f["error"] and f"re-run with --job-id {killed_job}" in f["error"]
               and "Z (in " in f["error"] for f in report["failures"])
    assert sum(report["results"]["not_yet_appended"].values()) == 1 and report["results"]["records_appended"] == 0
    code, report = split.run(append.SPEC, "--input", str(parts[1]))  # the same job id: taken over at once
    assert code == 0 and report["results"]["records_appended"] == 1, report.get("failures")
    assert split.run(append.SPEC, "--input", str(parts[2]))[0] == 0
    code, report = split.run(append.SPEC, "--input", str(parts[2]))
    assert code == 0 and report["results"]["already_committed"] is True and report["commit"] == {}
    assert report["results"]["records_appended"] == 0 and report["requests"].get("PUT", 0) == 0
    assert f"append: already done: job {report['job_id']} appended this input" in report["summary"]

    for p in range(3):
        records = whole.records("orders", p)
        assert records == split.records("orders", p)
        assert [r[0] for r in records] == list(range(len(records)))
        whole_rows, split_rows = whole.rows("orders", p), split.rows("orders", p)
        assert [r.base_offset for r in whole_rows] == [r.base_offset for r in split_rows]
        assert len(whole_rows) > 2
        for a, b in zip(whole_rows, split_rows, strict=True):
            assert read_bytes(a.log_key) == read_bytes(b.log_key)
            assert read_bytes(a.index_key) == read_bytes(b.index_key)
            assert read_bytes(a.timeindex_key) == read_bytes(b.timeindex_key)
    values = sorted(r[3] for p in range(3) for r in split.records("orders", p))
    assert values == sorted(table["value"].to_pylist())  # no record lost, none twice


# --- 4. retention ------------------------------------------------------------------------------------



def test_retention_dry_run_plans_and_the_run_deletes_exactly_kafkas_segments(
        spark, backend: Backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = Jobs(tmp_path, backend, {"events": {"partitions": 2, "segment.bytes": 1500, "retention.ms": HOUR}})
    # partition 0: three hours of records, one of them late (20 minutes ago): its segment stops the walk
    # although older segments follow it; partition 1: everything past retention, the active segment too
    first = input_table(150, topic="events", seed=5, start_ts=NOW - 3 * HOUR, step_ms=60_000)
    ts = first["timestamp"].to_pylist()
    ts[40] = NOW - HOUR // 3
    first = first.set_column(3, "timestamp", pa.array(ts, pa.int64()))
    second = input_table(60, topic="events", seed=6, start_ts=NOW - 5 * HOUR, step_ms=30_000, tag="q")
    table = pa.concat_tables([first, second]).append_column(
        "partition", pa.array([0] * 150 + [1] * 60, pa.int32()))
    code, _ = jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)))
    assert code == 0

    before = {p: jobs.rows("events", p) for p in range(2)}
    records_before = {p: jobs.records("events", p) for p in range(2)}
    expected = {p: kafka_time_retention(before[p], NOW, HOUR) for p in range(2)}
    assert 0 < len(expected[0]) < len(before[0]) and len(expected[1]) == len(before[1]) > 1
    late = next(r for r in before[0] if r.base_offset <= 40 < r.next_offset)
    assert expected[0][-1].next_offset == late.base_offset  # the late record's segment stopped the walk
    assert any(NOW - r.largest_timestamp > HOUR for r in before[0][len(expected[0]):])
    version, objects = jobs.catalog.version(), jobs.objects()

    capsys.readouterr()
    code, report = jobs.run(retention.SPEC, "--dry-run", "--verbose")
    assert code == 0 and report["dry_run"] is True
    assert jobs.catalog.version() == version and jobs.objects() == objects
    printed = capsys.readouterr().out.splitlines()
    side_file = report["results"]["files"]["segments"]
    segments = pq.read_table(side_file["path"])  # every segment's decision: a Parquet file next to the report
    assert side_file["rows"] == segments.num_rows == len(before[0]) + len(before[1])
    for p in range(2):
        doomed = {r.segment_id for r in expected[p]}
        outcome = next(e["outcome"] for e in report["partitions"] if e["partition"] == f"events-{p}")
        assert outcome["plan"]["totals"]["segments"] == len(doomed)
        assert outcome["plan"]["segments"] == len(before[p])
        decisions = [d for d in segments.to_pylist() if d["partition"] == p]
        assert [d["segment_id"] for d in decisions] == [r.segment_id for r in before[p]]
        for decision, row in zip(decisions, before[p], strict=True):
            action = "delete" if row.segment_id in doomed else "keep"
            assert decision["action"] == action and decision["reason"]
            line = next(s for s in printed if s.startswith(f"events-{p} {row.base_offset:>20} "))  # --verbose
            assert line.split()[2] == action and f"({decision['decided_by']})" in line
    assert not any(line.startswith("events-") for line in report["summary"].splitlines())  # a summary, not segments

    code, report = jobs.run(retention.SPEC)
    assert code == 0 and report["status"] == "succeeded", report["failures"]
    assert report["results"]["segments_deleted"] == len(expected[0]) + len(expected[1])
    assert {e["partition"]: e["status"] for e in report["partitions"]} == {"events-0": "succeeded",
                                                                          "events-1": "succeeded"}
    assert report["requests"]["DELETE"] >= 1 and report["requests"]["PUT"] >= 1
    assert report["bytes"]["written"] > 0  # the leases and the new empty active segment's objects
    assert report["commit"]["version"] > version and report["commit"]["transitioned"] == report[
        "results"]["segments_deleted"]
    assert report["results"]["cleanup"]["deleted_objects"] == 3 * report["results"]["segments_deleted"]
    all_ids = {r.segment_id for r in table_to_rows(jobs.catalog.all_rows())}
    for p in range(2):
        for row in expected[p]:
            assert row.segment_id not in all_ids
            assert not any(jobs.exists(key) for key in (row.log_key, row.index_key, row.timeindex_key))
    kept = [r.segment_id for r in before[0][len(expected[0]):]]
    assert [r.segment_id for r in jobs.rows("events", 0)] == kept
    start = expected[0][-1].next_offset
    assert jobs.records("events", 0) == [r for r in records_before[0] if r[0] >= start]
    (active,) = jobs.rows("events", 1)  # Kafka rolls an empty active segment at the log end offset
    assert active.state == SegmentState.ACTIVE and active.size_bytes == 0
    assert active.base_offset == before[1][-1].next_offset == 60

    version = jobs.catalog.version()
    code, report = jobs.run(retention.SPEC)
    assert code == 0 and report["results"]["segments_deleted"] == 0 and report["commit"] == {}
    assert jobs.catalog.version() == version


# --- 5. compaction -----------------------------------------------------------------------------------


def compact_input(n: int, seed: int) -> pa.Table:
    """Updates of 30 keys, every 9th record a tombstone, timestamps increasing."""
    table = input_table(n, topic="state", seed=seed, keys=30, value_bytes=(10, 40), tag="c")
    values = [None if i % 9 == 4 else v for i, v in enumerate(table["value"].to_pylist())]
    return table.set_column(2, "value", pa.array(values, pa.binary()))


def latest_per_key(records: list[tuple], end: int) -> list[tuple]:
    """Kafka's cleaner over [0, end): a record stays iff no later record below `end` has its key
    (tombstones stay too: their delete horizon starts at this first clean); records from `end` on stay."""
    last = {r[2]: r[0] for r in records if r[0] < end}
    return [r for r in records if r[0] >= end or last[r[2]] == r[0]]


def killing(doomed: str):  # noqa: ANN201 - a Catalog.apply replacement
    """`Catalog.apply` as if the driver died while committing a `doomed` operation."""
    original = Catalog.apply

    def apply(self, change, operation="change", job_id="", finished=(), **more):  # noqa: ANN001, ANN003, ANN202
        if operation == doomed:
            raise RuntimeError(f"driver killed during the {operation} commit")
        return original(self, change, operation=operation, job_id=job_id, finished=finished, **more)

    return apply


def test_compaction_keeps_the_latest_record_per_key_and_a_killed_run_reruns_to_the_same_log(
        spark, backend: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topics = {"state": {"partitions": 2, "cleanup.policy": "compact", "segment.bytes": 1200}}
    jobs = Jobs(tmp_path / "killed", backend, topics)
    table = compact_input(400, seed=7)
    path = write_parquet(tmp_path / "in.parquet", table)
    assert jobs.run(append.SPEC, "--input", str(path))[0] == 0
    before = {p: jobs.records("state", p) for p in range(2)}
    ends = {p: jobs.rows("state", p)[-1].base_offset for p in range(2)}
    assert all(ends[p] > 0 for p in range(2))

    with monkeypatch.context() as patch:
        patch.setattr(Catalog, "apply", killing("compact"))
        code, report = jobs.run(compact.SPEC)
    assert code == 1 and report["status"] == "failed" and "killed" in report["failures"][0]["error"]
    assert {p: jobs.records("state", p) for p in range(2)} == before  # nothing committed, nothing lost

    code, report = jobs.run(compact.SPEC)
    assert code == 0, report["failures"]
    assert report["results"]["partitions_cleaned"] == 2
    for p in range(2):
        after = jobs.records("state", p)
        assert after == latest_per_key(before[p], ends[p])
        assert len(after) < len(before[p])
        assert any(r[3] is None for r in after if r[0] < ends[p])  # tombstones kept until their horizon
    assert report["results"]["records_removed"] == sum(len(before[p]) - len(jobs.records("state", p))
                                                       for p in range(2))

    if backend.name == "local":  # the same input compacted without a crash: the very same log
        clean = Jobs(tmp_path / "clean", Backend("local", str(tmp_path / "clean-store"), StorageOptions()), topics)
        assert clean.run(append.SPEC, "--input", str(path))[0] == 0
        assert clean.run(compact.SPEC)[0] == 0
        for p in range(2):
            a, b = clean.rows("state", p), jobs.rows("state", p)
            assert [r.base_offset for r in a] == [r.base_offset for r in b]
            assert [read_bytes(r.log_key) for r in a] == [read_bytes(r.log_key) for r in b]


# --- 7. errors ---------------------------------------------------------------------------------------


def test_bad_config_key_and_missing_input_exit_2_naming_them(tmp_path: Path, capsys) -> None:
    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 1}})
    jobs.conf.write_text(yaml.safe_dump({"storage": {"root": jobs.root}, "jobs": {"lease_tll_ms": 5}}))
    code, report = jobs.run(retention.SPEC)
    assert code == 2 and report == {}
    assert "jobs.lease_tll_ms" in capsys.readouterr().err
    code, _ = jobs.run(retention.SPEC, "--root", jobs.root, "--set", "topics.t.retention.mss=5", conf=False)
    assert code == 2 and "retention.mss" in capsys.readouterr().err


def test_append_of_a_missing_input_exits_2_naming_the_path(spark, tmp_path: Path, capsys) -> None:
    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 1}})
    missing = str(tmp_path / "no-such-dir")
    for extra in ([], ["--job-id", "explicit-id"]):
        code, report = jobs.run(append.SPEC, "--input", missing, "--topic", "t", *extra)
        assert code == 2, extra
        assert report["status"] == "failed" and missing in report["failures"][0]["error"]
        assert missing in capsys.readouterr().err


def test_compaction_over_a_corrupt_log_fails_its_partition_naming_the_file(
        spark, tmp_path: Path) -> None:
    backend = local_backend(tmp_path)
    jobs = Jobs(tmp_path, backend, {"state": {"partitions": 2, "cleanup.policy": "compact", "segment.bytes": 1200}})
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", compact_input(300, 8))))[0] == 0
    victim = jobs.rows("state", 1)[1]
    data = bytearray(read_bytes(victim.log_key))
    data[len(data) // 2] ^= 0xFF  # inside a record: the batch CRC no longer matches
    backend.put(victim.log_key, bytes(data))
    code, report = jobs.run(compact.SPEC, "--force")
    assert code == 1 and report["status"] == "failed"
    (failure,) = report["failures"]
    assert failure["partition"] == "state-1" and victim.log_key in failure["error"]
    assert {e["partition"]: e["status"] for e in report["partitions"]} == {"state-0": "succeeded",
                                                                          "state-1": "failed"}
    assert jobs.rows("state", 0)[0].cleaned  # the other partition was compacted and committed


def test_append_reads_its_input_from_s3(spark, s3_backend: Backend, tmp_path: Path) -> None:
    jobs = Jobs(tmp_path, s3_backend, {"t": {"partitions": 2}})
    buffer = io.BytesIO()
    pq.write_table(input_table(50, seed=9), buffer)
    s3_backend.put(s3_backend.uri("landing", "part-0.parquet"), buffer.getvalue())
    code, report = jobs.run(append.SPEC, "--input", s3_backend.uri("landing"), "--topic", "t")
    assert code == 0, report.get("failures")
    assert sum(len(jobs.records("t", p)) for p in range(2)) == 50


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_append_reads_json_and_csv_input_from_s3_in_file_and_row_order(
        spark, s3_backend: Backend, tmp_path: Path, fmt: str) -> None:
    """s3:// JSON lines and CSV are read by the tasks through fsspec (Spark here has no S3 filesystem): each
    partition's records are the input's rows in path order, then row order, with strings as their bytes."""
    files = {}
    for index, name in enumerate(["b-part.", "a-part.", "_SUCCESS", ".hidden."]):  # listed out of order
        rows = [{"key": f"k{index}-{i % 7}", "value": f"{name}{i:04d}", "timestamp": NOW - HOUR + 1000 * i,
                 "partition": (i * 5 + index) % 3} for i in range(40 + index)]
        if fmt == "json":
            text = "".join(json.dumps(row) + "\n" for row in rows)
        else:
            text = "key,value,timestamp,partition\n" + "".join(
                f"{r['key']},{r['value']},{r['timestamp']},{r['partition']}\n" for r in rows)
        s3_backend.put(s3_backend.uri("landing", name + fmt if name[-1] == "." else name), text.encode())
        files[name] = rows
    jobs = Jobs(tmp_path, s3_backend, {"t": {"partitions": 3}})
    code, report = jobs.run(append.SPEC, "--input", s3_backend.uri("landing"), "--format", fmt, "--topic", "t")
    assert code == 0, report.get("failures")
    read = [r for name in ("a-part.", "b-part.") for r in files[name]]  # `_`/`.` files are not data, as in Spark
    for p in range(3):
        expected = [(o, r["timestamp"], r["key"].encode(), r["value"].encode(), [])
                    for o, r in enumerate(r for r in read if r["partition"] == p)]
        assert jobs.records("t", p) == expected


# --- 6. the other jobs -------------------------------------------------------------------------------


def test_roll_rolls_partitions_whose_segment_ms_is_up_and_appends_go_on_after_it(spark, tmp_path: Path) -> None:
    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 2, "segment.ms": 600_000}})
    old = input_table(30, start_ts=NOW - HOUR, step_ms=1000)                # first batch an hour ago: rolls
    recent = input_table(30, start_ts=NOW - 300_000, step_ms=1000, tag="n")  # five minutes ago: stays
    table = pa.concat_tables([old, recent]).append_column("partition", pa.array([0] * 30 + [1] * 30, pa.int32()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)), "--topic", "t")[0] == 0
    before = {p: (jobs.rows("t", p), jobs.records("t", p)) for p in range(2)}
    assert all(len(rows) == 1 and rows[0].state == SegmentState.ACTIVE for rows, _ in before.values())

    version = jobs.catalog.version()
    code, report = jobs.run(roll.SPEC, "--dry-run")
    assert code == 0 and report["results"]["segments_rolled"] == 1 and jobs.catalog.version() == version
    assert "t-0: would roll segment 0" in report["summary"]

    code, report = jobs.run(roll.SPEC)
    assert code == 0 and report["results"]["segments_rolled"] == 1
    rolled, active = jobs.rows("t", 0)
    assert (rolled.state, rolled.base_offset, rolled.next_offset) == (SegmentState.ROLLED, 0, 30)
    assert (active.state, active.base_offset, active.size_bytes) == (SegmentState.ACTIVE, 30, 0)
    assert jobs.records("t", 0) == before[0][1]
    assert jobs.rows("t", 1) == before[1][0]  # not due: untouched
    timeindex = read_bytes(rolled.timeindex_key)  # a rolled segment's last time entry is its max timestamp
    assert int.from_bytes(timeindex[-12:-4], "big") == NOW - HOUR + 29_000

    more = input_table(5, start_ts=NOW, tag="m").append_column("partition", pa.array([0] * 5, pa.int32()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "more.parquet", more)), "--topic", "t")[0] == 0
    assert [r.base_offset for r in jobs.rows("t", 0)] == [0, 30]
    assert [r[0] for r in jobs.records("t", 0)] == list(range(35))


def brute_force_list_offsets(records: list[tuple], log_start: int, log_end: int, target: int) -> tuple[int, int]:
    """Kafka's ListOffsets over every record at or after the log start offset."""
    live = [r for r in records if r[0] >= log_start]
    if target == -1:
        return log_end, -1
    if target == -2:
        return log_start, -1
    if target == -3:
        if not live:
            return -1, -1
        largest = max(r[1] for r in live)
        return next(r[0] for r in live if r[1] == largest), largest
    return next(((r[0], r[1]) for r in live if r[1] >= target), (-1, -1))


def test_truncate_delete_records_offsets_for_times_and_catalog_maintenance(spark, tmp_path: Path) -> None:
    jobs = Jobs(tmp_path, local_backend(tmp_path), {"t": {"partitions": 2, "segment.bytes": 1000,
                                                          "index.interval.bytes": 100}})
    rng = np.random.default_rng(11)
    table = input_table(300, seed=10, keys=50)
    ts = NOW - 2 * HOUR + np.arange(300) * 10_000 + rng.integers(-60_000, 60_000, 300)  # out of order
    table = table.set_column(2, "timestamp", pa.array(ts, pa.int64()))
    table = table.append_column("partition", pa.array([i % 2 for i in range(300)], pa.int32()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)), "--topic", "t")[0] == 0
    before = {p: jobs.records("t", p) for p in range(2)}
    rows_before = {p: jobs.rows("t", p) for p in range(2)}

    code, report = jobs.run(truncate_job.SPEC, "--topic", "t", "--offset", "37")  # no partition named
    assert code == 2 and "--partition" in report["failures"][0]["error"]
    code, report = jobs.run(truncate_job.SPEC, "--topic", "t", "--partition", "0", "--offset", "37")
    assert code == 0 and report["results"]["records_removed"] == 150 - 37
    assert jobs.records("t", 0) == before[0][:37]
    assert jobs.rows("t", 0)[-1].next_offset == 37 and jobs.rows("t", 0)[-1].state == SegmentState.ACTIVE

    retired = [r for r in rows_before[1] if r.next_offset <= 50]
    assert retired and rows_before[1][len(retired)].base_offset < 50  # 50 falls inside a segment
    code, report = jobs.run(truncate_job.DELETE_RECORDS, "--topic", "t", "--partition", "1", "--offset", "50")
    assert code == 0, report["failures"]
    assert jobs.records("t", 1) == before[1][50:]
    left, in_segments = len(before[1]) - len(jobs.records("t", 1)), sum(r.record_count for r in retired)
    assert (f"t-1: log start offset 0 -> 50: {left} offsets left the log ({in_segments} records in whole segments, "
            "deleted); log 50..150") in report["summary"].splitlines()
    assert all(not jobs.exists(r.log_key) for r in retired)
    assert offset_bounds(jobs.catalog, "t", 1).log_end_offset == 150

    targets = sorted({int(t) for t in rng.choice(ts, 25)} | {int(ts.min()) - 1, int(ts.max()), int(ts.max()) + 1,
                                                             NOW - 2 * HOUR + 500_000})
    output = tmp_path / "answers.jsonl"
    args = [a for t in [*targets, -1, -2, -3] for a in ("--timestamp", str(t))]
    code, report = jobs.run(offsets_for_times.SPEC, *args, "--topic", "t", "--output", str(output))
    assert code == 0, report["failures"]
    answers = [json.loads(line) for line in output.read_text().splitlines()]
    assert answers == report["results"]["answers"] and len(answers) == 2 * (len(targets) + 3)
    bounds = {0: (0, 37), 1: (50, 150)}
    for answer in answers:
        p = answer["partition"]
        expected = brute_force_list_offsets(jobs.records("t", p), *bounds[p], answer["target"])
        assert (answer["offset"], answer["timestamp"]) == expected, answer
        assert answer["found"] == (expected[0] >= 0)
    summary = report["summary"].splitlines()  # times in ISO-8601 UTC, special targets by name
    assert "t-0 @ latest: offset 37" in summary and "t-1 @ earliest: offset 50" in summary
    hit = next(a for a in answers if a["found"] and a["target"] >= 0)
    assert (f"t-{hit['partition']} @ {format_time(hit['target'])}: offset {hit['offset']} "
            f"(timestamp {format_time(hit['timestamp'])})") in summary
    assert f"t-0 @ {format_time(int(ts.max()) + 1)}: no offset (no record at or after it)" in summary

    # small questions run in the driver (no Spark task); the Spark path, forced, gives the same answers
    assert report["results"]["executed_in"] == "driver"
    code, on_spark = jobs.run(offsets_for_times.SPEC, *args, "--topic", "t", "--set", "jobs.driver_max_bytes=0")
    assert code == 0 and on_spark["results"]["executed_in"] == "spark"
    assert on_spark["results"]["answers"] == answers
    window = ["--topic", "t", "--from", str(int(np.median(ts))), "--to", str(int(ts.max())), "--from-offset", "60"]
    code, small = jobs.run(read.SPEC, *window, "--output", str(tmp_path / "read-driver"))
    assert code == 0 and small["results"]["executed_in"] == "driver", small["failures"]
    code, large = jobs.run(read.SPEC, *window, "--output", str(tmp_path / "read-spark"), "--set", "jobs.driver_max_bytes=0")
    assert code == 0 and large["results"]["executed_in"] == "spark", large["failures"]
    by_offset = [("partition", "ascending"), ("offset", "ascending")]
    driver_rows, spark_rows = (pq.read_table(tmp_path / name).sort_by(by_offset) for name in ("read-driver", "read-spark"))
    assert driver_rows.num_rows > 0 and driver_rows.equals(spark_rows)
    assert small["results"]["read"] == {**large["results"]["read"], "tasks": small["results"]["read"]["tasks"],
                                        "output": small["results"]["read"]["output"]}
    assert (small["requests"]["GET"], small["bytes"]["read"]) == (large["requests"]["GET"], large["bytes"]["read"])

    records = {p: jobs.records("t", p) for p in range(2)}
    version = jobs.catalog.version()
    code, report = jobs.run(catalog_maintenance.SPEC, "--vacuum-retention-hours", "0")  # below the safe minimum
    assert code == 2 and "--allow-short-vacuum" in report["failures"][0]["error"]
    code, report = jobs.run(catalog_maintenance.SPEC, "--vacuum-retention-hours", "0", "--allow-short-vacuum")
    assert code == 0, report["failures"]
    results = report["results"]
    assert results["versions"]["before"] == version and results["versions"]["after"] > version
    assert results["optimize"]["totalConsideredFiles"] >= 1  # MERGE commits rewrite the topic's one file
    assert version <= results["checkpoint_version"] <= results["versions"]["after"]
    assert results["vacuum"]["files"] > 0
    log_dir = Path(jobs.root) / "_catalog" / "_delta_log"
    assert list(log_dir.glob(f"{results['checkpoint_version']:020d}.checkpoint*.parquet"))
    assert {p: jobs.records("t", p) for p in range(2)} == records


def test_recover_rebuild_index_and_scrub(spark, tmp_path: Path) -> None:
    backend = local_backend(tmp_path)
    jobs = Jobs(tmp_path, backend, {"t": {"partitions": 2, "segment.bytes": 1000, "index.interval.bytes": 100,
                                          "max.message.bytes": 300}})  # several batches per segment
    table = input_table(200, seed=12).append_column("partition", pa.array([i % 2 for i in range(200)], pa.int32()))
    assert jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "in.parquet", table)), "--topic", "t")[0] == 0
    before = {p: jobs.records("t", p) for p in range(2)}
    rows = {p: jobs.rows("t", p) for p in range(2)}
    bad_index, bad_log = rows[0][1], rows[1][2]
    backend.put(bad_index.index_key, b"\x07" * 37)  # garbage .index
    original = read_bytes(bad_log.log_key)
    corrupt = bytearray(original)
    corrupt[len(corrupt) // 2] ^= 0x55  # one flipped bit pattern inside a record: a CRC mismatch
    backend.put(bad_log.log_key, bytes(corrupt))
    objects, version = jobs.objects(), jobs.catalog.version()

    code, report = jobs.run(recover.SPEC, "--dry-run")
    assert code == 1 and report["status"] == "failed"
    assert {f["partition"] for f in report["failures"]} == {"t-0", "t-1"}
    assert f"t-0 segment {bad_index.base_offset}: needs rebuild-sidecars" in report["summary"]
    assert f"t-1 segment {bad_log.base_offset}: needs cut-tail" in report["summary"]
    assert bad_log.log_key in report["summary"] and bad_index.index_key in report["summary"]
    assert jobs.objects() == objects and jobs.catalog.version() == version

    code, report = jobs.run(recover.SPEC)
    assert code == 0, report["failures"]
    assert report["results"]["segments_repaired"] == 2
    assert jobs.records("t", 0) == before[0]
    repaired = next(r for r in jobs.rows("t", 0) if r.base_offset == bad_index.base_offset)
    assert repaired.index_key != bad_index.index_key and repaired.log_key == bad_index.log_key
    cut = next(r for r in jobs.rows("t", 1) if r.base_offset == bad_log.base_offset)
    kept = read_bytes(cut.log_key)
    assert original.startswith(kept) and len(kept) < len(original)
    (quarantine,) = [o for o in jobs.objects() if "/_quarantine/" in o]
    assert read_bytes(quarantine) == bytes(corrupt[len(kept):])  # not a byte lost
    after = jobs.records("t", 1)
    lost = {r[0] for r in before[1]} - {r[0] for r in after}
    assert lost and all(bad_log.base_offset <= o < bad_log.next_offset for o in lost)  # only the corrupt batch on
    assert [r for r in before[1] if r[0] not in lost] == after  # later segments kept
    assert jobs.run(recover.SPEC, "--dry-run")[0] == 0

    live = {k for p in range(2) for r in jobs.rows("t", p) for k in (r.log_key, r.index_key, r.timeindex_key)}
    code, report = jobs.run(recover.REBUILD_INDEX, "--set", "topics.t.index.interval.bytes=300")
    assert code == 0 and report["results"]["segments_repaired"] == sum(len(jobs.rows("t", p)) for p in range(2))
    from engine.format.batch import scan_batches
    from engine.index.checks import check_sidecars
    for p in range(2):
        assert jobs.records("t", p) == (before[0] if p == 0 else after)
        for row in jobs.rows("t", p):
            assert row.index_key not in live
            data = read_bytes(row.log_key)
            check = check_sidecars(scan_batches(data).headers, row.base_offset, read_bytes(row.index_key),
                                   read_bytes(row.timeindex_key), row.log_key, active=row.state == "ACTIVE", min_timestamp=0)
            assert check.problems == []

    # superseded sidecars and the corrupt .log are unreferenced now: scrub deletes them once past the grace
    live = {k for p in range(2) for r in jobs.rows("t", p) for k in (r.log_key, r.index_key, r.timeindex_key)}
    orphans = {o for o in jobs.objects() if o not in live and o.startswith(f"{jobs.root}/t-")}
    assert bad_log.log_key in orphans and bad_index.index_key in orphans
    wall = int(Path(bad_log.log_key).stat().st_mtime * 1000)
    code, report = jobs.run(scrub.SPEC, now=wall)  # within the grace period: nothing deleted
    assert code == 0 and scrub_findings(report)["deleted"] == []
    code, report = jobs.run(scrub.SPEC, "--dry-run", now=wall + 2 * HOUR)
    assert code == 0 and {o["uri"] for o in scrub_findings(report)["orphan"]} == orphans
    assert jobs.objects() >= orphans
    code, report = jobs.run(scrub.SPEC, now=wall + 2 * HOUR)
    assert code == 0 and set(scrub_findings(report)["deleted"]) == orphans
    assert not jobs.objects() & orphans and live <= jobs.objects()
    assert any("/_quarantine/" in o for o in jobs.objects())  # never a scrub candidate
    assert {p: jobs.records("t", p) for p in range(2)} == {0: before[0], 1: after}


# --- 8. KIP-228: negative timestamps, one rule (engine.log.topic_config.min_timestamp) everywhere ---------


def test_a_kip228_topic_appends_verifies_prunes_retains_and_answers_pre_1970_targets(spark, tmp_path: Path,
                                                                                    capsys) -> None:
    """A topic with `klake.timestamps.allow.negative`: its own fresh sidecars verify clean (recover is a
    no-op), its catalog rows carry the records' true (negative) base/largest timestamps, and
    offsets-for-times, read and retention treat pre-1970 times as Kafka treats later ones."""
    day = 86_400_000
    topics = {"old": {"partitions": 1, "segment.bytes": 900, "index.interval.bytes": 100,
                      "klake.timestamps.allow.negative": True}}
    jobs = Jobs(tmp_path, local_backend(tmp_path), topics)
    n = 200
    ts = [-12 * day + i * (14 * day // n) + (7_000 if i % 5 == 0 else 0) for i in range(n)]  # 1969-12-20..1970-01-03
    ts[150], ts[151] = -1, 0  # a real -1 next to the epoch
    now = 4 * day
    table = input_table(n, seed=21).set_column(2, "timestamp", pa.array(ts, pa.int64()))
    code, report = jobs.run(append.SPEC, "--input", str(write_parquet(tmp_path / "old.parquet", table)),
                            "--topic", "old", now=now)
    assert code == 0 and report["results"]["records_appended"] == n, report.get("failures")
    records = jobs.records("old", 0)
    assert [r[1] for r in records] == ts
    rows = jobs.rows("old", 0)
    assert len(rows) > 3
    for row in rows:
        stamps = [r[1] for r in records if row.base_offset <= r[0] < row.next_offset]
        assert (row.base_timestamp, row.largest_timestamp) == (min(stamps), max(stamps))

    code, report = jobs.run(recover.SPEC, "--dry-run", now=now)
    assert code == 0 and report["failures"] == [], report["summary"]
    assert report["summary"].splitlines()[0] == f"recover: checked {len(rows)} segment(s); would repair 0"

    christmas = int(datetime(1969, 12, 25, tzinfo=UTC).timestamp() * 1000)
    targets = ["1969-12-25T00:00:00Z", str(-5 * day + 1), str(ts[149] + 1), "0", "-3", "-2", "-1"]
    code, report = jobs.run(offsets_for_times.SPEC, *[a for t in targets for a in ("--timestamp", t)],
                            "--topic", "old", now=now)
    assert code == 0, report["failures"]
    numbers = [christmas, -5 * day + 1, ts[149] + 1, 0, -3, -2, -1]
    assert [a["target"] for a in report["results"]["answers"]] == numbers
    for answer in report["results"]["answers"]:
        assert (answer["offset"], answer["timestamp"]) == brute_force_list_offsets(records, 0, n, answer["target"])
    first = report["results"]["answers"][0]
    assert (f"old-0 @ 1969-12-25T00:00:00Z: offset {first['offset']} (timestamp {format_time(first['timestamp'])})"
            in report["summary"].splitlines())

    # `klake segments` takes pre-1970 ISO times on this topic (its settings are under the catalog's root)
    before_1970 = [r.base_offset for r in rows if r.largest_timestamp >= christmas and r.base_timestamp <= -1]
    assert 0 < len(before_1970) < len(rows)
    capsys.readouterr()
    assert klake(["segments", "--catalog", f"{jobs.root}/_catalog", "--topic", "old", "--from", "1969-12-25",
                  "--to", "1969-12-31T23:59:59.999", "--json"]) == 0
    assert [json.loads(line)["base_offset"] for line in capsys.readouterr().out.splitlines()] == before_1970
    low, high = -9 * day, -2 * day - 1  # and negative epoch milliseconds, both bounds inclusive
    assert klake(["segments", "--catalog", f"{jobs.root}/_catalog", "--topic", "old", "--from", str(low),
                  "--to", str(high), "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["base_offset"] for r in listed] == [r.base_offset for r in rows
                                                  if r.largest_timestamp >= low and r.base_timestamp <= high]
    assert 0 < len(listed) < len(rows) and min(r["base_timestamp"] for r in listed) < 0

    # `offsets-for-times --timestamp -5`: on a KIP-228 topic -5 is a time (only -1/-2/-3 are special targets)
    code, report = jobs.run(offsets_for_times.SPEC, "--timestamp", "-5", "--topic", "old", now=now)
    assert code == 0, report["failures"]
    (answer,) = report["results"]["answers"]
    assert (answer["target"], answer["offset"], answer["timestamp"]) == (-5, 150, -1)
    assert (answer["offset"], answer["timestamp"]) == brute_force_list_offsets(records, 0, n, -5)

    # `read --from 1969-12-20T00:00:00Z` (7 s before the first record, with no --to): every record, the real
    # -1 at offset 150 included (it is a time here, not "no timestamp")
    out = tmp_path / "read-from"
    code, report = jobs.run(read.SPEC, "--topic", "old", "--from", "1969-12-20T00:00:00Z", "--output", str(out),
                            now=now)
    assert code == 0, report["failures"]
    got = sorted(pq.read_table(out)["offset"].to_pylist())
    assert got == [r[0] for r in records if r[1] >= parse_time("1969-12-20T00:00:00Z")] and 150 in got
    assert report["results"]["read"]["range"]["from_ms"] == -12 * day

    out = tmp_path / "read"
    code, report = jobs.run(read.SPEC, "--topic", "old", "--from", "1969-12-25T00:00:00Z",
                            "--to", "1970-01-01T00:00:00.001Z", "--output", str(out), now=now)
    assert code == 0, report["failures"]
    got = pq.read_table(out)
    expected = [r[0] for r in records if christmas <= r[1] < 1]
    assert sorted(got["offset"].to_pylist()) == expected and report["results"]["read"]["records"] == len(expected)
    assert report["results"]["read"]["segments"]["pruned"] > 0  # segments wholly before Christmas 1969

    def source_offsets(reader: KlakeReader) -> list[int]:
        return sorted(o for p in reader.partitions() for b in reader.read(p) for o in b.column("offset").to_pylist())

    by_option = KlakeReader({"root": jobs.root, "topic": "old", "startingTimestamp": "1969-12-25T00:00:00Z",
                             "endingTimestamp": "1"}, jobs.backend.options)
    assert source_offsets(by_option) == expected
    pushed = KlakeReader({"root": jobs.root, "topic": "old"}, jobs.backend.options)
    christmas_eve = datetime(1969, 12, 24, tzinfo=UTC)  # a pre-1970 lower bound is exact on a KIP-228 topic
    assert pushed.pushFilters([GreaterThanOrEqual(("timestamp",), christmas_eve)]) == []
    assert source_offsets(pushed) == [r[0] for r in records if r[1] >= christmas - day]

    # `export --from` a pre-1970 time: the log dir starts at ListOffsets' answer for it
    code, report = jobs.run(export.SPEC, "--topic", "old", "--from", "1969-12-25T00:00:00Z", "--output",
                            str(tmp_path / "kafka-logs"), now=now)
    assert code == 0, report["failures"]
    (part,) = [p["outcome"] for p in report["partitions"]]
    assert (part["log_start_offset"], part["log_end_offset"]) == (brute_force_list_offsets(records, 0, n, christmas)[0],
                                                                  n)

    retention_ms = 6 * day
    doomed = kafka_time_retention(rows, now, retention_ms)
    assert 0 < len(doomed) < len(rows)
    code, report = jobs.run(retention.SPEC, "--set", f"topics.old.retention.ms={retention_ms}", now=now)
    assert code == 0, report["failures"]
    assert [r.base_offset for r in jobs.rows("old", 0)] == [r.base_offset for r in rows[len(doomed):]]
