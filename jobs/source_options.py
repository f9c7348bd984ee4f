"""The options of `format("klake")`, batch and streaming: Spark's Kafka source options plus klake's own (issue 29).

One options dict serves `format("kafka")` and `format("klake")`: the same names mean the same thing (see the
README, "Replacing Spark's Kafka source", for every option of Spark's Kafka source and what klake does with it).
- klake's own: `root` (required), `catalog` (default `{root}/_catalog`), `endpoint` (an S3-compatible
  endpoint), `splitBytes`, `packBytes` (how the read is cut into tasks, `engine.ops.read`).
- Kafka's, applied: `subscribe`, `subscribePattern`, `assign` (exactly one), `startingOffsets`,
  `startingTimestamp`, `startingOffsetsByTimestamp`, `startingOffsetsByTimestampStrategy`, `endingOffsets`
  (batch), `failOnDataLoss`, `maxOffsetsPerTrigger` (streaming), `includeHeaders`, `kafka.isolation.level`.
- Kafka's, accepted and ignored: everything that tells Spark how to reach and poll a cluster, which an
  archive does not have (`kafka.bootstrap.servers` and every other `kafka.*` consumer setting, `groupIdPrefix`,
  `kafkaConsumer.pollTimeoutMs`, `fetchOffset.*`) and the task-count hints `minPartitions` and
  `maxRecordsPerPartition` (klake cuts tasks by log bytes, `splitBytes`/`packBytes`).
- Kafka's, refused as Spark's Kafka source refuses them: `kafka.auto.offset.reset`, `kafka.key.deserializer`,
  `kafka.value.deserializer`, `kafka.enable.auto.commit`, `kafka.interceptor.classes`.
- Not yet: `minOffsetsPerTrigger`, `maxTriggerDelay`, `endingTimestamp`/`endingOffsetsByTimestamp` on Kafka's
  offset semantics.
Any other option is an error naming it (Spark's Kafka source ignores unknown options silently; a typo here
would read the wrong records).

Offsets JSON is Spark's Kafka source's: `{"topic": {"0": 23, "1": -2}}`, -2 earliest, -1 latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from engine.errors import ConfigError
from engine.ops.read import IsolationLevel
from engine.times import InvalidTimeError, parse_time
from layouts.store import join, normalize_uri

EARLIEST = -2
LATEST = -1
KAFKA_SCHEMA = ("key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
                "timestampType int, headers array<struct<key:string,value:binary>>")
"""Spark's Kafka source's columns, the rows of `format("klake")` and of the `read` job. Here, with the options,
rather than in `jobs.read`: the Python process Spark starts per streaming query imports the source's modules
before its first offset, and the `read` job's imports (config, job runner) cost it half a second."""
Mode = Literal["batch", "stream"]

KLAKE_OPTIONS = {"root", "catalog", "endpoint", "splitbytes", "packbytes"}
KAFKA_APPLIED = {"subscribe", "subscribepattern", "assign", "startingoffsets", "startingtimestamp",
                 "startingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "endingoffsets",
                 "failondataloss", "maxoffsetspertrigger", "includeheaders", "kafka.isolation.level"}
KAFKA_IGNORED = {"groupidprefix", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries",
                 "fetchoffset.retryintervalms", "minpartitions", "maxrecordsperpartition"}
KAFKA_REFUSED = {"kafka.auto.offset.reset": "set startingOffsets instead",
                 "kafka.key.deserializer": "keys are always bytes", "kafka.value.deserializer": "values are always bytes",
                 "kafka.enable.auto.commit": "the source commits no offset to Kafka",
                 "kafka.interceptor.classes": "records are always read as bytes"}
