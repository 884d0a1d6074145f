"""CDC maintenance DAGs, one per pipeline in the configuration file ($CDC_CONFIG):

cdc_<name>_maintenance   its own schedule (`maintenance.schedule`, default daily; null = manual only),
                         triggerable from the UI, one run at a time, no catch-up:
                         acquire_lease -> clean_up -> maintain_tables   (+ release_lease, the teardown)

- acquire_lease takes the pipeline's own lease (no merge runs meanwhile), waiting up to
  `maintenance.lease_wait_seconds` for a running pipeline run; still held -> the run skips.
- clean_up deletes staged windows acked longer ago than `staging_retention_hours` and window records
  past `maintenance.window_records_retention_hours` (never a window that is not acked, never the
  cursor, the pending window or the last acked record).
- maintain_tables runs spark_apps/maintain_tables.py: OPTIMIZE (Z-order on `table_options.*.zorder_by`),
  VACUUM (never below the replay horizon), checkpoint + log cleanup, retention properties; tombstone
  tables included. The result is recorded in ZooKeeper and shown on the CDC monitor page.

The steps are `cdc_core.run.housekeeping` calls (plugins/cdc_airflow/maintenance.py); docs/housekeeping.md
explains retention floors and where each cleanup runs.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from cdc_airflow import tasks
from cdc_airflow.maintenance import CdcMaintenanceOperator, acquire_maintenance_lease, clean_up

from cdc_core.model.config import PipelineConfig, load_config

START_DATE = datetime(2024, 1, 1)


def maintenance_dag(pc: PipelineConfig) -> DAG:
    with DAG(
        dag_id=f"cdc_{pc.name}_maintenance",
        description=f"CDC {pc.name}: staged windows, ZooKeeper records and Delta table maintenance",
        schedule=pc.maintenance.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=tasks.task_defaults(pc),
        tags=["cdc", f"cdc:{pc.name}", "maintenance"],
        doc_md=__doc__,
        # Manual only (schedule null): ready when triggered from the UI. Scheduled: Airflow's default
        # (paused when first created), the operator unpauses it.
        is_paused_upon_creation=False if pc.maintenance.schedule is None else None,
    ) as dag:
        lease = acquire_maintenance_lease(pc.name)
        cleanup = clean_up(pc.name, grant=lease)
        maintain = CdcMaintenanceOperator(
            task_id="maintain_tables", pipeline=pc.name, conn_id=pc.spark.conn_id, grant=lease, cleaned=cleanup
        )
        release = tasks.release_lease(pc.name, grant=lease)
        lease >> cleanup >> maintain >> release.as_teardown(setups=lease)
    return dag


for _pc in load_config().pipelines:
    globals()[f"cdc_{_pc.name}_maintenance"] = maintenance_dag(_pc)
