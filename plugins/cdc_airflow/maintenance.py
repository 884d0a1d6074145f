"""The maintenance DAG's steps: lease (waiting), cleanup, the Spark maintenance job, release.

    acquire_lease -> clean_up -> maintain_tables   (+ release_lease, the teardown of acquire_lease)

- `acquire_lease` takes the pipeline's own lease, so no scheduled merge runs while the tables are
  compacted; when a pipeline run holds it, it waits up to `maintenance.lease_wait_seconds` (that run
  ends soon), then skips the whole run (the next scheduled maintenance tries again).
- `clean_up`: staged windows and ZooKeeper window records past their retention (a full pass).
- `maintain_tables` (`CdcMaintenanceOperator`, a SparkSubmitOperator): spark_apps/maintain_tables.py
  over the pipeline's tables, found at execute time, while a `LeaseKeeper` renews the lease; then the
  run's result (the cleanup's and the job's report) is recorded in ZooKeeper, fenced, for the monitor.
- `release_lease` is `cdc_airflow.tasks.release_lease` (the same XCom contract).

The logic is `cdc_core.run.housekeeping`; this module only maps it onto Airflow.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from cdc_airflow.operators import LEASE_TASK, spark_submit_env
from cdc_airflow.tasks import _grant, _step, holder_for, lease_held_message
from cdc_core.model.errors import ConfigError, Fenced, LeaseHeld

CLEANUP_TASK = "clean_up"


@task(task_id=LEASE_TASK)
def acquire_maintenance_lease(pipeline: str) -> dict[str, Any]:
    """Take the pipeline's lease for maintenance, waiting for a running pipeline run; skip when it stays held."""
    from cdc_core.run.housekeeping import acquire_waiting

    ctx = get_current_context()
    holder = holder_for(ctx["ti"].dag_id, ctx["run_id"])
    with _step(pipeline, "maintenance_lease") as p:
        try:
            grant = acquire_waiting(p, holder, p.config.maintenance.lease_wait_seconds)
        except LeaseHeld as e:
            raise AirflowSkipException(lease_held_message(pipeline, e)) from e
    return dict(grant.to_dict())


@task(task_id=CLEANUP_TASK)
def clean_up(pipeline: str) -> dict[str, Any]:
    """Staged windows and window records past their retention (full pass, fenced on the lease)."""
    from cdc_core.run.housekeeping import cleanup

    ctx = get_current_context()
    grant = _grant(ctx["ti"])
    with _step(pipeline, CLEANUP_TASK) as p:
        return dict(cleanup(p, grant, batched=False))


class CdcMaintenanceOperator(SparkSubmitOperator):
    """OPTIMIZE / VACUUM / log tidiness of the pipeline's Delta tables with spark_apps/maintain_tables.py.

    :param pipeline: the pipeline's name in the configuration file.
    :param conn_id: the Spark connection (the configuration's `spark.conn_id`).
    """

    ui_color = "#9fc5e8"

    def __init__(self, *, pipeline: str, conn_id: str = "spark_local", **kwargs: Any) -> None:
        kwargs.setdefault("name", f"cdc-maintain-{pipeline}")
        kwargs.setdefault("durable", False)  # a retry submits again (every step is idempotent)
        super().__init__(conn_id=conn_id, **kwargs)
        self.pipeline = pipeline

    def execute(self, context: Any) -> None:
        from airflow.sdk.log import mask_secret

        from cdc_airflow.hooks import open_pipeline, secrets_of
        from cdc_core.run import housekeeping

        ti = context["ti"]
        grant = _grant(ti)
        cleaned = ti.xcom_pull(task_ids=CLEANUP_TASK)
        started = time.time()
        with open_pipeline(self.pipeline) as p:
            tables = housekeeping.discover_tables(p.lake_root, p.table_filter(), p.config.table_options)
            report_uri = housekeeping.report_uri(p, grant, started)
            args = housekeeping.maintenance_application_args(p, grant, tables, report_uri)
            conf = {str(k): str(v) for k, v in p.spark_conf().items()}
            secrets = secrets_of(p.config, p.source, p.store)
            if any(s and any(s in a for a in (*args, *conf.values())) for s in secrets):
                raise AirflowFailException(
                    f"pipeline {self.pipeline!r}: the maintenance job's arguments or Spark confs contain a credential"
                )
            zk_auth = p.zk_auth()  # the same lookup as the CLI's (Pipeline.spark_job_env)
            if zk_auth:
                mask_secret(zk_auth)
            jars = p.spark_jars()
            p.renew(grant)  # fail now, not after a Spark start, if the lease was lost
            error: str | None = None
            report = None
            if tables:
                self.application = str(housekeeping.MAINTENANCE_JOB)
                self.application_args = args
                self.jars = jars
                self.conf = conf
                self.env_vars = spark_submit_env(sys.executable, os.environ.get("PATH", ""), zk_auth, store=p.store)
                self.name = f"cdc-maintain-{self.pipeline}"
                self._hook = None
                self.log.info("maintenance.submit pipeline=%s tables=%s", self.pipeline, len(tables))
                try:
                    with housekeeping.keep_lease(p, grant) as keeper:
                        super().execute(context)
                except Exception as e:  # recorded below, then re-raised
                    error = f"{type(e).__name__}: {str(e)[-2000:]}"
                report = housekeeping.read_report(report_uri)
                if keeper.lost is not None:
                    raise AirflowFailException(f"Fenced: {keeper.lost}")
            else:
                self.log.info("maintenance.no_tables pipeline=%s lake=%s", self.pipeline, p.lake_root)
                report = {"tables": [], "totals": {}, "errors": []}
            record = housekeeping.maintenance_record(
                grant=grant, started_at=started, finished_at=time.time(), cleanup_result=cleaned, report=report,
                error=error,
            )
            try:
                p.coordinator.record_maintenance(grant, record)
            except (ConfigError, Fenced) as e:
                raise AirflowFailException(f"{type(e).__name__}: {e}") from e
        self.log.info(
            "maintenance.recorded pipeline=%s status=%s totals=%s", self.pipeline, record["status"], record["totals"]
        )
        if error is not None:
            raise RuntimeError(f"pipeline {self.pipeline!r}: the maintenance job failed ({error}); it is safe to retry")
