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

import pendulum
from airflow.sdk import Param, dag
from klake_common import DEFAULT_ARGS, KlakeJobOperator, common_params, surface_report

OPTIONAL = ["null", "string"]


@dag(
    dag_id="klake_export",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={**common_params(),
            "output": Param(None, type=OPTIONAL, description="the log dir to write (local path or s3://...)"),
            "from_time": Param(None, type=OPTIONAL, description="export records from this time (ISO-8601 or ms)"),
            "to_time": Param(None, type=OPTIONAL, description="export records before this time")},
    tags=["klake", "export"],
    doc_md=__doc__,
)
def klake_export():
    export = KlakeJobOperator(job="export", execution_timeout=timedelta(hours=6),
                              param_options={"output": "--output", "from_time": "--from", "to_time": "--to"},
                              required_params=("output",))
    surface_report(export)


klake_export()
