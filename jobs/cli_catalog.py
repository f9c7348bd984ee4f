"""CLI subcommands over the catalog: `klake import`, `klake segments`, `klake scrub`.

Exit codes: 0 success; 1 when the run found problems (a partition not imported, a live row whose
objects are missing or have the wrong size, an orphan that could not be deleted); 2 usage or klake
errors (from `jobs.cli`). Storage endpoint and credentials come from the environment
(`layouts.storage.StorageOptions.from_env`) or `--endpoint-url`; secrets are never printed.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.catalog import Catalog
from jobs.importer import ImportReport, import_log_dir
from jobs.scrub import DEFAULT_GRACE_MS, ScrubReport, scrub
from layouts.storage import StorageOptions

SEGMENT_FIELDS = ("topic", "partition", "base_offset", "next_offset", "record_count", "size_bytes",
                  "base_timestamp", "largest_timestamp", "state", "log_key")


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _options(args: argparse.Namespace) -> StorageOptions:
    return StorageOptions.from_env(endpoint_url=args.endpoint_url)


def _add_endpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-url", help="S3-compatible endpoint (default: KLAKE_S3_ENDPOINT_URL or "
                                               "AWS_ENDPOINT_URL)")


def register(subparsers: argparse._SubParsersAction) -> None:
    imp = subparsers.add_parser("import", help="register a broker log dir (Kafka layout) in the catalog")
    imp.add_argument("source", metavar="SRC", help="log dir holding <topic>-<partition> directories (path or s3://)")
    imp.add_argument("--root", required=True, help="object-layout root for copies and rebuilt indexes")
    imp.add_argument("--catalog", required=True, help="catalog (Delta table) URI; created if absent")
    imp.add_argument("--copy", action="store_true", help="copy segments into the object layout under --root")
    imp.add_argument("--index-interval-bytes", type=_non_negative_int, default=4096,
                     help="index.interval.bytes for rebuilt indexes (default 4096)")
    imp.add_argument("--json", action="store_true", help="print the JSON run report")
    _add_endpoint(imp)
    imp.set_defaults(handler=run_import)

    seg = subparsers.add_parser("segments", help="list live segments, pruned by time range")
    seg.add_argument("--catalog", required=True)
    seg.add_argument("--topic")
    seg.add_argument("--partition", type=int)
    seg.add_argument("--from", dest="from_ms", type=int, metavar="MS",
                     help="keep segments that may hold a record at or after MS")
    seg.add_argument("--to", dest="to_ms", type=int, metavar="MS",
                     help="keep segments that may hold a record at or before MS")
    seg.add_argument("--json", action="store_true", help="one JSON object per segment")
    _add_endpoint(seg)
    seg.set_defaults(handler=run_segments)

    scr = subparsers.add_parser("scrub", help="find unreferenced objects and broken catalog rows; delete orphans")
    scr.add_argument("--root", required=True)
    scr.add_argument("--catalog", required=True)
    scr.add_argument("--grace-ms", type=_non_negative_int, default=DEFAULT_GRACE_MS,
                     help=f"ignore unreferenced objects younger than this (default {DEFAULT_GRACE_MS})")
    scr.add_argument("--dry-run", action="store_true", help="report only, delete nothing")
    scr.add_argument("--json", action="store_true", help="print the JSON report")
    _add_endpoint(scr)
    scr.set_defaults(handler=run_scrub)


def run_import(args: argparse.Namespace) -> int:
    options = _options(args)
    catalog = Catalog.create(args.catalog, options)
    report = import_log_dir(args.source, args.root, catalog, copy=args.copy,
                            index_interval_bytes=args.index_interval_bytes, options=options)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_import(report)
    return 1 if report.failed else 0


def _print_import(report: ImportReport) -> None:
    print(f"import {report.source} -> {report.catalog} ({'copy to ' + report.root if report.copy else 'in place'})")
    for part in report.partitions:
        counts: dict[str, int] = {}
        for s in part.segments:
            counts[s.status] = counts.get(s.status, 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no segments"
        print(f"  {part.topic}-{part.partition}: {summary}")
        for s in part.segments:
            if s.sidecars == "rebuilt":
                print(f"    rebuilt indexes of {s.source}: {'; '.join(s.sidecar_problems)}")
        if part.error:
            print(f"    ERROR: {part.error}")
    for name, reason in sorted(report.skipped_dirs.items()):
        print(f"  skipped {name}: {reason}")
    print(f"rows added: {report.rows_added}, already registered: {report.already_registered}, "
          f"indexes rebuilt: {report.sidecars_rebuilt}, catalog version: {report.commit_version}")


def run_segments(args: argparse.Namespace) -> int:
    catalog = Catalog.open(args.catalog, _options(args))
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


def run_scrub(args: argparse.Namespace) -> int:
    options = _options(args)
    catalog = Catalog.open(args.catalog, options)
    report = scrub(args.root, catalog, grace_ms=args.grace_ms, dry_run=args.dry_run, options=options)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_scrub(report)
    return 1 if (report.missing or report.size_mismatches or report.delete_failed) else 0


def _print_scrub(report: ScrubReport) -> None:
    print(f"scrub {report.root} against {report.catalog}: {report.objects_listed} objects, "
          f"{report.live_segments} live segments")
    verb = "would delete" if report.dry_run else "orphan"
    for orphan in report.orphans:
        print(f"  {verb} {orphan.uri} ({orphan.size} bytes, {orphan.age_ms} ms old)")
    if report.orphans_within_grace:
        print(f"  {report.orphans_within_grace} unreferenced objects are younger than {report.grace_ms} ms: kept")
    for missing in report.missing:
        print(f"  MISSING {missing.kind} of {missing.segment}: {missing.key}")
    for bad in report.size_mismatches:
        print(f"  SIZE {bad.segment}: {bad.key} is {bad.object_size} bytes, the catalog says {bad.catalog_size}")
    for uri, reason in sorted(report.delete_failed.items()):
        print(f"  DELETE FAILED {uri}: {reason}")
    if not report.dry_run:
        print(f"deleted {len(report.deleted)} orphans in {report.delete_requests} delete requests")
