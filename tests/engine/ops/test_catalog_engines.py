"""The catalog is an ordinary Delta table: DuckDB (`delta_scan`, with its Delta extension loaded from the
pinned `duckdb-ext-delta` package: no download), Polars and Spark answer the same time-range question
as klake's own `Catalog.segments`, and as a brute-force filter of the rows klake wrote.

Spark reads the Parquet files the Delta log lists (the test environment has no Delta jars for Spark);
DuckDB and Polars read the Delta table itself.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import duckdb_ext
import polars as pl
import pytest
from deltalake import DeltaTable

from engine.catalog.schema import SegmentState
from engine.ops.catalog_table import Catalog
from layouts.store.bound import Store
from tests.catalog_rows import add_segments, make_row, transition

HOUR = 3_600_000
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z


def _delta_extension() -> str:
    found = sorted(Path(duckdb_ext.__path__[0]).glob(f"extensions/v{duckdb.__version__}/*/delta.duckdb_extension"))
    assert found, f"duckdb-ext-delta has no build for duckdb {duckdb.__version__}: pin both together"
    return str(found[0])


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Catalog:
    """Hourly segments of three partitions over four days, in several commits, a few of them retired."""
    catalog = Catalog.create(Store(str(tmp_path_factory.mktemp("engines") / "catalog")))
    rnd = random.Random(5)
    rows = []
    for topic, partition in (("orders", 0), ("orders", 1), ("clicks", 0)):
        for hour in range(96):
            late = rnd.randint(0, 20) * 60_000  # out-of-order records reach back into the previous hour
            rows.append(make_row(topic, partition, hour * 1000, hour * 1000 + 1000,
                                 base_ts=T0 + hour * HOUR - late, largest_ts=T0 + (hour + 1) * HOUR - 1))
    for start in range(0, len(rows), 50):
        add_segments(catalog, rows[start:start + 50])
    transition(catalog, [r.ref for r in rows[:10]], SegmentState.DELETE_STARTED)
    return catalog


WINDOWS = [(T0 + 30 * HOUR + 17 * 60_000, T0 + 31 * HOUR), (T0, T0 + 1), (T0 + 95 * HOUR, T0 + 200 * HOUR),
           (T0 - 10 * HOUR, T0 - HOUR)]


def _live_overlapping(rows: list[dict], start: int, end: int) -> list[tuple]:
    """Brute force: live segments that can hold a record in [start, end]."""
    return sorted((r["topic"], r["partition"], r["base_offset"]) for r in rows
                  if r["state"] in ("ACTIVE", "ROLLED") and r["largest_timestamp"] >= start and 0 <= r["base_timestamp"] <= end)


SQL = ("SELECT topic, \"partition\", base_offset FROM {source} WHERE state IN ('ACTIVE', 'ROLLED') "
       "AND largest_timestamp >= ? AND base_timestamp <= ? AND base_timestamp >= 0 ORDER BY 1, 2, 3")


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"{w[0] - T0}..{w[1] - T0}")
def test_duckdb_polars_and_spark_answer_like_klake(catalog: Catalog, window: tuple[int, int], spark) -> None:  # noqa: ANN001
    start, end = window
    truth = _live_overlapping(catalog.all_rows().to_pylist(), start, end)
    ours = catalog.segments(from_ms=start, to_ms=end,
                            min_timestamp=0).select(["topic", "partition", "base_offset"]).to_pylist()
    assert [tuple(r.values()) for r in ours] == truth

    duck = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    duck.execute(f"LOAD '{_delta_extension()}'")
    answer = duck.execute(SQL.format(source=f"delta_scan('{catalog.uri}')"), [start, end]).fetchall()
    assert [tuple(r) for r in answer] == truth

    frame = pl.read_delta(catalog.uri).filter(
        pl.col("state").is_in(["ACTIVE", "ROLLED"]) & (pl.col("largest_timestamp") >= start)
        & (pl.col("base_timestamp") <= end) & (pl.col("base_timestamp") >= 0))
    assert sorted(frame.select(["topic", "partition", "base_offset"]).rows()) == truth

    files = DeltaTable(catalog.uri).file_uris()
    spark.read.option("basePath", catalog.uri).parquet(*files).createOrReplaceTempView("klake_catalog")
    spark_sql = SQL.format(source="klake_catalog").replace('"partition"', "`partition`").replace("?", "{}")
    rows = spark.sql(spark_sql.format(start, end)).collect()
    assert [(r["topic"], r["partition"], r["base_offset"]) for r in rows] == truth
