"""The DAG steps as TaskFlow tasks: each opens the pipeline, calls one `cdc_core.run.pipeline` step, returns.

State between steps travels as TaskFlow arguments: the lease grant `acquire_lease` returns goes to the
steps before the plan, and the window `plan_window` returns to the steps after it (no secrets in either).
The steps after the plan read the grant from `acquire_lease`'s current result (`window_lease`), never a
copy passed along: clearing a step also clears the lease setup, whose re-run (after the teardown released
the lease) holds a new token, and the cleared step must work under it. They cannot take it as an argument
because a setup task's direct downstream must use the ALL_SUCCESS trigger rule and ack_window does not.
Everything else lives in ZooKeeper and the staging area, so any single step can be retried or cleared.
Each step renews the lease before acting (inside `Pipeline.plan/stage/ack`).

Task states come from the error, in one place (`cdc_airflow.states.task_state`):
- another run holds the lease -> `acquire_lease` is skipped (message names the holder and expiry),
  and so is everything downstream, `release_lease` included: it only ever releases a grant this run
  acquired.
- a configuration error, a schema conflict or a lost lease -> failed without retries (`AirflowFailException`).
- anything else (source, ZooKeeper, staging, lake hiccups) -> failed, retried with back-off.

A failed step is noted for the monitor page by one callback, `failure_note` (the DAGs set it as
`on_failure_callback` and `on_retry_callback` in their default_args).

After the teardown, `more_work` (a short-circuit) lets `continue_run` trigger the next run only when
this run's ack succeeded and `Pipeline.more_work` said more is waiting (its answer travels in the ack's
XCom, with the continuation's run id).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import TriggerRule, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from cdc_airflow.states import RequestRefused, raise_for
from cdc_core.model.errors import CdcError, ConfigError, Fenced
from cdc_core.run import backfill

LEASE_TASK = "acquire_lease"
PLAN_TASK = "plan_window"
ACK_TASK = "ack_window"
MORE_WORK_TASK = "more_work"  # the short-circuit after release_lease
CONTINUE_TASK = "continue_run"  # the TriggerDagRunOperator after it
SOURCE_GROUP_PREFIX = "source_"  # a group pipeline's task group per source: source_<id> (dags/cdc_pipelines.py)

log = logging.getLogger("cdc.airflow")


def holder_for(dag_id: str, run_id: str) -> str:
    """Who holds the lease, as shown on the monitor page: the DAG run."""
    return f"{dag_id}/{run_id}"


def form_utc(value: Any) -> Any:
    """A timestamp from the backfill form, read as UTC when it carries no zone.

    The form labels its fields UTC, and a browser's date-time picker sends local wall-clock text
    without a zone ("2026-11-20T08:00"); anything else (a zone, unix seconds, garbage) is passed on
    for `cdc_core` to accept or reject with its own message.
    """
    if not isinstance(value, str) or not value.strip():
        return value
    try:
        parsed = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        return value
    return parsed.replace(tzinfo=UTC).isoformat() if parsed.tzinfo is None else value


@contextmanager
def pipeline_step(pipeline: str) -> Iterator[Any]:
    """Open the pipeline for one step (through `CdcPipelineHook`); map a CDC error to the task state it
    calls for (`cdc_airflow.states`)."""
    from cdc_airflow.hooks import CdcPipelineHook

    try:
        with CdcPipelineHook(pipeline).pipeline() as p:
            yield p
    except CdcError as e:
        raise_for(e, pipeline)


def source_units(pipeline: str, only: Any = None) -> list[str]:
    """The pipeline's per-source names (`shop.eu1`, ...: cdc_core.model.sources.unit_name), or just the
    pipeline's name when it has one source. `only`: a source id from a form (None or empty: every source)."""
    from cdc_airflow.hooks import pipeline_config
    from cdc_core.model.sources import unit_name

    pc = pipeline_config(pipeline)
    if only:
        pc.source_config(str(only))  # an unknown source: ConfigError naming the pipeline's sources
        return [unit_name(pipeline, str(only))]
    return [unit_name(pipeline, s) for s in pc.source_ids()]


def lease_grant(grant: Any, task_id: str = "") -> Any:
    """The run's lease grant from `acquire_lease`'s result; a clear error when there is none."""
    from cdc_core.coordination import LeaseGrant

    if not isinstance(grant, Mapping) or not grant:
        # Not retryable: only clearing the run from the lease step brings the grant back.
        raise AirflowFailException(
            f"task {task_id!r}: no lease grant from {LEASE_TASK!r}; clear the run from {LEASE_TASK!r}"
        )
    return LeaseGrant.from_dict(dict(grant))


