"""The README's main job (`klake demo`): its figures against a brute-force recomputation from its input.

The demo runs in-process (in the session's Spark) on a small data set. The expectations here are
computed from what the jobs were given, record by record, without the demo's own model: the Parquet
batches it wrote, the clock each append ran at (its report's `now_ms`), the topic settings in the
config it wrote, and, for retention, only the segment boundaries the catalog chose.
"""

from __future__ import annotations

import io
import json
import re
import struct
from collections import Counter, defaultdict
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.format.partitioner import partition_for_keys
from engine.log.kafka_files import parse_offset_checkpoint
from engine.log.lookup import list_offsets
from engine.ops.catalog_table import Catalog
from jobs.cli.inspect import load_partition_dir
from jobs.cli.main import main
from jobs.runtime.config import KlakeConfig, load_config
from layouts.store.bound import Store
from tests.engine.format import test_kafka_clients_oracle as jvm_oracle
from tests.jobs.test_export_job import java_file_records

pytestmark = pytest.mark.spark
kafka = jvm_oracle.kafka  # the kafka-clients JVM fixture (skips, saying why, without the jars or java)
SMALL = ["--days", "3", "--records-per-day", "400", "--batches-per-day", "1"]


@dataclass
class DemoRun:
    out: Path
    code: int
    stdout: str

    def report(self, name: str) -> dict[str, Any]:
        return json.loads((self.out / "reports" / f"{name}.json").read_text())

    @property
    def summary(self) -> dict[str, Any]:
        return json.loads((self.out / "demo-report.json").read_text())

    @property
    def config(self) -> KlakeConfig:
        return load_config(self.out / "demo.yaml")


def run_demo(out: Path, *extra: str) -> DemoRun:
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr):
        code = main(["demo", "--out", str(out), *SMALL, *extra])
    return DemoRun(out, code, stdout.getvalue())


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, spark) -> DemoRun:  # noqa: ANN001 - the Spark session
    return run_demo(tmp_path_factory.mktemp("demo"), "--local")


def live_rows(run: DemoRun) -> list[dict[str, Any]]:
    return Catalog.open(Store(run.config.catalog_uri)).segments().to_pylist()


# --- the brute force -------------------------------------------------------------------------------


@dataclass
class Record:
    timestamp: int
    key: bytes | None


def expected_logs(run: DemoRun) -> tuple[dict[str, list[Record]], Counter[str]]:
    """Every input record, batch by batch in file order, through Kafka's validation and partitioner."""
    topics = run.config.topics
    logs: dict[str, list[Record]] = defaultdict(list)
    rejected: Counter[str] = Counter()
    for i, path in enumerate(sorted((run.out / "input").glob("batch-*.parquet"))):
        now = run.report(f"append-{i:02d}")["now_ms"]
        table = pq.read_table(path)
        stamps = table["timestamp"].cast(pa.int64()).to_pylist()
        for row, ts in zip(table.select(["topic", "partition", "key"]).to_pylist(), stamps, strict=True):
            settings = topics[row["topic"]]
            config = settings.config
            log_append = config.message_timestamp_type == "LogAppendTime"
            if not log_append and not now - config.message_timestamp_before_max_ms <= ts <= \
                    now + config.message_timestamp_after_max_ms:
                rejected[row["topic"]] += 1
                continue
            partition = row["partition"]
            if partition is None:
                partition = int(partition_for_keys(pa.array([row["key"]], pa.binary()), settings.partitions)[0])
            logs[f"{row['topic']}-{partition}"].append(Record(now if log_append else ts, row["key"]))
    return logs, rejected


def partition_outcomes(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["partition"]: p["outcome"] for p in report["partitions"] if p.get("outcome")}


