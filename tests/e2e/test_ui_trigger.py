"""A backfill triggered the way the UI's form does it starts under a real scheduler (issue 15 §4).

Not `airflow dags test` (which ignores pausing): the API server, the scheduler and the DAG processor
run as scripts/ui.sh runs them (`airflow standalone` starts the same three, plus a triggerer this test
does not need), with scripts/airflow_env.sh's environment, a fresh AIRFLOW_HOME under .local/ and a
free port. The backfill DAG is triggered through the REST API exactly as the form does (POST
/api/v2/dags/<id>/dagRuns with the form's conf); the test waits until one of its task instances has
started. Before the fix every DAG was paused on creation and the run stayed queued. Every process the
test starts is stopped by its PID (each leads its own process group, which takes its children along).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from tests.support.real_airflow import STARTED, RealAirflow, real_airflow

pytestmark = pytest.mark.e2e

@pytest.fixture
def pipeline(services: Any, source_db: str, zk_root: str, tmp_path: Path) -> dict[str, Any]:
    """A pipeline that has landed one window (so a backfill has something to replay), without Spark."""
    name = "ui_" + uuid.uuid4().hex[:6]
    conn = {"conn_type": "mysql", "host": services.mysql_host, "port": services.mysql_port,
            "login": services.mysql_user, "password": services.mysql_password}
    cfg = {
        "name": name,
        "source": {"conn_id": "cdc_source_ui"},
        "tables": {"include": [f"{source_db}.*"]},
        "start": services.binlog_end(),
        "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"),
        "lake_root": str(tmp_path / "lake"),
        "schedule": "@daily",
        "retries": 0,
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [cfg]}))
    before = datetime.fromtimestamp(int(time.time()) - 1, UTC).isoformat()
    root = services.root_connect(source_db)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    root.close()
    env = {"AIRFLOW_CONN_CDC_SOURCE_UI": json.dumps(conn)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        assert main(["--config", str(config), "run", name]) == 0
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"name": name, "config": str(config), "env": env, "before": before}


@pytest.fixture
def airflow_ui(pipeline: dict[str, Any]) -> Iterator[RealAirflow]:
    with real_airflow({"CDC_CONFIG": pipeline["config"], **pipeline["env"]}) as airflow:
        yield airflow


def test_a_backfill_triggered_like_the_form_starts(airflow_ui: RealAirflow, pipeline: dict[str, Any]) -> None:
    airflow, name = airflow_ui, pipeline["name"]
    airflow.login()
    backfill = f"cdc_{name}_backfill"
    airflow.wait_for_dags([backfill, f"cdc_{name}"])
    # What the form's Trigger button sends.
    status, run = airflow.api(
        f"dags/{backfill}/dagRuns",
        {"logical_date": None, "conf": {"start_ts": pipeline["before"], "end_ts": None, "tables": None,
                                        "dry_run": True}},
    )
    assert status == 200, run
    run_id = run["dag_run_id"]

    def started() -> list[str]:
        code, tis = airflow.api(f"dags/{backfill}/dagRuns/{run_id}/taskInstances")
        if code != 200:
            return []
        return [f"{t['task_id']}={t['state']}" for t in tis["task_instances"] if t["state"] in STARTED]

    got = airflow.wait(f"a task instance of {run_id} starts (not queued forever)", started, 180)
    assert any(s.startswith("acquire_lease=") for s in got), got
    assert airflow.api(f"dags/{backfill}")[1]["is_paused"] is False
    assert airflow.api(f"dags/cdc_{name}")[1]["is_paused"] is True  # the operator's choice
