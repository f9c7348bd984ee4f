"""Daily catalog maintenance: scrub the store, then compact, checkpoint and vacuum the catalog.

Task order: scrub >> scrub_report; scrub >> catalog_maintenance >> catalog_maintenance_report

Scrub goes first: it removes objects no catalog row references (left by killed jobs) and reports rows
whose objects are missing, and any catalog commits it makes are then folded into the maintenance
pass of the same run. Catalog maintenance runs only after a successful scrub, and each job's report
task is a leaf, so a failed scrub fails the run. Both run in the one-slot pool `klake_mutating`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from klake_common import KlakeJobOperator, dag_settings, surface_report


@dag(**dag_settings("klake_catalog_maintenance", "@daily", ["klake", "maintenance", "mutating"], __doc__))
def klake_catalog_maintenance():
    scrub = KlakeJobOperator(job="scrub", execution_timeout=timedelta(hours=2))
    maintenance = KlakeJobOperator(job="catalog_maintenance", execution_timeout=timedelta(hours=2))
    surface_report(scrub)
    scrub >> maintenance
    surface_report(maintenance)


klake_catalog_maintenance()
