"""Open local paths and `s3://` URIs through fsspec, with endpoint and credentials from the environment.

Credentials follow the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`); an S3-compatible endpoint comes from
`KLAKE_S3_ENDPOINT_URL` or `AWS_ENDPOINT_URL`. Secrets are never part of a repr, a log line or a report.

Objects are written with put-if-absent only (`put_if_absent`): `If-None-Match: *` on S3, a hard link
of a fully written temporary file locally (atomic, fails if the name exists). Listings are never
cached, because klake decides what to delete from them.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import BinaryIO

import fsspec
from fsspec.asyn import sync

S3_SCHEMES = ("s3://", "s3a://")
S3_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request
S3_MIN_PART_SIZE = 5 * 1024**2  # every part of a multipart upload but the last must be >= 5 MiB
S3_MAX_PART_SIZE = 5 * 1024**3  # and no part (uploaded or copied) may exceed 5 GiB


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


def is_s3(uri: str) -> bool:
    return uri.startswith(S3_SCHEMES)


def filesystem(uri: str, options: StorageOptions | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `uri` and the path within it (no scheme for s3, absolute locally)."""
    options = options or StorageOptions.from_env()
    if is_s3(uri):
        fs = fsspec.filesystem("s3", **options.s3fs_kwargs())
        return fs, uri.split("://", 1)[1].rstrip("/")
    if "://" in uri and not uri.startswith("file://"):
        protocol = uri.split("://", 1)[0]
        return fsspec.filesystem(protocol), uri.split("://", 1)[1]
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return fsspec.filesystem("file"), os.path.abspath(path)


REQUESTS: Counter[str] = Counter()
"""Object-store requests made by this process, by verb (GET, HEAD, LIST, PUT, DELETE, and S3's multipart
calls by operation name, e.g. UploadPartCopy), for run reports and for tests that bound how many
requests an operation needs."""

TRANSFERRED: Counter[str] = Counter()
"""Object bytes moved by this process: `read` (GET bodies) and `written` (PUT bodies), for run reports."""


@contextmanager
def _counting(counter: Counter[str]) -> Iterator[Counter[str]]:
    before = counter.copy()
    delta: Counter[str] = Counter()
    try:
        yield delta
    finally:
        delta.update(counter - before)


def counting_requests() -> AbstractContextManager[Counter[str]]:
    """The requests made inside the block, by verb."""
    return _counting(REQUESTS)


def counting_bytes() -> AbstractContextManager[Counter[str]]:
    """The object bytes read and written inside the block."""
    return _counting(TRANSFERRED)


def read_bytes(uri: str, options: StorageOptions | None = None, start: int | None = None,
               end: int | None = None) -> bytes:
    """Read an object, or the byte range [start, end) of it (one ranged GET on S3)."""
    fs, path = filesystem(uri, options)
    REQUESTS["GET"] += 1
    data = fs.cat_file(path) if start is None and end is None else fs.cat_file(path, start=start, end=end)
    TRANSFERRED["read"] += len(data)
    return data


def join(base: str, *parts: str) -> str:
    """Join key parts with '/', keeping the scheme of `base`."""
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def normalize_uri(uri: str) -> str:
    """`s3://bucket/key` (s3a becomes s3) or an absolute local path, without a trailing '/'."""
    if is_s3(uri):
        return "s3://" + uri.split("://", 1)[1].rstrip("/")
    _, path = filesystem(uri, StorageOptions())
    return path