def window_lease(window: Any, task_id: str = "", ti: Any = None) -> tuple[Any, int]:
    """The run's current lease grant (`acquire_lease`'s latest result: a cleared step's setup re-run holds a
    new token) and the window's seq from `plan_window`'s result; a clear error when either is missing."""
    if ti is None:
        ti = get_current_context()["ti"]
    grant = ti.xcom_pull(task_ids=LEASE_TASK)
    if not isinstance(window, Mapping) or "seq" not in window or not grant:
        # Not retryable: only clearing the run from the lease step brings the window back.
        raise AirflowFailException(
            f"task {task_id!r}: no lease grant from {LEASE_TASK!r} or no window from {PLAN_TASK!r}; "
            f"clear the run from the {LEASE_TASK!r} task"
        )
    return lease_grant(grant, task_id), int(window["seq"])


# ----------------------------------------------------------------------------------- backfill form


def backfill_request(params: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the backfill form as a request: {"cancel": True} or {start_ts, end_ts, tables, dry_run};
    a ConfigError for a form that mixes the two (as `cdc backfill --cancel` refuses other flags)."""
    others = {k: params.get(k) for k in ("start_ts", "end_ts", "tables", "dry_run") if params.get(k)}
    if params.get("cancel"):
        if others:
            raise ConfigError(
                f"backfill cancel takes no {', '.join(sorted(others))}: leave the other fields empty to cancel "
                "the active backfill, or untick cancel to start one"
            )
        return {"cancel": True}
    return {
        "start_ts": form_utc(params.get("start_ts")),
        "end_ts": form_utc(params.get("end_ts")) or None,
        "tables": list(params.get("tables") or []) or None,
        "dry_run": bool(params.get("dry_run")),
    }


def check_backfill_form(pipeline: str, params: Any) -> dict[str, Any]:
    """Validate the backfill form before the lease is taken: bad input fails the run's first task, without
    retries, and changes nothing (`backfill.check_backfill` only reads; a refused request is not noted
    as the monitor's last error: the task's own log says what is wrong). Other errors (source or
    ZooKeeper unreachable) propagate and are retried."""
    from cdc_airflow.hooks import CdcPipelineHook

    try:
        request = backfill_request(params)
        if request.get("cancel"):
            return request
        checked = {}
        for unit in source_units(pipeline, params.get("source")):
            with CdcPipelineHook(unit).pipeline() as p:
                checked[unit] = dict(backfill.check_backfill(p, **request))
        return checked[pipeline] if list(checked) == [pipeline] else {"sources": checked}
    except CdcError as e:
        raise_for(e, pipeline, checking_request=True)


# ------------------------------------------------------------------------------------------ tasks


@task(task_id=LEASE_TASK)
def acquire_lease(pipeline: str, check_backfill: bool = False) -> dict[str, Any]:
    """Take the pipeline's ZooKeeper lease for this run; skip the run when another run holds it.

    With `check_backfill` (the backfill DAG) the run's form is validated first, so a bad form never
    touches the lease.
    """
    ctx = get_current_context()
    holder = holder_for(ctx["ti"].dag_id, ctx["run_id"])
    if check_backfill:
        check_backfill_form(pipeline, ctx["params"])
    with pipeline_step(pipeline) as p:
        grant = p.acquire(holder)
    return dict(grant.to_dict())


@task(task_id="begin_backfill")
def begin_backfill(pipeline: str, grant: dict[str, Any]) -> dict[str, Any]:
    """Start a backfill from the run's params (start_ts, end_ts, tables, dry_run) and return its report;
    or, with `cancel`, cancel the active one (`cdc backfill <pipeline> --cancel`)."""
    ctx = get_current_context()
    lease = lease_grant(grant, "begin_backfill")
    request = backfill_request(ctx["params"])
    units = source_units(pipeline, ctx["params"].get("source"))
    if request.get("cancel"):
        cancelled = {unit: cancel_backfill(unit, lease) for unit in units}
        return cancelled[pipeline] if units == [pipeline] else {"sources": cancelled}
    reports = {}
    for unit in units:  # a group pipeline: each source replays its own binlog from the same instant
        with pipeline_step(unit) as p:
            reports[unit] = dict(backfill.begin_backfill(p, lease, **request))
        log.info("backfill report: %s", reports[unit])
    return reports[pipeline] if units == [pipeline] else {"sources": reports}


def cancel_backfill(pipeline: str, grant: Any) -> dict[str, Any]:
    """Drop the active backfill (what it replayed stays; the stream goes on), with the same cdc_core call
    as `cdc backfill --cancel`. A backfill window planned and not acked must land first: refused, without
    retries (this run holds the lease, so retrying could never let that window land)."""
    from cdc_airflow.hooks import CdcPipelineHook

    try:
        with CdcPipelineHook(pipeline).pipeline() as p:
            return backfill.cancel_backfill(
                p, grant, how_to_land=f"a run of cdc_{pipeline} lands it: trigger it or let its schedule run it"
            )
    except CdcError as e:
        raise_for(e, pipeline, checking_request=True)


@task(task_id="begin_snapshot")
def begin_snapshot(pipeline: str, grant: dict[str, Any]) -> dict[str, Any]:
    """Request a snapshot of the form's tables (default: every captured table); return the progress."""
    from cdc_core.model import snapshot_state
    from cdc_core.run import snapshot_steps

    params = get_current_context()["params"]
    lease = lease_grant(grant, "begin_snapshot")
    tables = [str(t).strip() for t in (params.get("tables") or []) if str(t).strip()] or None
    chunk_rows = params.get("chunk_rows")
    views = {}
    for unit in source_units(pipeline):  # a group pipeline: every source snapshots its own tables
        with pipeline_step(unit) as p:
            state = snapshot_steps.request(p, lease, tables, int(chunk_rows) if chunk_rows else None)
        views[unit] = dict(snapshot_state.progress_view(state))
        log.info("snapshot requested: %s %s", unit, views[unit])
    return views[pipeline] if list(views) == [pipeline] else {"sources": views}


@task(task_id=PLAN_TASK)
def plan_window(pipeline: str, grant: dict[str, Any], skip_unless_replaying: bool = False) -> dict[str, Any]:
    """Recover, then plan (or replay) the next window; returns {seq, kind, empty, start, end, ...}.

    `skip_unless_replaying` (the backfill DAG): a dry run or a cancel lands no window."""
    params = get_current_context()["params"]
    if skip_unless_replaying and (params.get("dry_run") or params.get("cancel")):
        what = "cancel" if params.get("cancel") else "dry run"
        raise AirflowSkipException(f"pipeline {pipeline!r}: {what}; the report is begin_backfill's result")
    lease = lease_grant(grant, PLAN_TASK)
    with pipeline_step(pipeline) as p:
        window = p.plan(lease).to_dict()
    return dict(window)


@task(task_id="stage_window")
def stage_window(pipeline: str, window: dict[str, Any]) -> dict[str, Any]:
    """Stage the planned window's row changes (Parquet + manifest), or verify an existing staged copy."""
    lease, seq = window_lease(window, "stage_window")
    with pipeline_step(pipeline) as p:
        staged: dict[str, Any] = p.stage(lease, seq).to_dict()
    return staged


def ack_window(
    pipeline: str, window: dict[str, Any], ctx: Any, after_ack: Callable[[Any, int], None] | None = None
) -> dict[str, Any]:
    """The ack step (`CdcAckOperator`'s): move the cursor past the window once Delta holds it for every
    staged table (and the lake's checkpoints table records it); emit an asset event per table it changed
    (plugins/cdc_airflow/assets.py, through the outlet alias the DAG gives the task); say whether more work
    is waiting (`Pipeline.more_work`, under "more_work", with the run id a continuation run gets).
    `after_ack(p, seq)`: called with the open pipeline once the window is acked (the operator's lineage)."""
    lease, seq = window_lease(window, ACK_TASK)
    with pipeline_step(pipeline) as p:
        result: dict[str, Any] = p.ack(lease, seq).to_dict()
        if after_ack is not None:
            after_ack(p, seq)
        more = dict(p.more_work(seq))
        # One asset event per table the window (and any window acked by recovery before it) changed,
        # recorded by Airflow when this task succeeds; windows already announced are left out.
        from cdc_airflow.assets import emit

        result["asset_events"], before = emit(pipeline, seq, ctx, p)
        log.info("assets.emitted pipeline=%s seq=%s events=%s announced_before=%s",
                 pipeline, seq, len(result["asset_events"]), before)
    more["trigger_run_id"] = continue_run_id(seq, lease.token)
    result["more_work"] = more
    return result


def continue_run_id(seq: int, token: int) -> str:
    """The run id of the run that continues after window `seq`, acked under lease `token`.

    The same for every try of the ack, `more_work` and trigger tasks of one run, so a retried trigger
    finds the run it already created (and skips) instead of creating a second one; different for every
    window. Not derived from the current run id: a chain of continuations would grow it without bound.
    """
    return f"continue__w{seq}__t{token:x}"


@task.short_circuit(task_id=MORE_WORK_TASK, trigger_rule=TriggerRule.ALL_DONE)
def more_work(ack_tasks: list[str] | None = None) -> dict[str, Any] | bool:
    """After release_lease: continue (trigger the next run) only if this run's ack succeeded and said so.

    Runs whatever happened before (ALL_DONE, so it comes after the teardown whatever the teardown's
    state), and reads the ack's result from XCom: a run whose ack did not succeed (failed merge,
    skipped run, dry run) has none, so it never continues. Returns the answer (truthy) to continue,
    False to skip the trigger.

    The one step that pulls an XCom by task id instead of taking a TaskFlow argument, on purpose: an
    argument would make ack_window its upstream, so ack_window would no longer be a leaf and a failed
    ack would no longer fail the run (this task, ALL_DONE, would succeed after it).
    """
    ctx = get_current_context()
    answers = []
    for task_id in ack_tasks or [ACK_TASK]:  # a group pipeline: one ack per source (`<group>.ack_window`)
        ack = ctx["ti"].xcom_pull(task_ids=task_id)
        answer = ack.get("more_work") if isinstance(ack, dict) else None
        if isinstance(answer, dict):
            answers.append(answer)
            log.info("more_work ack=%s more=%s reason=%s detail=%r", task_id, answer.get("more"), answer.get("reason"),
                     answer.get("detail"))
    if not answers:
        log.info("more_work more=False reason=no_ack (this run acked no window)")
        return False
    return next((a for a in answers if a.get("more")), False)


@task(task_id="release_lease")
def release_lease(pipeline: str, grant: dict[str, Any] | None) -> None:
    """Give the lease back (teardown: runs whatever happened after a successful acquire)."""
    if not grant:
        # Not ours to release: this run never acquired a lease (skipped or failed acquire).
        raise AirflowSkipException(f"pipeline {pipeline!r}: this run holds no lease")
    from cdc_airflow.hooks import CdcPipelineHook

    lease = lease_grant(grant, "release_lease")
    with CdcPipelineHook(pipeline).pipeline() as p:
        try:
            p.release(lease)
        except Fenced as e:
            # The lease expired and someone else holds it now: theirs, not ours to touch.
            log.warning("lease.not_released pipeline=%s reason=%s", pipeline, e)


# ------------------------------------------------------------------------------ failure callback


def task_defaults(pc: Any) -> dict[str, object]:
    """default_args of every task of a pipeline's DAGs: retries with exponential back-off, starting from
    Airflow's `[core] default_task_retry_delay` and capped at half the lease (a retry comes while the
    lease is still ours), and the one failure callback (a failed step, and each failed try, noted for
    the monitor page)."""
    from datetime import timedelta

    note = failure_note(pc.name)
    return {
        "owner": "cdc",
        "retries": pc.retries,
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(seconds=max(30, pc.lease_seconds // 2)),
        "on_failure_callback": note,
        "on_retry_callback": note,
    }


def failure_note(pipeline: str) -> Callable[[Mapping[str, Any]], None]:
    """The one failure callback of a pipeline's tasks (`on_failure_callback` and `on_retry_callback` in
    the DAGs' default_args): note the failed step for the monitor page (`Pipeline.note_failure`:
    `status()["last_error"]`, with the window's seq when the step had one), under the source whose task
    group the step is in for a group pipeline (`failed_unit`). Not for a refused request
    (the backfill form: nothing changed) or a skip. Best effort: it never fails the task further."""

    def note_failure(context: Mapping[str, Any]) -> None:
        error = context.get("exception")
        if error is None or isinstance(error, RequestRefused | AirflowSkipException):
            return
        if not isinstance(error, BaseException):  # Airflow may hand over only a message
            error = RuntimeError(str(error))
        ti = context["ti"]
        seq = rendered_window_seq(context.get("task"))
        try:
            from cdc_airflow.hooks import CdcPipelineHook

            with CdcPipelineHook(failed_unit(pipeline, ti.task_id)).pipeline() as p:
                p.note_failure(ti.task_id, error, seq=seq, holder=holder_for(ti.dag_id, context["run_id"]))
        except Exception as e:  # ZooKeeper unreachable, say: the task's own log has the failure
            log.warning("step.failure_not_noted pipeline=%s step=%s reason=%s: %s",
                        pipeline, ti.task_id, type(e).__name__, e)

    return note_failure


def failed_unit(pipeline: str, task_id: str) -> str:
    """Pure: whose last error a failed task is: the source's (`<pipeline>.<id>`) for a step in a group
    pipeline's task group `source_<id>`, else the pipeline's (the lease steps; of a group pipeline they
    open its first source, as `CdcPipelineHook` does)."""
    from cdc_core.model.sources import unit_name

    group, dot, _ = task_id.partition(".")
    if dot and group.startswith(SOURCE_GROUP_PREFIX) and len(group) > len(SOURCE_GROUP_PREFIX):
        return unit_name(pipeline, group.removeprefix(SOURCE_GROUP_PREFIX))
    return pipeline


def rendered_window_seq(task_obj: Any) -> int | None:
    """Pure: the seq of the window a task worked on, from its rendered `window` argument (TaskFlow
    op_kwargs or an operator's field); None for a step before the plan (or when it was not rendered)."""
    window = getattr(task_obj, "window", None)
    if window is None:
        window = (getattr(task_obj, "op_kwargs", None) or {}).get("window")
    if isinstance(window, Mapping) and isinstance(window.get("seq"), int):
        return int(window["seq"])
    return None
