"""The DAG steps as TaskFlow tasks: each opens the pipeline, calls one `cdc_core.run.pipeline` step, returns.

State between steps travels as two small XComs (the lease grant from `acquire_lease`, the window
step from `plan_window`; no secrets in either); everything else lives in ZooKeeper and the staging
area, so any single step can be retried or cleared. Each step renews the lease before acting (inside
`Pipeline.plan/stage/ack`), and a lost lease fails the step without retries: retrying with a fenced
grant can never succeed.

Task states map CDC outcomes:
- another run holds the lease -> `acquire_lease` is skipped (message names the holder and expiry),
  and so is everything downstream, `release_lease` included: it only ever releases a grant this run
  acquired.
- a configuration error or a lost lease -> failed without retries (`AirflowFailException`).
- anything else (source, ZooKeeper, staging, lake hiccups) -> failed, retried with back-off.

After the teardown, `more_work` (a short-circuit) lets `continue_run` trigger the next run only when
this run's ack succeeded and `Pipeline.more_work` said more is waiting (its answer travels in the ack's
XCom, with the continuation's run id).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from airflow.sdk import TriggerRule, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from cdc_airflow.operators import LEASE_TASK, PLAN_TASK, pull_grant_and_seq
from cdc_core.model.errors import ConfigError, Fenced, LeaseHeld
from cdc_core.run import backfill

ACK_TASK = "ack_window"
MORE_WORK_TASK = "more_work"  # the short-circuit after release_lease
CONTINUE_TASK = "continue_run"  # the TriggerDagRunOperator after it

log = logging.getLogger("cdc.airflow")


def holder_for(dag_id: str, run_id: str) -> str:
    """Who holds the lease, as shown on the monitor page: the DAG run."""
    return f"{dag_id}/{run_id}"


def _fmt_ts(value: Any) -> str:
    try:
        return datetime.fromtimestamp(float(value), tz=UTC).isoformat(timespec="seconds")
    except (TypeError, ValueError):
        return str(value)


def lease_held_message(pipeline: str, err: LeaseHeld) -> str:
    holder = getattr(err, "holder", None)
    until = getattr(err, "until", None)
    if holder is None:
        return f"pipeline {pipeline!r}: skipped, the lease is held by another run ({err})"
    return (
        f"pipeline {pipeline!r}: skipped, the lease is held by {holder} until {_fmt_ts(until)}; "
        "the next scheduled run continues where that one stops"
    )


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
def _step(pipeline: str, step: str, seq: int | None = None) -> Iterator[Any]:
    """Open the pipeline for one step; note a failure for the monitor page; map errors that retrying
    cannot fix to a failure without retries."""
    from cdc_airflow.hooks import open_pipeline

    ctx = get_current_context()
    try:
        with open_pipeline(pipeline) as p:
            try:
                yield p
            except (AirflowSkipException, LeaseHeld):
                raise
            except Exception as e:
                p.note_failure(step, e, seq=seq, holder=holder_for(ctx["ti"].dag_id, ctx["run_id"]))
                raise
    except (ConfigError, Fenced) as e:
        raise AirflowFailException(f"{type(e).__name__}: {e}") from e


def _grant(ti: Any) -> Any:
    from cdc_core.coordination import LeaseGrant

    data = ti.xcom_pull(task_ids=LEASE_TASK)
    if not data:
        raise AirflowFailException(
            f"task {ti.task_id!r}: no lease grant from {LEASE_TASK!r} in XCom; clear the run from {LEASE_TASK!r}"
        )
    return LeaseGrant.from_dict(data)


def _grant_and_seq(ti: Any) -> tuple[Any, int]:
    from cdc_core.coordination import LeaseGrant

    grant, seq = pull_grant_and_seq(ti)
    return LeaseGrant.from_dict(grant), seq


def check_backfill_form(pipeline: str, params: Any) -> dict[str, Any]:
    """Validate the backfill form before the lease is taken: bad input fails the run's first task, without
    retries, and changes nothing (`Pipeline.check_backfill` only reads; outside `_step`, so not even the
    monitor's last-error note is written: the task's own log says what is wrong). Other errors (source or
    ZooKeeper unreachable) propagate and are retried."""
    from cdc_airflow.hooks import open_pipeline
    from cdc_core.model.errors import PositionPurged, StateConflict, UnknownTable

    try:
        with open_pipeline(pipeline) as p:
            return dict(
                backfill.check_backfill(
                    p,
                    form_utc(params.get("start_ts")),
                    form_utc(params.get("end_ts")) or None,
                    list(params.get("tables") or []) or None,
                    dry_run=bool(params.get("dry_run")),
                )
            )
    except (ConfigError, PositionPurged, UnknownTable, StateConflict) as e:
        raise AirflowFailException(f"{type(e).__name__}: {e}") from e


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
    with _step(pipeline, LEASE_TASK) as p:
        try:
            grant = p.acquire(holder)
        except LeaseHeld as e:
            raise AirflowSkipException(lease_held_message(pipeline, e)) from e
    return dict(grant.to_dict())


@task(task_id="begin_backfill")
def begin_backfill(pipeline: str) -> dict[str, Any]:
    """Start a backfill from the run's params (start_ts, end_ts, tables, dry_run); return its report."""
    ctx = get_current_context()
    params = ctx["params"]
    grant = _grant(ctx["ti"])
    with _step(pipeline, "begin_backfill") as p:
        report = backfill.begin_backfill(
            p,
            grant,
            form_utc(params["start_ts"]),
            form_utc(params.get("end_ts")) or None,
            list(params.get("tables") or []) or None,
            dry_run=bool(params.get("dry_run")),
        )
    log.info("backfill report: %s", report)
    return dict(report)


