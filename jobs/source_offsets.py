"""Offsets per topic-partition for `format("klake")`, batch and streaming, as Spark's Kafka source reckons them
(issue 29): the subscribed partitions and their live offsets in the archive, where a query starts
(`startingOffsets`, `startingTimestamp`, `startingOffsetsByTimestamp`) and ends (`endingOffsets`), the data-loss
rule (`failOnDataLoss`), `maxOffsetsPerTrigger`'s split, and the work items that read exactly those ranges.

- the latest offset of a partition is the archive's log end offset (its last live segment's next offset), or
  with `kafka.isolation.level=read_committed` its last stable offset (the first offset of a transaction still
  open, as a read_committed consumer's end offsets), the earliest its log start offset; a partition not yet seen by a running query starts at earliest (Kafka's);
- data loss: when retention or truncation moved a partition's log start offset past the next offset to read,
  its end below it, or a partition is gone from the archive, `failOnDataLoss=true` (the default) fails the
  read naming the partition and offsets; `false` logs a warning and reads from the log start offset on. The
  check is made when the read is planned (a segment deleted between planning and reading reads as a gap).
Checkpoint JSON is Spark's Kafka source's: `{"topic": {"0": 23}}`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal

from engine.catalog.schema import SegmentRow, partition_log_start_offset, table_to_rows
from engine.log.lookup import list_offsets
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog
from engine.ops.read import IsolationLevel, ReadRange, WorkItem, plan_read, transactions_by_partition
from engine.ops.stored_segment import stored_segment
from engine.ops.topic_store import load_topic_config
from jobs.source_options import EARLIEST, LATEST, SourceOptions
from kernel.errors import ConfigError, KlakeError
from layouts.store.bound import Store

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


class DataLossError(KlakeError):
    """Records a query had still to read are gone from the archive (`failOnDataLoss`)."""


@dataclass(frozen=True)
class PartitionExtent:
    """A partition's live offsets in the archive: [log_start, log_end)."""

    log_start: int
    log_end: int


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    """Offsets as Spark's Kafka source writes them to the checkpoint: {"topic": {"0": 23}}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def from_json(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    """The checkpoint's JSON (`to_json`) back as offsets per topic-partition."""
    return {(topic, int(p)): int(o) for topic, partitions in offsets.items() for p, o in partitions.items()}


