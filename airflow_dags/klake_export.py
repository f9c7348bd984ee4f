"""On demand: export topics as a broker's log dir (Kafka's files, indexes and checkpoints) to `output`.

Task order: export >> export_report

`export` submits `jobs/export.py --output OUTPUT` (a local directory or an object-store prefix; the
`from_time`/`to_time` params, ISO-8601 or epoch ms, cut the range at batch boundaries) over every
catalogued topic or the `topics` param. A re-run of the same export writes only what is missing, so a
failed try is retried. It shares the one-slot pool `klake_mutating`: retention or compaction running
beside it would delete segments the export is copying.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from klake_common import KlakeJobOperator, dag_settings, optional_param, surface_report


@dag(**dag_settings("klake_export", None, ["klake", "export"], __doc__,
                    {"output": optional_param("the log dir to write (local path or s3://...)"),
                     "from_time": optional_param("export records from this time (ISO-8601 or ms)"),
                     "to_time": optional_param("export records before this time")}))
def klake_export():
    export = KlakeJobOperator(job="export", execution_timeout=timedelta(hours=6),
                              param_options={"output": "--output", "from_time": "--from", "to_time": "--to"},
                              required_params=("output",))
    surface_report(export)


klake_export()
