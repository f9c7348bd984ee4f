"""Daily compaction: key compaction and small-segment merging for `cleanup.policy=compact` topics.

Task order: compact >> compact_report

`compact` submits `jobs/compact.py`; topics whose policy does not include compaction are left alone
by the job. It runs in the one-slot pool `klake_mutating` (never beside retention or maintenance on
any topic) with `max_active_runs=1`; a retry reuses the task's job id, so it finishes the same work.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from klake_common import KlakeJobOperator, dag_settings, surface_report


@dag(**dag_settings("klake_compaction", "@daily", ["klake", "compaction", "mutating"], __doc__))
def klake_compaction():
    compact = KlakeJobOperator(job="compact", execution_timeout=timedelta(hours=6))
    surface_report(compact)


klake_compaction()
