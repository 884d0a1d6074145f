"""The pipeline DAG's lag alert (issue 38 §3): an Airflow deadline alert on `cdc_<name>`.

`alerts.max_lag_seconds` is how far behind the source a pipeline may fall. `cdc status` and the monitor page show
a breach from the cursor (cdc_core.run.status.lag_alerts), whatever its cause, a paused DAG included. The DAG
itself carries a deadline (Airflow 3's deadline alerts, experimental since 3.1): a run still unfinished
`max_lag_seconds` after it was queued means the pipeline has not caught up within that time (a merge that keeps
failing and retrying, a dead merge server, a window stuck behind a lease), and the scheduler then has the
triggerer call the callback: `alerts.notify` (an Airflow notifier, e.g. Slack or SMTP, or an async function of
the user's, by dotted path, with its keyword arguments) or, by default, `lag_deadline_missed` below, which logs
a warning in the triggerer's log. A run that never starts (the DAG paused, the scheduler down) misses no
deadline: those the status and the monitor page show.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from cdc_core.model.logfmt import kv

log = logging.getLogger("cdc.alerts")


async def lag_deadline_missed(context: dict[str, Any], pipeline: str, max_lag_seconds: int) -> None:
    """The default callback: a warning in the triggerer's log, naming the pipeline, the run and the setting."""
    run = context.get("dag_run") or {}
    log.warning(
        "%s",
        kv(event="alert.lag_deadline", pipeline=pipeline, run_id=run.get("dag_run_id"), queued_at=run.get("queued_at"),
           max_lag_seconds=max_lag_seconds, reason="the run has not finished within alerts.max_lag_seconds"),
    )


def lag_deadline(pc: Any) -> Any:
    """The DeadlineAlert of the pipeline DAG, None without `alerts.max_lag_seconds` (the pipeline's, else the
    smallest of a group pipeline's sources': `PipelineConfig.deadline_seconds`)."""
    seconds = pc.deadline_seconds()
    if seconds is None:
        return None
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    notify = pc.alerts.notify
    callback = (
        AsyncCallback(notify.callable, kwargs=dict(notify.kwargs))
        if notify is not None
        else AsyncCallback(lag_deadline_missed, kwargs={"pipeline": pc.name, "max_lag_seconds": seconds})
    )
    return DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=timedelta(seconds=seconds), callback=callback,
        name=f"cdc {pc.name}: caught up within {seconds} s",
    )
