"""Open local paths and `s3://` URIs through fsspec, with endpoint and credentials from the environment.

Credentials follow the standard AWS variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `AWS_REGION`/`AWS_DEFAULT_REGION`); an S3-compatible endpoint comes from
`KLAKE_S3_ENDPOINT_URL` or `AWS_ENDPOINT_URL`. Secrets are never part of a repr, a log line or a report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import fsspec


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
        kwargs: dict = {"client_kwargs": client}
        if self.key:
            kwargs["key"] = self.key
        if self.secret:
            kwargs["secret"] = self.secret
        if self.token:
            kwargs["token"] = self.token
        return kwargs


def filesystem(uri: str, options: StorageOptions | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for `uri` and the path within it (no scheme for s3, absolute locally)."""
    options = options or StorageOptions.from_env()
    if uri.startswith("s3://") or uri.startswith("s3a://"):
        fs = fsspec.filesystem("s3", **options.s3fs_kwargs())
        return fs, uri.split("://", 1)[1].rstrip("/")
    if "://" in uri and not uri.startswith("file://"):
        protocol = uri.split("://", 1)[0]
        return fsspec.filesystem(protocol), uri.split("://", 1)[1]
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return fsspec.filesystem("file"), os.path.abspath(path)


def read_bytes(uri: str, options: StorageOptions | None = None, start: int | None = None,
               end: int | None = None) -> bytes:
    """Read an object, or the byte range [start, end) of it (one ranged GET on S3)."""
    fs, path = filesystem(uri, options)
    if start is None and end is None:
        return fs.cat_file(path)
    return fs.cat_file(path, start=start, end=end)


def join(base: str, *parts: str) -> str:
    """Join key parts with '/', keeping the scheme of `base`."""
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])
