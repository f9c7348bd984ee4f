"""Hourly retention: delete the segments that `retention.ms` / `retention.bytes` no longer keep.

Task order: retention >> retention_report

`retention` submits `jobs/retention.py` over every catalogued topic (or the `topics` param); the
report task logs the job's JSON report, pushes its summary as XCom and fails unless it says
succeeded. Retention runs in the one-slot pool `klake_mutating`, shared with every klake job that
mutates partitions, and `max_active_runs=1` keeps a slow hour from overlapping the next.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from klake_common import KlakeJobOperator, dag_settings, surface_report


@dag(**dag_settings("klake_retention", "@hourly", ["klake", "retention", "mutating"], __doc__))
def klake_retention():
    retention = KlakeJobOperator(job="retention", execution_timeout=timedelta(minutes=55))
    surface_report(retention)


klake_retention()
