"""Objects on local paths and `s3://` URIs through fsspec: the storage seam every klake module goes through.

`file_io(uri, options)` chooses a `FileIO` by URI scheme, as pyiceberg's `load_file_io` does: `LocalFileIO`
for paths and `file://`, `S3FileIO` for `s3://`/`s3a://`, `FsspecFileIO` (read, list, replace, delete;
no put-if-absent) for any other fsspec protocol. The module-level functions are the API callers use;
each resolves its `FileIO` and meters the request (`layouts.metering`).

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

import io
import mmap
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import BinaryIO

import fsspec

from engine.errors import KlakeError
from layouts.metering import active_meters, counting_into, record

S3_SCHEMES = ("s3://", "s3a://")
S3_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request
DELETE_THREADS = 8
"""Deletes in flight at once. A local unlink of a file written a while ago waits on the disk's metadata
(0.4 ms each on the benchmark machine, 8 threads 8x faster: benchmarks/history/2026-11-results-diary.md) and a DeleteObjects
on the network, so a bulk delete runs in up to this many threads, each on its own contiguous run of the
sorted keys (its own directories, its own full batches)."""
DELETE_CHUNK = 4 * S3_DELETE_BATCH
"""A thread of a bulk delete takes at least this many objects: a small delete runs in the caller's thread,
in order."""


Parts = Sequence[bytes]
"""An object's bytes as consecutive parts (a segment as its batches were encoded): written part after part,
never joined first, which would hold a second copy of a whole segment in memory (issue 14)."""
_WHOLE = (bytes, bytearray, memoryview)


def parts_of(data: bytes | Parts) -> Parts:
    """`data` as its sequence of parts (one part if it is whole)."""
    return [data] if isinstance(data, _WHOLE) else data


def whole(data: bytes | Parts) -> bytes:
    """`data` as one bytes object, joined only if it is in parts."""
    return bytes(data) if isinstance(data, _WHOLE) else b"".join(data)


def size_of(data: bytes | Parts) -> int:
    """How many bytes `data` (whole or in parts) holds."""
    return sum(map(len, parts_of(data)))


def write_parts(out: BinaryIO, data: bytes | Parts) -> None:
    """Write `data` to `out` part after part (a large part goes straight to the file, not through the
    writer's buffer)."""
    out.writelines(parts_of(data))


@dataclass(frozen=True)
class StorageOptions:
    """Where and how to reach object storage. `repr` hides the secrets."""

    endpoint_url: str | None = None
    key: str | None = field(default=None, repr=False)
    secret: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    region: str | None = None

    @classmethod
    def from_env(cls, endpoint_url: str | None = None) -> StorageOptions:
        env = os.environ
        return cls(
            endpoint_url=endpoint_url or env.get("KLAKE_S3_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL"),
            key=env.get("AWS_ACCESS_KEY_ID"),
            secret=env.get("AWS_SECRET_ACCESS_KEY"),
            token=env.get("AWS_SESSION_TOKEN"),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
        )

    def s3fs_kwargs(self) -> dict:
        client: dict = {}
        if self.endpoint_url:
            client["endpoint_url"] = self.endpoint_url
        if self.region:
            client["region_name"] = self.region
        kwargs: dict = {"client_kwargs": client, "use_listings_cache": False}
        if self.key:
            kwargs["key"] = self.key
        if self.secret:
            kwargs["secret"] = self.secret
        if self.token:
            kwargs["token"] = self.token
        return kwargs

    def delta_storage_options(self) -> dict[str, str]:
        """The same settings under delta-rs (object_store) option names; `AWS_ALLOW_HTTP` for http endpoints."""
        opts: dict[str, str] = {}
        if self.endpoint_url:
            opts["AWS_ENDPOINT_URL"] = self.endpoint_url
            if self.endpoint_url.startswith("http://"):
                opts["AWS_ALLOW_HTTP"] = "true"
        if self.key:
            opts["AWS_ACCESS_KEY_ID"] = self.key
        if self.secret:
            opts["AWS_SECRET_ACCESS_KEY"] = self.secret
        if self.token:
            opts["AWS_SESSION_TOKEN"] = self.token
        if self.region:
            opts["AWS_REGION"] = self.region
        return opts


class StorageAccessError(KlakeError):
    """The store cannot be reached as a job needs it: credentials, bucket, endpoint or local path."""


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_XML_ERROR = re.compile(r"(<\?xml[^>]*>\s*)?<Error>.*?</Error>", re.S)
_S3_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
              "AllAccessDisabled")


