"""A deadline-alert callback for the tests: appends what Airflow's triggerer passed it to a JSON-lines file (the
product's own callback, cdc_airflow.alerts.lag_deadline_missed, only logs). `alerts.notify.callable` names it."""

from __future__ import annotations

import json
from typing import Any


async def record_alert(context: dict[str, Any], path: str, **kwargs: Any) -> None:
    run = context.get("dag_run") or {}
    line = {"dag_id": run.get("dag_id"), "run_id": run.get("dag_run_id"), "deadline": context.get("deadline"), **kwargs}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line, default=str) + "\n")
