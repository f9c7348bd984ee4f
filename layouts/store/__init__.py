"""Objects on local paths and `s3://` URIs through fsspec: the storage seam every klake module goes through.

`file_io(uri, options)` chooses a `FileIO` by URI scheme, as pyiceberg's `load_file_io` does, each kind in a
module of its own: `LocalFileIO` (`local`) for paths and `file://`, `S3FileIO` (`s3`) for `s3://`/`s3a://`,
`FsspecFileIO` (`fsspec_file_io`: read, list, replace, delete; no put-if-absent) for any other fsspec
protocol, and `AivenFileIO` (`aiven_file_io`, read-only) for `aiven+` names of an Aiven tiered-storage
bucket's uploads read as Kafka segment files. The functions here are the API callers use; each resolves its `FileIO`, which meters the
request (`layouts.metering`).

Credentials follow the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`); an S3-compatible endpoint comes from
`KLAKE_S3_ENDPOINT_URL` or `AWS_ENDPOINT_URL`. Secrets are never part of a repr, a log line or a report.

Objects are written with put-if-absent only (`put_if_absent`): `If-None-Match: *` on S3, a hard link
of a fully written temporary file locally (atomic, fails if the name exists). Listings are never
cached, because klake decides what to delete from them.

A job asks `check_access` once before it starts work, so that missing credentials, a missing bucket
or a root that cannot be created are one line naming the bucket or path, not a botocore or delta-rs
error chain later; `describe_error` makes any storage error one line (no ANSI escapes, no XML).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

import fsspec

from layouts.store.aiven_file_io import SCHEME as AIVEN_SCHEME
from layouts.store.aiven_file_io import AivenFileIO, bucket_uri
from layouts.store.errors import ObjectConflictError, StorageAccessError, describe_error
from layouts.store.file_io import DeleteResult, FileIO, ObjectInfo, merge_deletes
from layouts.store.fsspec_file_io import FsspecFileIO
from layouts.store.local import TEMPORARY_NAME, LocalFileIO, publish_local
from layouts.store.options import StorageOptions
from layouts.store.parts import Parts, parts_of, size_of, whole
from layouts.store.ranged import RangedObject
from layouts.store.s3 import S3FileIO
from layouts.store.uris import is_local, is_s3, join

__all__ = [
    "TEMPORARY_NAME", "DeleteResult", "FileIO", "FsspecFileIO", "LocalFileIO", "ObjectConflictError", "ObjectInfo",
    "Parts", "S3FileIO", "StorageAccessError", "StorageOptions", "check_access", "delete_object", "delete_objects",
    "delete_tree", "describe_error", "ensure_object", "file_io", "filesystem", "is_local", "is_s3", "join",
    "list_dirs", "list_objects", "move_object", "normalize_uri", "object_info", "open_ranged", "open_write",
    "parts_of", "publish_local", "put_if_absent", "read_bytes", "read_view", "size_of", "whole", "write_bytes",
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


def read_view(uri: str, start: int, end: int, options: StorageOptions | None = None) -> bytes | memoryview:
    """The byte range [start, end) of an object, without a copy where it can be had without one: a local
    file's range is memory-mapped (a read-only view), any other object's is read (one ranged GET). For
    data read once and dropped soon (an append's staged rows, issue 14): the view keeps the file's pages
    mapped while it or anything made from it lives."""
    return file_io(uri, options).read_view(uri, start, end)


def check_access(uri: str, options: StorageOptions | None = None, write: bool = False) -> None:
    """Fail fast, with one line naming the bucket or path, if `uri` cannot be reached (S3: credentials,
    endpoint, bucket; one LIST) or, with `write`, not created (local: an ancestor is a file or read-only)."""
    file_io(uri, options).check_access(uri, write)


def open_ranged(uri: str, size: int, options: StorageOptions | None = None) -> BinaryIO:
    """A file object over the object `uri` of `size` bytes that reads only what is asked for, by ranged
    GETs: pyarrow reads a Parquet footer or one column through it without fetching the whole object."""
    return RangedObject(file_io(uri, options), uri, size)  # type: ignore[return-value]


def normalize_uri(uri: str) -> str:
    """`s3://bucket/key` (s3a becomes s3) or an absolute local path, without a trailing '/'."""
    if is_s3(uri):
        return "s3://" + uri.split("://", 1)[1].rstrip("/")
    return file_io(uri, StorageOptions()).path(uri)


def list_objects(uri: str, options: StorageOptions | None = None) -> list[ObjectInfo]:
    """Every object under the prefix `uri` (recursively), sorted by URI; empty if nothing is there."""
    return file_io(uri, options).list_objects(uri)


def list_dirs(uri: str, options: StorageOptions | None = None) -> list[str]:
    """URIs of the immediate sub-directories (common prefixes on S3) of `uri`, sorted."""
    return file_io(uri, options).list_dirs(uri)


def object_info(uri: str, options: StorageOptions | None = None) -> ObjectInfo | None:
    """Size and mtime of one object, or None if it does not exist."""
    return file_io(uri, options).info(uri)


def put_if_absent(uri: str, data: bytes | Parts, options: StorageOptions | None = None) -> None:
    """Create the object `uri` holding `data` (whole or in `Parts`); raise `FileExistsError` if it already
    exists.

    S3: one PUT with `If-None-Match: *` (conditional write). Local: write a temporary file beside the
    target, then `os.link` it to the final name, which is atomic and fails if the name exists, so
    readers never see a partial object.
    """
    file_io(uri, options).put_if_absent(uri, data)


def write_bytes(uri: str, data: bytes, options: StorageOptions | None = None) -> None:
    """Write (or replace) a job's output object whole: reports, rejects, answers, demo state, exported
    log dirs (one PUT on S3; a temporary file renamed over the name locally, parent directories
    created). Never used for catalogued segments, which are immutable (`put_if_absent`)."""
    file_io(uri, options).write(uri, data)


@contextmanager
def open_write(uri: str, options: StorageOptions | None = None) -> Iterator[BinaryIO]:
    """A stream writing (or replacing) the object `uri` in parts, for a job's output file too large to hold
    in memory (a multipart upload on S3); counted as one PUT of its bytes. An error inside the block may
    leave the object cut short: write under a temporary name and `move_object` it into place when done."""
    with file_io(uri, options).open_write(uri) as out:
        yield out


def move_object(source: str, target: str, options: StorageOptions | None = None) -> None:
    """Move one object to another name in the same store: a rename locally (atomic), a server-side
    copy and a delete on S3 (no bytes through this process)."""
    file_io(source, options).move(source, target)


def delete_tree(uri: str, options: StorageOptions | None = None) -> None:
    """Delete every object under the prefix `uri` (and, locally, its directories); nothing there is fine."""
    file_io(uri, options).delete_tree(uri)


def delete_object(uri: str, options: StorageOptions | None = None) -> bool:
    """Delete one object; False if it was already gone."""
    return file_io(uri, options).delete(uri)


def delete_objects(uris: Iterable[str], options: StorageOptions | None = None) -> DeleteResult:
    """Delete many objects, in as few requests as the store allows (S3: 1,000 keys a request); every
    per-object failure is reported with its reason."""
    by_scheme: dict[str, list[str]] = {}
    for uri in uris:
        scheme = "s3" if is_s3(uri) else "file" if is_local(uri) else uri.split("://", 1)[0]
        by_scheme.setdefault(scheme, []).append(uri)
    result = DeleteResult()
    for batch in by_scheme.values():
        merge_deletes(result, file_io(batch[0], options).delete_many(batch))
    return result


def ensure_object(uri: str, data: bytes | Parts, options: StorageOptions | None = None) -> bool:
    """Create `uri` with `data` (put-if-absent); True if created, False if it already held exactly `data`.

    This makes re-running an interrupted writer idempotent without ever overwriting an object: an
    existing object with other bytes raises `ObjectConflictError`.
    """
    try:
        put_if_absent(uri, data, options)
    except FileExistsError:
        if read_bytes(uri, options) != whole(data):
            raise ObjectConflictError(f"{uri} already exists with different content") from None
        return False
    return True
