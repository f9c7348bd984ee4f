"""Local paths: objects are files, created by publishing a fully written temporary file."""

from __future__ import annotations

import mmap
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import BinaryIO

from layouts.metering import record
from layouts.store.errors import StorageAccessError
from layouts.store.file_io import DeleteResult, FileIO
from layouts.store.parts import Parts, size_of, write_parts


class LocalFileIO(FileIO):
    """Local paths: objects are files; creation publishes a fully written temporary file by hard link."""

    def path(self, uri: str) -> str:
        return os.path.abspath(uri[len("file://"):] if uri.startswith("file://") else uri)

    def read_view(self, uri: str, start: int, end: int) -> bytes | memoryview:
        """The bytes [start, end) of the file, mapped (pages of the page cache, populated at once), not
        copied; the mapping lives as long as the view or anything made from it."""
        with open(self.path(uri), "rb") as file:
            end = min(end, os.fstat(file.fileno()).st_size)
            if end <= start:
                record("GET")
                return b""
            at = start - start % mmap.ALLOCATIONGRANULARITY
            mapped = mmap.mmap(file.fileno(), end - at, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                               prot=mmap.PROT_READ, offset=at)
        record("GET", read=end - start)
        return memoryview(mapped)[start - at:]

    def put_if_absent(self, uri: str, data: bytes | Parts) -> None:
        record("PUT", written=size_of(data))
        publish_local(self.path(uri), lambda out: write_parts(out, data))

    def check_access(self, uri: str, write: bool) -> None:
        """To write, the path must be a directory or creatable as one: its nearest existing ancestor is
        a directory this process may write to."""
        if not write:
            return
        existing = self.path(uri)
        while not os.path.exists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise StorageAccessError(f"{uri} cannot be created: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise StorageAccessError(f"{uri} cannot be written: {existing} is not writable by this user")

    def write(self, uri: str, data: bytes) -> None:
        """A fully written temporary file renamed over the name: a reader (or a broker loading an
        exported log dir) never sees a partial file, and a killed writer leaves the old one."""
        record("PUT", written=len(data))
        publish_local(self.path(uri), lambda out: out.write(data), replace=True)

    @contextmanager
    def open_write(self, uri: str) -> Iterator[BinaryIO]:
        path = self.path(uri)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            yield out
            written = out.tell()
        record("PUT", written=written)

    def move(self, source: str, target: str) -> None:
        """A rename (atomic), parent directories created."""
        record("CopyObject")
        record("DELETE")
        path = self.path(target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.replace(self.path(source), path)

    def delete_tree(self, uri: str) -> None:
        super().delete_tree(uri)
        shutil.rmtree(self.path(uri), ignore_errors=True)  # the directories left empty

    def _delete_run(self, uris: list[str]) -> DeleteResult:
        result = DeleteResult()
        for uri in uris:
            path = self.path(uri)
            result.requests += 1
            try:
                os.remove(path)
                result.deleted.append(uri)
            except OSError as exc:
                result.failed[uri] = exc.strerror or type(exc).__name__
        return result


TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.tmp-[0-9a-f]{32}")
"""The name `publish_local` writes a file under before publishing it as `name`: what a writer killed
meanwhile leaves behind (S3 has none: a PUT is atomic)."""


def publish_local(path: str, write: Callable[[BinaryIO], object], replace: bool = False) -> None:
    """Write a temporary file beside `path`, then hard-link it to `path`: atomic, and it fails with
    `FileExistsError` if the name is taken, so readers never see a partial object; with `replace` it
    is renamed over `path` instead (atomic too). The temporary file is removed whatever happens."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex}")
    try:
        with open(temporary, "xb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(temporary, path)
        else:
            os.link(temporary, path)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
