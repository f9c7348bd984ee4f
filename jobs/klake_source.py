"""`spark.read.format("klake")`: a topic's records as a Spark Python data source, with Spark's Kafka source schema
(`spark.readStream.format("klake")` is `jobs.klake_stream`'s).

    from jobs.klake_source import register
    register(spark)
    df = (spark.read.format("klake").option("root", "s3://bucket/logs").option("subscribe", "orders").load()
          .where("timestamp >= '2026-11-21 10:00:00' AND timestamp < '2026-11-21 11:00:00' AND partition = 3"))

Options (`jobs.source_options`): Spark's Kafka source's (`subscribe`, `subscribePattern` or `assign`;
`startingOffsets`, `startingTimestamp`, `startingOffsetsByTimestamp`, `endingOffsets`, `failOnDataLoss`,
`includeHeaders`, ...), meaning what they mean there (offsets per partition, `jobs.source_offsets`), plus
klake's `root` (required), `catalog` (default `{root}/_catalog`), `endpoint` (an S3-compatible endpoint),
`splitBytes`, `packBytes` (log bytes per task from small segments, default 256 MiB). klake's own range options
of before, kept for existing readers, go with `topic` (one topic, instead of `subscribe`): `startingTimestamp` /
`endingTimestamp` (a record-time range: epoch ms or ISO-8601; inclusive / exclusive), `startingOffset` /
`endingOffset` (inclusive / exclusive, every partition), `partitions` ("0,3"). Credentials are never options:
`register` binds the driver's storage settings (AWS_* and KLAKE_S3_ENDPOINT_URL from its environment) into the
registered class, so the Python workers that plan and read need no environment of their own. Range semantics,
pruning, seeking, splitting and packing are the `read` job's (`engine.ops.read`): one Spark partition per pack.

Filter pushdown (`register` turns on `spark.sql.python.filterPushdown.enabled`, which Spark requires
of any source that implements it, so registering the class yourself needs it too): comparisons and
equality on `offset` and `timestamp`, comparisons, equality and IN on `partition`, equality and IN on
`topic`, IS NOT NULL on those; every handled filter is applied exactly by the reader. A timestamp
filter is handled only when the read is bounded in time from the topic's smallest timestamp on (an
option, or a lower bound >= 0, or >= KIP-228's minimum on a topic with `klake.timestamps.allow.negative`):
a time range here never matches timestamps below that floor (records without a timestamp, -1, on other
topics), whereas Spark's `timestamp < t` alone would. Anything else goes back to Spark, which applies it after the scan.

Spark 4.2.0 caveat: it keeps the planned read (partitions and reader state) of a pushed-down query on
the relation that `load()` made, and a later query on that same DataFrame without pushable filters
reuses it, so it would see only the earlier query's rows (Spark's own Python data source
limitation; upstream's `PythonScanBuilder` now scopes the read to each scan). Call `load()` once per
query, as the tests do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from engine.log.topic_config import KAFKA_MIN_TIMESTAMP, min_timestamp
from engine.ops.catalog_table import Catalog
from engine.ops.read import (
    DEFAULT_PACK_BYTES,
    DEFAULT_SPLIT_BYTES,
    ReadRange,
    WorkItem,
    pack_items,
)
from engine.ops.topic_store import load_topic_config
from jobs.klake_stream import KlakeStreamReader, records
from jobs.source_offsets import (
    checked_ranges,
    ending_offsets,
    extents_of,
    plan_ranges,
    starting_offsets,
    subscribed_partitions,
)
from jobs.source_options import KAFKA_SCHEMA, include_headers, parse_options
from kernel.errors import ConfigError, KlakeError
from kernel.times import EPOCH, InvalidTimeError, parse_time
from layouts.store import StorageOptions
from layouts.store.bound import Store

NAME = "klake"
_NEVER_NULL = {"topic", "partition", "offset", "timestamp", "timestampType"}
_COMPARISONS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo)


class KlakeDataSource(DataSource):
    """The "klake" source; `storage` is bound by `register` (None: the worker's environment)."""

    storage: StorageOptions | None = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return KAFKA_SCHEMA if include_headers(self.options) else KAFKA_SCHEMA.rsplit(", headers", 1)[0]

    def reader(self, schema: StructType) -> DataSourceReader:
        return KlakeReader(dict(self.options), self.storage)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        options = parse_options(self.options, "stream")
        return KlakeStreamReader(options, _with_endpoint(self.storage or StorageOptions.from_env(), options.endpoint))


def _with_endpoint(storage: StorageOptions, endpoint: str | None) -> StorageOptions:
    return replace(storage, endpoint_url=endpoint) if endpoint else storage


def register(spark: Any, storage: StorageOptions | None = None) -> None:
    """Register "klake" bound to `storage` (default: the driver's environment) and enable filter pushdown.

    The bound class is created here, so cloudpickle ships it (with its storage settings) by value. On a
    local master, a worker Python that cannot import klake is one error line saying what to set, here,
    rather than `No module named 'pyarrow'` from deep inside the first query.
    """
    problem = worker_python_problem(spark)
    if problem:
        raise KlakeError(problem)
    bound = type("BoundKlakeDataSource", (KlakeDataSource,), {"storage": storage or StorageOptions.from_env()})
    spark.dataSource.register(bound)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def worker_python_problem(spark: Any) -> str | None:
    """Why Spark's local Python workers cannot run klake's reader, or None.

    They run `spark.pyspark.python`, else PYSPARK_PYTHON as it was when the session started, else the
    first `python3` on PATH (Spark's rule), which is not this virtualenv's unless it is on PATH. A remote
    master's executors are not this machine's, so only a local master is checked (one `python -c`)."""
    if not str(spark.sparkContext.master).startswith("local"):
        return None
    configured = spark.conf.get("spark.pyspark.python", None) or spark.sparkContext.pythonExec
    found = shutil.which(configured)
    if found and os.path.abspath(found) == os.path.abspath(sys.executable):
        return None
    probe = "import pyarrow, engine.format.compiled, jobs.klake_source"
    if found and subprocess.run([found, "-c", probe], capture_output=True, timeout=120).returncode == 0:
        return None
    return (f"Spark's Python workers run {configured!r} ({found or 'not found'}), which cannot import klake: "
            f"set PYSPARK_PYTHON={sys.executable} before the Spark session starts (or build the session with "
            f".config('spark.pyspark.python', {sys.executable!r}))")


class KlakeInputPartition(InputPartition):
    """A pack of work items (`engine.ops.read.pack_items`) read by one task."""

    def __init__(self, items: list[WorkItem]) -> None:
        super().__init__(items)


@dataclass
class Pushdown:
    """What the handled filters require, as bounds the planner understands."""

    from_ms: int | None = None
    to_ms: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    partition_tests: list[tuple[str, Any]] = field(default_factory=list)
    topics: set[str] | None = None

    def narrow(self, name: str, low: int | None, high: int | None) -> None:
        """AND a [low, high) bound into the `from_`/`to_` fields named by `name` ("ms" or "offset")."""
        if low is not None:
            current = getattr(self, f"from_{name}")
            setattr(self, f"from_{name}", low if current is None else max(current, low))
        if high is not None:
            current = getattr(self, f"to_{name}")
            setattr(self, f"to_{name}", high if current is None else min(current, high))


LEGACY_OPTIONS = ("topic", "partitions", "startingOffset", "endingOffset", "endingTimestamp")
"""klake's own range options, read with `topic` (and `startingTimestamp`, there a record-time bound too)."""


class KlakeReader(DataSourceReader):
    """Resolves each partition's offset range as Spark's Kafka source (`jobs.source_offsets`), narrows it by
    klake's range options and the pushed-down filters, plans with `engine.ops.read.plan_read` (one input
    partition per pack of work items, `pack_items`) and reads with `read_item`."""

    def __init__(self, options: dict[str, str], storage: StorageOptions | None) -> None:
        self.source = parse_options(options, "batch", LEGACY_OPTIONS)
        self.options = {k.lower(): v for k, v in options.items()}
        self.legacy = "topic" in self.source.extra
        misplaced = [name for name in ("partitions", "startingoffset", "endingoffset", "endingtimestamp")
                     if name in self.options and not self.legacy]
        if misplaced:
            raise ConfigError(f"klake data source: option {misplaced[0]!r} is klake's own and goes with 'topic'; "
                              "with subscribe, subscribePattern or assign use Kafka's startingOffsets/endingOffsets")
        kafkas = [name for name in ("startingoffsets", "startingoffsetsbytimestamp", "endingoffsets")
                  if name in self.options and self.legacy]
        if kafkas:
            raise ConfigError(f"klake data source: option {kafkas[0]!r} is Kafka's and goes with subscribe, "
                              "subscribePattern or assign; with 'topic' use startingOffset/endingOffset")
        self.store = Store(self.source.root, _with_endpoint(storage or StorageOptions.from_env(), self.source.endpoint))
        topics = self.source.subscription.fixed_topics
        if topics is None:
            catalog = Catalog.open(self.store.at(self.source.catalog))
            listed = ((tp.topic, tp.partition) for tp in catalog.partitions())
            topics = tuple(sorted({t for t, _ in self.source.subscription.select(listed)}))
        self.configs = {t: load_topic_config(self.store, t) for t in topics}
        floor = max((min_timestamp(c) for c in self.configs.values()), default=KAFKA_MIN_TIMESTAMP)
        self.range = ReadRange(self._time("startingtimestamp") if self.legacy else None, self._time("endingtimestamp"),
                               self._int("startingoffset"), self._int("endingoffset"), floor=floor)
        listed = self.options.get("partitions")
        self.partition_tests: list[tuple[str, Any]] = (
            [("in", tuple(int(p) for p in listed.split(",") if p.strip()))] if listed else [])
        self.split_bytes = self.source.split_bytes or DEFAULT_SPLIT_BYTES
        self.pack_bytes = self.source.pack_bytes or DEFAULT_PACK_BYTES
        self.topics: set[str] | None = None
        self.include_headers = self.source.include_headers

    def _int(self, name: str) -> int | None:
        text = self.options.get(name)
        try:
            return None if text in (None, "") else int(text)
        except ValueError:
            raise ConfigError(f"klake data source: option {name!r} must be an integer, got {text!r}") from None

    def _time(self, name: str) -> int | None:
        text = self.options.get(name)
        if text in (None, ""):
            return None
        try:
            return parse_time(text)
        except InvalidTimeError as exc:
            raise ConfigError(f"klake data source: option {name!r}: {exc}") from None

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:  # noqa: N802 - Spark's name
        """Keep what can be applied exactly; return the rest to Spark."""
        wanted = Pushdown()
        timed: list[Filter] = []
        rest = [item for item in filters if not _take(item, wanted, timed)]
        time_ok = self.range.lowest_timestamp is not None or (wanted.from_ms is not None
                                                              and wanted.from_ms >= self.range.floor)
        if timed and not time_ok:
            rest += timed
            wanted.from_ms = wanted.to_ms = None
        self._apply(wanted)
        return rest

    def _apply(self, wanted: Pushdown) -> None:
        r = self.range
        lower_ms = None if wanted.from_ms is None else max(wanted.from_ms, r.floor)
        upper_ms = None if wanted.to_ms is None else max(wanted.to_ms, r.floor)
        merged = Pushdown(r.from_ms, r.to_ms, r.from_offset, r.to_offset)
        merged.narrow("ms", lower_ms, upper_ms)
        merged.narrow("offset", None if wanted.from_offset is None else max(wanted.from_offset, 0),
                      None if wanted.to_offset is None else max(wanted.to_offset, 0))
        self.range = ReadRange(merged.from_ms, merged.to_ms, merged.from_offset, merged.to_offset,
                               floor=r.floor)
        self.partition_tests += wanted.partition_tests
        self.topics = wanted.topics

    def partitions(self) -> Sequence[InputPartition]:
        """Kafka's offsets per partition (start: `startingOffsets`/`startingTimestamp`/`startingOffsetsByTimestamp`,
        or earliest with `topic`; end: `endingOffsets`, default latest) with the data-loss rule, then only the
        partitions and topics the filters keep, within `self.range`."""
        catalog = Catalog.open(self.store.at(self.source.catalog))
        seen = subscribed_partitions(catalog, self.source, self.store, self.configs)
        extents = extents_of(seen)
        start = ({tp: e.log_start for tp, e in extents.items()} if self.legacy
                 else starting_offsets(seen, self.source, self.store, dict(self.configs)))
        ranges = checked_ranges(start, ending_offsets(extents, self.source), extents, self.source.fail_on_data_loss)
        tests = list(self.partition_tests)
        kept = {tp: r for tp, r in ranges.items() if (self.topics is None or tp[0] in self.topics)
                and all(_partition_ok(tp[1], op, v) for op, v in tests)}
        configs = {t: self.configs.get(t) or load_topic_config(self.store, t) for t, _ in kept}
        items = plan_ranges(catalog, kept, self.store, configs, self.split_bytes, self.source.isolation_level,
                            narrow=self.range)
        return [KlakeInputPartition(pack) for pack in pack_items(items, self.pack_bytes, os.cpu_count() or 1)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return records(partition.value or [], self.store, self.include_headers)


def _take(item: Filter, wanted: Pushdown, timed: list[Filter]) -> bool:
    """Record `item` in `wanted` if it can be applied exactly (timestamp filters also go to `timed`)."""
    if isinstance(item, IsNotNull):
        return item.attribute in {(name,) for name in _NEVER_NULL}
    column = item.attribute[0] if len(getattr(item, "attribute", ())) == 1 else None
    if column == "topic" and isinstance(item, EqualTo | In):
        values = set(item.value) if isinstance(item, In) else {item.value}
        wanted.topics = values if wanted.topics is None else wanted.topics & values
        return True
    if column == "partition":
        return _take_partition(item, wanted)
    if column == "offset" and isinstance(item, _COMPARISONS) and _is_int(item.value):
        wanted.narrow("offset", *_int_bounds(item, item.value))
        return True
    if column == "timestamp" and isinstance(item, _COMPARISONS) and isinstance(item.value, datetime) \
            and item.value.tzinfo is not None:
        wanted.narrow("ms", *_millis_bounds(item, (item.value - EPOCH) // timedelta(microseconds=1)))
        timed.append(item)
        return True
    return False


def _take_partition(item: Filter, wanted: Pushdown) -> bool:
    if isinstance(item, In) and all(_is_int(v) for v in item.value):
        wanted.partition_tests.append(("in", tuple(item.value)))
        return True
    if isinstance(item, _COMPARISONS) and _is_int(item.value):
        wanted.partition_tests.append((type(item).__name__, item.value))
        return True
    return False


def _partition_ok(partition: int, op: str, value: Any) -> bool:
    return {"in": lambda: partition in value, "EqualTo": lambda: partition == value,
            "GreaterThan": lambda: partition > value, "GreaterThanOrEqual": lambda: partition >= value,
            "LessThan": lambda: partition < value, "LessThanOrEqual": lambda: partition <= value}[op]()


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_bounds(item: Filter, v: int) -> tuple[int | None, int | None]:
    """[low, high) over integers for a comparison with `v`."""
    return {GreaterThan: (v + 1, None), GreaterThanOrEqual: (v, None), LessThan: (None, v),
            LessThanOrEqual: (None, v + 1), EqualTo: (v, v + 1)}[type(item)]


def _millis_bounds(item: Filter, micros: int) -> tuple[int | None, int | None]:
    """[low, high) over millisecond timestamps for a comparison of `timestamp` (µs) with `micros`:
    ms * 1000 >= x  <=>  ms >= ceil(x / 1000), and ms * 1000 <= x  <=>  ms < floor(x / 1000) + 1."""
    floor, ceil = micros // 1000, -(-micros // 1000)
    return {GreaterThan: (floor + 1, None), GreaterThanOrEqual: (ceil, None), LessThan: (None, ceil),
            LessThanOrEqual: (None, floor + 1), EqualTo: (ceil, floor + 1)}[type(item)]
