"""Object URIs: which store a URI names, and joining keys under a root."""

from __future__ import annotations

S3_SCHEMES = ("s3://", "s3a://")


def is_s3(uri: str) -> bool:
    return uri.startswith(S3_SCHEMES)


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def join(base: str, *parts: str) -> str:
    """Join key parts with '/', keeping the scheme of `base`."""
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])
