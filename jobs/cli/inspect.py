"""`klake dump`, `klake verify`, `klake index rebuild`, `klake lookup`: look at Kafka's bytes directly.

They work on a `.log` or record-set file, or on a Kafka partition directory, local or `s3://`, reached
with a configuration's storage settings (`--conf`, `--set`) as the jobs are (`jobs.cli.storage`).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import sys
from collections.abc import Iterable

import numpy as np

from engine.catalog.schema import partition_log_start_offset
from engine.format import compression
from engine.format.batch import TIMESTAMP_TYPE_NAMES, BatchHeaders, BatchScan, scan_batches
from engine.format.records import RecordTable, decode_records
from engine.index.checks import check_sidecars, sidecar_names
from engine.index.common import DEFAULT_INDEX_INTERVAL_BYTES
from engine.index.rebuild import build_indexes
from engine.log.lookup import list_offsets
from engine.log.segment import InMemorySegment
from engine.log.topic_config import KAFKA_MIN_TIMESTAMP, min_timestamp
from engine.ops.catalog_table import Catalog, CatalogNotFoundError
from engine.ops.stored_segment import StoredSegment, stored_segment
from engine.ops.topic_store import load_topic_config
from engine.ops.verify import record_problems, valid_prefix
from jobs.cli.storage import add_storage_arguments, check_reachable, paths_store, storage_options
from jobs.offsets_for_times import parse_target
from jobs.runtime.job_runner import add_command
from jobs.runtime.report import plural
from kernel.errors import CorruptRecordError, KlakeError
from kernel.names import TopicPartition, parse_partition_dir
from layouts.kafka_layout import group_partition_files
from layouts.store import join, normalize_uri
from layouts.store.bound import Store

_SEGMENT_NAME = re.compile(r"(?P<offset>[0-9]{20})\.log")


FIXTURES = "tests/fixtures/kafka"


def register(commands: argparse._SubParsersAction) -> None:
    dump = add_command(
        commands, "dump", "print the records or batch headers of .log / record-set files",
        "Print every record (or batch header) of each file, as kafka-dump-log does. Problems (a bad CRC, a partial "
        "last batch, a missing file) go to stderr, exit code 1; the valid records before them are printed.",
        "klake dump --batches demo-output/store/klake/orders-0/*.log", run_dump)
    dump.add_argument("paths", nargs="+", metavar="PATH", help=".log or record-set files: local paths or s3:// URIs")
    dump.add_argument("--json", action="store_true", help="one JSON object per record (or batch)")
    dump.add_argument("--batches", action="store_true", help="print batch headers instead of records")
    add_storage_arguments(dump)

    verify = add_command(
        commands, "verify", "check batches (CRC, sizes, offsets) and index sidecars",
        "Check every batch of each file and, for a segment with .index/.timeindex beside it, that the indexes "
        "agree with the log. Exit 0 when all is valid, 1 with one line per problem.",
        f"klake verify {FIXTURES}/broker/timeindex_test-0/*.log", run_verify)
    verify.add_argument("paths", nargs="+", metavar="PATH", help=".log / record-set files (local or s3://)")
    add_storage_arguments(verify)

    index = commands.add_parser("index", help="index maintenance").add_subparsers(dest="index_command",
                                                                                  required=True, metavar="ACTION")
    rebuild = add_command(
        index, "rebuild", "write .index/.timeindex for a segment from its .log",
        "Rebuild a segment's .index and .timeindex as a broker's recovery does.",
        f"klake index rebuild {FIXTURES}/broker/timeindex_test-0/00000000000000000000.log --out /tmp/idx", run_index_rebuild)
    rebuild.add_argument("segment", metavar="SEGMENT.log", help="the segment's .log (local or s3://)")
    rebuild.add_argument("--out", metavar="DIR", help="directory for the sidecars (default: beside the .log)")
    rebuild.add_argument("--index-interval-bytes", type=int, default=DEFAULT_INDEX_INTERVAL_BYTES, metavar="N",
                         help=f"index.interval.bytes (default {DEFAULT_INDEX_INTERVAL_BYTES})")
    rebuild.add_argument("--base-offset", type=int, metavar="N",
                         help="segment base offset (default: from the 20-digit file name)")
    add_storage_arguments(rebuild)

    lookup = add_command(
        commands, "lookup", "offset for a timestamp in a partition directory",
        "For each --timestamp, the first offset stamped at or after it, as Kafka's ListOffsets answers, in a "
        "broker's partition directory or a klake root's (read by its catalog).",
        "klake lookup demo-output/store/klake/orders-0 --timestamp 2026-11-04T18:00:00Z", run_lookup)
    lookup.add_argument("partition_dir", metavar="PARTITION_DIR", help="<topic>-<partition> directory or s3:// prefix")
    lookup.add_argument("--timestamp", type=parse_target, action="append", required=True, metavar="T",
                        help="epoch ms or ISO-8601, or -1/latest, -2/earliest, -3/max; repeatable")
    lookup.add_argument("--log-start-offset", type=int, metavar="N",
                        help="ignore records below this offset")
    add_storage_arguments(lookup)


# ------------------------------------------------------------------------------------------- dump

def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def record_dicts(records: RecordTable, batches: BatchHeaders) -> Iterable[dict]:
    """Records in the fixtures' golden JSON form."""
    table = records.to_arrow(batches).to_pydict()
    for i in range(len(records)):
        yield {
            "compression": compression.NAMES[table["compression"][i]],
            "control": table["control"][i],
            "headers": [[h["key"], _b64(h["value"])] for h in table["headers"][i]],
            "key": _b64(table["key"][i]),
            "magic": table["magic"][i],
            "offset": table["offset"][i],
            "timestamp": table["timestamp"][i],
            "timestamp_type": TIMESTAMP_TYPE_NAMES[table["timestamp_type"][i]],
            "value": _b64(table["value"][i]),
        }


