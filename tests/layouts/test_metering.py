"""Per-run metering (`layouts.metering`) and the storage seam chosen by scheme (`layouts.store.file_io`)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from layouts.metering import metered
from layouts.store import (
    FsspecFileIO,
    LocalFileIO,
    S3FileIO,
    StorageOptions,
    file_io,
    list_objects,
    read_bytes,
)
from layouts.store.bound import Store


def test_each_run_counts_only_its_own_requests(tmp_path: Path) -> None:
    """Two runs in one process (threads, as Spark local mode or a library user has) see their own figures."""
    Store(str(tmp_path)).put_if_absent(str(tmp_path / "a"), b"x" * 10)
    barrier = threading.Barrier(2)
    seen: dict[str, dict] = {}

    def run(name: str, reads: int) -> None:
        with metered() as meter:
            barrier.wait()
            for _ in range(reads):
                read_bytes(str(tmp_path / "a"))
            barrier.wait()
        seen[name] = {"requests": dict(meter.requests), "bytes": dict(meter.bytes)}

    threads = [threading.Thread(target=run, args=(n, k)) for n, k in (("one", 1), ("three", 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"one": {"requests": {"GET": 1}, "bytes": {"read": 10}},
                    "three": {"requests": {"GET": 3}, "bytes": {"read": 30}}}


def test_nested_meters_all_count_and_blocks_may_end_out_of_order(tmp_path: Path) -> None:
    uri = str(tmp_path / "b")
    with metered() as job:
        Store(str(tmp_path)).put_if_absent(uri, b"12345")
        outer = metered()
        task = outer.__enter__()
        inner = metered()
        sub = inner.__enter__()
        list_objects(str(tmp_path))
        outer.__exit__(None, None, None)  # ends before the block it encloses, as a generator's block can
        read_bytes(uri)
        inner.__exit__(None, None, None)
    read_bytes(uri)  # after every block: counted nowhere
    assert job.requests == {"PUT": 1, "LIST": 1, "GET": 1} and job.bytes == {"written": 5, "read": 5}
    assert task.requests == {"LIST": 1}
    assert sub.requests == {"LIST": 1, "GET": 1}


def test_the_store_is_chosen_by_scheme(tmp_path: Path) -> None:
    local = file_io(str(tmp_path))
    assert isinstance(local, LocalFileIO) and local.path(f"file://{tmp_path}/x") == f"{tmp_path}/x"
    s3 = file_io("s3a://bucket/key/", StorageOptions(endpoint_url="http://127.0.0.1:1"))
    assert isinstance(s3, S3FileIO) and s3.path("s3a://bucket/key/") == "bucket/key"
    assert s3.uri("bucket/key") == "s3://bucket/key"
    memory = file_io("memory://klake/x")
    assert isinstance(memory, FsspecFileIO) and memory.protocol == "memory"


def test_pyarrow_reads_a_parquet_column_by_ranged_gets_counted_into_the_opener_meter(tmp_path: Path) -> None:
    """`open_ranged`: pyarrow's I/O threads read the footer and one column chunk per row group, and every
    GET counts into the meter of the block that opened the object, though those threads have no context of it."""
    path = tmp_path / "in.parquet"
    rows, noise = 40_000, random.Random(7)
    values = [noise.randbytes(100) for _ in range(rows)]  # incompressible: the file is ~4 MB
    pq.write_table(pa.table({"topic": ["a", "b"] * (rows // 2), "value": values}), path, row_group_size=rows // 4)
    size = path.stat().st_size
    with metered() as meter:
        parquet = pq.ParquetFile(Store(str(tmp_path)).open_ranged(str(path), size))
        topics = {t for g in range(parquet.num_row_groups)
                  for t in parquet.read_row_group(g, columns=["topic"]).column(0).to_pylist()}
    assert topics == {"a", "b"}
    assert meter.requests["GET"] == 1 + parquet.num_row_groups  # the footer, then one chunk per row group
    footer_and_topics = min(size, 65_536) + sum(parquet.metadata.row_group(g).column(0).total_compressed_size
                                               for g in range(parquet.num_row_groups))
    assert meter.bytes["read"] <= footer_and_topics < size