def retention_decisions(run: DemoRun) -> dict[str, list[dict[str, Any]]]:
    """Every segment's retention decision by partition, from the Parquet file next to the job's report."""
    path = run.report("retention")["results"]["files"]["segments"]["path"]
    by_partition: dict[str, list[dict[str, Any]]] = {}
    for d in pq.read_table(path).to_pylist():
        by_partition.setdefault(f"{d['topic']}-{d['partition']}", []).append(d)
    return by_partition


def retention_walk(decisions: list[dict[str, Any]], log: list[Record], retention_ms: int, now: int
                   ) -> tuple[list[int], list[int]]:
    """(deleted, held back) base offsets: oldest first, delete while past retention.ms, stop at the first keeper."""
    deleted: list[int] = []
    for d in decisions:
        records = log[d["base_offset"]:d["next_offset"]]
        if not records or retention_ms < 0:
            return deleted, []
        largest = max(r.timestamp for r in records)
        if now - largest <= retention_ms:
            return deleted, [d["base_offset"]] if largest > now else []
        deleted.append(d["base_offset"])
    return deleted, []


def latest_per_key(log: list[Record], start: int, end: int) -> list[int]:
    latest: dict[bytes | None, int] = {}
    for offset in range(start, end):
        latest[log[offset].key] = offset
    return sorted(latest.values())


def surviving_offsets(run: DemoRun, logs: dict[str, list[Record]]) -> dict[str, tuple[int, list[int]]]:
    """Per partition: the log start after retention and the offsets left after compaction."""
    kept = {}
    decisions = retention_decisions(run)
    cleaned = partition_outcomes(run.report("compact"))
    for name, log in logs.items():
        start = next(d["base_offset"] for d in decisions[name] if d["action"] == "keep")
        end = cleaned[name]["checkpoint"] if name in cleaned else start
        kept[name] = (start, latest_per_key(log, start, end) + list(range(end, len(log))))
    return kept


def lookup(log: list[Record], start: int, offsets: list[int], target: int) -> tuple[int, int]:
    if target == -1:
        return len(log), -1
    if target == -2:
        return start, -1
    if target == -3:
        best = max(offsets, key=lambda o: (log[o].timestamp, -o))
        return best, log[best].timestamp
    return next(((o, log[o].timestamp) for o in offsets if log[o].timestamp >= target), (-1, -1))


def summary_number(run: DemoRun, pattern: str) -> int:
    match = re.search(pattern, run.stdout)
    assert match, f"{pattern!r} not in the summary:\n{run.stdout}"
    return int(match.group(1).replace(",", ""))


# --- the tests ------------------------------------------------------------------------------------


def test_the_demo_succeeds_with_a_short_summary(local_run: DemoRun) -> None:
    assert local_run.code == 0, local_run.stdout
    assert all(check["ok"] for check in local_run.summary["checks"]), local_run.summary["checks"]
    assert all(step["exit_code"] == 0 for step in local_run.summary["steps"])
    lines = local_run.stdout.strip().splitlines()
    assert 15 <= len(lines) <= 25, local_run.stdout
    assert "every figure equals a recomputation from the generated input" in local_run.stdout
    # OUT/demo.yaml outlives the run: it names the local store the jobs ran on
    assert Path(local_run.config.root) == (local_run.out / "store" / "klake").resolve()
    assert f"--conf {(local_run.out / 'demo.yaml').resolve()}" in local_run.stdout


def test_appends_and_rejects_equal_the_input(local_run: DemoRun) -> None:
    logs, rejected = expected_logs(local_run)
    appended: Counter[str] = Counter()
    reported_rejects = 0
    for i in range(3):
        report = local_run.report(f"append-{i:02d}")
        reported_rejects += report["rejected"]["count"]
        for name, outcome in partition_outcomes(report).items():
            appended[name] += outcome["records_accepted"]
    assert appended == Counter({name: len(log) for name, log in logs.items()})
    assert reported_rejects == sum(rejected.values()) == rejected["orders"] > 0
    assert summary_number(local_run, r"([\d,]+) records appended") == sum(len(log) for log in logs.values())
    assert summary_number(local_run, r"(\d+) rejected") == sum(rejected.values())
    assert local_run.report("append-00-retry")["results"]["already_committed"] is True