def batch_dicts(batches: BatchHeaders) -> Iterable[dict]:
    cols = {name: getattr(batches, name).tolist() for name in (
        "position", "size", "magic", "base_offset", "last_offset", "records_count", "partition_leader_epoch",
        "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "crc")}
    codec, kind = batches.codec.tolist(), batches.timestamp_type.tolist()
    control, txn, horizon = (batches.is_control.tolist(), batches.is_transactional.tolist(),
                             batches.has_delete_horizon.tolist())
    for i in range(len(batches)):
        row = {name: values[i] for name, values in cols.items()}
        row.update(compression=compression.NAMES[codec[i]], timestamp_type=TIMESTAMP_TYPE_NAMES[kind[i]],
                   control=control[i], transactional=txn[i], delete_horizon=horizon[i])
        yield row


def _read_log(path: str, store: Store) -> tuple[bytes, BatchScan, list[CorruptRecordError]]:
    """Scan a file leniently: the valid prefix plus every problem found (framing, CRC, records)."""
    data = store.read(path)
    scan = scan_batches(data, path, strict=False)
    problems = list(scan.problems)
    bad = {p.position for p in problems}
    valid = scan.headers.take(~np.isin(scan.headers.position, list(bad)))
    return data, BatchScan(valid, scan.valid_bytes, problems), problems


def _decode_valid(data: bytes, batches: BatchHeaders, source: str) -> tuple[BatchHeaders, RecordTable, list]:
    """Decode the records of every batch whose records are valid; name each batch whose are not."""
    bad = record_problems(data, batches, source)
    good = np.ones(len(batches), dtype=bool)
    good[[row for row, _ in bad]] = False
    kept = batches.take(good)
    return kept, decode_records(data, kept, source), [problem for _, problem in bad]


def run_dump(args: argparse.Namespace) -> int:
    store = paths_store(args)
    check_reachable(args.paths, store)
    several = len(args.paths) > 1
    failed = False
    for path in args.paths:
        if several and not args.json:
            sys.stdout.write(f"Dumping {path}\n")
        try:
            problems = _dump_file(path, args, store, source=path if several else None)
        except (FileNotFoundError, IsADirectoryError) as exc:  # a glob that matched nothing, a typo
            problems = [f"{path}: {exc.strerror or exc}"]
        for problem in problems:
            print(f"problem: {problem}", file=sys.stderr)
        failed = failed or bool(problems)
    return 1 if failed else 0


def _dump_file(path: str, args: argparse.Namespace, store: Store, source: str | None) -> list[str]:
    """Print one file's records (or batch headers), each JSON object tagged with `file: source` when
    given (one of several files, so JSON lines stay one object per record); return its problems."""
    data, scan, problems = _read_log(path, store)
    batches = scan.headers
    tag = {} if source is None else {"file": source}
    if args.batches:
        rows, line = batch_dicts(batches), _batch_line
    else:
        batches, records, record_problems = _decode_valid(data, batches, path)
        problems += record_problems
        rows, line = record_dicts(records, batches), _record_line
    for row in rows:
        sys.stdout.write((json.dumps({**row, **tag}, sort_keys=True) if args.json else line(row)) + "\n")
    return [str(problem) for problem in sorted(problems, key=lambda p: p.position)]


def _batch_line(b: dict) -> str:
    return (f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['records_count']} "
            f"baseSequence: {b['base_sequence']} producerId: {b['producer_id']} "
            f"producerEpoch: {b['producer_epoch']} partitionLeaderEpoch: {b['partition_leader_epoch']} "
            f"isTransactional: {str(b['transactional']).lower()} isControl: {str(b['control']).lower()} "
            f"deleteHorizon: {str(b['delete_horizon']).lower()} position: {b['position']} "
            f"{b['timestamp_type']}: {b['max_timestamp']} size: {b['size']} magic: {b['magic']} "
            f"compresscodec: {b['compression']} crc: {b['crc']}")


def _record_line(r: dict) -> str:
    key = base64.b64decode(r["key"]) if r["key"] is not None else None
    value = base64.b64decode(r["value"]) if r["value"] is not None else None
    return (f"| offset: {r['offset']} {r['timestamp_type']}: {r['timestamp']} "
            f"keySize: {-1 if key is None else len(key)} valueSize: {-1 if value is None else len(value)} "
            f"magic: {r['magic']} compresscodec: {r['compression']} control: {str(r['control']).lower()} "
            f"headerKeys: [{','.join(h[0] for h in r['headers'])}] key: {_printable(key)} payload: {_printable(value)}")


def _printable(value: bytes | None) -> str:
    if value is None:
        return "null"
    text = value.decode("utf-8", errors="backslashreplace")
    return text if len(text) <= 120 else text[:117] + "..."


# ----------------------------------------------------------------------------------------- verify

def _base_offset_of(path: str) -> int | None:
    match = _SEGMENT_NAME.fullmatch(path.rstrip("/").rsplit("/", 1)[-1])
    return int(match["offset"]) if match else None


def verify_problems(path: str, store: Store) -> tuple[list[str], int]:
    """Every problem of one file, as "file: byte N: what" lines (framing, CRC, records, offset order and
    range, sidecars of a segment), and its number of batches. The same checks recovery applies."""
    data = store.read(path)
    base = _base_offset_of(path)
    start = base if base is not None else int.from_bytes(data[:8], "big", signed=True) if len(data) >= 8 else 0
    prefix = valid_prefix(data, start, path)
    lines = [str(p) for p in prefix.problems]
    if base is not None and not lines:
        lines += _sidecar_problems(path, base, prefix.headers, store)
    return sorted(set(lines), key=_byte_of), len(prefix.headers)


def _byte_of(line: str) -> tuple[str, int]:
    match = re.search(r": byte (\d+):", line)
    return (line.split(":", 1)[0], int(match.group(1)) if match else -1)


def _sidecar_problems(path: str, base: int, batches: BatchHeaders, store: Store) -> list[str]:
    """Problems of the `.index`/`.timeindex` beside a segment, if it has any. The newest segment of
    its directory is the active one, which legitimately lacks the final time-index entry."""
    index_uri, time_uri = sidecar_names(path)
    index_info, time_info = store.info(index_uri), store.info(time_uri)
    if index_info is None and time_info is None:
        return []
    directory = path.rsplit("/", 1)[0] if "/" in path else "."
    newest = max((b for b in (_base_offset_of(info.uri) for info in store.list_objects(directory)
                              if "/" not in info.uri[len(normalize_uri(directory)) + 1:]) if b is not None),
                 default=base)
    return check_sidecars(batches, base, store.read(index_uri) if index_info else None,
                          store.read(time_uri) if time_info else None, path, active=base == newest,
                          min_timestamp=KAFKA_MIN_TIMESTAMP).problems


def run_verify(args: argparse.Namespace) -> int:
    store = paths_store(args)
    check_reachable(args.paths, store)
    failed = False
    for path in args.paths:
        try:
            problems, n_batches = verify_problems(path, store)
        except (FileNotFoundError, KlakeError) as exc:
            problems, n_batches = [f"{path}: {exc}"], 0
        for line in problems:
            print(line)
        if problems:
            failed = True
        else:
            print(f"ok: {path}: {plural(n_batches, 'batch', 'batches')}", file=sys.stderr)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------- index rebuild

def run_index_rebuild(args: argparse.Namespace) -> int:
    path = args.segment
    store = paths_store(args)
    check_reachable([path, *([args.out] if args.out else [])], store)
    base = args.base_offset if args.base_offset is not None else _base_offset_of(path)
    if base is None:
        raise KlakeError(f"{path}: not named NNNNNNNNNNNNNNNNNNNN.log; pass --base-offset")
    data = store.read(path)
    scan = scan_batches(data, path)
    offsets, times = build_indexes(scan.headers, base, args.index_interval_bytes,
                                   min_timestamp=KAFKA_MIN_TIMESTAMP)
    stem = path.rstrip("/").rsplit("/", 1)[-1][:-len(".log")] if path.endswith(".log") else f"{base:020d}"
    out_dir = args.out if args.out else path.rsplit("/", 1)[0] if "/" in path else "."
    fs, out_path = store.filesystem(out_dir)
    fs.makedirs(out_path, exist_ok=True)
    for suffix, payload in ((".index", offsets.to_bytes()), (".timeindex", times.to_bytes())):
        with fs.open(f"{out_path}/{stem}{suffix}", "wb") as handle:
            handle.write(payload)
    print(json.dumps({"segment": path, "base_offset": base, "batches": len(scan.headers),
                      "index_entries": len(offsets), "timeindex_entries": len(times),
                      "out": normalize_uri(out_dir)}))
    return 0


# ----------------------------------------------------------------------------------------- lookup

def load_partition_dir(directory: Store) -> list[InMemorySegment]:
    """Every segment of a Kafka partition directory (the store's root; a broker's: Kafka's timestamp floor),
    with indexes validated or rebuilt in memory."""
    root = directory.root
    name = root.rsplit("/", 1)[-1]
    tp = parse_partition_dir(name) or TopicPartition("partition", 0)
    files = [info for info in directory.list_objects() if "/" not in info.uri[len(root) + 1:]]
    partition = group_partition_files(tp, root, files)
    if not partition.segments:
        raise KlakeError(f"{root}: no NNNNNNNNNNNNNNNNNNNN.log segments found, and no klake catalog at "
                         f"{join(root.rsplit('/', 1)[0], '_catalog')} to name its segments")
    last = partition.segments[-1].base_offset
    return [InMemorySegment.load(seg.base_offset, directory.read(seg.log.uri),
                                 directory.read(seg.index.uri) if seg.index else None,
                                 directory.read(seg.timeindex.uri) if seg.timeindex else None, seg.log.uri,
                                 min_timestamp=KAFKA_MIN_TIMESTAMP, active=seg.base_offset == last)
            for seg in partition.segments]


def catalog_partition(directory: Store) -> tuple[list[StoredSegment], int | None, int] | None:
    """A partition directory (the store's root) of a klake root (`{root}/{topic}-{partition}`, its catalog `{root}/_catalog`):
    its live segments by the catalog (a folder there also holds older object versions no row names), its log
    start offset (`partition_log_start_offset`) and its topic's smallest timestamp; None for a folder under
    no catalog (a broker's directory)."""
    uri = directory.root
    root, name = uri.rsplit("/", 1)
    tp = parse_partition_dir(name)
    if tp is None:
        return None
    try:
        catalog = Catalog.open(directory.at(join(root, "_catalog")))
    except CatalogNotFoundError:
        return None
    rows = catalog.live_segments(tp.topic, tp.partition)
    if not rows:
        raise KlakeError(f"{uri}: the catalog {join(root, '_catalog')} has no live segment of {tp}")
    store = directory.at(root)
    config = load_topic_config(store, tp.topic)
    return ([stored_segment(row, store, config) for row in rows], partition_log_start_offset(rows),
            min_timestamp(config))


def run_lookup(args: argparse.Namespace) -> int:
    partition = Store(args.partition_dir, storage_options(args))
    check_reachable([args.partition_dir], partition)
    catalogued = catalog_partition(partition)
    if catalogued is not None:
        segments, start, floor = catalogued
        start = start if args.log_start_offset is None else max(start or 0, args.log_start_offset)
    else:
        segments, start, floor = (load_partition_dir(partition), args.log_start_offset,
                                  KAFKA_MIN_TIMESTAMP)
        for segment in segments:
            for problem in segment.index_problems:
                print(f"rebuilt indexes in memory: {problem}", file=sys.stderr)
    for target in args.timestamp:
        try:
            answer = list_offsets(segments, target, start, min_timestamp=floor)
        except ValueError as exc:  # a time before 1970: a broker's log has no KIP-228
            raise KlakeError(str(exc)) from None
        print(json.dumps({"target": target, "offset": answer.offset, "timestamp": answer.timestamp}))
    return 0
