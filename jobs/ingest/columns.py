"""Spark's Kafka sink columns as the append reads them: which types each may have (checked on Parquet footers
before Spark starts, and on any other input's schema once Spark has it), and the schema an input task stages
rows in."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from jobs.ingest.kept_offsets import KEPT_COLUMNS
from kernel.errors import KlakeError


def _is_text(type_: pa.DataType) -> bool:
    return pa.types.is_string(type_) or pa.types.is_large_string(type_)


def _is_bytes(type_: pa.DataType) -> bool:
    return pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or _is_text(type_)


def _is_headers(type_: pa.DataType) -> bool:
    if not (pa.types.is_list(type_) or pa.types.is_large_list(type_)) or not pa.types.is_struct(type_.value_type):
        return False
    fields = {f.name: f.type for f in type_.value_type}
    return set(fields) == {"key", "value"} and _is_text(fields["key"]) and _is_bytes(fields["value"])


# Spark's Kafka sink columns and the Arrow types each may have (the module docstring's input rule, its one
# home): checked on Parquet footers before Spark starts, and on any other input's schema once Spark has it.
SINK_COLUMNS: dict[str, tuple[str, Callable[[pa.DataType], bool]]] = {
    "topic": ("string", _is_text),
    "partition": ("an integer", pa.types.is_integer),
    "key": ("binary or string", _is_bytes),
    "value": ("binary or string", _is_bytes),
    "headers": ("array<struct<key: string, value: binary>>", _is_headers),
    "timestamp": ("a timestamp or epoch ms (an integer)", lambda t: pa.types.is_timestamp(t) or pa.types.is_integer(t)),
}


# every column the append reads: the sink's, and those an append keeping offsets keeps (`jobs.ingest.kept_offsets`)
INPUT_COLUMNS = SINK_COLUMNS | KEPT_COLUMNS


def check_input_schema(schema: pa.Schema, where: str) -> None:
    """Raise, naming `where` and the column, unless `schema` has a `value` column and every Kafka sink
    column it has is of a usable type (all-null columns are; other columns are ignored)."""
    if "value" not in schema.names:
        raise KlakeError(f"input {where}: no `value` column (found {sorted(schema.names)}); it needs Spark's "
                         "Kafka sink columns")
    for field in schema:
        if field.name in INPUT_COLUMNS:
            expected, accepts = INPUT_COLUMNS[field.name]
            type_ = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
            if not (pa.types.is_null(type_) or accepts(type_)):
                raise KlakeError(f"input {where}: column `{field.name}` is {field.type}; Spark's Kafka sink needs "
                                 f"{expected}")


def staging_schema(schema: pa.Schema) -> pa.Schema:
    """The Kafka sink columns of `schema` as the append stages them: key and value binary (Spark's Kafka sink
    takes strings as their UTF-8 bytes), missing `partition` and `key` as nulls, other columns dropped."""
    fields = {f.name: f for f in schema if f.name in INPUT_COLUMNS}
    out = [pa.field("topic", pa.string())] if "topic" in fields else []
    out.append(pa.field("partition", fields["partition"].type if "partition" in fields else pa.int32()))
    out += [pa.field("key", pa.binary()), pa.field("value", pa.binary())]
    out += [fields[name] for name in ("headers", "timestamp", *KEPT_COLUMNS) if name in fields]
    return pa.schema(out)
