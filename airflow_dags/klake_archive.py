"""Hourly archive: copy a live Kafka cluster's topics into klake at the cluster's offsets.

Task order: archive >> archive_report

`archive` submits `jobs/archive.py --bootstrap-servers SERVERS` over the `topics` param (both required);
`from_time` is where a partition klake does not hold yet starts (default earliest), `until_time` stops the
run earlier than the cluster's end. Each hour appends what the cluster gained since the last run. A retry
keeps the run's job id, so it takes over a killed try and appends nothing twice; a gap (records the
cluster's retention removed before they were archived) fails the task with its offset range. The archive
appends, so it shares the one-slot pool `klake_mutating` with retention and compaction.
Kafka client secrets reach the job through the worker's environment (`kafka.*` options as `env:NAME`).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag
from klake_common import DEFAULT_ARGS, KlakeJobOperator, common_params, surface_report

OPTIONAL = ["null", "string"]


@dag(
    dag_id="klake_archive",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={**common_params(),
            "bootstrap_servers": Param(None, type=OPTIONAL, description="the cluster to archive (HOST:PORT,...)"),
            "from_time": Param(None, type=OPTIONAL, description="where a new partition starts (default earliest)"),
            "until_time": Param(None, type=OPTIONAL, description="archive records before this time only")},
    tags=["klake", "archive", "mutating"],
    doc_md=__doc__,
)
def klake_archive():
    archive = KlakeJobOperator(job="archive", execution_timeout=timedelta(minutes=55),
                               param_options={"bootstrap_servers": "--bootstrap-servers", "from_time": "--from",
                                              "until_time": "--until"},
                               required_params=("bootstrap_servers", "topics"))
    surface_report(archive)


klake_archive()
