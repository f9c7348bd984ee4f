"""`klake archive` against the live broker (issue 30, item 2): the archive holds every record the cluster holds,
each at its source offset, checked against a consumer of the cluster (kafka-python, read_committed).

Archived while a producer writes, with a transactional producer's aborts; a run killed at its commit and
re-run loses and duplicates nothing; retention on the cluster between two runs is a gap reported with its
exact range (exit 1 unless --allow-gaps); bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTP
from kafka.structs import OffsetAndMetadata

from engine.ops.catalog_table import Catalog
from jobs import archive
from jobs.cli import main as cli
from jobs.read import read_records
from jobs.runtime.config import load_config
from jobs.runtime.job_runner import main
from tests.kafka.runs import consumed
from tests.kafka_broker import SASL_USER, KafkaBroker, free_port
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "klake.yaml"
    conf.write_text(yaml.safe_dump({"storage": {"root": str(tmp_path / "root")}}))
    return conf


def _archive(conf: Path, broker: KafkaBroker, topic: str, *extra: str) -> tuple[int, dict]:
    report = conf.parent / f"report-{uuid.uuid4().hex[:6]}.json"
    code = main(archive.SPEC, ["--conf", str(conf), "--bootstrap-servers", broker.bootstrap, "--topic", topic,
                               "--no-progress", "--report", str(report), *extra])
    return code, json.loads(report.read_text()) if report.exists() else {}


def _cluster(broker: KafkaBroker, topic: str, partitions: int) -> list[tuple]:
    """Every committed record of the cluster, as a consumer reads it."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    tps = [KafkaTP(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    out = [(r.partition, r.offset, r.timestamp, r.key, r.value) for r in consumer]
    consumer.close()
    return sorted(out)


def _archived(spark, conf: Path, topic: str) -> list[tuple]:
    rows = read_records(spark, load_config(str(conf), []), topic).collect()
    return sorted((r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000) if r["timestamp"] else None,
                   r["key"], r["value"]) for r in rows)


def _transactions(broker: KafkaBroker, topic: str, tag: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{topic}-{tag}", linger_ms=5)
    producer.init_transactions()
    for t in range(4):
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, key=b"t%d" % i, value=f"{tag}-txn{t}-{i}".encode(), partition=i % 2)
        producer.flush()
        producer.commit_transaction() if t % 2 else producer.abort_transaction()
    producer.close()


def test_archive_while_a_producer_writes_and_a_killed_run_reruns_without_loss_or_duplicates(
        spark, kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"archive-{uuid.uuid4().hex[:8]}", partitions=2, segment_bytes=4096,
                                      retention_ms=-1)
    conf = _conf(tmp_path)
    _transactions(kafka_broker, topic, "a")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, enable_idempotence=True, linger_ms=2)
    done = threading.Event()

    def write() -> None:
        i = 0
        while not done.is_set() or i < 300:
            producer.send(topic, key=b"k%d" % (i % 7), value=b"live-%d" % i, headers=[("i", b"%d" % i)])
            i += 1
            if i % 50 == 0:
                producer.flush()
            time.sleep(0.005)
        producer.flush()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        code, report = _archive(conf, kafka_broker, topic)  # while the producer writes
        assert code == 0, report
        original = Catalog.apply

        def killed(self, change, operation="change", **more):  # noqa: ANN001, ANN003, ANN202
            if operation == "archive":
                raise RuntimeError("driver killed during the archive's commit")
            return original(self, change, operation=operation, **more)

        with monkeypatch.context() as patch:
            patch.setattr(Catalog, "apply", killed)
            code, _ = _archive(conf, kafka_broker, topic)
            assert code != 0
    finally:
        done.set()
        writer.join()
        producer.close()
    _transactions(kafka_broker, topic, "b")
    code, report = _archive(conf, kafka_broker, topic)  # takes over the killed run, then the cluster's end
    assert code == 0, report
    assert all(row["lag"] == 0 for row in report["results"]["archive"].values())
    cluster = _cluster(kafka_broker, topic, 2)
    for p in (0, 1):  # the report's range and count: this run's records, as the cluster numbers them
        row = report["results"]["archive"][f"{topic}-{p}"]
        assert row["last_offset"] == max(o for q, o, *_ in cluster if q == p)
        assert row["records"] == sum(1 for q, o, *_ in cluster if q == p and o >= row["first_offset"])
    assert _archived(spark, conf, topic) == cluster
    offsets = [o for p, o, *_ in cluster if p == 1]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # markers and aborts: gaps kept
    code, report = _archive(conf, kafka_broker, topic)  # nothing new
    assert code == 0 and report["results"]["records_appended"] == 0
    assert _archived(spark, conf, topic) == cluster


