"""Tiered-storage buckets as klake roots (KIP-405): imported in place, read by every reading job, never changed.

`import --layout kafka-rsm` registers the uploads of Kafka's `LocalTieredStorage` (`layouts.kafka_rsm_layout`)
through the importer's `SourceLayout`: per start offset the complete upload that chains with its neighbours
(duplicates set aside and reported), rows of layout `kafka-rsm` whose keys are absolute (external), and
rebuilt or batch indexes written under the klake root, never in the bucket. A broker owns those segments:
its remote log manager deletes them by its own retention and its metadata topic says which upload counts,
so a job that would change such a partition's log (append, roll, retention, compact, truncate,
delete-records, recover, a mirror into it) refuses before any work (`refuse_broker_owned`). The log start
offset of a tiered partition lives in the broker's metadata topic, not in the bucket: the catalog's is the
first upload's start offset.

`import --layout aiven` does the same for a bucket of Aiven's tiered-storage plugin (`layouts.aiven_layout`):
rows of layout `aiven` whose keys are `aiven+` names, read through each upload's manifest and chunk index
(`layouts.store.aiven_file_io`), only the chunks a read needs.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from engine.catalog.schema import LIVE_STATES, Layout
from engine.log.summary import summarize_segment
from engine.log.topic_config import TopicConfig, min_timestamp
from engine.ops.catalog_table import Catalog
from engine.ops.importer import InvalidSourceError, SourceLayout
from kernel.errors import CorruptRecordError, KlakeError
from kernel.names import TopicPartition
from layouts import aiven_layout
from layouts.aiven_manifest import AivenObjectError
from layouts.kafka_layout import KafkaLogDir
from layouts.kafka_rsm_layout import Upload, UploadDir, as_log_dir, choose_uploads, scan_bucket
from layouts.store import normalize_uri
from layouts.store.bound import Store


def _next_offset(upload: Upload, store: Store) -> int | None:
    """The offset after an upload's last batch, None if its `.log` does not read whole."""
    log = upload.files["log"]
    try:
        summary = summarize_segment(store.read(log.uri), upload.start_offset, log.uri,
                                    min_timestamp=min_timestamp(TopicConfig()))  # a broker's log: Kafka's floor
    except CorruptRecordError:
        return None
    return None if summary.problems or summary.batch_count == 0 else summary.next_offset


def scan_rsm_source(source: Store) -> KafkaLogDir:
    """The bucket's partitions with one upload per start offset (`choose_uploads`); a partition whose uploads
    leave a gap carries the error that fails it after the segments before the gap."""
    root, parts, skipped = scan_bucket(source.root, source.options)
    if not parts:
        raise InvalidSourceError(f"import source {root}: no {{topic}}-{{partition}}-{{topicId}} directories of "
                                 "LocalTieredStorage uploads there")
    choices = {part.tp: choose_uploads(part, lambda upload: _next_offset(upload, source)) for part in parts}
    log_dir = as_log_dir(root, parts, choices, skipped)
    for part in log_dir.partitions:
        if choices[part.tp].problems:
            part.error = choices[part.tp].problems[0]
    return log_dir


def check_outside(source: str, root: str, catalog_uri: str) -> None:
    """Refuse a klake root or catalog inside the bucket (klake never writes where the broker owns the objects)
    and a bucket inside the root (its uploads would count as objects the root owns)."""
    source = normalize_uri(source)
    for what, uri in (("root", normalize_uri(root)), ("catalog", normalize_uri(catalog_uri))):
        if uri == source or uri.startswith(source + "/"):
            raise InvalidSourceError(f"the klake {what} {uri} lies inside the tiered-storage bucket {source}: klake "
                                     "never writes into a bucket a broker owns; give a root elsewhere")
        if source.startswith(uri + "/"):
            raise InvalidSourceError(f"the tiered-storage bucket {source} lies inside the klake {what} {uri}: its "
                                     "uploads would count as the root's own objects; give a root elsewhere")


KAFKA_RSM_SOURCE = SourceLayout("kafka-rsm", scan_rsm_source, lambda source: {}, Layout.KAFKA_RSM)
"""Kafka's `LocalTieredStorage` directory (or an S3 prefix holding a copy of one)."""


def _manifest_next_offset(part: UploadDir, upload: Upload, source: Store) -> int | None:
    """The offset after an Aiven upload's last record, as its manifest records it (the broker's
    `remoteLogSegmentMetadata.endOffset`); None if the manifest does not read or records none."""
    try:
        manifest = aiven_layout.read_manifest(part, upload, source.options)
    except AivenObjectError:
        return None
    return None if manifest.end_offset is None else manifest.end_offset + 1


def scan_aiven_source(source: Store) -> KafkaLogDir:
    """The bucket's partitions with one upload per start offset (`choose_uploads`, by the end offsets the
    manifests record), as `aiven+` names the importer reads through the chunk index."""
    root, parts, skipped = aiven_layout.scan_bucket(source.root, source.options)
    if not parts:
        raise InvalidSourceError(f"import source {root}: no {{topic}}-{{topicId}}/{{partition}} directories of "
                                 "Aiven tiered-storage uploads there (give the bucket URI with the plugin's "
                                 "key.prefix)")
    choices = {part.tp: choose_uploads(part, lambda upload, part=part: _manifest_next_offset(part, upload, source))
               for part in parts}
    return aiven_layout.as_log_dir(root, parts, choices, skipped, source.options)


AIVEN_SOURCE = SourceLayout("aiven", scan_aiven_source, lambda source: {}, Layout.AIVEN)
"""A bucket (with the plugin's `key.prefix`) of Aiven's tiered-storage plugin for Apache Kafka."""
TIERED_LAYOUTS = (Layout.KAFKA_RSM, Layout.AIVEN)
"""The layouts of segments a broker's tiered storage owns."""


class BrokerOwnedError(KlakeError):
    """A job would change partitions whose segments a broker's tiered storage owns."""


def refuse_broker_owned(catalog: Catalog, tps: Iterable[TopicPartition], job: str) -> None:
    """Refuse, naming the partitions, a job that would change the log of partitions holding rows of a tiered
    layout (`TIERED_LAYOUTS`)."""
    wanted = sorted({(tp.topic, tp.partition) for tp in tps})
    rows = catalog.rows_table(wanted, states=LIVE_STATES, columns=("topic", "partition", "layout"))
    owned = rows.filter(pc.is_in(rows["layout"], pa.array([str(layout) for layout in TIERED_LAYOUTS])))
    if owned.num_rows:
        names = sorted({f"{t}-{p}" for t, p in zip(owned["topic"].to_pylist(), owned["partition"].to_pylist(),
                                                   strict=True)})
        layouts = " or ".join(sorted(set(owned["layout"].to_pylist())))
        raise BrokerOwnedError(
            f"{job} would change {', '.join(names)}, whose segments a broker's tiered storage owns (imported with "
            f"--layout {layouts}, read-only): read, export or mirror them instead")
