"""The jobs' configuration: one YAML file (`--conf`), `--set key=value` overrides, secrets from the environment.

```yaml
storage:  {root: s3://bucket/logs, endpoint_url: null, region: null}
catalog:  {uri: null}                      # default: {root}/_catalog
spark:    {master: "local[*]", app_name: klake, conf: {spark.sql.shuffle.partitions: 8}}
jobs:     {lease_ttl_ms: 3600000, scrub_grace_ms: 3600000, vacuum_retention_hours: 168, ...}
topic_defaults: {retention.ms: 604800000}  # Kafka's names, for every topic below
topics:   {orders: {partitions: 8, cleanup.policy: compact}}
```

Unknown keys anywhere are errors naming the key (a typo must not silently keep a default). Credentials
are never read from the file: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, and
KLAKE_S3_ENDPOINT_URL for an endpoint the file does not name (`layouts.store.StorageOptions`).
`--set` takes dotted paths; a Kafka topic key keeps its dots after the topic name
(`--set topics.orders.retention.ms=3600000`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from engine.errors import ConfigError
from engine.log.topic_config import TopicConfig
from engine.names import InvalidNameError, validate_topic
from engine.ops.lease import DEFAULT_LEASE_TTL_MS
from layouts.store import StorageOptions, join, normalize_uri

JOB_DEFAULTS: dict[str, Any] = {
    "lease_ttl_ms": DEFAULT_LEASE_TTL_MS,
    "scrub_grace_ms": 3_600_000,
    "vacuum_retention_hours": 168,
    "index_interval_bytes": 4096,
    "sticky_batch_bytes": 16_384,
    "batch_bytes": 0,
}
SPARK_DEFAULTS: dict[str, Any] = {"master": "local[*]", "app_name": "klake", "conf": {}}
_SECTIONS = {"storage": {"root", "endpoint_url", "region"}, "catalog": {"uri"}, "spark": set(SPARK_DEFAULTS),
             "jobs": set(JOB_DEFAULTS), "topic_defaults": None, "topics": None}
_SECRET_KEYS = {"key", "secret", "token", "access_key", "secret_key", "aws_access_key_id", "aws_secret_access_key"}


@dataclass(frozen=True)
class TopicSettings:
    """A topic's Kafka settings and its partition count (`partitions`, CreateTopics' field), if declared."""

    config: TopicConfig
    partitions: int | None = None


@dataclass(frozen=True)
class KlakeConfig:
    root: str
    catalog_uri: str
    storage: StorageOptions
    spark_master: str = "local[*]"
    spark_app_name: str = "klake"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    jobs: Mapping[str, Any] = field(default_factory=lambda: dict(JOB_DEFAULTS))
    topic_defaults: Mapping[str, Any] = field(default_factory=dict)
    topics: Mapping[str, TopicSettings] = field(default_factory=dict)

    def topic(self, name: str) -> TopicSettings | None:
        return self.topics.get(name)

    def to_dict(self) -> dict[str, Any]:
        """The effective configuration for reports (the storage options' repr hides secrets)."""
        return {"root": self.root, "catalog_uri": self.catalog_uri, "storage": repr(self.storage),
                "spark": {"master": self.spark_master, "app_name": self.spark_app_name, "conf": dict(self.spark_conf)},
                "jobs": dict(self.jobs),
                "topics": {n: {"partitions": t.partitions, **t.config.to_mapping()} for n, t in self.topics.items()}}


def load_config(path: str | Path | None, overrides: Sequence[str] = (), root: str | None = None) -> KlakeConfig:
    """Read `path` (or start empty), apply `--set` overrides and an explicit `root`, and validate."""
    document: dict[str, Any] = {}
    if path is not None:
        try:
            document = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping")
    document = copy.deepcopy(document)
    for item in overrides:
        apply_override(document, item)
    if root is not None:
        document.setdefault("storage", {})["root"] = root
    return config_from_document(document, source=str(path) if path else "--set")


def apply_override(document: dict[str, Any], item: str) -> None:
    """`section.key=value` (YAML-typed value); under `topics.<name>.` and `topic_defaults.` the rest is
    one Kafka key, and `spark.conf.` takes a whole Spark key."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value")
    dotted, raw = item.split("=", 1)
    value = yaml.safe_load(raw) if raw else ""
    parts = dotted.split(".")
    if parts[0] == "topics" and len(parts) >= 3:
        path = ["topics", parts[1], ".".join(parts[2:])]
    elif parts[0] == "topic_defaults" and len(parts) >= 2:
        path = ["topic_defaults", ".".join(parts[1:])]
    elif parts[:2] == ["spark", "conf"] and len(parts) >= 3:
        path = ["spark", "conf", ".".join(parts[2:])]
    else:
        path = parts
    node = document
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {part!r} is not a section")
    node[path[-1]] = value


def config_from_document(document: Mapping[str, Any], source: str = "config") -> KlakeConfig:
    unknown = set(document) - set(_SECTIONS)
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {sorted(unknown)}; expected {sorted(_SECTIONS)}")
    for section, keys in _SECTIONS.items():
        body = document.get(section) or {}
        if not isinstance(body, dict):
            raise ConfigError(f"{source}: {section} must be a mapping")
        if secrets := {k for k in body if str(k).lower() in _SECRET_KEYS}:
            raise ConfigError(f"{source}: {section}.{sorted(secrets)[0]}: credentials are read from the "
                              "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never from the file")
        if keys is not None and (bad := set(body) - keys):
            raise ConfigError(f"{source}: unknown key {section}.{sorted(bad)[0]}; expected one of {sorted(keys)}")
    storage = document.get("storage") or {}
    if not storage.get("root"):
        raise ConfigError(f"{source}: storage.root is required (a local path or s3://bucket/prefix)")
    root = normalize_uri(str(storage["root"]))
    options = StorageOptions.from_env(endpoint_url=storage.get("endpoint_url"))
    if storage.get("region"):
        options = replace(options, region=str(storage["region"]))
    spark = {**SPARK_DEFAULTS, **(document.get("spark") or {})}
    if not isinstance(spark["conf"], dict):
        raise ConfigError(f"{source}: spark.conf must be a mapping of Spark settings")
    jobs = {**JOB_DEFAULTS, **(document.get("jobs") or {})}
    for key, value in jobs.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{source}: jobs.{key} must be a non-negative integer, got {value!r}")
    defaults = dict(document.get("topic_defaults") or {})
    TopicConfig.from_mapping(defaults, topic="topic_defaults")
    topics = {_topic_name(str(name), source): _topic(str(name), defaults, body or {})
              for name, body in (document.get("topics") or {}).items()}
    catalog = (document.get("catalog") or {}).get("uri") or join(root, "_catalog")
    return KlakeConfig(root=root, catalog_uri=normalize_uri(str(catalog)), storage=options,
                       spark_master=str(spark["master"]), spark_app_name=str(spark["app_name"]),
                       spark_conf={str(k): str(v) for k, v in spark["conf"].items()}, jobs=jobs,
                       topic_defaults=defaults, topics=topics)


def _topic_name(name: str, source: str) -> str:
    try:
        return validate_topic(name)
    except InvalidNameError as exc:
        raise ConfigError(f"{source}: topics: {exc}") from None


def _topic(name: str, defaults: Mapping[str, Any], body: Mapping[str, Any]) -> TopicSettings:
    settings = dict(body)
    partitions = settings.pop("partitions", None)
    if partitions is not None and (not isinstance(partitions, int) or isinstance(partitions, bool)
                                   or not 1 <= partitions <= 100_000):
        raise ConfigError(f"topic {name}: partitions must be an integer from 1 to 100000, got {partitions!r}")
    return TopicSettings(TopicConfig.from_mapping({**defaults, **settings}, topic=name), partitions)
