"""`spark.readStream.format("klake")` (jobs/klake_stream.py) and its options (jobs/source_options.py), issue 29.

Truth: the records the `append` job was given (each value unique), and a Delta table (deltalake) written by
an idempotent `foreachBatch` sink (Delta's app transactions, keyed by Spark's batch id), read back by
deltalake: every appended record exactly once, across AvailableNow runs, appends in between, a run that
fails mid-batch and a run whose processes are killed by SIGKILL mid-batch (this module run as a script is that
run's child: `python -m tests.jobs.test_klake_stream ROOT DELTA CHECKPOINT BATCH MARKER`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from engine.ops.read import IsolationLevel
from jobs import append, retention
from jobs.klake_source import KlakeReader, register
from jobs.klake_stream import KlakeStreamReader, offsets_behind_latest
from jobs.source_options import parse_options
from kernel.errors import ConfigError
from layouts.store import StorageOptions
from tests.conftest import PROJECT_ROOT
from tests.jobs.test_jobs import HOUR, NOW, Jobs, input_table, local_backend, write_parquet

pytestmark = pytest.mark.spark

TOPIC = "events"
TOPICS = {TOPIC: {"partitions": 2, "segment.bytes": 1500, "retention.ms": 3 * HOUR}}


class Crash(Exception):
    """Raised by the sink to fail a run mid-batch."""


def add(jobs: Jobs, n: int, tag: str, start_ts: int) -> list[str]:
    """Append `n` records with values `{tag}-NNNNN|...` to the topic; their values."""
    table = input_table(n, seed=len(tag), tag=tag, start_ts=start_ts, step_ms=1000)
    assert jobs.run(append.SPEC, "--input", str(write_parquet(jobs.tmp / f"{tag}.parquet", table)),
                    "--topic", TOPIC)[0] == 0
    return [v.decode() for v in table.column("value").to_pylist()]


def delta_sink(delta: Path, after: Callable[[int, bool], None]) -> Callable:
    """A `foreachBatch` sink appending each batch to the Delta table once: the batch id is the commit's app
    transaction version, and a batch id the table already holds (a batch run again after a crash) is skipped.
    `after(batch_id, wrote)` runs once the batch is in the table, before Spark's commit."""
    def sink(frame, batch_id: int) -> None:  # noqa: ANN001 - Spark's DataFrame
        app = "klake-stream-test"
        if delta.exists() and (DeltaTable(str(delta)).transaction_version(app) or -1) >= batch_id:
            return
        table = frame.toArrow()
        if table.num_rows:
            write_deltalake(str(delta), table, mode="append",
                            commit_properties=CommitProperties(app_transactions=[Transaction(app, batch_id)]))
        after(batch_id, table.num_rows > 0)
    return sink


def available_now(spark, root: str, sink: Callable, checkpoint: Path, **options: str) -> None:
    """One AvailableNow run of the topic from earliest into `sink`."""
    stream = (spark.readStream.format("klake").option("root", root).option("subscribe", TOPIC)
              .option("startingOffsets", "earliest").options(**options).load())
    query = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def run(spark, jobs: Jobs, delta: Path, checkpoint: Path, crash_at: int | None = None, **options: str) -> list[int]:
    """One AvailableNow run into the Delta table; the ids of the batches it wrote. With `crash_at`, the sink
    writes batch `crash_at` and then fails, as a run that failed after its sink committed and before Spark did."""
    written: list[int] = []

    def after(batch_id: int, wrote: bool) -> None:
        if wrote:
            written.append(batch_id)
        if batch_id == crash_at:
            raise Crash(f"batch {batch_id}")

    available_now(spark, jobs.root, delta_sink(delta, after), checkpoint, **options)
    return written


def delta_values(delta: Path) -> list[str]:
    return [v.decode() for v in DeltaTable(str(delta)).to_pyarrow_table().column("value").to_pylist()]


