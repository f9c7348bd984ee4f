"""Objects on local paths and `s3://` URIs through fsspec: the storage seam every klake module goes through.

`file_io(uri, options)` chooses a `FileIO` by URI scheme, as pyiceberg's `load_file_io` does, each kind in a
module of its own: `LocalFileIO` (`local`) for paths and `file://`, `S3FileIO` (`s3`) for `s3://`/`s3a://`,
`FsspecFileIO` (`fsspec_file_io`: read, list, replace, delete; no put-if-absent) for any other fsspec
protocol, and `AivenFileIO` (`aiven_file_io`, read-only) for `aiven+` names of an Aiven tiered-storage
bucket's uploads read as Kafka segment files. Each `FileIO` meters its requests (`layouts.metering`). Jobs and
ops reach storage through a `Store` (`layouts.store.bound`: a root bound to its `FileIO`, issue 28); the few
functions here serve the layouts, which resolve a `FileIO` per URI.

Credentials follow the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`); an S3-compatible endpoint comes from
`KLAKE_S3_ENDPOINT_URL` or `AWS_ENDPOINT_URL`. Secrets are never part of a repr, a log line or a report.

Objects are written with put-if-absent only (`Store.put_if_absent`): `If-None-Match: *` on S3, a hard link
of a fully written temporary file locally (atomic, fails if the name exists). Listings are never
cached, because klake decides what to delete from them.

A job asks `Store.check_access` once before it starts work, so that missing credentials, a missing bucket
or a root that cannot be created are one line naming the bucket or path, not a botocore or delta-rs
error chain later; `describe_error` makes any storage error one line (no ANSI escapes, no XML).
"""

from __future__ import annotations

import fsspec

from layouts.store.aiven_file_io import SCHEME as AIVEN_SCHEME
from layouts.store.aiven_file_io import AivenFileIO, bucket_uri
from layouts.store.errors import ObjectConflictError, StorageAccessError, describe_error
from layouts.store.file_io import DeleteResult, FileIO, ObjectInfo
from layouts.store.fsspec_file_io import FsspecFileIO
from layouts.store.local import TEMPORARY_NAME, LocalFileIO, publish_local
from layouts.store.options import StorageOptions
from layouts.store.parts import Parts, parts_of, size_of, whole
from layouts.store.s3 import S3FileIO
from layouts.store.uris import is_local, is_s3, join

__all__ = [
    "TEMPORARY_NAME", "DeleteResult", "FileIO", "FsspecFileIO", "LocalFileIO", "ObjectConflictError", "ObjectInfo",
    "Parts", "S3FileIO", "StorageAccessError", "StorageOptions", "describe_error", "ensure_object", "file_io",
    "filesystem", "is_local", "is_s3", "join", "list_objects", "normalize_uri", "object_info", "parts_of",
    "publish_local", "read_bytes", "size_of", "whole",
]


def file_io(uri: str, options: StorageOptions | None = None) -> FileIO:
    """The `FileIO` for `uri`'s scheme; S3 stores take `options`, by default from the environment.

    Nothing is cached here: fsspec caches its filesystems itself and drops them after a fork, which
    Spark's Python workers are, so a cache of ours would hand a forked worker its parent's event loop.
    """
    if uri.startswith(AIVEN_SCHEME):
        return AivenFileIO(file_io(bucket_uri(uri), options))
    if is_s3(uri):
        return S3FileIO(fsspec.filesystem("s3", **(options or StorageOptions.from_env()).s3fs_kwargs()))
    if is_local(uri):
        return LocalFileIO(fsspec.filesystem("file"))
    protocol = uri.split("://", 1)[0]
    return FsspecFileIO(fsspec.filesystem(protocol), protocol)


def filesystem(uri: str, options: StorageOptions | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `uri` and the path within it (no scheme for s3, absolute locally), for
    callers that hand a filesystem to another library (pyarrow datasets, Spark inputs)."""
    io = file_io(uri, options)
    return io.fs, io.path(uri)


def read_bytes(uri: str, options: StorageOptions | None = None, start: int | None = None,
               end: int | None = None) -> bytes:
    """Read an object, or the byte range [start, end) of it (one ranged GET on S3)."""
    return file_io(uri, options).read(uri, start, end)


def normalize_uri(uri: str) -> str:
    """`s3://bucket/key` (s3a becomes s3) or an absolute local path, without a trailing '/'."""
    if is_s3(uri):
        return "s3://" + uri.split("://", 1)[1].rstrip("/")
    return file_io(uri, StorageOptions()).path(uri)


def list_objects(uri: str, options: StorageOptions | None = None) -> list[ObjectInfo]:
    """Every object under the prefix `uri` (recursively), sorted by URI; empty if nothing is there."""
    return file_io(uri, options).list_objects(uri)


def object_info(uri: str, options: StorageOptions | None = None) -> ObjectInfo | None:
    """Size and mtime of one object, or None if it does not exist."""
    return file_io(uri, options).info(uri)


def ensure_object(uri: str, data: bytes | Parts, options: StorageOptions | None = None) -> bool:
    """Create `uri` with `data` (put-if-absent); True if created, False if it already held exactly `data`.

    This makes re-running an interrupted writer idempotent without ever overwriting an object: an
    existing object with other bytes raises `ObjectConflictError`.
    """
    return file_io(uri, options).ensure(uri, data)
