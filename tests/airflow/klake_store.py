"""Prepare and inspect a klake store for the Airflow tests; runs in the PROJECT venv, not Airflow's.

The Airflow venv has no klake dependencies (and must not have pyspark), so the tests call this script
with `.venv/bin/python`. Storage settings come from the environment (AWS_*, KLAKE_S3_ENDPOINT_URL).
Each command prints one JSON document on stdout.

  seed ROOT CATALOG TOPIC PARTITIONS DAYS T0_MS   one segment per day, 24 hourly batches each
  state CATALOG TOPIC                             live segments and log start/end offsets per partition
  hold-lease ROOT TOPIC PARTITION                 take a partition's lease for an hour, as another job would
"""

from __future__ import annotations

import json
import sys

from engine.catalog.changes import CatalogChange
from engine.catalog.schema import Layout, SegmentState
from engine.format.builder import encode_batch
from engine.log.roll_rule import RollPolicy
from engine.log.segment_writer import Append, SegmentWriter
from engine.log.summary import summarize_segment
from engine.log.topic_config import TopicConfig
from engine.names import TopicPartition
from engine.ops.catalog_table import Catalog
from engine.ops.lease import acquire_lease
from engine.ops.versions import segment_row
from layouts.object_layout import new_segment_id, object_segment_keys, put_segment_objects
from layouts.store import StorageOptions, filesystem
from layouts.store.bound import Store

HOUR = 3_600_000
DAY = 24 * HOUR


def seed(root: str, catalog_uri: str, topic: str, partitions: int, days: int, t0: int) -> dict:
    """Segments like a broker with `segment.ms` = 1 day would have rolled them, catalogued in one commit."""
    options = StorageOptions.from_env()
    bucket = root.removeprefix("s3://").split("/", 1)[0]
    fs, _ = filesystem(f"s3://{bucket}", options)
    if not fs.exists(bucket):
        fs.call_s3("create_bucket", Bucket=bucket)
    catalog = Catalog.create(Store(catalog_uri, options))
    rows = []
    for partition in range(partitions):
        tp = TopicPartition(topic, partition)
        writer = SegmentWriter(RollPolicy(TopicConfig(segment_ms=DAY - 1)), min_timestamp=0)
        for hour in range(days * 24):
            ts = t0 + hour * HOUR
            data = encode_batch([b"k%d" % hour], [b"v%d" % hour], [ts], base_offset=hour)
            writer.append(Append(data, hour, hour, ts, hour), now_ms=t0)
        segments = [*writer.closed, writer.active.close(None)]
        for i, seg in enumerate(segments):
            segment_id = new_segment_id()
            keys = object_segment_keys(root, tp, seg.base_offset, segment_id)
            put_segment_objects(keys, seg.log, seg.index, seg.timeindex, options)
            state = SegmentState.ACTIVE if i == len(segments) - 1 else SegmentState.ROLLED
            rows.append(segment_row(tp, segment_id, keys, Layout.OBJECT, summarize_segment(seg.log, seg.base_offset,
                                                                                           min_timestamp=0),
                                    state, "airflow-test-seed", created_at_ms=t0,
                                    index_size_bytes=len(seg.index), timeindex_size_bytes=len(seg.timeindex)))
    catalog.apply(CatalogChange(add=tuple(rows)), operation="seed")
    return {"segments": len(rows)}


def state(catalog_uri: str, topic: str) -> dict:
    catalog = Catalog.open(Store(catalog_uri, StorageOptions.from_env()))
    out = {}
    for tp in catalog.partitions():
        if tp.topic != topic:
            continue
        live = catalog.live_segments(tp.topic, tp.partition)
        out[str(tp.partition)] = {
            "base_offsets": [r.base_offset for r in live],
            "log_start_offset": live[0].base_offset if live else None,
            "log_end_offset": live[-1].next_offset if live else None,
        }
    return out


def hold_lease(root: str, topic: str, partition: int) -> dict:
    lease = acquire_lease(Store(root, StorageOptions.from_env()), TopicPartition(topic, partition), owner="another-job", job_id="another-job", ttl_ms=HOUR)
    return {"lease": lease.uri}


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "seed":
        root, catalog_uri, topic, partitions, days, t0 = args
        result = seed(root, catalog_uri, topic, int(partitions), int(days), int(t0))
    elif command == "state":
        result = state(*args)
    elif command == "hold-lease":
        root, topic, partition = args
        result = hold_lease(root, topic, int(partition))
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
