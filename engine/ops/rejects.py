"""The rejects dataset of an append: the records Kafka would refuse, with their reason and where each came
from, one Parquet file per partition (`{dir}/{topic}-{partition}.parquet`) plus one per partition the
topic lacks or the run did not select (`{dir}/unplaced/{topic}-{partition}.parquet`).

A partition's file is written by its append task before the driver's commit (a crash after the commit
cannot lose it) and is true once the partition is committed; scrub reclaims the files of attempts that
never committed (`{root}/_rejects/{job id}/`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kernel.names import TopicPartition
from layouts.object_layout import REJECTS_DIR
from layouts.store import join
from layouts.store.bound import Store


def rejects_dir(root: str, job_id: str, given: str | None, report: str | None) -> str:
    """The Parquet dataset of a job id's rejected records: `given` (`--rejects`), else beside the report
    (`out/append.json` -> `out/append.rejects`), else `{root}/_rejects/{job id}/`."""
    if given:
        return given.rstrip("/")
    if report:
        return report.rsplit(".", 1)[0] + ".rejects"
    return join(root, REJECTS_DIR, job_id)


def partition_rejects_uri(rejects_dir: str, tp: TopicPartition) -> str:
    """Where an append attempt writes the records of `tp` it rejected; valid once `tp` is committed."""
    return join(rejects_dir, f"{tp}.parquet")


def rejected(table: pa.Table, reason: str, message: str, carry: Sequence[str]) -> pa.Table:
    """Every record of `table` as a reject with `reason`, in the columns `append_records` gives its
    rejects (with the `carry` columns carried)."""
    n = table.num_rows
    rejects = pa.table({"row": pa.array(np.arange(n), pa.int64()), "reason": pa.array([reason] * n, pa.string()),
                        "message": pa.array([message] * n, pa.string())})
    for name in ("key", "value", "timestamp", "headers", *carry):
        if name in table.column_names:
            rejects = rejects.append_column(name, table.column(name))
    return rejects


def with_provenance(rejects: pa.Table | None, topic: str, files: Sequence[str]) -> pa.Table | None:
    """Rejects as the rejects file holds them: where each came from (topic, partition, input file, and
    `seq`: its row in the file for Parquet input, else Spark's row id) instead of its row number in the
    stream (the `_rank` and `_pos` columns the input carried)."""
    if rejects is None or rejects.num_rows == 0:
        return rejects
    rejects = rejects.drop_columns(["row"])
    at = rejects.schema.get_field_index("_rank")
    rejects = rejects.set_column(at, "file", pa.array(files, pa.string()).take(rejects.column(at)))
    rejects = rejects.add_column(rejects.schema.get_field_index("partition"), "topic",
                                 pa.array([topic] * rejects.num_rows, pa.string()))
    return rejects.rename_columns(["seq" if name == "_pos" else name for name in rejects.column_names])


def store_partition_rejects(rejects_dir: str, tp: TopicPartition, rejects: pa.Table | None,
                            store: Store) -> None:
    """Write the rejects of a partition this attempt appended; with none, delete an earlier attempt's (made
    at another `--now`): they are not true for this one."""
    if rejects is not None and rejects.num_rows:
        _write_parquet(partition_rejects_uri(rejects_dir, tp), rejects, store)
    else:
        drop_partition_rejects(rejects_dir, tp, store)


def drop_partition_rejects(rejects_dir: str, tp: TopicPartition, store: Store) -> None:
    """Delete the rejects file of `tp` (a partition that did not commit: a later attempt rejects again)."""
    store.delete(partition_rejects_uri(rejects_dir, tp))


def write_unplaced(rejects_dir: str, topic: str, partition: int, rejects: pa.Table,
                   store: Store) -> str:
    """Write the records naming a partition the topic lacks or the run did not select; their file."""
    return _write_parquet(join(rejects_dir, "unplaced", f"{topic}-{partition}.parquet"), rejects, store)


def _write_parquet(uri: str, table: pa.Table, store: Store) -> str:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    store.write(uri, buffer.getvalue())
    return uri