def test_available_now_runs_write_each_record_once_across_appends_and_a_failed_run(klake_source, tmp_path: Path) -> None:
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    delta, checkpoint = tmp_path / "delta", tmp_path / "checkpoint"
    appended: list[str] = []
    for step in range(3):
        appended += add(jobs, 120, f"a{step}", NOW - HOUR + step * 200_000)
        assert run(klake_source, jobs, delta, checkpoint, maxOffsetsPerTrigger="50")
        assert sorted(delta_values(delta)) == sorted(appended)
    offsets = json.loads((checkpoint / "offsets").glob("*").__next__().read_text().splitlines()[-1])
    assert set(offsets) == {TOPIC} and set(offsets[TOPIC]) == {"0", "1"}

    appended += add(jobs, 90, "crash", NOW - HOUR + 700_000)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    with pytest.raises(Exception, match="Crash"):
        run(klake_source, jobs, delta, checkpoint, crash_at=last + 1)
    run(klake_source, jobs, delta, checkpoint)  # the failed batch again: the sink skips what it committed
    assert sorted(delta_values(delta)) == sorted(appended)
    assert run(klake_source, jobs, delta, checkpoint) == []  # nothing new: no batch


def test_a_run_killed_by_sigkill_mid_batch_and_run_again_writes_each_record_once(klake_source, tmp_path: Path) -> None:
    """A child process (its own driver, JVM and Python workers, in one process group) runs AvailableNow in
    batches of 50; its sink writes batch 1 into Delta and blocks; the group is SIGKILLed there, so batch 1 is in
    Spark's offset log and in Delta but not in Spark's commit log. Run again on the checkpoint, the query redoes
    batch 1 (the sink skips it) and reads on: the Delta table holds every record of the root exactly once
    (kafka-python's decode of the segments is the truth)."""
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    add(jobs, 160, "kill", NOW - HOUR)
    truth = [r[3].decode() for p in (0, 1) for r in jobs.records(TOPIC, p)]
    delta, checkpoint, marker = tmp_path / "delta", tmp_path / "checkpoint", tmp_path / "written"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": str(PROJECT_ROOT)}
    with open(tmp_path / "child.log", "w") as log:
        child = subprocess.Popen([sys.executable, "-m", "tests.jobs.test_klake_stream", jobs.root, str(delta),
                                  str(checkpoint), "1", str(marker)], cwd=PROJECT_ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert marker.exists(), (tmp_path / "child.log").read_text()[-3000:]
    assert DeltaTable(str(delta)).transaction_version("klake-stream-test") == 1
    assert {p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()} == {"0", "1"}
    assert {p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit()} == {"0"}

    assert run(klake_source, jobs, delta, checkpoint, maxOffsetsPerTrigger="50") == [2, 3]
    assert sorted(delta_values(delta)) == sorted(truth) and len(truth) == 160


def test_max_offsets_per_trigger_splits_the_run_into_batches(klake_source, tmp_path: Path) -> None:
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    appended = add(jobs, 200, "m", NOW - HOUR)
    delta = tmp_path / "delta"
    batches = run(klake_source, jobs, delta, tmp_path / "checkpoint", maxOffsetsPerTrigger="30")
    assert len(batches) == -(-200 // 30)  # 30 a batch, split over the two partitions by what each holds
    assert sorted(delta_values(delta)) == sorted(appended)


def test_progress_reports_the_latest_offsets_and_how_far_each_batch_is_behind_them(klake_source, tmp_path: Path) -> None:
    """Every batch's progress names the archive's latest offsets (kafka-python's decode of the segments is the
    truth), and `offsets_behind_latest` gives Spark's Kafka source's three metrics from it: latest minus the
    batch's end offset per partition, min, max and mean, as strings."""
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    add(jobs, 200, "p", NOW - HOUR)
    latest = {str(p): jobs.records(TOPIC, p)[-1][0] + 1 for p in (0, 1)}
    query = (klake_source.readStream.format("klake").option("root", jobs.root).option("subscribe", TOPIC)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "70").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    sources = [progress.sources[0] for progress in query.recentProgress]
    assert len(sources) == 3  # 200 records, 70 a batch
    for source in sources:
        assert json.loads(source.latestOffset) == {TOPIC: latest}
        consumed = json.loads(source.endOffset)[TOPIC]
        behind = [latest[p] - consumed[p] for p in ("0", "1")]
        assert offsets_behind_latest(source) == {
            "minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / 2)}
    assert max(int(offsets_behind_latest(s)["maxOffsetsBehindLatest"]) for s in sources[:2]) > 0
    assert offsets_behind_latest(sources[-1])["maxOffsetsBehindLatest"] == "0"


def test_retention_between_runs_fails_the_query_or_skips_what_is_gone(klake_source, tmp_path: Path) -> None:
    """Retention deletes records the query had still to read: failOnDataLoss=true (default) fails the run naming
    the partition; false reads what is left from the log start offset on (kafka-python's decode of the live
    segments is the truth)."""
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    first = add(jobs, 100, "first", NOW - 10 * HOUR)
    delta, checkpoint = tmp_path / "delta", tmp_path / "checkpoint"
    run(klake_source, jobs, delta, checkpoint)
    middle = add(jobs, 150, "middle", NOW - 9 * HOUR)
    add(jobs, 60, "new", NOW - 60_000)
    assert jobs.run(retention.SPEC)[0] == 0  # segments holding only records older than 3 h go
    live = {r[3].decode() for p in (0, 1) for r in jobs.records(TOPIC, p)}
    assert set(middle) - live, "retention deleted nothing the query had still to read"
    with pytest.raises(Exception, match=r"events-[01]: offsets \d+ to \d+ are gone"):
        run(klake_source, jobs, delta, checkpoint)
    run(klake_source, jobs, delta, checkpoint, failOnDataLoss="false")
    assert sorted(delta_values(delta)) == sorted(set(first) | live)


def test_options_are_checked_and_named() -> None:
    base = {"root": "/tmp/r", "subscribe": "t"}
    for options, message in [
            ({"root": "/tmp/r", "topic": "t"}, "option 'topic' is unknown"),
            ({**base, "startingOffset": "3"}, "option 'startingoffset' is unknown"),
            ({**base, "kafka.auto.offset.reset": "earliest"}, "set startingOffsets instead"),
            ({**base, "minOffsetsPerTrigger": "5"}, "'minoffsetspertrigger' is not supported yet"),
            ({**base, "endingOffsets": "latest"}, "for batch queries only"),
            ({**base, "kafka.isolation.level": "read_dirty"}, "must be one of read_uncommitted, read_committed"),
            ({**base, "assign": '{"t":[0]}'}, "exactly one of"),
            ({**base, "startingOffsets": '{"t":{"0":-3}}'}, "bad value -3"),
            ({**base, "maxOffsetsPerTrigger": "0"}, "must be a positive integer")]:
        with pytest.raises(ConfigError, match=message):
            parse_options(options, "stream")
    parsed = parse_options({**base, "kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SSL",
                            "startingOffsets": '{"t":{"0":5,"1":-2}}', "failOnDataLoss": "false"}, "stream")
    assert parsed.starting.offsets == {"t": {0: 5, 1: -2}} and parsed.fail_on_data_loss is False
    assert parse_options(base, "stream").starting.default == -1  # latest, Spark's default for streams
    assert parse_options(base, "batch").starting.default == -2
    committed = {**base, "kafka.isolation.level": "read_committed"}
    assert parse_options(committed, "stream").isolation_level == IsolationLevel.READ_COMMITTED
    assert parse_options(base, "batch").isolation_level == IsolationLevel.READ_UNCOMMITTED
    with pytest.raises(ConfigError, match="'kafka.isolation.level' must be one of read_uncommitted, read_committed"):
        parse_options({**base, "kafka.isolation.level": "committed"}, "stream")
    with pytest.raises(ConfigError, match="option 'startingoffsetz' is unknown"):
        KlakeReader({"root": "/tmp/r", "topic": "t", "startingOffsetz": "3"}, StorageOptions())
    with pytest.raises(ConfigError, match="option 'partitions' is klake's own and goes with 'topic'"):
        KlakeReader({**base, "partitions": "0"}, StorageOptions())
    with pytest.raises(ConfigError, match="option 'startingoffsets' is Kafka's and goes with subscribe"):
        KlakeReader({"root": "/tmp/r", "topic": "t", "startingOffsets": "earliest"}, StorageOptions())


def test_starting_offsets_by_timestamp_are_kafkas_list_offsets_answers(spark, tmp_path: Path) -> None:
    """Each partition starts at its first record with a timestamp at or after the time (kafka-python's decode of
    the live segments is the truth); a time after every record fails the query (strategy error, the default) or
    starts at the log end (strategy latest)."""
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    add(jobs, 150, "t", NOW - HOUR)
    records = {p: jobs.records(TOPIC, p) for p in (0, 1)}
    target = NOW - HOUR + 70_500

    def reader(**options: str) -> KlakeStreamReader:
        return KlakeStreamReader(parse_options({"root": jobs.root, "subscribe": TOPIC, **options}, "stream"),
                                 StorageOptions())

    first = {str(p): next(r[0] for r in records[p] if r[1] >= target) for p in (0, 1)}
    assert reader(startingTimestamp=str(target)).initialOffset() == {TOPIC: first}
    by_partition = json.dumps({TOPIC: {"0": target, "1": NOW}})
    with pytest.raises(ConfigError, match="events-1 holds no record at or after timestamp"):
        reader(startingOffsetsByTimestamp=by_partition).initialOffset()
    latest = reader(startingOffsetsByTimestamp=by_partition, startingOffsetsByTimestampStrategy="latest")
    assert latest.initialOffset() == {TOPIC: {"0": first["0"], "1": records[1][-1][0] + 1}}


DRIVER_CALLS = """
import pickle, sys
from engine.ops.catalog_table import Catalog
from jobs.klake_stream import KlakeStreamReader
from jobs.source_options import parse_options
from layouts.store import StorageOptions
opened = []
real_open = Catalog.open.__func__
Catalog.open = classmethod(lambda cls, *a, **k: opened.append(1) or real_open(cls, *a, **k))
reader = KlakeStreamReader(parse_options({"root": sys.argv[1], "subscribe": sys.argv[2],
                                          "startingOffsets": "earliest"}, "stream"), StorageOptions())
reader.prepareForTriggerAvailableNow()
start = reader.initialOffset()
end = reader.latestOffset(start, reader.getDefaultReadLimit())
reader.reportLatestOffset()
assert reader.initialOffset() == start
items = sum(len(p.value) for p in pickle.loads(pickle.dumps(reader.partitions(start, end))))
assert reader.latestOffset(end, reader.getDefaultReadLimit()) == end and reader.reportLatestOffset() == end
print(items, len(opened), *sorted(m for m in ("pandas", "Crypto", "cryptography") if m in sys.modules))
"""


def test_a_streams_driver_calls_import_neither_pandas_nor_the_cipher_libraries(spark, tmp_path: Path) -> None:
    """Spark starts a fresh Python process for each streaming query's driver calls (its source runner, not a
    reused worker), so what they import and read is paid per query (issue 29's benchmark: ~0.5 s for pandas,
    which pyarrow imports when a Python value becomes an Arrow scalar; ~0.2 s for the Aiven cipher libraries,
    needed only for encrypted uploads). The calls of an AvailableNow run of one batch, in Spark 4.2's order, in
    a process of their own, plan a non-empty read and open the catalog twice: once to fix the run's target (the
    starting offsets and every `latestOffset` answer from that look), once to plan the batch."""
    jobs = Jobs(tmp_path, local_backend(tmp_path), TOPICS)
    add(jobs, 40, "i", NOW - HOUR)
    done = subprocess.run([sys.executable, "-c", DRIVER_CALLS, jobs.root, TOPIC], cwd=PROJECT_ROOT, text=True,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr
    items, opened, *imported = done.stdout.split()
    assert int(items) > 0 and int(opened) == 2 and imported == []


def killed_run(root: str, delta: str, checkpoint: str, block_at: str, marker: str) -> None:
    """The child of the SIGKILL test: an AvailableNow run in batches of 50 whose sink, once batch `block_at` is
    in the Delta table, writes `marker` and waits to be killed."""
    from pyspark.sql import SparkSession

    def after(batch_id: int, wrote: bool) -> None:
        if batch_id == int(block_at):
            Path(marker).write_text(str(batch_id))
            time.sleep(3600)

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1").getOrCreate())
    register(spark)
    available_now(spark, root, delta_sink(Path(delta), after), Path(checkpoint), maxOffsetsPerTrigger="50")


if __name__ == "__main__":
    killed_run(*sys.argv[1:])