def rate_limit(start: Offsets, until: Offsets, extents: Mapping[TopicPartition, PartitionExtent],
               limit: int) -> Offsets:
    """At most about `limit` offsets in all, split over the partitions in proportion to what each has to read
    (a share below 1 rounded up, else down), as Spark's `KafkaMicroBatchStream.rateLimit`."""
    begins = {tp: start.get(tp, extents[tp].log_start if tp in extents else 0) for tp in until}
    sizes = {tp: end - begins[tp] for tp, end in until.items() if end - begins[tp] > 0}
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    out = {}
    for tp, end in until.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        out[tp] = min(end, begins[tp] + int(-(-share // 1) if share < 1 else share // 1))
    return out


def behind_latest(consumed: Offsets, latest: Offsets) -> dict[str, str]:
    """`minOffsetsBehindLatest`, `maxOffsetsBehindLatest`, `avgOffsetsBehindLatest` as Spark's Kafka source
    reports them (`KafkaMicroBatchStream.metrics`): over the partitions of the latest offsets, latest minus
    consumed (a partition not consumed yet counts from 0); strings as Scala prints a Long and a Double."""
    behind = [end - consumed.get(tp, 0) for tp, end in latest.items()]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": str(min(behind)), "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": _java_double(sum(behind) / len(behind))}


def _java_double(value: float) -> str:
    """`value` as Java's `Double.toString` writes it: the shortest digits that read back to it, plain from 1e-3
    to 1e7 ("12.5", "3.0"), else in computerized scientific notation ("1.25E7")."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{exponent + len(text) - 1}"


Subscribed = dict[TopicPartition, tuple[PartitionExtent, list[SegmentRow]]]
"""The subscribed partitions as one catalog snapshot shows them: each one's readable offsets and live segments."""


def subscribed_partitions(catalog: Catalog, options: SourceOptions, store: Store, configs: dict[str, TopicConfig],
                          *, readable_end: bool = True) -> Subscribed:
    """The subscribed partitions, their readable offsets (an assigned partition the archive lacks: [0, 0)) and
    live segments; `configs` caches the topics' settings. Without `readable_end` the end is the log end even
    under read_committed, for callers that need only the log starts (the data-loss check): the last stable
    offset costs a scan of every live segment's batch headers."""
    topics = options.subscription.fixed_topics
    rows = [r for t in (topics if topics is not None else [None]) for r in table_to_rows(catalog.segments(topic=t))]
    by_partition: dict[TopicPartition, list[SegmentRow]] = {}
    for row in rows:
        by_partition.setdefault((row.topic, row.partition), []).append(row)
    selected = options.subscription.select(by_partition)
    stable: dict[TopicPartition, int | None] = {}
    if readable_end and options.isolation_level == IsolationLevel.READ_COMMITTED:
        wanted: dict[str, list[int]] = {}
        for topic, partition in selected:
            if by_partition.get((topic, partition)):
                wanted.setdefault(topic, []).append(partition)
        for topic, partitions in wanted.items():  # a topic's partitions scanned in one pool of threads
            found = transactions_by_partition([r for p in partitions for r in by_partition[(topic, p)]], store,
                                              min_timestamp(_topic_config(configs, topic, store)), partitions)
            stable |= {(topic, p): txns.first_unstable_offset for p, txns in found.items()}
    out = {}
    for tp in selected:
        live = by_partition.get(tp, [])
        extent = PartitionExtent(partition_log_start_offset(live) or 0, live[-1].next_offset) if live \
            else PartitionExtent(0, 0)
        if stable.get(tp) is not None:
            extent = replace(extent, log_end=max(extent.log_start, min(extent.log_end, stable[tp])))
        out[tp] = (extent, live)
    return out


def extents_of(subscribed: Subscribed) -> dict[TopicPartition, PartitionExtent]:
    """The readable offsets of each subscribed partition."""
    return {tp: extent for tp, (extent, _) in subscribed.items()}


def latest_offsets(subscribed: Subscribed) -> Offsets:
    """The latest offset of each subscribed partition: its readable end (module docstring)."""
    return {tp: extent.log_end for tp, (extent, _) in subscribed.items()}


def archive_extents(catalog: Catalog, options: SourceOptions, store: Store,
                    configs: dict[str, TopicConfig], *, readable_end: bool = True
                    ) -> dict[TopicPartition, PartitionExtent]:
    """`subscribed_partitions`' offsets alone."""
    return extents_of(subscribed_partitions(catalog, options, store, configs, readable_end=readable_end))


def _topic_config(configs: dict[str, TopicConfig], topic: str, store: Store) -> TopicConfig:
    if topic not in configs:
        configs[topic] = load_topic_config(store, topic)
    return configs[topic]


def starting_offsets(subscribed: Subscribed, options: SourceOptions, store: Store,
                     configs: dict[str, TopicConfig]) -> Offsets:
    """Where a new query starts per partition of `subscribed`: `startingTimestamp`, else
    `startingOffsetsByTimestamp` (Kafka's ListOffsets by time, `engine.log.lookup.list_offsets`, with
    `startingOffsetsByTimestampStrategy`), else `startingOffsets` (-2 earliest, -1 latest); a JSON of offsets
    or times must name every subscribed partition."""
    starting = options.starting
    by_time = starting.timestamp is not None or starting.by_timestamp is not None
    named = starting.by_timestamp if starting.by_timestamp is not None else starting.offsets
    if (by_time and starting.timestamp is None) or named:
        wanted = {(t, p) for t, ps in named.items() for p in ps}
        if wanted != set(subscribed):
            option = "startingOffsetsByTimestamp" if by_time else "startingOffsets"
            raise ConfigError(f"klake data source: option {option!r} must name every subscribed partition "
                              f"(as Spark's Kafka source): it names {_names(wanted)}, the subscription is "
                              f"{_names(subscribed)}")
    out: Offsets = {}
    for (topic, partition), (extent, rows) in subscribed.items():
        if not by_time:
            wanted_offset = named.get(topic, {}).get(partition, starting.default)
            out[(topic, partition)] = {EARLIEST: extent.log_start, LATEST: extent.log_end}.get(wanted_offset,
                                                                                             wanted_offset)
            continue
        target = starting.timestamp if starting.timestamp is not None else named[topic][partition]
        config = _topic_config(configs, topic, store)
        try:
            answer = list_offsets([stored_segment(r, store, config) for r in rows], target, extent.log_start,
                                  min_timestamp=min_timestamp(config))
        except ValueError as exc:  # a time before the topic's earliest (list_offsets names it)
            raise ConfigError(f"klake data source: {topic}-{partition}: {exc}") from None
        if answer.found:
            out[(topic, partition)] = answer.offset
        elif starting.strategy == "latest":
            out[(topic, partition)] = extent.log_end
        else:
            raise ConfigError(f"klake data source: {topic}-{partition} holds no record at or after timestamp "
                              f"{target} (startingOffsetsByTimestampStrategy=error)")
    return out


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "nothing"


def checked_ranges(start: Offsets, end: Offsets, extents: Mapping[TopicPartition, PartitionExtent],
                   fail_on_data_loss: bool) -> dict[TopicPartition, tuple[int, int]]:
    """The [from, until) offsets a batch reads per partition, after the data-loss rule (module docstring):
    what is gone fails the batch, or is reported and skipped."""
    def lost(message: str) -> None:
        if fail_on_data_loss:
            raise DataLossError(f"klake data source: {message}; set failOnDataLoss=false to skip what is gone")
        log.warning("klake data source: %s; skipped (failOnDataLoss=false)", message)

    for tp in sorted(set(start) - set(end)):
        lost(f"{tp[0]}-{tp[1]} is gone from the archive (offsets from {start[tp]} on were still to read)")
    ranges = {}
    for tp, until in sorted(end.items()):
        extent = extents.get(tp, PartitionExtent(0, 0))
        begin = start.get(tp, extent.log_start)
        if until < begin:
            lost(f"{tp[0]}-{tp[1]}'s end moved back from offset {begin} to {until} (truncated)")
            continue
        if begin < extent.log_start and begin < until:
            lost(f"{tp[0]}-{tp[1]}: offsets {begin} to {min(extent.log_start, until) - 1} are gone (retention or "
                 f"truncation moved the log start offset to {extent.log_start})")
            begin = min(extent.log_start, until)
        if until > begin:
            ranges[tp] = (begin, until)
    return ranges


def plan_ranges(catalog: Catalog, ranges: Mapping[TopicPartition, tuple[int, int]], store: Store,
                configs: Mapping[str, TopicConfig], split_bytes: int, isolation: IsolationLevel,
                narrow: ReadRange | None = None) -> list[WorkItem]:
    """Work items reading exactly `ranges` (and within `narrow`, time and offset bounds for every partition: the
    batch source's pushed-down filters): one `plan_read` per topic over the union of its ranges, so the catalog
    prunes and large segments are seeked and split once; each item then narrowed to its own partition's range."""
    items: list[WorkItem] = []
    for topic in sorted({t for t, _ in ranges}):
        mine = {p: r for (t, p), r in ranges.items() if t == topic}
        lowest, highest = min(a for a, _ in mine.values()), max(b for _, b in mine.values())
        base = narrow or ReadRange(floor=min_timestamp(configs[topic]))
        union = replace(base, floor=min_timestamp(configs[topic]), from_offset=max(lowest, base.from_offset or 0),
                        to_offset=highest if base.to_offset is None else min(highest, base.to_offset))
        plan = plan_read(catalog, topic, union, store, mine.__contains__, split_bytes, isolation=isolation)
        for item in plan.items:
            begin, until = mine[item.row.partition]
            if item.row.next_offset <= begin or item.row.base_offset >= until:
                continue
            bounds = replace(item.bounds, from_offset=max(item.bounds.from_offset or 0, begin),
                             to_offset=min(until, item.bounds.to_offset or until))
            items.append(replace(item, bounds=bounds))
    return items


def ending_offsets(extents: Mapping[TopicPartition, PartitionExtent], options: SourceOptions) -> Offsets:
    """Where a batch read ends per partition (exclusive): `endingOffsets` (-1 latest), default latest; a JSON
    must name every subscribed partition, as Spark's Kafka source requires."""
    named = options.ending
    if named is None:
        return {tp: e.log_end for tp, e in extents.items()}
    wanted = {(t, p) for t, ps in named.items() for p in ps}
    if wanted != set(extents):
        raise ConfigError(f"klake data source: option 'endingOffsets' must name every subscribed partition (as "
                          f"Spark's Kafka source): it names {_names(wanted)}, the subscription is {_names(extents)}")
    return {tp: e.log_end if named[tp[0]][tp[1]] == LATEST else named[tp[0]][tp[1]] for tp, e in extents.items()}