def test_retention_deletes_what_the_time_rule_says(local_run: DemoRun) -> None:
    logs, _ = expected_logs(local_run)
    report = local_run.report("retention")
    now, topics = report["now_ms"], local_run.config.topics
    deleted_segments = deleted_records = 0
    held_total = 0
    decisions = retention_decisions(local_run)
    for name, outcome in partition_outcomes(report).items():
        plan = outcome["plan"]
        deleted, held = retention_walk(decisions[name], logs[name], topics[name.rsplit("-", 1)[0]].config.retention_ms,
                                       now)
        assert [d["base_offset"] for d in decisions[name] if d["action"] == "delete"] == deleted, name
        assert [h["base_offset"] for h in plan["held_back_by_future_timestamp"]] == held, name
        assert plan["totals"]["segments"] == len(deleted), name
        deleted_segments += len(deleted)
        deleted_records += sum(d["record_count"] for d in decisions[name] if d["base_offset"] in deleted)
        held_total += len(held)
    assert deleted_segments > 0 and held_total == 1
    assert summary_number(local_run, r"retention +deleted (\d+) segments") == deleted_segments
    assert summary_number(local_run, r"retention .*?, ([\d,]+) records") == deleted_records
    assert "held back  clicks-1" in local_run.stdout


def test_compaction_keeps_the_latest_record_per_key(local_run: DemoRun) -> None:
    logs, _ = expected_logs(local_run)
    kept = surviving_offsets(local_run, logs)
    read = removed = 0
    for name, outcome in partition_outcomes(local_run.report("compact")).items():
        start, checkpoint = kept[name][0], outcome["checkpoint"]
        expected = latest_per_key(logs[name], start, checkpoint)
        assert outcome["cleaned"] and checkpoint == len(logs[name]), name
        assert (outcome["stats"]["records_read"], outcome["stats"]["records_kept"]) == \
            (checkpoint - start, len(expected)), name
        read += checkpoint - start
        removed += checkpoint - start - len(expected)
    assert removed > 0
    assert summary_number(local_run, r"([\d,]+) records read") == read
    assert summary_number(local_run, r"([\d,]+) removed") == removed
    live = live_rows(local_run)
    assert sum(r["record_count"] for r in live) == sum(len(offsets) for _, offsets in kept.values())
    assert summary_number(local_run, r"([\d,]+) records live now") == sum(r["record_count"] for r in live)


def test_lookups_and_the_range_read_equal_a_scan(local_run: DemoRun) -> None:
    logs, _ = expected_logs(local_run)
    kept = surviving_offsets(local_run, logs)
    answers = local_run.report("offsets-for-times")["results"]["answers"]
    targets = {a["target"] for a in answers}
    assert len(answers) == len(targets) * len(logs) and {-1, -2, -3} < targets
    for a in answers:
        name = f"{a['topic']}-{a['partition']}"
        assert (a["offset"], a["timestamp"]) == lookup(logs[name], *kept[name], a["target"]), a
    window = local_run.report("read")["results"]["read"]["range"]
    expected = {(int(name.rsplit("-", 1)[1]), o) for name, (_, offsets) in kept.items() if name.startswith("clicks-")
                for o in offsets if window["from_ms"] <= logs[name][o].timestamp < window["to_ms"]}
    table = pq.read_table(local_run.out / "read" / "clicks")
    assert set(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True)) == expected
    assert table.num_rows == len(expected) > 0