def describe_error(exc: BaseException) -> str:
    """One line for an error of the storage stack: delta-rs' chains (`↳` lines with ANSI colours and an
    S3 XML body) become `what: why: S3 code: message`."""
    def code_and_message(match: re.Match[str]) -> str:
        found = [re.search(f"<{tag}>(.*?)</{tag}>", match.group(0), re.S) for tag in ("Code", "Message")]
        return ": ".join(m.group(1).strip() for m in found if m is not None)

    text = _XML_ERROR.sub(code_and_message, _ANSI_ESCAPE.sub("", str(exc)))
    return ": ".join(part for line in text.splitlines() if (part := line.strip().lstrip("↳").strip()))


def _s3_error_code(exc: BaseException) -> str | None:
    """The S3 error code of a botocore error, or of the one s3fs translated into an OSError."""
    for error in (exc, exc.__cause__):
        response = getattr(error, "response", None)
        if isinstance(response, dict):
            return response.get("Error", {}).get("Code")
    return None


def _s3_problem(bucket: str, exc: Exception) -> str:
    """What is wrong, in the user's terms, when the first request to `bucket` failed."""
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError, PartialCredentialsError

    code = _s3_error_code(exc)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ("no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN "
                "for temporary ones) in the environment")
    if code == "NoSuchBucket":
        return f"bucket {bucket} does not exist"
    if code in _S3_DENIED or isinstance(exc, PermissionError):
        return (f"access denied to bucket {bucket} ({code or type(exc).__name__}: {describe_error(exc)}): check "
                "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN")
    if isinstance(exc, EndpointConnectionError):
        return f"cannot reach the S3 endpoint ({describe_error(exc)}): check storage.endpoint_url or KLAKE_S3_ENDPOINT_URL"
    return describe_error(exc)


def is_s3(uri: str) -> bool:
    return uri.startswith(S3_SCHEMES)


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


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
        return _delete_in_threads(self._delete_run, uris, 1)

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


class S3FileIO(FileIO):
    """S3 and S3-compatible stores: conditional PUTs (`If-None-Match: *`), batched DeleteObjects."""

    def uri(self, path: str) -> str:
        return "s3://" + path

    def put_if_absent(self, uri: str, data: bytes | Parts) -> None:
        record("PUT", written=size_of(data))
        self.fs.pipe_file(self.path(uri), whole(data), mode="create")

    def check_access(self, uri: str, write: bool) -> None:
        """One LIST of at most one key under `uri`: it proves the credentials, the endpoint and the bucket.
        (Write permission cannot be proven without writing; a refused write fails its partition later.)"""
        bucket, _, prefix = self.path(uri).partition("/")
        record("LIST")
        try:
            self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=1)
        except Exception as exc:
            raise StorageAccessError(f"{uri}: {_s3_problem(bucket, exc)}") from None

    def delete_many(self, uris: list[str]) -> DeleteResult:
        """One DeleteObjects request per bucket and batch of at most 1,000 keys, several requests at once
        (`_delete_in_threads`). Per-key errors that S3 returns are reported in `failed`, never dropped
        (s3fs' own `rm` omits them)."""
        result = DeleteResult()
        by_bucket: dict[str, list[str]] = {}
        for uri in uris:
            bucket, key = self.path(uri).split("/", 1)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            _merge(result, _delete_in_threads(lambda run, bucket=bucket: self._delete_keys(bucket, run), keys,
                                              S3_DELETE_BATCH))
        return result

    def _delete_keys(self, bucket: str, keys: list[str]) -> DeleteResult:
        """One thread's share of `delete_many`: its keys in batches of at most 1,000, one request each."""
        result = DeleteResult()
        for start in range(0, len(keys), S3_DELETE_BATCH):
            batch = keys[start:start + S3_DELETE_BATCH]
            response = self.fs.call_s3("delete_objects", Bucket=bucket,
                                       Delete={"Objects": [{"Key": k} for k in batch], "Quiet": False})
            result.requests += 1
            result.deleted.extend(f"s3://{bucket}/{d['Key']}" for d in response.get("Deleted", []))
            for error in response.get("Errors", []):
                result.failed[f"s3://{bucket}/{error['Key']}"] = f"{error.get('Code')}: {error.get('Message')}"
        return result


