"""The input columns of an append that keeps offsets (issue 30, item 1): `offset`, and `timestampType`, as Spark's
Kafka source gives them, so that a DataFrame read from a cluster appends at the cluster's offsets
(`engine.log.kept_offsets` holds the rule)."""

from __future__ import annotations

from collections.abc import Callable, Collection

import pyarrow as pa

from kernel.errors import KlakeError

KEPT_COLUMNS: dict[str, tuple[str, Callable[[pa.DataType], bool]]] = {
    "offset": ("an integer", pa.types.is_integer),
    "timestampType": ("an integer (0 CreateTime, 1 LogAppendTime)", pa.types.is_integer),
}


def keeps_offsets(columns: Collection[str], required: bool, where: str) -> bool:
    """Whether the append keeps the input's offsets: whenever it has an `offset` column. `--keep-offsets`
    (`required`) makes a missing one bad input, naming `where`."""
    if required and "offset" not in columns:
        raise KlakeError(f"input {where}: --keep-offsets needs an `offset` column (found {sorted(columns)})")
    return "offset" in columns
