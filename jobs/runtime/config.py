"""The jobs' configuration: one YAML file (`--conf`), `--set key=value` overrides, secrets from the environment.

```yaml
storage:  {root: s3://bucket/logs, endpoint_url: null, region: null}
catalog:  {uri: null}                      # default: {root}/_catalog
spark:    {master: "local[*]", app_name: klake, conf: {spark.sql.shuffle.partitions: 8}}
jobs:     {lease_ttl_ms: 3600000, scrub_grace_ms: 3600000, vacuum_retention_hours: 168, ...}
topic_defaults: {retention.ms: 604800000}  # Kafka's names, for every topic below
topics:   {orders: {partitions: 8, cleanup.policy: compact}}
```

The file's shape is a pydantic model, so every problem of the file and the overrides is reported at
once, one line per problem with its key path (`topics.orders.retention.ms: must be an integer >= -1,
got 'abc'`): a new user fixes them all in one round. Each Kafka topic setting is checked by its one
rule, `engine.log.topic_config.parse_setting`, and each topic name by `kernel.names.validate_topic`.
Unknown keys anywhere are errors naming the key (a typo must not silently keep a default). Credentials
are never read from the file: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, and
KLAKE_S3_ENDPOINT_URL for an endpoint the file does not name (`layouts.store.StorageOptions`).
`--set` takes dotted paths; a Kafka topic key keeps its dots after the topic name
(`--set topics.orders.retention.ms=3600000`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.log.topic_config import KAFKA_KEYS, TopicConfig, parse_setting
from engine.ops.catalog_table import DEFAULT_VACUUM_RETENTION_HOURS
from engine.ops.lease import DEFAULT_LEASE_TTL_MS
from engine.ops.scrub import DEFAULT_GRACE_MS
from kernel.errors import ConfigError, KlakeError
from kernel.names import validate_topic
from layouts.store import StorageOptions, join, normalize_uri

_SECRET_KEYS = {"key", "secret", "token", "access_key", "secret_key", "aws_access_key_id", "aws_secret_access_key"}
_CREDENTIALS = ("credentials are read from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), "
                "never from the file")


def _rule(check: Callable[[Any], Any], kind: type[AfterValidator | BeforeValidator] = AfterValidator,
          ) -> AfterValidator | BeforeValidator:
    """Run one of klake's own rules as a pydantic validator: its error becomes this key's problem
    (`BeforeValidator` to check the value as YAML wrote it before pydantic's own type coerces it)."""
    def validate(value: Any) -> Any:
        try:
            return check(value)
        except KlakeError as exc:
            raise PydanticCustomError("klake", "{reason}", {"reason": str(exc)}) from None
    return kind(validate)


def _whole(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    """A whole number in range, as YAML wrote it (not true/false, not 1.5, not "10")."""
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def check(value: Any) -> int:
        if (not isinstance(value, int) or isinstance(value, bool) or value < minimum
                or (maximum is not None and value > maximum)):
            raise ConfigError(f"must be an integer {bounds}, got {value!r}")
        return value
    return check


def _storage_root(value: Any) -> str:
    if not value:
        raise ConfigError("required (a local path or s3://bucket/prefix)")
    if not isinstance(value, str):
        raise ConfigError(f"must be a local path or s3://bucket/prefix, got {value!r}")
    return value


_partition_count = _whole(1, 100_000)


def _partitions(value: Any) -> int | None:
    return None if value is None else _partition_count(value)


def _empty_if_none(value: Any) -> Any:
    """`topics:` with nothing under it is YAML's null: an empty section, as the user meant."""
    return {} if value is None else value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Storage(_Section):
    root: Annotated[Any, _rule(_storage_root)] = Field(None, validate_default=True)
    endpoint_url: str | None = None
    region: str | None = None


class _Catalog(_Section):
    uri: str | None = None


class _Spark(_Section):
    master: str = "local[*]"
    app_name: str = "klake"
    conf: dict[str, Any] = Field(default_factory=dict)


_Count = Annotated[int, _rule(_whole(0), BeforeValidator)]


class JobSettings(_Section):
    """The `jobs:` section: the jobs' own knobs, typed once here so no job casts a mapping's value."""

    lease_ttl_ms: _Count = DEFAULT_LEASE_TTL_MS
    scrub_grace_ms: _Count = DEFAULT_GRACE_MS
    vacuum_retention_hours: _Count = DEFAULT_VACUUM_RETENTION_HOURS
    index_interval_bytes: _Count = DEFAULT_INDEX_INTERVAL_BYTES
    sticky_batch_bytes: _Count = 16_384
    batch_bytes: _Count = 0
    driver_max_bytes: _Count = 64 << 20

_TopicDefaults = create_model(
    "_TopicDefaults", __base__=_Section,
    **{key.replace(".", "_"): (Annotated[Any, _rule(partial(parse_setting, key))], Field(None, alias=key))
       for key in KAFKA_KEYS})
_Topic = create_model("_Topic", __base__=_TopicDefaults, partitions=(Annotated[Any, _rule(_partitions)], None))
_TopicName = Annotated[str, BeforeValidator(str), _rule(validate_topic)]


class _Document(_Section):
    """The configuration file's shape; every section optional but `storage.root`."""

    storage: Annotated[_Storage, BeforeValidator(_empty_if_none)]
    catalog: Annotated[_Catalog, BeforeValidator(_empty_if_none)] = Field(default_factory=_Catalog)
    spark: Annotated[_Spark, BeforeValidator(_empty_if_none)] = Field(default_factory=_Spark)
    jobs: Annotated[JobSettings, BeforeValidator(_empty_if_none)] = Field(default_factory=JobSettings)
    topic_defaults: Annotated[_TopicDefaults, BeforeValidator(_empty_if_none)] = Field(default_factory=_TopicDefaults)
    topics: Annotated[dict[_TopicName, Annotated[_Topic, BeforeValidator(_empty_if_none)]],
                      BeforeValidator(_empty_if_none)] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _storage_is_required(cls, data: Any) -> Any:
        """Without a `storage` section the missing root is still reported as `storage.root`."""
        return {"storage": {}, **data} if isinstance(data, dict) else data


_SECTIONS: dict[str, type[BaseModel]] = {"storage": _Storage, "catalog": _Catalog, "spark": _Spark, "jobs": JobSettings}


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
    jobs: JobSettings = field(default_factory=JobSettings)
    topic_defaults: Mapping[str, Any] = field(default_factory=dict)
    topics: Mapping[str, TopicSettings] = field(default_factory=dict)

    def topic(self, name: str) -> TopicSettings | None:
        return self.topics.get(name)

    def to_dict(self) -> dict[str, Any]:
        """The effective configuration for reports (the storage options' repr hides secrets)."""
        return {"root": self.root, "catalog_uri": self.catalog_uri, "storage": repr(self.storage),
                "spark": {"master": self.spark_master, "app_name": self.spark_app_name, "conf": dict(self.spark_conf)},
                "jobs": self.jobs.model_dump(),
                "topics": {n: {"partitions": t.partitions, **t.config.to_mapping()} for n, t in self.topics.items()}}


def load_config(path: str | Path | None, overrides: Sequence[str] = (), root: str | None = None) -> KlakeConfig:
    """Read `path` (or start empty), apply `--set` overrides and an explicit `root`, and validate:
    every problem of the file and the overrides in one `ConfigError`."""
    document: dict[str, Any] = {}
    if path is not None:
        try:
            document = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path}: not valid YAML{_yaml_where(exc)}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping")
    document = copy.deepcopy(document)
    problems = []
    for item in overrides:
        try:
            apply_override(document, item)
        except ConfigError as exc:
            problems.append(str(exc))
    if root is not None:
        _put(document, ["storage", "root"], root, "--root")
    return config_from_document(document, source=str(path) if path else "configuration", problems=problems)


def _yaml_where(exc: yaml.YAMLError) -> str:
    """Where and what PyYAML found wrong, on one line (its own message draws the line with a caret)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}: {problem}"


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
    _put(document, path, value, f"--set {dotted}")


def _put(document: dict[str, Any], path: Sequence[str], value: Any, where: str) -> None:
    node = document
    for part in path[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: {part!r} is not a section")
    node[path[-1]] = value


def config_from_document(document: Mapping[str, Any], source: str = "config",
                         problems: Sequence[str] = ()) -> KlakeConfig:
    """Validate a configuration document; `problems` found before (bad `--set` items) are reported with
    the document's own, all in one `ConfigError`."""
    try:
        model = _Document.model_validate(document)
    except ValidationError as exc:
        problems = [*problems, *(_problem(error) for error in exc.errors())]
    if problems:
        raise ConfigError(f"{source}: {problems[0]}" if len(problems) == 1 else
                          f"{source}: {len(problems)} problems:\n  " + "\n  ".join(problems))
    root = normalize_uri(model.storage.root)
    options = StorageOptions.from_env(endpoint_url=model.storage.endpoint_url)
    if model.storage.region:
        options = replace(options, region=model.storage.region)
    defaults = model.topic_defaults.model_dump(by_alias=True, exclude_unset=True)
    topics = {name: TopicSettings(TopicConfig.from_mapping(
                  {**defaults, **body.model_dump(by_alias=True, exclude_unset=True, exclude={"partitions"})},
                  topic=name), body.partitions)
              for name, body in model.topics.items()}
    return KlakeConfig(root=root, catalog_uri=normalize_uri(model.catalog.uri or join(root, "_catalog")),
                       storage=options, spark_master=model.spark.master, spark_app_name=model.spark.app_name,
                       spark_conf={str(k): str(v) for k, v in model.spark.conf.items()},
                       jobs=model.jobs, topic_defaults=defaults, topics=topics)


def _problem(error: ErrorDetails) -> str:
    """One pydantic error as `key.path: what is wrong`, in klake's words."""
    loc = [str(part) for part in error["loc"] if part != "[key]"]
    where, key, value = ".".join(loc), loc[-1] if loc else "", error.get("input")
    if error["type"] == "klake":
        message = error["msg"]
    elif error["type"] != "extra_forbidden":
        message = {"string_type": "must be a string", "model_type": "must be a mapping",
                   "dict_type": "must be a mapping"}.get(error["type"], error["msg"]) + f", got {value!r}"
    elif key.lower() in _SECRET_KEYS:
        message = _CREDENTIALS
    elif len(loc) == 1:
        message = f"unknown section; expected one of {sorted(_Document.model_fields)}"
    elif loc[0] in ("topics", "topic_defaults"):
        message = _unknown_setting(key)
    else:
        message = f"unknown key; expected one of {sorted(_SECTIONS[loc[0]].model_fields)}"
    return f"{where}: {message}"


def _unknown_setting(key: str) -> str:
    """The engine's words for a key that is not a Kafka topic setting (with its "did you mean")."""
    try:
        parse_setting(key, None)
    except ConfigError as exc:
        return str(exc)
    raise AssertionError(f"{key} is a topic setting the configuration model does not know")
