"""The tests where the scheduler is the point, not `airflow dags test`: one real Airflow for this module (the API
server, the scheduler, the DAG processor and the triggerer as separate processes, as scripts/ui.sh runs them:
tests/support/real_airflow.py), started once with the DAGs of three pipelines, each over a database, ZooKeeper
root, staging area and lake of its own; their windows merge on the session's warm merge server. (One module: a
test module stays on one xdist worker, so both tests share this Airflow. The production shape, on PostgreSQL
with LocalExecutor, a Spark cluster and fault points armed for the whole deployment, has an Airflow of its
own: test_production_airflow.py.)

1. A backfill triggered the way the UI's form does it starts (issue 15 §4). Not `airflow dags test` (which
   ignores pausing): the backfill DAG is triggered through the REST API exactly as the form does (POST
   /api/v2/dags/<id>/dagRuns with the form's conf); the test waits until one of its task instances has
   started. Before the fix every DAG was paused on creation and the run stayed queued.
2. A real ack triggers downstream DAGs (issue 21). The DAGs folder holds the pipeline DAGs, the documented
   downstream example (docs/examples/cdc_downstream.py: one DAG on `orders`, one on `orders & items`) and a
   DAG on a table the window does not change. One transaction writes an order with its items; the pipeline
   DAG is triggered through the REST API and lands the window. The scheduler itself then starts both example
   DAGs, each run consuming the ack's asset events, whose extra matches the lake's checkpoints
   (`cdc versions`); the DAG on the untouched table gets no run. Then the ack task is cleared through the
   REST API, as an operator retries a step: it runs again, finds the window acked, and emits nothing: no new
   asset event, no new downstream run.
3. The lag deadline (issue 38 §3): a pipeline with `alerts.max_lag_seconds: 3` and `alerts.notify` naming a
   test callback (tests/support/alert_sink.py); with the merge server stopped (SIGSTOP) the run is still
   unfinished 3 s after it was queued, the scheduler has the triggerer call the callback with the run's
   context, and once the server resumes a retry lands the window.

Every process the module starts is stopped by its PID (each leads its own process group, which takes its
children along).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.lake.merge_client import ADDRESS_ENV
from tests.support.e2e import ROOT, binlog_position, sql
from tests.support.real_airflow import STARTED, RealAirflow, real_airflow

pytestmark = pytest.mark.e2e

CONN_ID = "cdc_source_scheduler"
UNTOUCHED_DAG = '''
import os
from datetime import datetime

from airflow.sdk import DAG, task
from cdc_airflow.assets import table_asset

untouched = table_asset(os.environ["CDC_EXAMPLE_PIPELINE"], os.environ["CDC_EXAMPLE_UNTOUCHED"])

with DAG(dag_id="cdc_downstream_untouched", schedule=untouched, start_date=datetime(2024, 1, 1), catchup=False):

    @task
    def never():
        print("the window did not change this table")

    never()
'''
ASSET_TABLES = (
    "CREATE TABLE orders (id INT PRIMARY KEY, n_items INT NOT NULL)",
    "CREATE TABLE order_items (order_id INT, line INT, PRIMARY KEY (order_id, line))",
    "CREATE TABLE untouched (id INT PRIMARY KEY)",
)
DOWNSTREAM = ("cdc_downstream_orders", "cdc_downstream_orders_and_items", "cdc_downstream_untouched")


@dataclass
class Pipeline:
    name: str
    database: str
    zk_root: str


@dataclass
class Scheduler:
    airflow: RealAirflow
    config: Path
    env: dict[str, str]  # what the Airflow processes got besides scripts/airflow_env.sh's environment
    ui: Pipeline  # the backfill form's pipeline (test 1)
    assets: Pipeline  # the downstream DAGs' pipeline (test 2)
    lag: Pipeline  # the lag deadline's pipeline (test 3)
    alerts: Path  # where its deadline's callback writes (tests/support/alert_sink.py)


@pytest.fixture(scope="module")
def scheduler(
    services: Any, zk_client: Any, shared_merge_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scheduler]:
    tmp = tmp_path_factory.mktemp("scheduler")
    ui = Pipeline("ui_" + uuid.uuid4().hex[:6], "t_" + uuid.uuid4().hex[:10], "/cdc-test-" + uuid.uuid4().hex[:10])
    assets = Pipeline("as_" + uuid.uuid4().hex[:6], "t_" + uuid.uuid4().hex[:10], "/cdc-test-" + uuid.uuid4().hex[:10])
    lag = Pipeline("lag_" + uuid.uuid4().hex[:6], "t_" + uuid.uuid4().hex[:10], "/cdc-test-" + uuid.uuid4().hex[:10])
    alerts = tmp / "alerts.jsonl"
    everyone = (ui, assets, lag)
    sql(services, None, *(f"CREATE DATABASE `{p.database}` CHARACTER SET utf8mb4" for p in everyone))
    sql(services, lag.database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    # The assets pipeline starts after its tables exist: a window that creates a table announces it (it appeared
    # in the lake), and test 2 is about the row changes of one transaction.
    sql(services, assets.database, *ASSET_TABLES)
    conn = services.airflow_connection
    config = tmp / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [
        {
            "name": ui.name, "source": {"conn_id": CONN_ID}, "tables": {"include": [f"{ui.database}.*"]},
            "start": services.binlog_end(), "snapshot": {"on_start": False},
            "zookeeper": {"hosts": services.zk_hosts, "root": ui.zk_root},
            "staging_root": str(tmp / "ui" / "staging"), "lake_root": str(tmp / "ui" / "lake"),
            "schedule": "@daily", "retries": 0,
        },
        {
            "name": assets.name, "source": {"conn_id": CONN_ID}, "tables": {"include": [f"{assets.database}.*"]},
            "start": binlog_position(services), "snapshot": {"on_start": False},
            "zookeeper": {"hosts": services.zk_hosts, "root": assets.zk_root}, "lease_seconds": 300,
            "staging_root": str(tmp / "assets" / "staging"), "lake_root": str(tmp / "assets" / "lake"),
            "schedule": None, "retries": 0,
        },
        {
            "name": lag.name, "source": {"conn_id": CONN_ID}, "tables": {"include": [f"{lag.database}.*"]},
            "start": binlog_position(services), "snapshot": {"on_start": False},
            "zookeeper": {"hosts": services.zk_hosts, "root": lag.zk_root}, "lease_seconds": 300,
            "staging_root": str(tmp / "lag" / "staging"), "lake_root": str(tmp / "lag" / "lake"),
            "schedule": None, "retries": 3,
            "alerts": {"max_lag_seconds": 3, "notify": {"callable": "tests.support.alert_sink.record_alert",
                                                        "kwargs": {"path": str(alerts), "pipeline": lag.name}}},
        },
    ]}))
    dags = tmp / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / "cdc_pipelines.py", dags / "cdc_pipelines.py")
    shutil.copy(ROOT / "docs" / "examples" / "cdc_downstream.py", dags / "cdc_downstream.py")
    (dags / "cdc_downstream_untouched.py").write_text(UNTOUCHED_DAG)
    db = assets.database
    env = {"CDC_CONFIG": str(config), f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn),
           "AIRFLOW__CORE__DAGS_FOLDER": str(dags), "CDC_EXAMPLE_PIPELINE": assets.name,
           "CDC_EXAMPLE_ORDERS": f"{db}.orders", "CDC_EXAMPLE_ITEMS": f"{db}.order_items",
           "CDC_EXAMPLE_UNTOUCHED": f"{db}.untouched", ADDRESS_ENV: shared_merge_server.ensure_running(),
           "PYTHONPATH": str(ROOT)}  # the triggerer imports the deadline's callback from tests/support
    try:
        with real_airflow(env, triggerer=True) as airflow:
            airflow.login()
            yield Scheduler(airflow, config, env, ui, assets, lag, alerts)
    finally:
        sql(services, None, *(f"DROP DATABASE IF EXISTS `{p.database}`" for p in everyone))
        for p in everyone:
            zk_client.delete(p.zk_root, recursive=True)


# ------------------------------------------------------------------ 1. the backfill form's trigger


def test_a_backfill_triggered_like_the_form_starts(
    scheduler: Scheduler, services: Any, warm_merges: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    airflow, name = scheduler.airflow, scheduler.ui.name
    # A pipeline that has landed one window, so that a backfill has something to replay.
    before = datetime.fromtimestamp(int(time.time()) - 1, UTC).isoformat()
    sql(services, scheduler.ui.database, "CREATE TABLE t (id INT PRIMARY KEY)")
    conn_env = f"AIRFLOW_CONN_{CONN_ID.upper()}"
    monkeypatch.setenv(conn_env, scheduler.env[conn_env])
    assert main(["--config", str(scheduler.config), "run", name]) == 0

    backfill = f"cdc_{name}_backfill"
    airflow.wait_for_dags([backfill, f"cdc_{name}"])
    # What the form's Trigger button sends.
    status, run = airflow.api(
        f"dags/{backfill}/dagRuns",
        {"logical_date": None, "conf": {"start_ts": before, "end_ts": None, "tables": None, "dry_run": True}},
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


# ------------------------------------------------------------------ 2. downstream DAGs on a real ack


def _events(airflow: RealAirflow, name: str) -> list[dict[str, Any]]:
    status, body = airflow.api("assets/events?limit=100&order_by=timestamp")
    assert status == 200, body
    return [e for e in body["asset_events"] if str(e.get("name") or "").startswith(f"cdc_{name}/")]


def _run_state(airflow: RealAirflow, dag_id: str, run_id: str) -> str:
    status, body = airflow.api(f"dags/{dag_id}/dagRuns/{run_id}")
    return str(body["state"]) if status == 200 else ""


def test_a_real_ack_starts_the_downstream_dags_once(scheduler: Scheduler, services: Any) -> None:
    airflow, name, db = scheduler.airflow, scheduler.assets.name, scheduler.assets.database
    root = services.root_connect(db)
    with root.cursor() as cur:  # one transaction: an order with its items
        root.begin()
        cur.execute("INSERT INTO orders VALUES (1, 2)")
        cur.execute("INSERT INTO order_items VALUES (1, 0), (1, 1)")
        root.commit()
    root.close()

    pipeline_dag = f"cdc_{name}"
    airflow.wait_for_dags([pipeline_dag, *DOWNSTREAM])
    for dag_id in (pipeline_dag, *DOWNSTREAM):
        status, body = airflow.api(f"dags/{dag_id}", {"is_paused": False}, method="PATCH")
        assert status == 200, body

    status, run = airflow.api(f"dags/{pipeline_dag}/dagRuns", {"logical_date": None, "conf": {}})
    assert status == 200, run
    run_id = run["dag_run_id"]
    state = airflow.wait(f"{pipeline_dag} {run_id} finishes",
                         lambda: _run_state(airflow, pipeline_dag, run_id) in ("success", "failed")
                         and _run_state(airflow, pipeline_dag, run_id), 600)
    assert state == "success", airflow.api(f"dags/{pipeline_dag}/dagRuns/{run_id}/taskInstances")[1]

    events = _events(airflow, name)
    by_table = {e["extra"]["table"]: e for e in events}
    assert sorted(by_table) == [f"{db}.order_items", f"{db}.orders"], events
    assert all(e["extra"]["pipeline"] == name and e["extra"]["window_seq"] == 1 for e in events)
    assert (by_table[f"{db}.orders"]["extra"]["inserted"], by_table[f"{db}.order_items"]["extra"]["inserted"]) \
        == (1, 2)
    assert all(e["source_dag_id"] == pipeline_dag and e["source_run_id"] == run_id for e in events)

    # The scheduler starts both example DAGs on its own, each consuming the ack's events.
    for dag_id, tables in (("cdc_downstream_orders", [f"{db}.orders"]),
                           ("cdc_downstream_orders_and_items", [f"{db}.order_items", f"{db}.orders"])):
        runs = airflow.wait(f"the scheduler starts {dag_id}",
                            lambda d=dag_id: [r for r in airflow.runs(d) if r["state"] == "success"], 300)
        assert len(runs) == 1 and runs[0]["run_type"] == "asset_triggered", runs
        status, body = airflow.api(f"dags/{dag_id}/dagRuns/{runs[0]['dag_run_id']}/upstreamAssetEvents")
        assert status == 200, body
        consumed = sorted((e["extra"]["table"], e["extra"]["delta_version"]) for e in body["asset_events"])
        assert consumed == sorted((t, by_table[t]["extra"]["delta_version"]) for t in tables), body
    assert airflow.runs("cdc_downstream_untouched") == []

    # The lake's checkpoints agree with the events (what a consistent reader uses).
    out = subprocess.run(
        [sys.executable, "-m", "cdc_core.cli", "--config", str(scheduler.config), "versions", name],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, **scheduler.env}, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cut = json.loads(out.stdout)
    assert cut["window"] == 1
    assert {t: v["version"] for t, v in cut["tables"].items() if t in by_table} == {
        t: e["extra"]["delta_version"] for t, e in by_table.items()}

    # An operator clears the ack step: it runs again, finds the window acked and announces nothing twice.
    status, body = airflow.api(f"dags/{pipeline_dag}/clearTaskInstances", {
        "dry_run": False, "dag_run_id": run_id, "task_ids": ["ack_window"], "only_failed": False,
        "reset_dag_runs": True, "include_downstream": False, "include_upstream": False})
    # Airflow clears the lease's setup and teardown tasks with it: the re-run takes the lease again.
    assert status == 200 and "ack_window" in [t["task_id"] for t in body["task_instances"]], body

    def ack_rerun_done() -> bool:
        code, ti = airflow.api(f"dags/{pipeline_dag}/dagRuns/{run_id}/taskInstances/ack_window")
        return code == 200 and ti["try_number"] >= 2 and ti["state"] in ("success", "failed")

    airflow.wait("the cleared ack_window runs again", ack_rerun_done, 300)
    ti = airflow.api(f"dags/{pipeline_dag}/dagRuns/{run_id}/taskInstances/ack_window")[1]
    assert ti["state"] == "success", ti
    assert len(_events(airflow, name)) == len(events)
    assert len(airflow.runs("cdc_downstream_orders")) == 1


# ------------------------------------------------------------------ 3. the lag deadline


def test_a_run_that_has_not_caught_up_in_time_raises_the_lag_deadline(
    scheduler: Scheduler, services: Any, shared_merge_server: Any
) -> None:
    """`alerts.max_lag_seconds: 3` gives the pipeline DAG an Airflow deadline alert (cdc_airflow.alerts): with the
    merge server stopped (SIGSTOP: the merge step waits, then fails and retries), the run is still unfinished 3 s
    after it was queued, and the scheduler has the triggerer call `alerts.notify` with the run's context. The
    server resumed, a retry lands the window: the alert changed nothing."""
    airflow, lag = scheduler.airflow, scheduler.lag
    dag_id = f"cdc_{lag.name}"
    airflow.wait_for_dags([dag_id])
    status, body = airflow.api(f"dags/{dag_id}", {"is_paused": False}, method="PATCH")  # paused when created
    assert status == 200, body
    sql(services, lag.database, "INSERT INTO t VALUES (1, 'late')")
    server = shared_merge_server.proc
    assert server is not None and server.poll() is None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        status, run = airflow.api(f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
        assert status == 200, run
        run_id = run["dag_run_id"]

        def alerted() -> list[dict[str, Any]]:
            lines = scheduler.alerts.read_text().splitlines() if scheduler.alerts.exists() else []
            return [a for a in map(json.loads, lines) if a["run_id"] == run_id]

        (alert,) = airflow.wait(f"the lag deadline of {run_id} calls alerts.notify", alerted, 180)
        assert alert["dag_id"] == dag_id and alert["pipeline"] == lag.name, alert
        assert alert["deadline"]["deadline_time"], alert
        assert _run_state(airflow, dag_id, run_id) not in ("success", "failed")  # raised while it was behind
    finally:
        os.kill(server.pid, signal.SIGCONT)
    final = airflow.wait(f"{run_id} finishes", lambda: (s := _run_state(airflow, dag_id, run_id))
                         in ("success", "failed") and s, 300)
    assert final == "success", airflow.api(f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")
