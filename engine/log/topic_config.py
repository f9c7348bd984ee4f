"""Per-topic configuration with Kafka's names, defaults and validation (spec 11), plus klake's opt-ins.

Keys are Kafka's (`segment.bytes`, `retention.ms`, ...); `parse_setting` is each key's one validation,
and a bad value raises `ConfigError` naming the key. Defaults are Kafka 4.0's except where noted:
`segment.bytes` accepts values below 4.0's 1 MiB minimum (Kafka's pre-4.0 minimum of 14 bytes), so
small segments can be tested and back-filled.
Two klake-only settings, both off by default:
- `klake.timestamps.allow.negative` (KIP-228, never shipped in Kafka): every int64 is a valid
  timestamp, and "no timestamp" is kept distinct from -1 instead of being -1;
- `klake.log.append.time.monotonic`: LogAppendTime = max(last appended, now) (the KIP-32 draft rule;
  Kafka lets LogAppendTime go backwards with the broker clock).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES, DEFAULT_SEGMENT_INDEX_BYTES
from kernel.errors import ConfigError

LONG_MAX = 2**63 - 1
KAFKA_MIN_TIMESTAMP = 0
"""Kafka's lowest timestamp (-1 is its "none", spec 9): the floor of every topic, and of a broker's log."""
KIP228_MIN_TIMESTAMP = -(2**63) + 1
"""The lowest timestamp with klake.timestamps.allow.negative (KIP-228); -2**63 is then its "none"."""
CLEANUP_POLICIES = frozenset({"delete", "compact"})
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _int(minimum: int, maximum: int = LONG_MAX) -> Callable[[Any], int]:
    bounds = f">= {minimum}" if maximum == LONG_MAX else f"from {minimum} to {maximum}"

    def parse(value: Any) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError, OverflowError):
            number = None
        if (isinstance(value, bool) or number is None or (isinstance(value, float) and value != number)
                or not minimum <= number <= maximum):
            raise ConfigError(f"must be an integer {bounds}, got {value!r}")
        return number
    return parse


def _ratio(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0.0 <= number <= 1.0:
        raise ConfigError(f"must be a number from 0 to 1, got {value!r}")
    return number


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in options:
            raise ConfigError(f"must be one of {', '.join(options)}, got {value!r}")
        return value
    return parse


def _policy(value: Any) -> str:
    items = [v.strip() for v in (value if isinstance(value, list | tuple) else str(value).split(","))]
    if not items or any(v not in CLEANUP_POLICIES for v in items):
        raise ConfigError(f"must be delete, compact or both (comma separated), got {value!r}")
    return ",".join(sorted(set(items), key=["compact", "delete"].index))


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ConfigError(f"must be true or false, got {value!r}")


# key -> (attribute, parser)
_SETTINGS: dict[str, tuple[str, Callable[[Any], Any]]] = {  # defaults: the TopicConfig fields
    "segment.bytes": ("segment_bytes", _int(14, 2**31 - 1)),
    "segment.ms": ("segment_ms", _int(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _int(0)),
    "segment.index.bytes": ("segment_index_bytes", _int(12, 2**31 - 1)),
    "index.interval.bytes": ("index_interval_bytes", _int(0, 2**31 - 1)),
    "retention.ms": ("retention_ms", _int(-1)),
    "retention.bytes": ("retention_bytes", _int(-1)),
    "cleanup.policy": ("cleanup_policy", _policy),
    "compression.type": ("compression_type", _choice(COMPRESSION_TYPES)),
    "max.message.bytes": ("max_message_bytes", _int(0, 2**31 - 1)),
    "message.timestamp.type": ("message_timestamp_type", _choice(TIMESTAMP_TYPES)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _int(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _int(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "delete.retention.ms": ("delete_retention_ms", _int(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _int(1)),
    "klake.timestamps.allow.negative": ("allow_negative_timestamps", _bool),
    "klake.log.append.time.monotonic": ("monotonic_log_append_time", _bool),
}
KAFKA_KEYS = tuple(_SETTINGS)


def parse_setting(key: str, value: Any) -> Any:
    """The value of the Kafka-named topic setting `key`, or a `ConfigError` saying what is wrong with it
    (the caller names the key and where it was read): the one validation of each setting, used by
    `TopicConfig.from_mapping` and by the jobs' configuration file."""
    if key not in _SETTINGS:
        close = difflib.get_close_matches(str(key), _SETTINGS, n=1, cutoff=0.8)
        raise ConfigError("unknown topic setting" + (f" (did you mean {close[0]}?)" if close else ""))
    return _SETTINGS[key][1](value)


@dataclass(frozen=True)
class TopicConfig:
    segment_bytes: int = 1_073_741_824
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    compression_type: str = "producer"
    max_message_bytes: int = 1_048_588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    allow_negative_timestamps: bool = False
    monotonic_log_append_time: bool = False

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any], topic: str = "") -> TopicConfig:
        """Validate Kafka-named settings; unknown keys and bad values are errors naming the key, every
        bad one in one `ConfigError` (a stored or generated config is checked by the same rules)."""
        values, problems = {}, []
        for key, value in settings.items():
            try:
                values[_SETTINGS[key][0]] = parse_setting(key, value)
            except ConfigError as exc:
                problems.append(f"{key}: {exc}")
        if problems:
            where = f"topic {topic}: " if topic else ""
            raise ConfigError(where + "; ".join(problems))
        return cls(**values)

    def to_mapping(self) -> dict[str, Any]:
        """Kafka-named settings, every key present."""
        return {key: getattr(self, attribute) for key, (attribute, _) in _SETTINGS.items()}

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")


DEFAULTS = TopicConfig().to_mapping()  # Kafka's default of every topic setting, by its Kafka name


def min_timestamp(config: TopicConfig) -> int:
    """The smallest timestamp a record, a time-index entry or a catalog row of the topic may carry:
    Kafka's 0, or with KIP-228's opt-in `klake.timestamps.allow.negative` every int64 above -2**63.

    The one place the rule is decided: append, truncation, the cleaner, the sidecar checks, stored
    segments, recovery and the catalog rows all ask here, so a KIP-228 topic's own indexes check out.
    """
    return KIP228_MIN_TIMESTAMP if config.allow_negative_timestamps else KAFKA_MIN_TIMESTAMP
