"""Where and how to reach object storage: endpoint and the standard AWS credentials, never shown."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


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
