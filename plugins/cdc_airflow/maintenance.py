"""The maintenance DAG's steps: lease (waiting), cleanup, the Spark maintenance job, release.

    acquire_lease -> clean_up -> maintain_tables   (+ release_lease, the teardown of acquire_lease)

- `acquire_lease` takes the pipeline's own lease, so no scheduled merge runs while the tables are
  compacted; when a pipeline run holds it, it waits up to `maintenance.lease_wait_seconds` (that run
  ends soon), then skips the whole run (the next scheduled maintenance tries again).
- `clean_up`: staged windows and ZooKeeper window records past their retention (a full pass).
- `maintain_tables` (`CdcMaintenanceOperator`): `cdc_core.run.housekeeping.maintain`, the CLI's, with a
  spark-submit through `SparkSubmitHook` as its runner: spark_apps/maintain_tables.py over the pipeline's
  tables, found at execute time, while a `LeaseKeeper` renews the lease; then the run's result (the
  cleanup's and the job's report) is recorded in ZooKeeper, fenced, for the monitor. The job's error
  decides the task's state as the merge's does (`cdc_airflow.states`). The lease grant and the cleanup's
  result come as TaskFlow results.
- `release_lease` is `cdc_airflow.tasks.release_lease` (the same grant argument).

The logic is `cdc_core.run.housekeeping`; this module only maps it onto Airflow.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import get_current_context, task

from cdc_airflow.operators import SparkJobOperator
from cdc_airflow.states import raise_for
from cdc_airflow.tasks import LEASE_TASK, holder_for, lease_grant, pipeline_step
from cdc_core.model.errors import CdcError

CLEANUP_TASK = "clean_up"


@task(task_id=LEASE_TASK)
def acquire_maintenance_lease(pipeline: str) -> dict[str, Any]:
    """Take the pipeline's lease for maintenance, waiting for a running pipeline run; skip when it stays held."""
    from cdc_core.run.housekeeping import acquire_waiting

    ctx = get_current_context()
    holder = holder_for(ctx["ti"].dag_id, ctx["run_id"])
    with pipeline_step(pipeline) as p:
        grant = acquire_waiting(p, holder, p.config.maintenance.lease_wait_seconds)
    return dict(grant.to_dict())


@task(task_id=CLEANUP_TASK)
def clean_up(pipeline: str, grant: dict[str, Any]) -> dict[str, Any]:
    """Staged windows and window records past their retention (full pass, fenced on the lease)."""
    from cdc_core.run.housekeeping import cleanup

    lease = lease_grant(grant, CLEANUP_TASK)
    with pipeline_step(pipeline) as p:
        return dict(cleanup(p, lease, batched=False))


class CdcMaintenanceOperator(SparkJobOperator):
    """OPTIMIZE / VACUUM / log tidiness of the pipeline's Delta tables with spark_apps/maintain_tables.py.

    :param pipeline: the pipeline's name in the configuration file.
    :param grant: the run's lease grant (`acquire_lease`'s result; templated: pass the TaskFlow result).
    :param cleaned: the cleanup's result (`clean_up`'s; templated), recorded with the job's report.
    :param conn_id: the Spark connection (the configuration's `spark.conn_id`).
    """

    template_fields: Sequence[str] = ("grant", "cleaned")
    ui_color = "#9fc5e8"

    def __init__(self, *, grant: Any = None, cleaned: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.grant = grant
        self.cleaned = cleaned

    def execute(self, context: Any) -> None:
        from cdc_airflow.hooks import CdcPipelineHook
        from cdc_core.run import housekeeping

        grant = lease_grant(self.grant, self.task_id)
        hook = CdcPipelineHook(self.pipeline)
        try:
            with hook.pipeline() as p:
                record, error = housekeeping.maintain(
                    p, grant, started_at=time.time(), cleaned=self.cleaned,
                    runner=self.runner(p, hook.secrets(p), "maintenance job"),
                )
            self.log.info(
                "maintenance.recorded pipeline=%s status=%s totals=%s", self.pipeline, record["status"],
                record["totals"],
            )
            if error is not None:
                raise error
        except CdcError as e:
            raise_for(e, self.pipeline)
