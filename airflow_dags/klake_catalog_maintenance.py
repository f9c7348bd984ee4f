"""Daily catalog maintenance: scrub the store, then compact, checkpoint and vacuum the catalog.

Task order: scrub >> scrub_report; scrub >> catalog_maintenance >> catalog_maintenance_report

Scrub goes first: it removes objects no catalog row references (left by killed jobs) and reports rows
whose objects are missing, and any catalog commits it makes are then folded into the maintenance
pass of the same run. Catalog maintenance runs only after a successful scrub, and each job's report
task is a leaf, so a failed scrub fails the run. Both run in the one-slot pool `klake_mutating`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import dag
from klake_common import DEFAULT_ARGS, KlakeJobOperator, common_params, surface_report


@dag(
    dag_id="klake_catalog_maintenance",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=common_params(),
    tags=["klake", "maintenance", "mutating"],
    doc_md=__doc__,
)
def klake_catalog_maintenance():
    scrub = KlakeJobOperator(job="scrub", execution_timeout=timedelta(hours=2))
    maintenance = KlakeJobOperator(job="catalog_maintenance", execution_timeout=timedelta(hours=2))
    surface_report(scrub)
    scrub >> maintenance
    surface_report(maintenance)


klake_catalog_maintenance()
