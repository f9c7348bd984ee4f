"""Spark's Kafka source reading the live broker and klake reading the same topic imported from it give equal
rows for the same offset range (issue 27, item 4: the read benchmark's two sides answer alike), and
`spark.read.format("klake")` given the very options dict `format("kafka")` is given answers alike too (issue 29).

Truth is Spark's own Kafka source (`spark-sql-kafka-0-10` of the pinned `spark-kafka` set, on the shared
session's classpath); klake's side is `read_records` over the broker's log dir imported in place.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.read import read_records
from jobs.runtime.config import load_config
from tests.kafka.runs import imported_topic
from tests.kafka_broker import KafkaBroker
from tests.oracles import fetch_jvm

pytestmark = pytest.mark.spark

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def test_spark_kafka_source_and_klake_read_equal_rows_for_the_same_offsets(
        klake_source, kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    spark = klake_source
    fetch_jvm.require("spark-kafka")
    topic, root, t0 = imported_topic(kafka_broker, tmp_path, "parity", lambda i: i % 2)

    start, end = 17, 151
    bounds = {"startingOffsets": json.dumps({topic: {"0": start, "1": start}}),
              "endingOffsets": json.dumps({topic: {"0": end, "1": end}})}
    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap)
             .option("subscribe", topic).option("includeHeaders", "true").options(**bounds).load())
    ours = read_records(spark, load_config(None, [f"storage.root={root}"]), topic, from_offset=start, to_offset=end)
    theirs_rows = kafka.select(*COLUMNS).orderBy("partition", "offset").collect()
    our_rows = ours.select(*COLUMNS).orderBy("partition", "offset").collect()
    assert len(theirs_rows) == 2 * (end - start)
    assert kafka.select(*COLUMNS).schema == ours.select(*COLUMNS).schema
    assert [r.asDict(recursive=True) for r in our_rows] == [r.asDict(recursive=True) for r in theirs_rows]

    # the data source, with the very options dict given to format("kafka") (issue 29, item 3)
    for options in ({"subscribe": topic, "includeHeaders": "true", **bounds},
                    {"subscribePattern": "parity-.*", "startingTimestamp": str(t0 + 200 * 997),
                     "endingOffsets": json.dumps({topic: {"0": -1, "1": 180}})}):
        shared = {"kafka.bootstrap.servers": kafka_broker.bootstrap, **options}
        kafka = spark.read.format("kafka").options(**shared).load()
        klake = spark.read.format("klake").options(root=str(root), **shared).load()
        assert klake.schema == kafka.schema, options
        theirs_rows = kafka.orderBy("partition", "offset").collect()
        assert len(theirs_rows) > 100
        assert klake.orderBy("partition", "offset").collect() == theirs_rows, options
