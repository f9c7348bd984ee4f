"""How the inspection commands (`segments`, `dump`, `verify`, `lookup`, `index rebuild`) reach storage.

They take `--conf FILE` and `--set key=value` as the jobs do, so a configuration's endpoint and region
apply to them too (credentials come from the environment, as for the jobs: `jobs.runtime.config`), and
they check every `s3://` location they are given with one LIST before reading it, so a missing bucket,
missing credentials or an unreachable endpoint are one line naming the bucket (exit 2), not a
traceback (issue 26).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import replace

from jobs.runtime.config import KlakeConfig, load_config
from layouts.store import StorageOptions, is_s3
from layouts.store.bound import Store

PATHS_ROOT = "."  # the root of a configuration read only for its storage settings: commands on paths use none


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("storage")
    group.add_argument("--conf", metavar="FILE", help="a klake configuration, for its endpoint and region")
    group.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override one of its keys")
    group.add_argument("--endpoint-url", metavar="URL", help="an S3-compatible endpoint")


def load_storage_config(args: argparse.Namespace, root: str | None = None) -> KlakeConfig | None:
    """The configuration `--conf`/`--set` give (with `root` overriding its root when given), or None."""
    if args.conf is None and not args.overrides:
        return None
    return load_config(args.conf, args.overrides, root=root)


def storage_options(args: argparse.Namespace, config: KlakeConfig | None = None) -> StorageOptions:
    """`--endpoint-url`, else the configuration's storage settings, else the environment's."""
    if config is None and (args.conf is not None or args.overrides):
        config = load_config(args.conf, args.overrides, root=PATHS_ROOT)
    if config is None:
        return StorageOptions.from_env(endpoint_url=args.endpoint_url)
    return replace(config.storage, endpoint_url=args.endpoint_url) if args.endpoint_url else config.storage


def paths_store(args: argparse.Namespace) -> Store:
    """A store reaching the paths and URIs a command is given (each by its scheme) with `storage_options`;
    rooted at the working directory, which relative paths are under."""
    return Store(PATHS_ROOT, storage_options(args))


def check_reachable(uris: Iterable[str], store: Store) -> None:
    """One LIST per distinct `s3://` folder, through `store`: raises `StorageAccessError` naming the bucket
    and what is wrong (credentials, endpoint, bucket) before any work."""
    for location in dict.fromkeys(u.rstrip("/").rsplit("/", 1)[0] for u in uris if is_s3(u)):
        store.check_access(uri=location)
