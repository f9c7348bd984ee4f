"""`put_extending`: a new object made of an existing object plus a tail sends only the tail (S3
UploadPartCopy for prefixes of at least 5 MiB), never overwrites, and leaves nothing behind on failure."""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from s3fs import S3FileSystem

from engine.catalog.schema import SegmentState
from engine.log.append import append_records
from engine.log.topic_config import TopicConfig
from engine.ops.versions import store_segment_version
from kernel.names import TopicPartition
from layouts import extend
from layouts.extend import S3_MAX_PART_SIZE, S3_MIN_PART_SIZE, put_extending
from layouts.metering import metered
from layouts.store import ObjectConflictError, filesystem, object_info, read_bytes
from tests.conftest import Backend

MIB = 1024 * 1024
NOW = 1_790_000_000_000
TP = TopicPartition("events", 0)


def _bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _with_prefix(backend: Backend, prefix_size: int, tail_size: int, seed: int = 1) -> tuple[str, bytes]:
    """A stored prefix object and the full bytes (prefix + tail) of the object extending it."""
    data = _bytes(prefix_size + tail_size, seed)
    prefix_uri = backend.uri("p", "prefix.log")
    backend.put(prefix_uri, data[:prefix_size])
    return prefix_uri, data


def _spy_s3(monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Record every s3fs call (method, kwargs); optionally fail the calls of one method."""
    calls: list[tuple[str, dict[str, Any]]] = []
    original = S3FileSystem._call_s3

    async def spy(self: S3FileSystem, method: str, *args: Any, **kwargs: Any) -> Any:
        calls.append((method, kwargs))
        if method == fail_on:
            raise ConnectionError(f"injected failure of {method}")
        return await original(self, method, *args, **kwargs)

    monkeypatch.setattr(S3FileSystem, "_call_s3", spy)
    return calls


def _pending_uploads(backend: Backend) -> list[dict]:
    bucket = backend.base[len("s3://"):]
    fs, _ = filesystem(backend.base, backend.options)
    return fs.call_s3("list_multipart_uploads", Bucket=bucket).get("Uploads", [])


def _leftovers(backend: Backend, uri: str) -> list[str]:
    """Local temporary files beside `uri`."""
    directory = os.path.dirname(uri)
    return [n for n in os.listdir(directory) if ".tmp-" in n] if os.path.isdir(directory) else []


@pytest.mark.parametrize("prefix_size,tail_size", [(4096, 1000), (6 * MIB, 100_000), (6 * MIB, 0)])
def test_content_is_prefix_plus_tail(backend: Backend, prefix_size: int, tail_size: int) -> None:
    prefix_uri, data = _with_prefix(backend, prefix_size, tail_size)
    uri = backend.uri("p", "new.log")
    with metered() as meter:
        requests = meter.requests
        result = put_extending(uri, data, prefix_uri, prefix_size, backend.options)
    assert read_bytes(uri, backend.options) == data
    assert read_bytes(prefix_uri, backend.options) == data[:prefix_size]
    assert result.created
    server_side = backend.name == "local" or prefix_size >= S3_MIN_PART_SIZE
    assert result.copied_bytes == (prefix_size if server_side else 0)
    assert result.sent_bytes == len(data) - result.copied_bytes
    if backend.name == "s3" and not server_side:
        assert requests == {"PUT": 1}  # below 5 MiB the prefix cannot be a part: one conditional PUT
    elif backend.name == "s3":
        assert requests == Counter({"HEAD": 1, "CreateMultipartUpload": 1, "UploadPartCopy": 1,
                                    "UploadPart": 1 if tail_size else 0, "CompleteMultipartUpload": 1})
    else:
        assert requests == {"HEAD": 1, "PUT": 1}
        assert _leftovers(backend, uri) == []


@pytest.mark.parametrize("cuts", [[6 * MIB], [100, 6 * MIB - 7, 6 * MIB + 3], [6 * MIB + 70_000]])
def test_data_in_parts_makes_the_same_object(backend: Backend, cuts: list[int]) -> None:
    """The new object given as `Parts` (cut before, at or after the prefix's end) holds their concatenation,
    and only the tail is sent."""
    prefix_uri, data = _with_prefix(backend, 6 * MIB, 70_000)
    bounds = [0, *cuts, len(data)]
    parts = [data[start:end] for start, end in zip(bounds, bounds[1:], strict=False)]
    uri = backend.uri("p", "new.log")
    with metered() as meter:
        result = put_extending(uri, parts, prefix_uri, 6 * MIB, backend.options)
    assert read_bytes(uri, backend.options) == data
    assert (result.created, result.copied_bytes, result.sent_bytes) == (True, 6 * MIB, 70_000)
    assert meter.bytes["written"] == 70_000
    assert not put_extending(uri, parts, prefix_uri, 6 * MIB, backend.options).created


def test_s3_sends_only_the_tail(s3_backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix_uri, data = _with_prefix(s3_backend, 6 * MIB, 70_000)
    uri = s3_backend.uri("p", "new.log")
    calls = _spy_s3(monkeypatch)
    put_extending(uri, data, prefix_uri, 6 * MIB, s3_backend.options)
    bodies = [kwargs["Body"] for method, kwargs in calls if "Body" in kwargs]
    assert bodies == [data[6 * MIB:]]
    copies = [kwargs for method, kwargs in calls if method == "upload_part_copy"]
    assert [(c["PartNumber"], c["CopySourceRange"]) for c in copies] == [(1, f"bytes=0-{6 * MIB - 1}")]
    complete = [kwargs for method, kwargs in calls if method == "complete_multipart_upload"]
    assert complete[0]["IfNoneMatch"] == "*"
    assert read_bytes(uri, s3_backend.options) == data


def test_prefix_larger_than_a_part_is_copied_in_ranges(s3_backend: Backend, monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(extend, "S3_MAX_PART_SIZE", 5 * MIB)  # stands in for 5 GiB
    prefix_uri, data = _with_prefix(s3_backend, 10 * MIB, 1234)
    uri = s3_backend.uri("p", "new.log")
    calls = _spy_s3(monkeypatch)
    put_extending(uri, data, prefix_uri, 10 * MIB, s3_backend.options)
    ranges = [kwargs["CopySourceRange"] for method, kwargs in calls if method == "upload_part_copy"]
    assert sorted(ranges) == [f"bytes=0-{5 * MIB - 1}", f"bytes={5 * MIB}-{10 * MIB - 1}"]
    assert read_bytes(uri, s3_backend.options) == data


def test_part_ranges_respect_s3_part_limits() -> None:
    size = 12 * 1024**3 + 7
    parts = extend._part_ranges(100, 100 + size)
    assert len(parts) == 3
    assert parts[0][0] == 100 and parts[-1][1] == 100 + size
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
    assert all(S3_MIN_PART_SIZE <= end - start <= S3_MAX_PART_SIZE for start, end in parts)
    assert extend._part_ranges(5, 5) == []
    assert extend._part_ranges(0, S3_MAX_PART_SIZE) == [(0, S3_MAX_PART_SIZE)]


def test_never_overwrites(backend: Backend) -> None:
    prefix_uri, data = _with_prefix(backend, 6 * MIB, 5000)
    uri = backend.uri("p", "new.log")
    assert put_extending(uri, data, prefix_uri, 6 * MIB, backend.options).created
    again = put_extending(uri, data, prefix_uri, 6 * MIB, backend.options)
    assert not again.created  # a re-run after a crash: same bytes, nothing to do
    other = data[:6 * MIB] + _bytes(5000, seed=2)
    with pytest.raises(ObjectConflictError):
        put_extending(uri, other, prefix_uri, 6 * MIB, backend.options)
    assert read_bytes(uri, backend.options) == data
    if backend.name == "s3":
        assert _pending_uploads(backend) == []  # the refused completion's upload was aborted
    else:
        assert _leftovers(backend, uri) == []


def test_failed_part_aborts_the_upload(s3_backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix_uri, data = _with_prefix(s3_backend, 6 * MIB, 5000)
    uri = s3_backend.uri("p", "new.log")
    calls = _spy_s3(monkeypatch, fail_on="upload_part")
    with metered() as meter, pytest.raises(ConnectionError):
        put_extending(uri, data, prefix_uri, 6 * MIB, s3_backend.options)
    assert "complete_multipart_upload" not in [method for method, _ in calls]
    assert meter.requests["AbortMultipartUpload"] == 1
    monkeypatch.undo()
    assert object_info(uri, s3_backend.options) is None
    assert _pending_uploads(s3_backend) == []


@pytest.mark.parametrize("stored_size,missing", [(6 * MIB - 1, False), (0, True)])
def test_wrong_or_missing_prefix_writes_nothing(backend: Backend, stored_size: int, missing: bool) -> None:
    data = _bytes(6 * MIB + 100, seed=3)
    prefix_uri = backend.uri("p", "prefix.log")
    if not missing:
        backend.put(prefix_uri, data[:stored_size])
    uri = backend.uri("p", "new.log")
    with pytest.raises(FileNotFoundError if missing else ValueError):
        put_extending(uri, data, prefix_uri, 6 * MIB, backend.options)
    assert object_info(uri, backend.options) is None
    if backend.name == "local":
        assert _leftovers(backend, uri) == []


def _records(n: int, value_size: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"key": pa.array([b"k%d" % i for i in range(n)], pa.binary()),
                     "value": pa.array([rng.bytes(value_size) for _ in range(n)], pa.binary()),
                     "timestamp": pa.array([NOW - 1000 + i for i in range(n)], pa.int64())})


def test_store_segment_version_extends_the_previous_version(backend: Backend) -> None:
    config = TopicConfig.from_mapping({})
    first = append_records(_records(13, 500_000, seed=1), config, log_end_offset=0, now_ms=NOW).active
    first_log = b"".join(first.pieces)
    assert len(first_log) >= 6 * MIB
    row = store_segment_version(backend.store(), TP, 0, first_log, first.offset_index.to_bytes(), first.time_index.to_bytes(), SegmentState.ACTIVE, "job-1", NOW, min_timestamp=0)
    second = append_records(_records(5, 1000, seed=2), config, log_end_offset=first.state.next_offset, now_ms=NOW,
                            resume=first.state, resume_log=first_log).active
    second_log = b"".join(second.pieces)
    index, timeindex = second.offset_index.to_bytes(), second.time_index.to_bytes()
    with metered() as meter:
        requests = meter.requests
        extended = store_segment_version(backend.store(), TP, 0, second_log, index, timeindex, SegmentState.ACTIVE, "job-2", NOW, extends=row, min_timestamp=0)
    if backend.name == "s3":
        assert requests["UploadPartCopy"] == 1 and requests["PUT"] == 2  # the two indexes
    assert extended.log_key != row.log_key
    assert read_bytes(extended.log_key, backend.options) == second_log
    assert read_bytes(extended.index_key, backend.options) == index
    assert read_bytes(extended.timeindex_key, backend.options) == timeindex
    assert (extended.size_bytes, extended.record_count, extended.next_offset) == (len(second_log), 18, 18)
    in_parts = store_segment_version(backend.store(), TP, 0, second.pieces, index, timeindex, SegmentState.ACTIVE, "job-2", NOW, extends=row, min_timestamp=0)  # the batches, not joined
    assert read_bytes(in_parts.log_key, backend.options) == second_log
    assert (in_parts.size_bytes, in_parts.record_count) == (len(second_log), 18)
    with pytest.raises(ValueError):
        store_segment_version(backend.store(), TP, 5, second_log, index, timeindex, SegmentState.ACTIVE, "job-3", NOW, extends=row, min_timestamp=0)
