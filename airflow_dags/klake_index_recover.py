"""On demand: verify every segment's indexes and tail, and repair them when the `repair` param says so.

Task order: verify >> verify_report; verify >> repair_requested >> recover >> recover_report

`verify` runs `jobs/recover.py --dry-run`, which changes nothing and exits 1 when anything needs
repair (so it is not retried: damage is not transient); `recover` rebuilds sidecars and quarantines
corrupt tails. `repair_requested` runs whatever verify's outcome (repair is most needed
when verification found damage) and skips the repair unless `repair` is true. The run fails when
either report is not `succeeded`, so damage verify found is never silent, even when repair fixed it.
Verify also takes the one-slot pool `klake_mutating`: a verification beside a running retention or
compaction would see their half-done work and report damage that is not there.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param, TriggerRule, dag, task
from klake_common import MUTATING_POOL, KlakeJobOperator, dag_settings, surface_report


@dag(**dag_settings("klake_index_recover", None, ["klake", "recovery"], __doc__,
                    {"repair": Param(False, type="boolean", description="after verifying, rebuild and quarantine")}))
def klake_index_recover():
    verify = KlakeJobOperator(job="recover", task_id="verify", mutating=False, pool=MUTATING_POOL, retries=0,
                              extra_args=["--dry-run"], execution_timeout=timedelta(hours=4))
    recover = KlakeJobOperator(job="recover", execution_timeout=timedelta(hours=4))

    @task.short_circuit(trigger_rule=TriggerRule.ALL_DONE)
    def repair_requested(params=None) -> bool:
        return bool(params["repair"])

    surface_report(verify)
    verify >> repair_requested() >> recover
    surface_report(recover)


klake_index_recover()
