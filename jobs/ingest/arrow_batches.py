"""How many rows Spark hands a Python task in one Arrow batch when the rows' size is known beforehand (the
archive's, issue 30).

Spark 4.2 bounds a batch for a Python task by rows (`spark.sql.execution.arrow.maxRecordsPerBatch`, 10,000) and
by bytes (`spark.sql.execution.arrow.maxBytesPerBatch`, 64 MiB). It checks the byte bound after every row, by
summing the batch's Arrow buffers (`BatchedPythonArrowInput.writeSizedBatch`), which for a nested column (Kafka's
`headers`, a list of structs) walks every child vector each time: on the archive's 1 GiB benchmark the check
took ~13% of the JVM's samples (JFR) and its removal 11% of the archive's time. Spark skips the check when the
byte bound is `Int.MaxValue`; `records_per_batch` then states the byte bound as a row count from the largest
record measured, so a batch still holds about what the byte bound allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MAX_RECORDS = "spark.sql.execution.arrow.maxRecordsPerBatch"
MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
SPARK_MAX_RECORDS = 10_000  # Spark's defaults of the two
SPARK_MAX_BYTES = 64 << 20
UNCHECKED_BYTES = 2**31 - 1  # Int.MaxValue: Spark does not check a batch's bytes per row
ROW_OVERHEAD_BYTES = 64  # a row's fixed Arrow columns and offsets beside its key, value and headers


def records_per_batch(record_bytes: int, max_records: int = SPARK_MAX_RECORDS,
                      max_bytes: int = SPARK_MAX_BYTES) -> int:
    """The most rows a batch of records of at most `record_bytes` each may hold within both of Spark's bounds:
    at least one row, as Spark's own byte check always admits one."""
    return max(1, min(max_records, max_bytes // (record_bytes + ROW_OVERHEAD_BYTES)))


@contextmanager
def sized_batches(spark: SparkSession, record_bytes: int | None) -> Iterator[int | None]:
    """Within the block, the session's Python tasks get batches of `records_per_batch(record_bytes)` rows
    under the session's bounds (the user's, if set, else Spark's), the byte bound unchecked; the settings
    as they were afterwards. `record_bytes` None (not measured) leaves Spark's own checks; yields the rows."""
    if record_bytes is None:
        yield None
        return
    before = {key: spark.conf.get(key, None) for key in (MAX_RECORDS, MAX_BYTES)}
    effective = spark._jsparkSession.sessionState().conf()  # the bounds as Spark reads them ("64m" parsed)
    set_records = effective.arrowMaxRecordsPerBatch()
    rows = records_per_batch(record_bytes, set_records if set_records > 0 else SPARK_MAX_RECORDS,
                             effective.arrowMaxBytesPerBatch())
    spark.conf.set(MAX_RECORDS, str(rows))
    spark.conf.set(MAX_BYTES, str(UNCHECKED_BYTES))
    try:
        yield rows
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
