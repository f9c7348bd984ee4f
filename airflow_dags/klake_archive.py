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

from airflow.sdk import dag
from klake_common import KlakeJobOperator, dag_settings, optional_param, surface_report


@dag(**dag_settings("klake_archive", "@hourly", ["klake", "archive", "mutating"], __doc__,
                    {"bootstrap_servers": optional_param("the cluster to archive (HOST:PORT,...)"),
                     "from_time": optional_param("where a new partition starts (default earliest)"),
                     "until_time": optional_param("archive records before this time only")}))
def klake_archive():
    archive = KlakeJobOperator(job="archive", execution_timeout=timedelta(minutes=55),
                               param_options={"bootstrap_servers": "--bootstrap-servers", "from_time": "--from",
                                              "until_time": "--until"},
                               required_params=("bootstrap_servers", "topics"))
    surface_report(archive)


klake_archive()
