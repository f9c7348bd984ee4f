"""A tiered-storage bucket as a klake root (issue 31): Kafka's own `LocalTieredStorage` uploads, imported in place.

A dedicated broker (the `KafkaBroker` of the session fixture, started once for this module with remote storage
enabled: `LocalTieredStorage` from kafka-storage's test jar, the topic-based remote log metadata manager) offloads
the rolled segments of a `remote.storage.enable` topic with small segments and a one-second local retention.
Its storage directory, copied once the broker has deleted offloaded segments locally (so its consumer reads them
back from remote storage), is imported with `--layout kafka-rsm`, on a local directory and on a moto S3 bucket;
Kafka is the truth:
- every record klake reads equals what Kafka's consumer fetched at those offsets (the remote log: every offset
  below the last upload's end);
- every ListOffsets answer (-2, -3, 60+ timestamps) equals the broker's where the broker's answer lies in the
  remote log, and klake has none where it lies beyond (in the broker's local log only);
- the reading jobs (`segments`, `offsets-for-times`, `read`, the data source, `export`, `mirror`) work on that
  root, the jobs that would change the log refuse with one line (exit 2), and the bucket's bytes and mtimes are
  unchanged by all of it.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import time
import uuid
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
from kafka import KafkaProducer
from kafka.errors import RequestTimedOutError

from engine.ops.catalog_table import Catalog
from jobs import export, import_log, klake_source, mirror, retention, truncate
from jobs.cli.main import main as klake_main
from jobs.runtime.job_runner import main
from layouts.store import StorageOptions, list_objects, read_bytes
from layouts.store.bound import Store
from tests.conftest import Backend
from tests.kafka.runs import run_job
from tests.kafka.test_broker_to_klake import (
    HOUR,
    Record,
    broker_list_offsets,
    consumed,
    klake_list_offsets,
    klake_records,
    targets_for,
)
from tests.kafka_broker import KafkaBroker, start_broker

pytestmark = pytest.mark.spark

LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
SEGMENT_BYTES = 4096
RECORDS = 1500


def tiered_configs(storage: Path) -> dict[str, str]:
    """A broker with Kafka's reference RemoteStorageManager on a local directory and the default (topic-based)
    remote log metadata manager, its metadata topic on one partition, copying and deleting every 500 ms."""
    return {"remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
            "rsm.config.dir": str(storage),
            "remote.log.metadata.manager.listener.name": "PLAINTEXT",
            "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
            "remote.log.manager.task.interval.ms": "500",
            "remote.list.offsets.request.timeout.ms": "120000"}


@pytest.fixture(scope="module")
def tiered_broker(tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("tiered-broker")
    broker = start_broker(workdir, tiered_configs(workdir / "remote"))
    try:
        yield broker
    finally:
        broker.stop()


def produce(broker: KafkaBroker, topic: str, t0: int) -> None:
    """Keyed records, two codecs, timestamps out of order within half a minute."""
    rng = np.random.default_rng(31)
    for codec in (None, "zstd"):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=10, batch_size=1024,
                                 compression_type=codec)
        for i in range(RECORDS // 2):
            n = i if codec is None else i + RECORDS // 2
            stamp = t0 + n * 1000 + int(rng.integers(-30_000, 30_000))
            producer.send(topic, key=b"key-%d" % (n % 50), value=b"value-%05d|" % n + b"x" * int(rng.integers(0, 60)),
                          headers=[("n", b"%d" % n)] if n % 3 == 0 else [], partition=0, timestamp_ms=stamp)
        producer.close()


@pytest.fixture(scope="module")
def offloaded(tiered_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory):
    """A topic offloaded to the broker's `LocalTieredStorage`, the broker's truth about it, and a copy of the
    storage directory taken once the broker has deleted offloaded segments from its local log."""
    topic = tiered_broker.create_topic(f"tiered-{uuid.uuid4().hex[:6]}", segment_bytes=SEGMENT_BYTES,
                                       remote_storage_enable="true", local_retention_ms=1000, retention_ms=-1)
    t0 = int(time.time() * 1000) - 3 * HOUR
    produce(tiered_broker, topic, t0)
    storage = tiered_broker.workdir / "remote" / "kafka-tiered-storage"
    deadline = time.monotonic() + 120
    while (min((int(p.stem) for p in tiered_broker.topic_dir(topic).glob("*.log")), default=0) == 0
           or len(list(storage.glob(f"{topic}-0-*/*.log"))) < 10):
        assert time.monotonic() < deadline, f"no offload within 120 s:\n{tiered_broker.log_tail()}"
        time.sleep(0.5)
    copy = tmp_path_factory.mktemp("bucket") / "kafka-tiered-storage"
    shutil.copytree(storage, copy)  # the uploads as they are now; the broker may upload more meanwhile
    truth = consumed(tiered_broker, topic)  # below the local log start, read back from remote storage
    targets = targets_for(truth)
    return topic, copy, truth, targets, [remote_list_offsets(tiered_broker, topic, target) for target in targets]


def remote_list_offsets(broker: KafkaBroker, topic: str, target: int) -> tuple[int, int]:
    """The broker's ListOffsets answer; one that times out reading remote storage on a loaded machine is asked
    again (the answer is Kafka's either way)."""
    for attempt in range(3):
        try:
            return broker_list_offsets(broker, topic, [target])[0]
        except RequestTimedOutError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def bucket_state(uri: str, options: StorageOptions | None = None) -> dict[str, tuple[int, int, str]]:
    """Every object under `uri`: size, mtime and SHA-256 (a job that wrote into the bucket changes one)."""
    return {info.uri: (info.size, info.mtime_ms, hashlib.sha256(read_bytes(info.uri, options)).hexdigest())
            for info in list_objects(uri, options)}


def expected_answers(listed: list[tuple[int, int]], targets: list[int], remote: list[Record],
                     end: int) -> list[tuple[int, int]]:
    """The broker's ListOffsets answers over the remote log ending at `end`: the same where the broker's answer is
    in it, none where it is beyond; -1 (latest) is the remote log's end and -3 (max timestamp) the first record
    of the remote log's largest timestamp (brute force over the consumer's records)."""
    out = []
    for target, (offset, stamp) in zip(targets, listed, strict=True):
        if target == -1:
            out.append((end, -1))
        elif target == -3:
            largest = max(r[1] for r in remote)
            out.append((next(r[0] for r in remote if r[1] == largest), largest))
        else:
            out.append((offset, stamp) if 0 <= offset < end else (-1, -1))
    return out


def refused(spec, *argv: str) -> str:
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = main(spec, [*argv, "--no-progress"])
    assert code == 2, err.getvalue()
    return err.getvalue()


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_a_tiered_storage_bucket_imported_in_place_reads_and_answers_like_the_broker(
        spark, offloaded, where: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    topic, copy, truth, targets, listed = offloaded
    if where == "s3":
        backend: Backend = request.getfixturevalue("s3_backend")
        bucket = backend.upload_tree(copy, backend.uri("tiered", "kafka-tiered-storage"), skip_suffixes=())
        root, options = backend.uri("klake"), backend.options
    else:
        bucket, root, options = str(copy), str(tmp_path / "klake"), StorageOptions()
    before = bucket_state(bucket, options)

    document = run_job(import_log.SPEC, tmp_path, bucket, "--layout", "kafka-rsm", "--root", root)
    part, = document["results"]["import"]["partitions"]
    assert part["topic"] == topic and part["error"] is None and part["set_aside"] == {}
    rows = Catalog.open(Store(f"{root}/_catalog")).live_segments(topic, 0)
    assert len(rows) >= 10 and {r.layout for r in rows} == {"kafka-rsm"}
    assert all(r.log_key.startswith(bucket + "/") for r in rows)  # in place: the bucket's own objects
    end = rows[-1].next_offset
    assert [r.base_offset for r in rows[1:]] == [r.next_offset for r in rows[:-1]]  # uploads chain
    assert 0 < end <= truth[-1][0] + 1  # at most the whole log (an active segment is uploaded once rolled)

    remote: list[Record] = [r for r in truth if r[0] < end]
    assert klake_records(tmp_path, root, topic) == remote
    assert klake_list_offsets(tmp_path, root, topic, targets) == expected_answers(listed, targets, remote, end)
    assert sum(0 <= offset < end for offset, _ in listed) >= 40  # most answers lie in the remote log

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert klake_main(["segments", "--root", root, "--topic", topic, "--json"]) == 0
    assert [json.loads(line)["base_offset"] for line in out.getvalue().splitlines()] == [r.base_offset for r in rows]

    klake_source.register(spark)
    source = spark.read.format("klake").option("root", root).option("topic", topic) \
        .option("startingOffset", "100").option("endingOffset", "400").load()
    assert sorted(r["offset"] for r in source.select("offset").collect()) == [r[0] for r in remote if 100 <= r[0] < 400]

    exported = tmp_path / "export"
    run_job(export.SPEC, tmp_path, "--root", root, "--topic", topic, "--output", str(exported))
    assert sorted(p.name for p in (exported / f"{topic}-0").glob("*.log")) == [f"{r.base_offset:020d}.log" for r in rows]
    for row in rows:  # a broker's log dir holding the uploads' bytes
        assert (exported / f"{topic}-0" / f"{row.base_offset:020d}.log").read_bytes() == read_bytes(row.log_key, options)

    replica = str(tmp_path / "replica")
    run_job(mirror.SPEC, tmp_path, root, "--root", replica, "--topic", topic)
    assert klake_records(tmp_path, replica, topic) == remote

    for spec, argv in ((retention.SPEC, ()), (truncate.SPEC, ("--partition", "0", "--offset", "5"))):
        line = refused(spec, "--root", root, "--topic", topic, *argv)
        assert f"{topic}-0, whose segments a broker's tiered storage owns" in line and len(line.splitlines()) == 1
    line = refused(mirror.SPEC, replica, "--root", root, "--topic", topic)
    assert "tiered storage owns" in line

    assert bucket_state(bucket, options) == before  # nothing written into the bucket, nothing touched
    run_job(import_log.SPEC, tmp_path, bucket, "--layout", "kafka-rsm", "--root", root)  # a re-run adds nothing
    assert len(Catalog.open(Store(f"{root}/_catalog")).live_segments(topic, 0)) == len(rows)
    assert json.dumps(bucket_state(bucket, options)) == json.dumps(before)
