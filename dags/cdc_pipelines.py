"""CDC DAGs, two per pipeline in the configuration file ($CDC_CONFIG):

cdc_<name>            scheduled (the pipeline's `schedule`), one run at a time, no catch-up:
                      acquire_lease -> plan_window -> stage_window -> merge_window -> ack_window
                      (+ release_lease, the teardown of acquire_lease)
cdc_<name>_backfill   manual, with a form (start_ts, end_ts, tables, dry_run; or cancel):
                      acquire_lease -> begin_backfill -> plan_window -> ... -> ack_window (+ release_lease).
                      With `cancel` ticked (and nothing else), begin_backfill cancels the active backfill
                      instead (as `cdc backfill <name> --cancel`: what it replayed stays, the stream goes on;
                      refused, without retries, while a backfill window is planned and not acked) and the
                      window steps skip.
cdc_<name>_snapshot   manual, with a form (tables, chunk_rows): request a lock-free snapshot of existing rows
                      (a table added to the include list later, or one to rebuild), then run the first window:
                      acquire_lease -> begin_snapshot -> plan_window -> ... -> ack_window (+ release_lease).
                      The scheduled runs continue it: while a snapshot is active every run of cdc_<name> lands
                      one window, chunks and stream windows in turn (progress on the monitor page).

A group pipeline (several `sources`, docs/group-pipelines.md) has the window steps once per source, in a task
group `source_<id>` each, all under the run's one lease: a source whose server is down fails its own steps
(and so the run) while the other sources' windows land. The backfill form then has an optional `source`.

Every run lands one window, then, after release_lease: more_work -> continue_run. When the ack said more
work is waiting (`Pipeline.more_work`: the window was cut short by a cap before the source's end seen when
it was planned, or a backfill or a snapshot is still in progress) and `continue_while_behind` is on,
continue_run triggers cdc_<name> at once (not waited for) instead of leaving it to the schedule: a
pipeline that is behind catches up run after run, a backfill replays up to its end, a snapshot loads
chunk after chunk, and then the schedule takes over again. The new run queues behind this one
(max_active_runs=1) and finds the lease released. Its run id (`continue__w<seq>__t<token>`) is fixed by
the ack, so a retried trigger finds the run it created and skips. Only a successful ack continues, never
after an empty window (no progress: no loop).

Pausing: the manual DAGs (backfill, snapshot) are created unpaused (`is_paused_upon_creation=False`), so
a run triggered from the form starts at once. cdc_<name> is created paused, as Airflow does by default
(`[core] dags_are_paused_at_creation`): unpausing it starts its schedule, the operator's choice. While it
is paused, the runs `continue_run` triggers stay queued; the monitor page says so.

The steps are `cdc_core.run.pipeline` calls (plugins/cdc_airflow); this file only says how they connect.
- The lease grant (acquire_lease's result) and the planned window (plan_window's, carrying the grant it
  was planned under) travel as TaskFlow arguments, to the steps and to the merge operator's templated
  field.
- Every task's failure (and failed try) is noted for the monitor page by one callback in default_args
  (`cdc_airflow.tasks.failure_note`).
- ack_window's outlet (and inlet) is the AssetAlias `cdc_<name>_tables`: the ack emits one asset event per
  lake table the window changed (plugins/cdc_airflow/assets.py; docs/downstream.md), so downstream DAGs
  can be scheduled on a table's Asset (`cdc_airflow.assets.table_asset(name, "schema.table")`).
- release_lease is a teardown: it runs after everything else whether the run succeeded or failed, is
  skipped when acquire_lease was skipped (another run holds the lease: the whole run skips), and does
  not decide the run's state (a failed merge still fails the run).
- more_work runs after release_lease whatever happened (ALL_DONE) and reads the ack's result from XCom:
  a failed, skipped or dry run has none and triggers nothing. The run's state still comes from
  ack_window (its only downstream is the teardown, so it stays a leaf) and continue_run.
- merge_window is skipped for an empty window; ack_window then still runs (it records the empty
  window), but never after a failed merge.
- Every task retries `retries` times with exponential back-off, starting from Airflow's
  `[core] default_task_retry_delay` and capped at half the lease, so a retry comes while the lease is
  still ours.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param, TaskGroup, TriggerRule
from cdc_airflow import alerts, assets, tasks
from cdc_airflow.operators import CdcAckOperator, CdcMergeOperator

from cdc_core.model.config import PipelineConfig, load_config
from cdc_core.model.sources import unit_name

if TYPE_CHECKING:
    from airflow.sdk import XComArg

START_DATE = datetime(2024, 1, 1)


def source_window(
    pc: PipelineConfig, unit: str, lease: XComArg, first_step: XComArg, plan_kwargs: dict[str, Any] | None
) -> CdcAckOperator:
    """plan -> stage -> merge -> ack of one source (`unit`: the pipeline, or `<pipeline>.<source>`) after
    `first_step`; returns the ack."""
    plan = tasks.plan_window(unit, grant=lease, **(plan_kwargs or {}))
    stage = tasks.stage_window(unit, window=plan)
    merge = CdcMergeOperator(task_id="merge_window", pipeline=unit, conn_id=pc.spark.conn_id, window=plan)
    alias = assets.tables_alias(pc.name)  # the ack emits one asset event per lake table the window changed
    ack = CdcAckOperator(
        task_id=tasks.ACK_TASK, pipeline=unit, window=plan,
        trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS, outlets=[alias], inlets=[alias],
    )
    first_step >> plan >> stage >> merge >> ack
    stage >> ack  # so ack runs when merge was skipped (empty window) but not when it failed
    return ack


def window_steps(
    pc: PipelineConfig, lease: XComArg, first_step: XComArg, plan_kwargs: dict[str, Any] | None = None
) -> None:
    """plan -> stage -> merge -> ack after `first_step`, and release as the teardown of `lease`.

    A group pipeline has these steps once per source, in a task group `source_<id>` each: the sources'
    windows are independent (a source whose server is down fails its own steps, and with them the run,
    while the other sources' windows land), under the run's one lease."""
    if pc.is_group:
        acks = []
        for source in pc.source_ids():
            group_id = f"{tasks.SOURCE_GROUP_PREFIX}{source}"  # the failure callback reads the source from it
            with TaskGroup(group_id=group_id, tooltip=f"source {source} of {pc.name}"):
                acks.append(source_window(pc, unit_name(pc.name, source), lease, first_step, plan_kwargs))
        ack_ids = [f"{tasks.SOURCE_GROUP_PREFIX}{source}.{tasks.ACK_TASK}" for source in pc.source_ids()]
    else:
        acks = [source_window(pc, pc.name, lease, first_step, plan_kwargs)]
        ack_ids = [tasks.ACK_TASK]
    release = tasks.release_lease(pc.name, grant=lease)
    more = tasks.more_work(ack_tasks=ack_ids)
    carry_on = continue_run(pc)
    # Airflow annotates `setups` as operators only; a @task's XComArg is what its docs pass.
    acks >> release.as_teardown(setups=lease)
    # After the teardown, so the next run finds the lease released (it may belong to another DAG); the
    # acks stay leaves (their only downstream is the teardown), so a failed window still fails the run.
    release >> more >> carry_on


def continue_run(pc: PipelineConfig) -> TriggerDagRunOperator:
    """Trigger `cdc_<name>` now (it continues backfills and snapshots too), without waiting for it.

    The run id comes from the ack (`tasks.continue_run_id`): a retried trigger finds its run and skips.
    The new run queues behind this one when it is the same DAG (max_active_runs=1).
    """
    more = f"ti.xcom_pull(task_ids='{tasks.MORE_WORK_TASK}')"
    return TriggerDagRunOperator(
        task_id=tasks.CONTINUE_TASK,
        trigger_dag_id=f"cdc_{pc.name}",
        trigger_run_id="{{ " + more + "['trigger_run_id'] }}",
        conf={
            "continued_from": "{{ dag.dag_id }}/{{ run_id }}",
            "after_window": "{{ " + more + "['seq'] }}",
            "reason": "{{ " + more + "['reason'] }}",
        },
        wait_for_completion=False,
        skip_when_already_exists=True,
    )


def pipeline_dag(pc: PipelineConfig) -> DAG:
    with DAG(
        dag_id=f"cdc_{pc.name}",
        description=f"CDC {pc.name}: binlog window -> Delta, exactly once",
        schedule=pc.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=tasks.task_defaults(pc),
        tags=["cdc", f"cdc:{pc.name}"],
        doc_md=__doc__,
        deadline=alerts.lag_deadline(pc),  # alerts.max_lag_seconds: a run that has not caught up in time
    ) as dag:
        lease = tasks.acquire_lease(pc.name)
        window_steps(pc, lease, first_step=lease)
    return dag


def manual_dag(pc: PipelineConfig, kind: str, description: str, params: dict[str, Param]) -> DAG:
    """`cdc_<name>_<kind>`: triggered by hand with a form, one run at a time, the pipeline's task defaults."""
    return DAG(
        dag_id=f"cdc_{pc.name}_{kind}",
        description=description,
        schedule=None,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args=tasks.task_defaults(pc),
        tags=["cdc", f"cdc:{pc.name}", kind],
        doc_md=__doc__,
        params=params,
        # Only ever runs when someone triggers it (the form): a paused manual DAG would leave the
        # triggered run queued forever. The scheduled cdc_<name> keeps Airflow's default (paused when
        # first created): whether it runs on its schedule is the operator's choice (README, first steps).
        is_paused_upon_creation=False,
    )


def backfill_dag(pc: PipelineConfig) -> DAG:
    with manual_dag(
        pc,
        "backfill",
        f"CDC {pc.name}: replay the binlog from a timestamp into Delta",
        params={
            "start_ts": Param(
                None,
                type=["null", "string"],
                format="date-time",
                title="Replay from (UTC)",
                description="Replay every change committed at or after this instant, e.g. 2026-11-20T08:00:00Z "
                "(required unless cancelling).",
            ),
            "end_ts": Param(
                None,
                type=["null", "string"],
                format="date-time",
                title="Replay until (UTC, optional)",
                description="Default: up to the pipeline's current cursor.",
            ),
            "tables": Param(
                None,
                type=["null", "array"],
                items={"type": "string"},
                title="Tables (optional)",
                description="schema.table names to replay; default: every table of the pipeline.",
            ),
            "dry_run": Param(
                False,
                type="boolean",
                title="Dry run",
                description="Only report the resolved positions and the number of changes.",
            ),
            **(
                {
                    "source": Param(
                        None,
                        type=["null", "string"],
                        enum=[None, *pc.source_ids()],
                        title="Source (optional)",
                        description="Replay only this source of the group pipeline; default: every source.",
                    )
                }
                if pc.is_group
                else {}
            ),
            "cancel": Param(
                False,
                type="boolean",
                title="Cancel the active backfill",
                description="Stop the backfill in progress (what it replayed stays; the stream goes on). "
                "Leave the other fields empty. Refused while a backfill window is planned and not landed: "
                f"a run of cdc_{pc.name} lands it, then cancel again.",
            ),
        },
    ) as dag:
        lease = tasks.acquire_lease(pc.name, check_backfill=True)  # validates the form before the lease
        begin = tasks.begin_backfill(pc.name, grant=lease)
        window_steps(pc, lease, first_step=begin, plan_kwargs={"skip_unless_replaying": True})
    return dag


def snapshot_dag(pc: PipelineConfig) -> DAG:
    with manual_dag(
        pc,
        "snapshot",
        f"CDC {pc.name}: load existing rows of tables (lock-free, chunked), reconciled with the binlog",
        params={
            "tables": Param(
                None,
                type=["null", "array"],
                items={"type": "string"},
                title="Tables (optional)",
                description="schema.table names to load (again); default: every table of the pipeline.",
            ),
            "chunk_rows": Param(
                None,
                type=["null", "integer"],
                minimum=1,
                title="Rows per chunk (optional)",
                description=f"Default: the pipeline's snapshot.chunk_rows ({pc.snapshot.chunk_rows}).",
            ),
        },
    ) as dag:
        lease = tasks.acquire_lease(pc.name)
        begin = tasks.begin_snapshot(pc.name, grant=lease)
        window_steps(pc, lease, first_step=begin)
    return dag


for _pc in load_config().pipelines:
    globals()[f"cdc_{_pc.name}"] = pipeline_dag(_pc)
    globals()[f"cdc_{_pc.name}_backfill"] = backfill_dag(_pc)
    globals()[f"cdc_{_pc.name}_snapshot"] = snapshot_dag(_pc)