def test_the_demos_topics_export_as_a_log_dir_kafka_clients_reads_and_whose_indexes_answer(
        local_run: DemoRun, kafka) -> None:  # noqa: ANN001 - the kafka-clients JVM
    """Issue 15's acceptance: `klake export` of the demo's topics, read by Apache kafka-clients' FileRecords
    (every batch and record validated) to exactly the records the brute force says survive, and ListOffsets
    over the exported files' own indexes answering like the brute force."""
    out = local_run.out / "kafka-logs"
    code = main(["export", "--conf", str(local_run.out / "demo.yaml"), "--output", str(out), "--no-progress"])
    assert code == 0
    logs, _ = expected_logs(local_run)
    kept = surviving_offsets(local_run, logs)
    starts = parse_offset_checkpoint((out / "log-start-offset-checkpoint").read_bytes(), "log-start")
    assert {f"{tp.topic}-{tp.partition}" for tp in starts} == set(kept)
    for name, (start, offsets) in kept.items():
        directory = out / name
        read = [r for path in sorted(directory.glob("*.log")) for r in java_file_records(kafka, path)]
        assert [r for r in read if r[0] >= start] == [(o, logs[name][o].timestamp) for o in offsets], name
        segments = load_partition_dir(Store(str(directory)))
        assert all(s.index_problems == [] for s in segments), name
        stamps = sorted({logs[name][o].timestamp for o in offsets})
        for target in [-1, -2, -3, stamps[0] - 1, *stamps[:: max(1, len(stamps) // 12)], stamps[-1] + 1]:
            answer = list_offsets(segments, target, start, min_timestamp=0)
            got = (answer.offset, -1 if target in (-1, -2) else answer.timestamp)
            assert got == lookup(logs[name], start, offsets, target), (name, target)


def test_the_timeline_is_a_readable_png(local_run: DemoRun) -> None:
    png = (local_run.out / "timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = struct.unpack(">II", png[16:24])
    assert width >= 1200 and height >= 700 and len(png) > 30_000
    assert str(local_run.out / "timeline.png") in local_run.stdout


def test_a_second_run_does_not_double_the_data(local_run: DemoRun) -> None:
    before = live_rows(local_run)
    again = run_demo(local_run.out, "--local")
    assert again.code == 0, again.stdout
    assert all(again.report(f"append-{i:02d}")["results"]["already_committed"] for i in range(3))
    assert sorted((r["topic"], r["partition"], r["segment_id"]) for r in live_rows(again)) == \
        sorted((r["topic"], r["partition"], r["segment_id"]) for r in before)
    assert "0 of 3 batches committed" in again.stdout and "deleted 0 segments" in again.stdout
    assert summary_number(again, r"([\d,]+) records live now") == sum(r["record_count"] for r in before)


def refused(*args: str) -> str:
    """The error of a demo run that must stop before it touches anything."""
    stderr = io.StringIO()
    with redirect_stderr(stderr), redirect_stdout(io.StringIO()):
        assert main(["demo", *args]) == 2
    return stderr.getvalue()


def test_other_settings_on_the_same_store_are_refused(local_run: DemoRun) -> None:
    assert "other settings" in refused("--out", str(local_run.out), "--local", "--days", "2")


def test_a_store_with_foreign_data_is_refused(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "someone-elses.log").write_bytes(b"x")
    assert "did not write" in refused("--out", str(tmp_path), "--local")
    assert not (tmp_path / "input").exists()


@pytest.mark.s3
def test_the_default_embedded_s3_run(tmp_path: Path, spark) -> None:  # noqa: ANN001 - the Spark session
    local_config = b"# a --local run's configuration\n"
    (tmp_path / "demo.yaml").write_bytes(local_config)
    run = run_demo(tmp_path)
    assert run.code == 0, run.stdout
    assert "embedded S3 (moto_server" in run.stdout
    # the endpoint is stopped at exit: no configuration pointing at it is left, a local run's stays
    assert (tmp_path / "demo.yaml").read_bytes() == local_config
    assert "`klake demo --local` keeps a store and its demo.yaml" in run.stdout
    assert all(check["ok"] for check in run.summary["checks"]), run.summary["checks"]
    assert (tmp_path / "timeline.png").stat().st_size > 30_000
