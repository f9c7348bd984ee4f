"""Open local paths and `s3://` URIs through fsspec, with endpoint and credentials from the environment.

Credentials follow the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`); an S3-compatible endpoint comes from
`KLAKE_S3_ENDPOINT_URL` or `AWS_ENDPOINT_URL`. Secrets are never part of a repr, a log line or a report.

Objects are written with put-if-absent only (`put_if_absent`): `If-None-Match: *` on S3, a hard link
of a fully written temporary file locally (atomic, fails if the name exists). Listings are never
cached, because klake decides what to delete from them.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import fsspec

S3_SCHEMES = ("s3://", "s3a://")
S3_DELETE_BATCH = 1000  # DeleteObjects takes at most 1,000 keys per request


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
"""Object-store requests made by this process, by verb (GET, HEAD, LIST, PUT, DELETE), for run reports
and for tests that bound how many requests an operation needs."""


@contextmanager
def counting_requests() -> Iterator[Counter[str]]:
    """The requests made inside the block, by verb."""
    before = REQUESTS.copy()
    delta: Counter[str] = Counter()
    try:
        yield delta
    finally:
        delta.update(REQUESTS - before)


def read_bytes(uri: str, options: StorageOptions | None = None, start: int | None = None,
               end: int | None = None) -> bytes:
    """Read an object, or the byte range [start, end) of it (one ranged GET on S3)."""
    fs, path = filesystem(uri, options)
    REQUESTS["GET"] += 1
    if start is None and end is None:
        return fs.cat_file(path)
    return fs.cat_file(path, start=start, end=end)


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
