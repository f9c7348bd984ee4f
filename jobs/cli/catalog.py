"""`klake segments`: list the catalog's live segments, pruned by time range.

Storage endpoint and credentials come from the environment (`layouts.store.StorageOptions.from_env`)
or `--endpoint-url`; secrets are never printed. `import` and `scrub` are jobs (`jobs/import_log.py`,
`jobs/scrub.py`) with the common job options.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.ops.catalog_table import Catalog
from layouts.store import StorageOptions

SEGMENT_FIELDS = ("topic", "partition", "base_offset", "next_offset", "record_count", "size_bytes",
                  "base_timestamp", "largest_timestamp", "state", "log_key")


def register(subparsers: argparse._SubParsersAction) -> None:
    seg = subparsers.add_parser("segments", help="list live segments, pruned by time range")
    seg.add_argument("--catalog", required=True)
    seg.add_argument("--topic")
    seg.add_argument("--partition", type=int)
    seg.add_argument("--from", dest="from_ms", type=int, metavar="MS",
                     help="keep segments that may hold a record at or after MS")
    seg.add_argument("--to", dest="to_ms", type=int, metavar="MS",
                     help="keep segments that may hold a record at or before MS")
    seg.add_argument("--json", action="store_true", help="one JSON object per segment")
    seg.add_argument("--endpoint-url", help="S3-compatible endpoint (default: KLAKE_S3_ENDPOINT_URL or "
                                            "AWS_ENDPOINT_URL)")
    seg.set_defaults(handler=run_segments)


def run_segments(args: argparse.Namespace) -> int:
    catalog = Catalog.open(args.catalog, StorageOptions.from_env(endpoint_url=args.endpoint_url))
    table = catalog.segments(topic=args.topic, partition=args.partition, from_ms=args.from_ms, to_ms=args.to_ms)
    rows = table.select(list(SEGMENT_FIELDS)).to_pylist()
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    widths = {f: max([len(f)] + [len(str(r[f])) for r in rows]) for f in SEGMENT_FIELDS}
    print("  ".join(f.ljust(widths[f]) for f in SEGMENT_FIELDS))
    for row in rows:
        print("  ".join(str(row[f]).ljust(widths[f]) for f in SEGMENT_FIELDS))
    print(f"{len(rows)} segments", file=sys.stderr)
    return 0