def test_retention_between_two_runs_is_a_gap_with_its_exact_range(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"gap-{uuid.uuid4().hex[:8]}", retention_ms=-1)
    conf = _conf(tmp_path)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(40):
        producer.send(topic, value=b"first-%d" % i)
    producer.flush()
    assert _archive(conf, kafka_broker, topic)[0] == 0
    for i in range(60):
        producer.send(topic, value=b"second-%d" % i)
    producer.flush()
    producer.close()
    admin = kafka_broker.admin()
    admin.delete_records({KafkaTP(topic, 0): 75})  # the cluster's log start moves past the archive's end (40)
    admin.close()
    code, report = _archive(conf, kafka_broker, topic)
    assert code == 1
    assert report["results"]["gaps"] == {f"{topic}-0": {"first": 40, "last": 74, "records": 35}}
    assert f"gap: {topic}-0 offsets 40..74 (35 records)" in report["summary"]
    archived = _archived(spark, conf, topic)
    assert [o for _, o, *_ in archived] == [*range(40), *range(75, 100)]
    assert archived[40:] == _cluster(kafka_broker, topic, 1)


def test_bad_input_is_one_line_and_exit_2(kafka_broker: KafkaBroker, tmp_path: Path,
                                          capsys: pytest.CaptureFixture) -> None:
    conf = _conf(tmp_path)
    cases = {"nowhere": (["--bootstrap-servers", f"127.0.0.1:{free_port()}", "--topic", "t"], "cannot reach"),
             "unknown": (["--bootstrap-servers", kafka_broker.bootstrap, "--topic", "no-such-topic"],
                         "topic no-such-topic: not in the cluster"),
             "secret": (["--bootstrap-servers", kafka_broker.bootstrap, "--topic", "t",
                         "--kafka-option", "kafka.sasl.jaas.config=hunter2"], "never on the command line")}
    for name, (argv, expected) in cases.items():
        capsys.readouterr()
        assert main(archive.SPEC, ["--conf", str(conf), "--no-progress", *argv]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0] and "hunter2" not in err[0], (name, err)
    assert not (tmp_path / "root" / "_catalog").exists()