@task(task_id="begin_snapshot")
def begin_snapshot(pipeline: str) -> dict[str, Any]:
    """Request a snapshot of the form's tables (default: every captured table); return the progress."""
    ctx = get_current_context()
    params = ctx["params"]
    grant = _grant(ctx["ti"])
    from cdc_core.model import snapshot_state
    from cdc_core.run import snapshot_steps

    tables = [str(t).strip() for t in (params.get("tables") or []) if str(t).strip()] or None
    chunk_rows = params.get("chunk_rows")
    with _step(pipeline, "begin_snapshot") as p:
        state = snapshot_steps.request(p, grant, tables, int(chunk_rows) if chunk_rows else None)
    view = snapshot_state.progress_view(state)
    log.info("snapshot requested: %s", view)
    return dict(view)


@task(task_id=PLAN_TASK)
def plan_window(pipeline: str, skip_if_dry_run: bool = False) -> dict[str, Any]:
    """Recover, then plan (or replay) the next window; returns {seq, kind, empty, start, end, ...}."""
    ctx = get_current_context()
    if skip_if_dry_run and ctx["params"].get("dry_run"):
        raise AirflowSkipException(f"pipeline {pipeline!r}: dry run; the report is begin_backfill's result")
    grant = _grant(ctx["ti"])
    with _step(pipeline, PLAN_TASK) as p:
        return dict(p.plan(grant))


@task(task_id="stage_window")
def stage_window(pipeline: str) -> dict[str, Any]:
    """Stage the planned window's row changes (Parquet + manifest), or verify an existing staged copy."""
    ctx = get_current_context()
    grant, seq = _grant_and_seq(ctx["ti"])
    with _step(pipeline, "stage_window", seq) as p:
        return dict(p.stage(grant, seq))


@task(task_id=ACK_TASK)
def ack_window(pipeline: str) -> dict[str, Any]:
    """Move the cursor past the window once Delta holds it for every staged table (and the lake's
    checkpoints table records it); emit an asset event per table it changed (plugins/cdc_airflow/assets.py,
    through the outlet alias the DAG gives this task); say whether more work is waiting
    (`Pipeline.more_work`, under "more_work", with the run id a continuation run gets)."""
    ctx = get_current_context()
    grant, seq = _grant_and_seq(ctx["ti"])
    with _step(pipeline, ACK_TASK, seq) as p:
        result = dict(p.ack(grant, seq))
        more = dict(p.more_work(seq))
        # One asset event per table the window (and any window acked by recovery before it) changed,
        # recorded by Airflow when this task succeeds; windows already announced are left out.
        from cdc_airflow.assets import emit

        result["asset_events"], before = emit(pipeline, seq, ctx, p)
        log.info("assets.emitted pipeline=%s seq=%s events=%s announced_before=%s",
                 pipeline, seq, len(result["asset_events"]), before)
    more["trigger_run_id"] = continue_run_id(seq, grant.token)
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
def more_work() -> dict[str, Any] | bool:
    """After release_lease: continue (trigger the next run) only if this run's ack succeeded and said so.

    Runs whatever happened before (ALL_DONE, so it comes after the teardown whatever the teardown's
    state), and reads the ack's result from XCom: a run whose ack did not succeed (failed merge,
    skipped run, dry run) has none, so it never continues. Returns the answer (truthy) to continue,
    False to skip the trigger.
    """
    ctx = get_current_context()
    ack = ctx["ti"].xcom_pull(task_ids=ACK_TASK)
    answer = ack.get("more_work") if isinstance(ack, dict) else None
    if not isinstance(answer, dict):
        log.info("more_work more=False reason=no_ack (this run acked no window)")
        return False
    log.info("more_work more=%s reason=%s detail=%r", answer.get("more"), answer.get("reason"), answer.get("detail"))
    return answer if answer.get("more") else False


@task(task_id="release_lease")
def release_lease(pipeline: str) -> None:
    """Give the lease back (teardown: runs whatever happened after a successful acquire)."""
    ctx = get_current_context()
    data = ctx["ti"].xcom_pull(task_ids=LEASE_TASK)
    if not data:
        # Not ours to release: this run never acquired a lease (skipped or failed acquire).
        raise AirflowSkipException(f"pipeline {pipeline!r}: this run holds no lease")
    from cdc_airflow.hooks import open_pipeline
    from cdc_core.coordination import LeaseGrant

    grant = LeaseGrant.from_dict(data)
    with open_pipeline(pipeline) as p:
        try:
            p.release(grant)
        except Fenced as e:
            # The lease expired and someone else holds it now: theirs, not ours to touch.
            log.warning("lease.not_released pipeline=%s reason=%s", pipeline, e)