NOT_YET = {"minoffsetspertrigger", "maxtriggerdelay", "endingoffsetsbytimestamp", "endingtimestamp"}
BATCH_ONLY = {"endingoffsets"}
STREAM_ONLY = {"maxoffsetspertrigger"}


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions are read: `subscribe` (topics), `subscribePattern` (a regex every topic name
    must match whole, as Java's `Pattern.matches`) or `assign` (topic -> partitions)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: Mapping[str, tuple[int, ...]] | None = None

    def select(self, available: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """The subscribed topic-partitions among `available` (the archive's); `assign`ed ones absent from the
        archive are kept (Kafka's source assigns them as given and fails on them; here they read as empty)."""
        pairs = sorted(set(available))
        if self.assigned is not None:
            return sorted({(t, p) for t, ps in self.assigned.items() for p in ps})
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            return [(t, p) for t, p in pairs if regex.fullmatch(t)]
        return [(t, p) for t, p in pairs if t in self.topics]

    @property
    def fixed_topics(self) -> tuple[str, ...] | None:
        """The topics named outright (`subscribe`, `assign`), or None for a pattern."""
        if self.pattern is not None:
            return None
        return tuple(self.assigned) if self.assigned is not None else self.topics


@dataclass(frozen=True)
class Starting:
    """Where a query starts: `offsets` per topic-partition (EARLIEST/LATEST or an offset), `default` for the
    rest; or timestamps (`timestamp` for every partition, `by_timestamp` per partition) looked up as Kafka's
    ListOffsets, with `strategy` ("error" or "latest") where no record is at or after the time."""

    default: int = EARLIEST
    offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    timestamp: int | None = None
    by_timestamp: Mapping[str, Mapping[int, int]] | None = None
    strategy: str = "error"


@dataclass(frozen=True)
class SourceOptions:
    """Parsed options; `extra` keeps the klake batch reader's own range options (`jobs.klake_source`)."""

    root: str
    catalog: str
    endpoint: str | None
    subscription: Subscription
    starting: Starting
    ending: Mapping[str, Mapping[int, int]] | None
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    include_headers: bool
    isolation_level: IsolationLevel
    split_bytes: int | None
    pack_bytes: int | None
    extra: Mapping[str, str] = field(default_factory=dict)


def parse_options(options: Mapping[str, str], mode: Mode, extra_names: Iterable[str] = ()) -> SourceOptions:
    """Check and parse `options` (names case-insensitive, as Spark's) for a batch or streaming read;
    `extra_names` are further options the caller handles itself (kept in `extra`)."""
    given = {k.lower(): v for k, v in options.items()}
    extra = {name.lower() for name in extra_names}
    for name in given:
        _check_name(name, mode, extra)
    root = _required(given, "root")
    subscription = _subscription(given, topic_option="topic" in extra)
    return SourceOptions(
        root=normalize_uri(root), catalog=normalize_uri(given.get("catalog") or join(normalize_uri(root), "_catalog")),
        endpoint=given.get("endpoint") or None, subscription=subscription,
        starting=_starting(given, mode), ending=_ending(given), fail_on_data_loss=_bool(given, "failondataloss", True),
        max_offsets_per_trigger=_positive(given, "maxoffsetspertrigger"),
        include_headers=include_headers(given), isolation_level=isolation_level(given),
        split_bytes=_positive(given, "splitbytes"), pack_bytes=_positive(given, "packbytes"),
        extra={k: v for k, v in given.items() if k in extra})


def include_headers(options: Mapping[str, str]) -> bool:
    """`includeHeaders` (default false, as Spark's Kafka source): whether rows have the `headers` column; the
    data source's schema asks this before any reader parses the rest."""
    return _bool({k.lower(): v for k, v in options.items()}, "includeheaders", False)


def isolation_level(options: Mapping[str, str]) -> IsolationLevel:
    """`kafka.isolation.level` (Kafka's consumer setting, default read_uncommitted as Kafka's)."""
    level = options.get("kafka.isolation.level", IsolationLevel.READ_UNCOMMITTED)
    try:
        return IsolationLevel(level)
    except ValueError:
        raise ConfigError(f"klake data source: option 'kafka.isolation.level' must be one of "
                          f"{', '.join(IsolationLevel)}, got {level!r}") from None


def _check_name(name: str, mode: Mode, extra: set[str]) -> None:
    def fail(why: str) -> None:
        raise ConfigError(f"klake data source: option {name!r} {why}")

    if name in extra or name in KLAKE_OPTIONS or name in KAFKA_IGNORED:
        return
    if name in KAFKA_REFUSED:
        fail(f"is not supported, as by Spark's Kafka source: {KAFKA_REFUSED[name]}")
    if name in NOT_YET:
        fail("is not supported yet (see README, Replacing Spark's Kafka source)")
    if name in KAFKA_APPLIED:
        if mode == "stream" and name in BATCH_ONLY:
            fail("is for batch queries only (as in Spark's Kafka source)")
        if mode == "batch" and name in STREAM_ONLY:
            fail("is for streaming queries only")
        return
    if name.startswith("kafka."):
        return  # a Kafka consumer setting: how to reach a cluster, which an archive does not need
    fail("is unknown (see README, Replacing Spark's Kafka source)")


def _required(given: Mapping[str, str], name: str) -> str:
    if not given.get(name):
        raise ConfigError(f"klake data source: option {name!r} is required")
    return given[name]


def _subscription(given: Mapping[str, str], topic_option: bool) -> Subscription:
    chosen = [name for name in ("subscribe", "subscribepattern", "assign") if given.get(name)]
    if topic_option and given.get("topic"):
        chosen.append("topic")
    if len(chosen) != 1:
        names = "'subscribe', 'subscribePattern' or 'assign'" + (" (or 'topic')" if topic_option else "")
        raise ConfigError(f"klake data source: exactly one of {names} is required, got {len(chosen)}"
                          + (f" ({', '.join(chosen)})" if chosen else ""))
    name = chosen[0]
    text = given[name]
    if name in ("subscribe", "topic"):
        topics = tuple(t.strip() for t in text.split(",") if t.strip())
        if not topics:
            raise ConfigError(f"klake data source: option {name!r} names no topic")
        return Subscription(topics=topics)
    if name == "subscribepattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise ConfigError(f"klake data source: option 'subscribePattern': {exc}") from None
        return Subscription(pattern=text)
    parsed = _json(name, text)
    if not isinstance(parsed, dict) or not all(isinstance(v, list) and all(_is_int(p) for p in v)
                                               for v in parsed.values()):
        raise ConfigError(f"klake data source: option 'assign' must be JSON like {{\"topicA\":[0,1]}}, got {text!r}")
    return Subscription(assigned={t: tuple(sorted(ps)) for t, ps in parsed.items()})


def _starting(given: Mapping[str, str], mode: Mode) -> Starting:
    strategy = given.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(f"klake data source: option 'startingOffsetsByTimestampStrategy' must be error or "
                          f"latest, got {strategy!r}")
    if given.get("startingtimestamp"):
        return Starting(timestamp=_time(given, "startingtimestamp"), strategy=strategy)
    if given.get("startingoffsetsbytimestamp"):
        return Starting(by_timestamp=_offsets_json(given, "startingoffsetsbytimestamp", times=True), strategy=strategy)
    text = given.get("startingoffsets", "latest" if mode == "stream" else "earliest").strip()
    if text.lower() in ("earliest", "latest"):
        if mode == "batch" and text.lower() == "latest":
            raise ConfigError("klake data source: option 'startingOffsets' latest is for streaming queries only "
                              "(as in Spark's Kafka source)")
        return Starting(default=EARLIEST if text.lower() == "earliest" else LATEST)
    offsets = _offsets_json(given, "startingoffsets")
    if mode == "batch" and any(o == LATEST for ps in offsets.values() for o in ps.values()):
        raise ConfigError("klake data source: option 'startingOffsets' -1 (latest) is for streaming queries only")
    return Starting(offsets=offsets)


def _ending(given: Mapping[str, str]) -> Mapping[str, Mapping[int, int]] | None:
    text = given.get("endingoffsets", "").strip()
    if text.lower() in ("", "latest"):
        return None
    offsets = _offsets_json(given, "endingoffsets")
    if any(o == EARLIEST for ps in offsets.values() for o in ps.values()):
        raise ConfigError("klake data source: option 'endingOffsets' cannot hold -2 (earliest), as in Spark's "
                          "Kafka source")
    return offsets


def _offsets_json(given: Mapping[str, str], name: str, times: bool = False) -> dict[str, dict[int, int]]:
    """`{"topic": {"0": 23}}` as {topic: {partition: value}}; offsets are >= 0 or -2/-1, times any int."""
    parsed = _json(name, given[name])
    shape = 'JSON like {"topicA":{"0":23,"1":-2}}'
    if not isinstance(parsed, dict) or not all(isinstance(ps, dict) for ps in parsed.values()):
        raise ConfigError(f"klake data source: option {name!r} must be {shape}, got {given[name]!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        for p, value in partitions.items():
            if not (str(p).lstrip("-").isdigit() and _is_int(value)) or (not times and value < EARLIEST):
                raise ConfigError(f"klake data source: option {name!r}: {topic} partition {p!r}: "
                                  f"bad value {value!r} ({shape})")
            out.setdefault(topic, {})[int(p)] = value
    return out


def _json(name: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"klake data source: option {name!r} is not JSON ({exc}): {text!r}") from None


def _time(given: Mapping[str, str], name: str) -> int:
    try:
        return parse_time(given[name])
    except InvalidTimeError as exc:
        raise ConfigError(f"klake data source: option {name!r}: {exc}") from None


def _bool(given: Mapping[str, str], name: str, default: bool) -> bool:
    text = given.get(name)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise ConfigError(f"klake data source: option {name!r} must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _positive(given: Mapping[str, str], name: str) -> int | None:
    text = given.get(name)
    if text in (None, ""):
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"klake data source: option {name!r} must be a positive integer, got {text!r}")
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