def test_wrong_credentials_are_one_line_naming_them_exit_2_and_the_right_ones_archive(
        spark, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's SASL_PLAINTEXT listener (PLAIN, one user): a wrong password is refused by the cluster, and the
    run says so in one line that holds no secret, exits 2 and commits nothing; the right one, given the same way
    (`sasl.jaas.config` from the environment, as Spark's Kafka source takes it), archives the topic."""
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"sasl-{uuid.uuid4().hex[:8]}")
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(5):
        producer.send(topic, value=b"s-%d" % i)
    producer.flush()
    producer.close()
    conf = _conf(tmp_path)
    user, password = SASL_USER
    argv = ["--conf", str(conf), "--no-progress", "--bootstrap-servers", kafka_broker.sasl_bootstrap, "--topic", topic,
            "--kafka-option", "kafka.security.protocol=SASL_PLAINTEXT", "--kafka-option", "kafka.sasl.mechanism=PLAIN",
            "--kafka-option", "kafka.sasl.jaas.config=env:KLAKE_TEST_JAAS"]
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="{}" password="{}";'
    monkeypatch.setenv("KLAKE_TEST_JAAS", jaas.format(user, "wrong-" + password))
    capsys.readouterr()
    assert main(archive.SPEC, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the cluster refused the credentials" in err[0] and password not in err[0], err
    assert not (tmp_path / "root" / "_catalog").exists()
    monkeypatch.setenv("KLAKE_TEST_JAAS", jaas.format(user, password))
    assert main(archive.SPEC, argv) == 0
    assert [v for *_, v in _archived(spark, conf, topic)] == [b"s-%d" % i for i in range(5)]


def test_each_run_snapshots_the_groups_committed_offsets_and_groups_answers_where_they_stood(
        spark, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"groups-{uuid.uuid4().hex[:8]}", partitions=2)
    conf = _conf(tmp_path)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(30):
        producer.send(topic, value=b"g-%d" % i, partition=i % 2)
    producer.flush()
    producer.close()
    group = f"billing-{topic}"
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group, enable_auto_commit=False)
    tps = [KafkaTP(topic, 0), KafkaTP(topic, 1)]
    consumer.assign(tps)
    consumer.commit({tps[0]: OffsetAndMetadata(7, "seven", -1), tps[1]: OffsetAndMetadata(11, "", -1)})
    consumer.close()
    code, report = _archive(conf, kafka_broker, topic, "--now", "2026-11-28T04:00:00Z")
    assert code == 0 and report["results"]["group_offsets"] >= 2, report
    capsys.readouterr()
    assert cli.main(["groups", "--conf", str(conf), "--group", group, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    admin = kafka_broker.admin()
    truth = admin.list_group_offsets({group: None})[group]
    admin.close()
    assert [(r["topic"], r["partition"], r["offset"], r["metadata"]) for r in rows] == [
        (tp.topic, tp.partition, meta.offset, meta.metadata or None) for tp, meta in sorted(truth.items())]
    assert {r["snapshot_ms"] for r in rows} == {1795838400000}  # the run's --now
    assert cli.main(["groups", "--conf", str(conf), "--group", group, "--at", "2026-11-28T03:59:59Z"]) == 2
    assert "no snapshot of group" in capsys.readouterr().err



def test_restore_produces_the_archive_into_a_new_topic_and_the_group_resumes_where_it_would_have(
        spark, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    from jobs import restore

    fetch_jvm.require("spark-kafka")
    topic = kafka_broker.create_topic(f"restore-{uuid.uuid4().hex[:8]}", partitions=2)
    conf = _conf(tmp_path)
    _transactions(kafka_broker, topic, "a")  # aborted records and markers: gaps the restore closes
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for i in range(20):
        producer.send(topic, key=b"k%d" % i, value=b"plain-%d" % i, partition=i % 2, headers=[("h", b"%d" % i)],
                      timestamp_ms=1_790_000_000_000 + i)
    producer.flush()
    producer.close()
    source = consumed(kafka_broker, topic, 2)
    gap = next(o for o in range(source[-1][1]) if (0, o) not in {(p, x) for p, x, *_ in source})
    group = f"readers-{topic}"
    committed = {0: gap, 1: [o for p, o, *_ in source if p == 1][3]}  # partition 0: at a gap (an aborted record)
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=group, enable_auto_commit=False)
    consumer.commit({KafkaTP(topic, p): OffsetAndMetadata(o, "", -1) for p, o in committed.items()})
    consumer.close()
    assert _archive(conf, kafka_broker, topic)[0] == 0

    target = f"{topic}-restored"
    report = tmp_path / "restore.json"
    code = main(restore.SPEC, ["--conf", str(conf), "--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic,
                               "--to-topic", target, "--apply-groups", "--no-progress", "--report", str(report)])
    assert code == 0, report.read_text()
    restored = consumed(kafka_broker, target, 2)
    assert [(p, t, k, v, h) for p, _, t, k, v, h in restored] == [(p, t, k, v, h) for p, _, t, k, v, h in source]
    admin = kafka_broker.admin()
    positions = admin.list_group_offsets({group: None})[group]
    admin.close()
    for p, c in committed.items():  # the record the group reads next is the one it would have read next
        would = next(v for q, o, _, _, v, _ in source if q == p and o >= c)
        new = positions[KafkaTP(target, p)].offset
        assert next(v for q, o, _, _, v, _ in restored if q == p and o == new) == would
    offset_map = pq.read_table(str(tmp_path / "restore.offset-map.parquet")).to_pylist()
    assert [(r["partition"], r["archive_offset"]) for r in offset_map] == [(p, o) for p, o, *_ in source]
    assert [(r["partition"], r["new_offset"]) for r in offset_map] == [(p, o) for p, o, *_ in restored]

    csv = tmp_path / "groups"
    code = main(restore.SPEC, ["--conf", str(conf), "--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic,
                               "--to-topic", f"{topic}-again", "--groups-csv", str(csv), "--no-progress"])
    assert code == 0
    assert (csv / f"{group}.csv").read_text() == "".join(
        f"{topic}-again,{p},{positions[KafkaTP(target, p)].offset}\n" for p in sorted(committed))