class FsspecFileIO(FileIO):
    """Any other fsspec protocol (`memory://`, …): reads, listings, replacing writes and deletes, but no
    atomic creation, so no segment can be written there."""

    def __init__(self, fs: fsspec.AbstractFileSystem, protocol: str) -> None:
        super().__init__(fs)
        self.protocol = protocol

    def path(self, uri: str) -> str:
        return uri.split("://", 1)[1]


def file_io(uri: str, options: StorageOptions | None = None) -> FileIO:
    """The `FileIO` for `uri`'s scheme; S3 stores take `options`, by default from the environment.

    Nothing is cached here: fsspec caches its filesystems itself and drops them after a fork, which
    Spark's Python workers are, so a cache of ours would hand a forked worker its parent's event loop.
    """
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


class _RangedObject(io.RawIOBase):
    """A read-only, seekable view of one object whose every read is one ranged GET, counted into the
    meters active where it was opened (pyarrow reads through it from its own threads)."""

    def __init__(self, uri: str, size: int, options: StorageOptions | None) -> None:
        super().__init__()
        self.uri, self.size, self.options, self.position = uri, size, options, 0
        self.meters = active_meters()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(base + offset, 0)
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:
        end = min(self.position + len(buffer), self.size)
        if end <= self.position:
            return 0
        with counting_into(self.meters):
            data = read_bytes(self.uri, self.options, self.position, end)
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)


def open_ranged(uri: str, size: int, options: StorageOptions | None = None) -> BinaryIO:
    """A file object over the object `uri` of `size` bytes that reads only what is asked for, by ranged
    GETs: pyarrow reads a Parquet footer or one column through it without fetching the whole object."""
    return _RangedObject(uri, size, options)  # type: ignore[return-value]


def join(base: str, *parts: str) -> str:
    """Join key parts with '/', keeping the scheme of `base`."""
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


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


def _delete_in_threads(delete_run: Callable[[list[str]], DeleteResult], items: list[str], unit: int) -> DeleteResult:
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
        _merge(result, part)
    if result.requests:
        record("DELETE", requests=result.requests)
    return result


def _merge(result: DeleteResult, part: DeleteResult) -> None:
    result.deleted += part.deleted
    result.failed.update(part.failed)
    result.requests += part.requests


def delete_objects(uris: Iterable[str], options: StorageOptions | None = None) -> DeleteResult:
    """Delete many objects, in as few requests as the store allows (S3: 1,000 keys a request); every
    per-object failure is reported with its reason."""
    by_scheme: dict[str, list[str]] = {}
    for uri in uris:
        scheme = "s3" if is_s3(uri) else "file" if is_local(uri) else uri.split("://", 1)[0]
        by_scheme.setdefault(scheme, []).append(uri)
    result = DeleteResult()
    for batch in by_scheme.values():
        _merge(result, file_io(batch[0], options).delete_many(batch))
    return result


class ObjectConflictError(FileExistsError):
    """An object already exists under a key with different bytes than the ones to be written."""


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
