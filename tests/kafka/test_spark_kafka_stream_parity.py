"""`spark.readStream.format("kafka")` on the live broker and `spark.readStream.format("klake")` on the same topic
imported from it, with the same options dict, give the same micro-batches (issue 29, item 2): for an
`AvailableNow` run, the same offsets in every checkpointed batch (`maxOffsetsPerTrigger`'s split included),
equal rows, every column, in every batch, and the same progress: latest offsets, and Kafka's offsets-behind-latest
metrics equal to `offsets_behind_latest` of klake's.

Truth is Spark's own Kafka source (`spark-sql-kafka-0-10` of the pinned `spark-kafka` set, on the shared
session's classpath).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.klake_stream import offsets_behind_latest
from tests.kafka.runs import available_now, checkpointed_offsets, imported_topic
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark


def test_an_available_now_run_reads_the_same_batches_as_sparks_kafka_source(
        klake_source, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    spark = klake_source
    fetch_jvm.require("spark-kafka")
    topic, root, t0 = imported_topic(kafka_broker, tmp_path, "stream", lambda i: i % 3 % 2)
    lagging: list[dict] = []  # batches that ended behind the latest offsets (maxOffsetsPerTrigger)
    for n, options in enumerate([
            {"subscribe": topic, "startingOffsets": "earliest", "includeHeaders": "true",
             "maxOffsetsPerTrigger": "110"},
            {"assign": json.dumps({topic: [0, 1]}), "startingTimestamp": str(t0 + 150 * 997),
             "maxOffsetsPerTrigger": "1000"},
            {"subscribePattern": "stream-.*", "startingOffsets": json.dumps({topic: {"0": 40, "1": -2}}),
             "includeHeaders": "false"}]):
        shared = {"kafka.bootstrap.servers": kafka_broker.bootstrap, **options}
        their_sources: list = []
        our_sources: list = []
        theirs = available_now(spark, "kafka", shared, tmp_path / f"kafka-{n}", their_sources)
        ours = available_now(spark, "klake", {"root": str(root), **shared}, tmp_path / f"klake-{n}", our_sources)
        assert checkpointed_offsets(tmp_path / f"klake-{n}") == checkpointed_offsets(tmp_path / f"kafka-{n}")
        assert sum(len(rows) for rows in theirs.values()) > 100
        assert ours == theirs, options
        assert [json.loads(s.latestOffset) for s in our_sources] == [json.loads(s.latestOffset)
                                                                      for s in their_sources]
        behind = [offsets_behind_latest(s) for s in our_sources]
        assert behind == [{k: v for k, v in s.metrics.items() if k.endswith("OffsetsBehindLatest")}
                          for s in their_sources]
        lagging += [b for b in behind if b["maxOffsetsBehindLatest"] != "0"]
    assert lagging
