"""`spark.readStream.format("klake")`: a topic's records as a stream, read as Spark's Kafka source reads a cluster
(issue 29, item 2), through Spark 4.2's Python streaming data source API.

    from jobs.klake_source import register
    register(spark)
    (spark.readStream.format("klake").option("root", "s3://bucket/logs").option("subscribe", "orders")
     .option("startingOffsets", "earliest").load()
     .writeStream.trigger(availableNow=True).option("checkpointLocation", "s3://bucket/chk/orders")
     .toTable("orders_copy"))

Offsets are Spark's Kafka source's, per topic-partition, `{"orders": {"0": 23, "1": 17}}`: the next offset to
read, kept in the query's checkpoint, so a query restarted on its checkpoint resumes where its last committed
batch ended and an idempotent or transactional sink (Delta) receives each record exactly once.
`Trigger.AvailableNow` (`prepareForTriggerAvailableNow`) fixes the latest offsets when the run starts and reads
up to them, in batches of `maxOffsetsPerTrigger` if set. How offsets are found, the data-loss rule and the
planning are `jobs.source_offsets`'; options `jobs.source_options`'; the rows `engine.ops.read.read_item`'s, as
the batch source's.

Progress: each batch's `sources[].latestOffset` is the archive's latest offsets (`reportLatestOffset`, as Spark's
Kafka source). Spark's Kafka source also puts `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
`avgOffsetsBehindLatest` in `sources[].metrics` (`ReportsSourceMetrics.metrics`); Spark 4.2's Python streaming
API has no such hook (its source runner serves initial/latest/reported offsets, partitions, commit and
AvailableNow, nothing else; `PythonMicroBatchStream` does not implement `ReportsSourceMetrics`), so the metrics of
a Python source stay empty. `offsets_behind_latest` gives the same three figures from a progress's source entry.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from engine.log.topic_config import TopicConfig
from engine.ops.catalog_table import Catalog
from engine.ops.read import DEFAULT_PACK_BYTES, DEFAULT_SPLIT_BYTES, WorkItem, pack_items, read_item
from engine.ops.topic_store import load_topic_config
from jobs.source_offsets import (
    Offsets,
    Subscribed,
    archive_extents,
    behind_latest,
    checked_ranges,
    extents_of,
    from_json,
    latest_offsets,
    plan_ranges,
    rate_limit,
    starting_offsets,
    subscribed_partitions,
    to_json,
)
from jobs.source_options import SourceOptions
from layouts.store import StorageOptions
from layouts.store.bound import Store


class KlakeStreamPartition(InputPartition):
    """A pack of work items (`engine.ops.read.pack_items`) read by one task."""

    def __init__(self, items: list[WorkItem]) -> None:
        super().__init__(items)


class KlakeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark calls it on the driver (offsets, planning) in a process of its own per query, and pickles it to
    the tasks (`read`). It reads the catalog once per call at most, and not at all where this process has
    already read the answer: the starting offsets are found once per query (Spark asks twice), from the catalog
    read that fixed the AvailableNow target when there is one; under AvailableNow every `latestOffset` is that
    target, as Spark's Kafka source's `allDataForTriggerAvailableNow` (the run reads up to what was there when
    it started); `reportLatestOffset` is the latest offsets `latestOffset` found."""

    def __init__(self, options: SourceOptions, storage: StorageOptions) -> None:
        self.options = options
        self.store = Store(options.root, storage)
        self.configs: dict[str, TopicConfig] = {}
        self.seen: Subscribed | None = None
        self.initial: Offsets | None = None
        self.target: Offsets | None = None
        self.latest: Offsets | None = None

    def _catalog(self) -> Catalog:
        return Catalog.open(self.store.at(self.options.catalog))

    def _config(self, topic: str) -> TopicConfig:
        if topic not in self.configs:
            self.configs[topic] = load_topic_config(self.store, topic)
        return self.configs[topic]

    def _look(self) -> Subscribed:
        """The subscribed partitions as the catalog shows them now (one snapshot)."""
        self.seen = subscribed_partitions(self._catalog(), self.options, self.store, self.configs)
        return self.seen

    def initialOffset(self) -> dict:  # noqa: N802 - Spark's name
        if self.initial is None:
            seen = self._look() if self.seen is None else self.seen
            self.initial = starting_offsets(seen, self.options, self.store, self.configs)
        return to_json(self.initial)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        self.target = latest_offsets(self._look())

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's name
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802 - Spark's name
        seen = self.seen if self.target is not None and self.seen is not None else self._look()
        self.latest = until = self.target if self.target is not None else latest_offsets(seen)
        if isinstance(limit, ReadMaxRows):
            until = rate_limit(from_json(start), until, extents_of(seen), limit.max_rows)
        return to_json(until)

    def reportLatestOffset(self) -> dict:  # noqa: N802 - Spark's name
        """The latest offsets `latestOffset` found for this batch (Spark asks right after it)."""
        return to_json(latest_offsets(self._look()) if self.latest is None else self.latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        catalog = self._catalog()
        extents = archive_extents(catalog, self.options, self.store, self.configs, readable_end=False)
        ranges = checked_ranges(from_json(start), from_json(end), extents, self.options.fail_on_data_loss)
        configs = {t: self._config(t) for t, _ in ranges}
        items = plan_ranges(catalog, ranges, self.store, configs, self.options.split_bytes or DEFAULT_SPLIT_BYTES,
                            self.options.isolation_level)
        packs = pack_items(items, self.options.pack_bytes or DEFAULT_PACK_BYTES, os.cpu_count() or 1)
        return [KlakeStreamPartition(pack) for pack in packs]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return records(partition.value or [], self.store, self.options.include_headers)

    def commit(self, end: dict) -> None:
        """Nothing to release: the archive keeps no consumer state (the checkpoint holds the offsets)."""


def records(items: Sequence[WorkItem], store: Store, include_headers: bool
            ) -> Iterator[pa.RecordBatch]:
    """The rows of `items`, without the `headers` column unless `includeHeaders` (Spark's Kafka source's
    columns either way)."""
    for item in items:
        for batch in read_item(item, store):
            yield batch if include_headers else batch.drop_columns(["headers"])


def offsets_behind_latest(source: Mapping[str, object]) -> dict[str, str]:
    """Spark's Kafka source's progress metrics for one entry of a query progress's `sources` (a
    `StreamingQueryProgress.sources` item, or its JSON): how far the batch's end offsets are behind the
    reported latest offsets (`jobs.source_offsets.behind_latest`); empty before the first batch, as Kafka's."""
    def offsets(name: str) -> dict | None:
        value = source.get(name)
        return json.loads(value) if isinstance(value, str) else value  # type: ignore[return-value]

    consumed, latest = offsets("endOffset"), offsets("latestOffset")
    if not consumed or not latest:
        return {}
    return behind_latest(from_json(consumed), from_json(latest))