def _uri_of(uri_like: str, path: str) -> str:
    """Turn an fsspec path back into a URI of the same kind as `uri_like`."""
    return "s3://" + path if is_s3(uri_like) else path


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: its URI, size in bytes and last-modified time (ms since epoch)."""

    uri: str
    size: int
    mtime_ms: int

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[-1]


def _object_info(uri_like: str, path: str, detail: dict) -> ObjectInfo:
    if "LastModified" in detail:
        mtime_ms = int(detail["LastModified"].timestamp() * 1000)
    else:
        mtime_ms = int(detail["mtime"] * 1000)
    return ObjectInfo(uri=_uri_of(uri_like, path), size=int(detail["size"]), mtime_ms=mtime_ms)


def list_objects(uri: str, options: StorageOptions | None = None) -> list[ObjectInfo]:
    """Every object under the prefix `uri` (recursively), sorted by URI; empty if nothing is there."""
    fs, path = filesystem(uri, options)
    REQUESTS["LIST"] += 1
    if not fs.exists(path):
        return []
    found = fs.find(path, detail=True)
    return sorted((_object_info(uri, p, d) for p, d in found.items() if d.get("type") == "file"),
                  key=lambda info: info.uri)


def list_dirs(uri: str, options: StorageOptions | None = None) -> list[str]:
    """URIs of the immediate sub-directories (common prefixes on S3) of `uri`, sorted."""
    fs, path = filesystem(uri, options)
    REQUESTS["LIST"] += 1
    if not fs.exists(path):
        return []
    entries = fs.ls(path, detail=True)
    return sorted(_uri_of(uri, e["name"].rstrip("/")) for e in entries if e.get("type") == "directory")


def object_info(uri: str, options: StorageOptions | None = None) -> ObjectInfo | None:
    """Size and mtime of one object, or None if it does not exist."""
    fs, path = filesystem(uri, options)
    REQUESTS["HEAD"] += 1
    try:
        detail = fs.info(path)
    except FileNotFoundError:
        return None
    if detail.get("type") != "file":
        return None
    return _object_info(uri, path, detail)


def put_if_absent(uri: str, data: bytes, options: StorageOptions | None = None) -> None:
    """Create the object `uri` holding `data`; raise `FileExistsError` if it already exists.

    S3: one PUT with `If-None-Match: *` (conditional write). Local: write a temporary file beside the
    target, then `os.link` it to the final name, which is atomic and fails if the name exists, so
    readers never see a partial object.
    """
    fs, path = filesystem(uri, options)
    REQUESTS["PUT"] += 1
    TRANSFERRED["written"] += len(data)
    if is_s3(uri):
        fs.pipe_file(path, data, mode="create")
        return
    if "file" not in fs.protocol:
        raise ValueError(f"put-if-absent is implemented for s3:// and local paths, not {uri!r}")
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex}")
    with open(temporary, "xb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, path)
    finally:
        os.unlink(temporary)


def write_bytes(uri: str, data: bytes, options: StorageOptions | None = None) -> None:
    """Write (or replace) a job's output object: reports, rejects, answers, demo state. Never used for
    segments, which are immutable (`put_if_absent`). Local parent directories are created."""
    fs, path = filesystem(uri, options)
    if not is_s3(uri):
        fs.makedirs(os.path.dirname(path), exist_ok=True)
    REQUESTS["PUT"] += 1
    TRANSFERRED["written"] += len(data)
    fs.pipe_file(path, data)


def delete_object(uri: str, options: StorageOptions | None = None) -> bool:
    """Delete one object; False if it was already gone."""
    fs, path = filesystem(uri, options)
    REQUESTS["DELETE"] += 1
    try:
        fs.rm_file(path)
    except FileNotFoundError:
        return False
    return True


@dataclass
class DeleteResult:
    """What a bulk delete did: URIs deleted, URIs that failed with the reason, and requests sent."""

    deleted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    requests: int = 0


def delete_objects(uris: Iterable[str], options: StorageOptions | None = None) -> DeleteResult:
    """Delete many objects: on S3 one DeleteObjects request per bucket and batch of at most 1,000 keys.

    Per-key errors that S3 returns are reported in `failed`, never dropped (s3fs' own `rm` omits them).
    """
    result = DeleteResult()
    s3_by_bucket: dict[str, list[str]] = {}
    for uri in uris:
        if is_s3(uri):
            bucket, key = normalize_uri(uri)[len("s3://"):].split("/", 1)
            s3_by_bucket.setdefault(bucket, []).append(key)
        else:
            path = normalize_uri(uri)
            result.requests += 1
            REQUESTS["DELETE"] += 1
            try:
                os.remove(path)
                result.deleted.append(path)
            except OSError as exc:
                result.failed[path] = exc.strerror or type(exc).__name__
    for bucket, keys in s3_by_bucket.items():
        fs, _ = filesystem(f"s3://{bucket}", options)
        for start in range(0, len(keys), S3_DELETE_BATCH):
            batch = keys[start:start + S3_DELETE_BATCH]
            response = fs.call_s3("delete_objects", Bucket=bucket,
                                  Delete={"Objects": [{"Key": k} for k in batch], "Quiet": False})
            result.requests += 1
            REQUESTS["DELETE"] += 1
            result.deleted.extend(f"s3://{bucket}/{d['Key']}" for d in response.get("Deleted", []))
            for error in response.get("Errors", []):
                result.failed[f"s3://{bucket}/{error['Key']}"] = f"{error.get('Code')}: {error.get('Message')}"
    return result


class ObjectConflictError(FileExistsError):
    """An object already exists under a key with different bytes than the ones to be written."""


def ensure_object(uri: str, data: bytes, options: StorageOptions | None = None) -> bool:
    """Create `uri` with `data` (put-if-absent); True if created, False if it already held exactly `data`.

    This makes re-running an interrupted writer idempotent without ever overwriting an object: an
    existing object with other bytes raises `ObjectConflictError`.
    """
    try:
        put_if_absent(uri, data, options)
    except FileExistsError:
        if read_bytes(uri, options) != data:
            raise ObjectConflictError(f"{uri} already exists with different content") from None
        return False
    return True


@dataclass(frozen=True)
class ExtendResult:
    """What `put_extending` did: whether it created the object (False: it already held exactly these bytes),
    how many leading bytes were copied in place from the prefix object and how many were sent."""

    created: bool
    copied_bytes: int
    sent_bytes: int


def put_extending(uri: str, data: bytes, prefix_uri: str, prefix_size: int,
                  options: StorageOptions | None = None) -> ExtendResult:
    """Create `uri` holding `data`, whose first `prefix_size` bytes are the whole existing object
    `prefix_uri`, sending only the tail where the store can copy the prefix in place.

    Same contract as `ensure_object`: put-if-absent, `created` False if `uri` already holds exactly
    `data`, `ObjectConflictError` if it holds other bytes. The prefix's size is checked (one HEAD); its
    bytes are the caller's word (objects are immutable), so a wrong prefix would go unnoticed.

    S3, `prefix_size` >= 5 MiB: one multipart upload of UploadPartCopy parts of the prefix and the tail
    as the last part, completed with `If-None-Match: *` and aborted on any failure. Below 5 MiB the
    prefix cannot be a part (only the last part may be smaller), so `data` goes up in one conditional
    PUT. Local: a copy of the prefix file plus the tail, linked into place like `put_if_absent`.
    """
    if not 0 <= prefix_size <= len(data):
        raise ValueError(f"prefix of {prefix_size} bytes for an object of {len(data)} bytes")
    if is_s3(uri) and is_s3(prefix_uri) and prefix_size >= S3_MIN_PART_SIZE:
        extend = _extend_s3
    elif _is_local(uri) and _is_local(prefix_uri):
        extend = _extend_local
    else:
        return ExtendResult(ensure_object(uri, data, options), 0, len(data))
    _check_prefix_size(prefix_uri, prefix_size, options)
    result = ExtendResult(True, prefix_size, len(data) - prefix_size)
    try:
        extend(uri, data, prefix_uri, prefix_size, options)
    except FileExistsError:
        if read_bytes(uri, options) != data:
            raise ObjectConflictError(f"{uri} already exists with different content") from None
        return replace(result, created=False)
    return result


def _is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def _check_prefix_size(prefix_uri: str, prefix_size: int, options: StorageOptions | None) -> None:
    """A prefix object of another size than the caller's would silently give a wrong object."""
    info = object_info(prefix_uri, options)
    if info is None:
        raise FileNotFoundError(f"prefix object {prefix_uri} does not exist")
    if info.size != prefix_size:
        raise ValueError(f"prefix object {prefix_uri} has {info.size} bytes, not {prefix_size}")


def _extend_local(uri: str, data: bytes, prefix_uri: str, prefix_size: int,
                  options: StorageOptions | None) -> None:
    """Copy the prefix file, append the tail, publish with put-if-absent (`FileExistsError` if taken)."""
    path, source = normalize_uri(uri), normalize_uri(prefix_uri)
    REQUESTS["PUT"] += 1
    TRANSFERRED["written"] += len(data) - prefix_size

    def write(out: BinaryIO) -> None:
        with open(source, "rb") as prefix:
            shutil.copyfileobj(prefix, out)
        if out.tell() != prefix_size:
            raise ValueError(f"prefix file {source} changed size while being copied")
        out.write(memoryview(data)[prefix_size:])

    _publish_local(path, write)


def _publish_local(path: str, write: Callable[[BinaryIO], None]) -> None:
    """Write a temporary file beside `path`, then hard-link it to `path`: atomic, and it fails with
    `FileExistsError` if the name is taken, so readers never see a partial object. The temporary
    file is removed whatever happens."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex}")
    try:
        with open(temporary, "xb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.link(temporary, path)
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temporary)


def _bucket_and_key(uri: str) -> tuple[str, str]:
    bucket, key = normalize_uri(uri)[len("s3://"):].split("/", 1)
    return bucket, key


def _extend_s3(uri: str, data: bytes, prefix_uri: str, prefix_size: int,
               options: StorageOptions | None) -> None:
    fs, path = filesystem(uri, options)
    bucket, key = _bucket_and_key(uri)
    source_bucket, source_key = _bucket_and_key(prefix_uri)
    sync(fs.loop, _multipart_extend, fs, bucket, key, data, {"Bucket": source_bucket, "Key": source_key},
         prefix_size)
    fs.invalidate_cache(path)


async def _multipart_extend(fs: fsspec.AbstractFileSystem, bucket: str, key: str, data: bytes,
                            source: dict[str, str], prefix_size: int) -> None:
    """Create, fill and complete one multipart upload; abort it on any failure so that no parts linger
    (billed, invisible) and the key stays absent."""
    REQUESTS["CreateMultipartUpload"] += 1
    upload = await fs._call_s3("create_multipart_upload", Bucket=bucket, Key=key)
    target = {"Bucket": bucket, "Key": key, "UploadId": upload["UploadId"]}
    try:
        parts = await _upload_parts(fs, target, data, source, prefix_size)
        REQUESTS["CompleteMultipartUpload"] += 1
        await fs._call_s3("complete_multipart_upload", **target, MultipartUpload={"Parts": parts},
                          IfNoneMatch="*")
    except BaseException:
        await _abort_upload(fs, target)
        raise


async def _upload_parts(fs: fsspec.AbstractFileSystem, target: dict[str, str], data: bytes,
                        source: dict[str, str], prefix_size: int) -> list[dict]:
    """Copy the prefix and send the tail as parts, all at once; wait for every part before failing so
    that the abort does not race parts still in flight."""
    copies = _part_ranges(0, prefix_size)
    tails = _part_ranges(prefix_size, len(data))
    calls = [_copy_part(fs, target, number, source, part) for number, part in enumerate(copies, 1)]
    calls += [_upload_part(fs, target, number, data[start:end])
              for number, (start, end) in enumerate(tails, len(copies) + 1)]
    etags = await asyncio.gather(*calls, return_exceptions=True)
    for etag in etags:
        if isinstance(etag, BaseException):
            raise etag
    return [{"PartNumber": number, "ETag": etag} for number, etag in enumerate(etags, 1)]


def _part_ranges(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) cut into the fewest near-equal parts of at most `S3_MAX_PART_SIZE`; the parts of a
    cut range are over half that size, so none is under S3's 5 MiB minimum."""
    length = end - start
    if length <= 0:
        return []
    count = -(-length // S3_MAX_PART_SIZE)
    step = -(-length // count)
    return [(at, min(at + step, end)) for at in range(start, end, step)]


async def _copy_part(fs: fsspec.AbstractFileSystem, target: dict[str, str], number: int,
                     source: dict[str, str], part: tuple[int, int]) -> str:
    """UploadPartCopy with an explicit range: S3 copies the bytes, none pass through this process."""
    REQUESTS["UploadPartCopy"] += 1
    start, end = part
    out = await fs._call_s3("upload_part_copy", **target, PartNumber=number, CopySource=source,
                            CopySourceRange=f"bytes={start}-{end - 1}")
    return out["CopyPartResult"]["ETag"]


async def _upload_part(fs: fsspec.AbstractFileSystem, target: dict[str, str], number: int, body: bytes) -> str:
    REQUESTS["UploadPart"] += 1
    TRANSFERRED["written"] += len(body)
    out = await fs._call_s3("upload_part", **target, PartNumber=number, Body=body)
    return out["ETag"]


async def _abort_upload(fs: fsspec.AbstractFileSystem, target: dict[str, str]) -> None:
    """Best effort: the original error matters more; a bucket lifecycle rule
    (AbortIncompleteMultipartUpload) reclaims an upload whose abort failed."""
    REQUESTS["AbortMultipartUpload"] += 1
    with suppress(Exception):
        await fs._call_s3("abort_multipart_upload", **target)
