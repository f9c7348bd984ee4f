"""`FileIO`: one kind of storage, its operations on fsspec, and what every kind shares (listing entries,
bulk deletes run side by side)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

import fsspec

from layouts.metering import record
from layouts.store.errors import ObjectConflictError
from layouts.store.parts import Parts, whole

DELETE_THREADS = 8
"""Deletes in flight at once. A local unlink of a file written a while ago waits on the disk's metadata
(0.4 ms each on the benchmark machine, 8 threads 8x faster: benchmarks/history/2026-11-results-diary.md) and a DeleteObjects
on the network, so a bulk delete runs in up to this many threads, each on its own contiguous run of the
sorted keys (its own directories, its own full batches)."""
DELETE_CHUNK = 4_000
"""A thread of a bulk delete takes at least this many objects (four of S3's 1,000-key DeleteObjects
batches): a small delete runs in the caller's thread, in order."""


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: its URI, size in bytes and last-modified time (ms since epoch)."""

    uri: str
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]


@dataclass
class DeleteResult:
    """What a bulk delete did: URIs deleted, URIs that failed with the reason, and requests sent."""

    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    requests: int = 0


class FileIO:
    """One kind of storage: how a URI maps to an fsspec path and back, and how each operation is done
    there. The common operations are fsspec's; subclasses say what differs (atomic creation, bulk
    deletes)."""

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self.fs = fs

    def path(self, uri: str) -> str:
        """The fsspec path of `uri`."""
        return uri.split("://", 1)[1].rstrip("/")

    def uri(self, path: str) -> str:
        """The URI of an fsspec path this store returned (the inverse of `path`)."""
        return path

    def read(self, uri: str, start: int | None, end: int | None) -> bytes:
        path = self.path(uri)
        data = self.fs.cat_file(path) if start is None and end is None else self.fs.cat_file(path, start=start,
                                                                                              end=end)
        record("GET", read=len(data))
        return data

    def read_view(self, uri: str, start: int, end: int) -> bytes | memoryview:
        """The bytes [start, end) of an object, read (a store without files to map)."""
        return self.read(uri, start, end)

    def list_objects(self, uri: str) -> list[ObjectInfo]:
        path = self.path(uri)
        record("LIST")
        if not self.fs.exists(path):
            return []
        found = self.fs.find(path, detail=True)
        return sorted((self._info(p, d) for p, d in found.items() if d.get("type") == "file"),
                      key=lambda info: info.uri)

    def list_dirs(self, uri: str) -> list[str]:
        path = self.path(uri)
        record("LIST")
        if not self.fs.exists(path):
            return []
        entries = self.fs.ls(path, detail=True)
        return sorted(self.uri(e["name"].rstrip("/")) for e in entries if e.get("type") == "directory")

    def info(self, uri: str) -> ObjectInfo | None:
        path = self.path(uri)
        record("HEAD")
        try:
            detail = self.fs.info(path)
        except FileNotFoundError:
            return None
        if detail.get("type") != "file":
            return None
        return self._info(path, detail)

    def put_if_absent(self, uri: str, data: bytes | Parts) -> None:
        raise ValueError(f"put-if-absent is implemented for s3:// and local paths, not {uri!r}")

    def ensure(self, uri: str, data: bytes | Parts) -> bool:
        """Create `uri` with `data` (`put_if_absent`); True if created, False if it already held exactly `data`:
        a re-run writer is idempotent without ever overwriting an object (other bytes there raise
        `ObjectConflictError`)."""
        try:
            self.put_if_absent(uri, data)
        except FileExistsError:
            if self.read(uri, None, None) != whole(data):
                raise ObjectConflictError(f"{uri} already exists with different content") from None
            return False
        return True

    def check_access(self, uri: str, write: bool) -> None:
        """Raise `StorageAccessError` if `uri` is certainly out of reach (stores that cannot tell pass)."""

    def write(self, uri: str, data: bytes) -> None:
        record("PUT", written=len(data))
        self.fs.pipe_file(self.path(uri), data)

    @contextmanager
    def open_write(self, uri: str) -> Iterator[BinaryIO]:
        with self.fs.open(self.path(uri), "wb") as out:
            yield out
            written = out.tell()
        record("PUT", written=written)

    def move(self, source: str, target: str) -> None:
        record("CopyObject")
        self.fs.copy(self.path(source), self.path(target))
        self.delete(source)

    def delete_tree(self, uri: str) -> None:
        self.delete_many([info.uri for info in self.list_objects(uri)])

    def delete(self, uri: str) -> bool:
        record("DELETE")
        try:
            self.fs.rm_file(self.path(uri))
        except FileNotFoundError:
            return False
        return True

    def delete_many(self, uris: list[str]) -> DeleteResult:
        """Delete `uris`, several runs of them at once (`_delete_in_threads`); every per-object failure is
        reported with its reason."""
        return delete_in_threads(self._delete_run, uris, 1)

    def _delete_run(self, uris: list[str]) -> DeleteResult:
        """One thread's share of `delete_many`, one request per object (counted by the caller's thread)."""
        result = DeleteResult()
        for uri in uris:
            result.requests += 1
            try:
                self.fs.rm_file(self.path(uri))
            except FileNotFoundError:
                result.failed[uri] = "not found"
                continue
            result.deleted.append(uri)
        return result

    def _info(self, path: str, detail: dict) -> ObjectInfo:
        if "LastModified" in detail:
            mtime_ms = int(detail["LastModified"].timestamp() * 1000)
        else:
            mtime_ms = int(detail["mtime"] * 1000)
        return ObjectInfo(uri=self.uri(path), size=int(detail["size"]), mtime_ms=mtime_ms)


def delete_in_threads(delete_run: Callable[[list[str]], DeleteResult], items: list[str], unit: int) -> DeleteResult:
    """`delete_run` over `items` (sorted: a run is a directory's or a prefix's keys) cut into at most
    `DELETE_THREADS` contiguous runs of at least `DELETE_CHUNK` items and whole `unit`s (S3's batches), run
    side by side; the results merged in the runs' order, their requests counted here (a worker thread
    does not share this thread's meters)."""
    threads = max(1, min(DELETE_THREADS, len(items) // DELETE_CHUNK))
    step = max(unit, -(-len(items) // threads // unit) * unit)
    runs = [items[start:start + step] for start in range(0, len(items), step)]
    if len(runs) > 1:
        with ThreadPoolExecutor(len(runs), thread_name_prefix="klake-delete") as pool:
            parts = list(pool.map(delete_run, runs))
    else:
        parts = [delete_run(run) for run in runs]
    result = DeleteResult()
    for part in parts:
        merge_deletes(result, part)
    if result.requests:
        record("DELETE", requests=result.requests)
    return result


def merge_deletes(result: DeleteResult, part: DeleteResult) -> None:
    result.deleted += part.deleted
    result.failed.update(part.failed)
    result.requests += part.requests
