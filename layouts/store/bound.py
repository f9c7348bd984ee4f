"""`Store`: a storage root bound to the `FileIO` that reaches it, carried by a job instead of a `(root, options)`
pair threaded through every call (issue 28).

Its operations take absolute URIs (`uri(*parts)` makes one of a key under the root), so a store also reaches
an object outside its root, such as an external segment: a URI of another scheme than the root's gets the
`FileIO` of its own scheme, made from the same options, as `layouts.store.file_io` would.

A store crosses into Spark tasks by pickle: only the root and the options travel, and the `FileIO` is made
again where it is used, also after a fork, since fsspec drops its filesystems in a forked child (see
`layouts.store.file_io`). `repr` names the root alone; the options' secrets never show.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

import fsspec

from layouts.store import file_io, normalize_uri
from layouts.store.file_io import DeleteResult, FileIO, ObjectInfo, merge_deletes
from layouts.store.options import StorageOptions
from layouts.store.parts import Parts
from layouts.store.ranged import RangedObject
from layouts.store.uris import is_local, is_s3, join


def _scheme(uri: str) -> str:
    return "s3" if is_s3(uri) else "file" if is_local(uri) else uri.split("://", 1)[0]


class Store:
    """A root URI (normalized: `s3://bucket/key` or an absolute path) and the `FileIO` that reaches it; the
    options default to the environment's, read where the `FileIO` is made (a Spark executor's own)."""

    def __init__(self, root: str, options: StorageOptions | None = None) -> None:
        self.root = normalize_uri(root)
        self.options = options
        self._io: FileIO | None = None
        self._pid = 0

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Store) and (self.root, self.options) == (other.root, other.options)

    def __hash__(self) -> int:
        return hash(self.root)

    def __getstate__(self) -> tuple[str, StorageOptions | None]:
        return self.root, self.options

    def __setstate__(self, state: tuple[str, StorageOptions | None]) -> None:
        self.root, self.options = state
        self._io, self._pid = None, 0

    @property
    def io(self) -> FileIO:
        """The root's `FileIO`, made again in a forked process (fsspec's filesystems do not survive a fork)."""
        if self._io is None or self._pid != os.getpid():
            self._io, self._pid = file_io(self.root, self.options), os.getpid()
        return self._io

    def at(self, root: str) -> Store:
        """A store at another root reached with the same options (a job's second root, a catalog elsewhere)."""
        return Store(root, self.options)

    def delta_storage_options(self) -> dict[str, str] | None:
        """What delta-rs needs to reach a table under the root: the S3 settings (`StorageOptions`), None locally."""
        return (self.options or StorageOptions.from_env()).delta_storage_options() if is_s3(self.root) else None

    def uri(self, *parts: str) -> str:
        """The URI of a key under the root."""
        return join(self.root, *parts)

    def _io_for(self, uri: str) -> FileIO:
        return self.io if _scheme(uri) == _scheme(self.root) else file_io(uri, self.options)

    def filesystem(self, uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
        """The fsspec filesystem and path of `uri`, for libraries that take one (pyarrow datasets)."""
        io = self._io_for(uri)
        return io.fs, io.path(uri)

    def check_access(self, write: bool = False, uri: str | None = None) -> None:
        """Fail fast with one line naming the bucket or path if the root (or `uri`) cannot be reached or,
        with `write`, not created (`FileIO.check_access`)."""
        target = self.root if uri is None else uri
        self._io_for(target).check_access(target, write)

    def read(self, uri: str, start: int | None = None, end: int | None = None) -> bytes:
        """An object, or its byte range [start, end) (one ranged GET on S3)."""
        return self._io_for(uri).read(uri, start, end)

    def read_view(self, uri: str, start: int, end: int) -> bytes | memoryview:
        """The range [start, end) without a copy where possible (a local file is memory-mapped)."""
        return self._io_for(uri).read_view(uri, start, end)

    def open_ranged(self, uri: str, size: int) -> BinaryIO:
        """A file object over `uri` (`size` bytes) reading only what is asked, by ranged GETs (a Parquet
        footer or one column without the whole object)."""
        return RangedObject(self._io_for(uri), uri, size)  # type: ignore[return-value]

    def list_objects(self, uri: str | None = None) -> list[ObjectInfo]:
        """Every object under the prefix `uri` (the root by default), recursively, sorted by URI."""
        target = self.root if uri is None else uri
        return self._io_for(target).list_objects(target)

    def list_dirs(self, uri: str | None = None) -> list[str]:
        """URIs of the immediate sub-directories of `uri` (the root by default), sorted."""
        target = self.root if uri is None else uri
        return self._io_for(target).list_dirs(target)

    def info(self, uri: str) -> ObjectInfo | None:
        """Size and mtime of one object, or None if it does not exist."""
        return self._io_for(uri).info(uri)

    def put_if_absent(self, uri: str, data: bytes | Parts) -> None:
        """Create `uri` holding `data`; `FileExistsError` if it exists (`If-None-Match: *` on S3, a hard link
        of a fully written temporary file locally)."""
        self._io_for(uri).put_if_absent(uri, data)

    def ensure(self, uri: str, data: bytes | Parts) -> bool:
        """Create `uri` with `data`; True if created, False if it already held exactly `data`, so that a re-run
        writer is idempotent without overwriting: other bytes there raise `ObjectConflictError`."""
        return self._io_for(uri).ensure(uri, data)

    def write(self, uri: str, data: bytes) -> None:
        """Write or replace a job's output object whole (reports, rejects, exported files); never a
        catalogued segment, which is immutable."""
        self._io_for(uri).write(uri, data)

    @contextmanager
    def open_write(self, uri: str) -> Iterator[BinaryIO]:
        """A stream writing or replacing `uri` in parts (a multipart upload on S3); an error may leave the
        object cut short, so write under a temporary name and `move` it into place."""
        with self._io_for(uri).open_write(uri) as out:
            yield out

    def move(self, source: str, target: str) -> None:
        """Move one object within the store: a rename locally, a server-side copy and delete on S3."""
        self._io_for(source).move(source, target)

    def delete(self, uri: str) -> bool:
        """Delete one object; False if it was already gone."""
        return self._io_for(uri).delete(uri)

    def delete_many(self, uris: Iterable[str]) -> DeleteResult:
        """Delete many objects in as few requests as each store allows (S3: 1,000 keys a request), every
        failure reported with its reason."""
        by_scheme: dict[str, list[str]] = {}
        for uri in uris:
            by_scheme.setdefault(_scheme(uri), []).append(uri)
        result = DeleteResult()
        for batch in by_scheme.values():
            merge_deletes(result, self._io_for(batch[0]).delete_many(batch))
        return result

    def delete_tree(self, uri: str) -> None:
        """Delete every object under the prefix `uri` (locally, its directories too); nothing there is fine."""
        self._io_for(uri).delete_tree(uri)
