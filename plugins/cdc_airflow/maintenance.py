"""The maintenance DAG's steps: lease (waiting), cleanup, the Spark maintenance job, release.

    acquire_lease -> clean_up -> maintain_tables   (+ release_lease, the teardown of acquire_lease)

- `acquire_lease` takes the pipeline's own lease, so no scheduled merge runs while the tables are
  compacted; when a pipeline run holds it, it waits up to `maintenance.lease_wait_seconds` (that run
  ends soon), then skips the whole run (the next scheduled maintenance tries again).
- `clean_up`: staged windows and ZooKeeper window records past their retention (a full pass).
- `maintain_tables` (`CdcMaintenanceOperator`, a spark-submit through `SparkSubmitHook`):
  spark_apps/maintain_tables.py over the pipeline's tables, found at execute time, while a `LeaseKeeper`
  renews the lease; then the run's result (the cleanup's and the job's report) is recorded in ZooKeeper,
  fenced, for the monitor. The lease grant and the cleanup's result come as TaskFlow results.
- `release_lease` is `cdc_airflow.tasks.release_lease` (the same grant argument).

The logic is `cdc_core.run.housekeeping`; this module only maps it onto Airflow.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import get_current_context, task

from cdc_airflow.operators import SparkJobOperator, build_job_submit
from cdc_airflow.states import raise_for
from cdc_airflow.tasks import LEASE_TASK, _step, holder_for, lease_grant
from cdc_core.model.errors import CdcError

CLEANUP_TASK = "clean_up"


@task(task_id=LEASE_TASK)
def acquire_maintenance_lease(pipeline: str) -> dict[str, Any]:
    """Take the pipeline's lease for maintenance, waiting for a running pipeline run; skip when it stays held."""
    from cdc_core.run.housekeeping import acquire_waiting

    ctx = get_current_context()
    holder = holder_for(ctx["ti"].dag_id, ctx["run_id"])
    with _step(pipeline) as p:
        grant = acquire_waiting(p, holder, p.config.maintenance.lease_wait_seconds)
    return dict(grant.to_dict())


@task(task_id=CLEANUP_TASK)
def clean_up(pipeline: str, grant: dict[str, Any]) -> dict[str, Any]:
    """Staged windows and window records past their retention (full pass, fenced on the lease)."""
    from cdc_core.run.housekeeping import cleanup

    lease = lease_grant(grant, CLEANUP_TASK)
    with _step(pipeline) as p:
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
        started = time.time()
        hook = CdcPipelineHook(self.pipeline)
        try:
            with hook.pipeline() as p:
                tables = housekeeping.discover_tables(p.lake_root, p.lake_table_filter(), p.config.table_options)
                report_uri = housekeeping.report_uri(p, grant, started)
                submit = build_job_submit(
                    pipeline=self.pipeline,
                    job="maintenance job",
                    name=f"cdc-maintain-{self.pipeline}",
                    application=str(housekeeping.MAINTENANCE_JOB),
                    args=housekeeping.maintenance_application_args(p, grant, tables, report_uri),
                    conf=p.spark_conf(),
                    jars=p.spark_jars(),
                    python=sys.executable,
                    path=os.environ.get("PATH", ""),
                    secrets=hook.secrets(p),
                    zk_auth=p.zk_auth(),  # the same lookup as the CLI's (Pipeline.spark_job_env)
                    store=p.store,
                )
                p.renew(grant)  # fail now, not after a Spark start, if the lease was lost
                error: str | None = None
                if tables:
                    self.log.info("maintenance.submit pipeline=%s tables=%s", self.pipeline, len(tables))
                    try:
                        with housekeeping.keep_lease(p, grant) as keeper:
                            self.run_job(submit)
                    except Exception as e:  # recorded below, then re-raised
                        error = f"{type(e).__name__}: {str(e)[-2000:]}"
                    report = housekeeping.read_report(report_uri)
                    if keeper.lost is not None:
                        raise keeper.lost
                else:
                    self.log.info("maintenance.no_tables pipeline=%s lake=%s", self.pipeline, p.lake_root)
                    report = {"tables": [], "totals": {}, "errors": []}
                record = housekeeping.maintenance_record(
                    grant=grant, started_at=started, finished_at=time.time(), cleanup_result=self.cleaned,
                    report=report, error=error,
                )
                p.coordinator.record_maintenance(grant, record)
        except CdcError as e:
            raise_for(e, self.pipeline)
        self.log.info(
            "maintenance.recorded pipeline=%s status=%s totals=%s", self.pipeline, record["status"], record["totals"]
        )
        if error is not None:
            raise RuntimeError(f"pipeline {self.pipeline!r}: the maintenance job failed ({error}); it is safe to retry")
