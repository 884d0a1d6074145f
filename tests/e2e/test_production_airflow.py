"""The production Airflow shape (issue 20 §3): PostgreSQL (Debian's package, scripts/postgres.sh) as the metadata
database, LocalExecutor, and the API server, scheduler, DAG processor and triggerer as separate processes
(tests/e2e/real_airflow.py). The pipeline DAG is unpaused and its scheduled run is created and run by the
scheduler itself. Its merge is made to fail (the fault point `mid_merge` SIGKILLs the Spark driver after the
first of two tables committed, once): the run fails, the cursor does not move. The operator's retry is a
"Clear": once of the failed task through the REST API, once of the failed run in the real UI (Playwright
driving Debian's Chromium clicks Clear and confirms). Each time the run then succeeds, the window is acked
once, and every Delta table equals its source.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import ROOT, binlog_position, sql
from real_airflow import RealAirflow, free_port, real_airflow

from cdc_core import delta_state
from cdc_core.naming import path_component

pytestmark = pytest.mark.e2e

TABLES = ("orders", "items")


@pytest.fixture
def postgres(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL of this test's own (own data dir, free port); stopped by PID whatever happens."""
    env = {**os.environ, "CDC_POSTGRES_DIR": str(ROOT / ".local" / f"postgres-test-{uuid.uuid4().hex[:8]}"),
           "CDC_POSTGRES_PORT": str(free_port())}
    script = str(ROOT / "scripts" / "postgres.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=180, check=False)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        url = subprocess.run([script, "url"], env=env, capture_output=True, text=True, check=True).stdout.strip()
        yield url
    finally:
        stopped = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        subprocess.run(["rm", "-rf", env["CDC_POSTGRES_DIR"]], check=False)


def _state(airflow: RealAirflow, dag_id: str, run_id: str) -> str:
    status, body = airflow.api(f"dags/{dag_id}/dagRuns/{run_id}")
    return str(body["state"]) if status == 200 else ""


def _finished(airflow: RealAirflow, dag_id: str, run_id: str, timeout: float = 600) -> str:
    return str(airflow.wait(f"{dag_id} {run_id} finishes",
                            lambda: (s := _state(airflow, dag_id, run_id)) in ("success", "failed") and s, timeout))


def _task_states(airflow: RealAirflow, dag_id: str, run_id: str) -> dict[str, str]:
    status, body = airflow.api(f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    assert status == 200, body
    return {t["task_id"]: t["state"] for t in body["task_instances"]}


def _lake_equals_source(services: Any, db: str, lake: Path) -> None:
    conn = services.root_connect(db)
    for table in TABLES:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, v FROM {table} ORDER BY id")
            want = [tuple(r) for r in cur.fetchall()]
        uri = str(lake / path_component(db) / path_component(table))
        got = sorted((r["id"], r["v"]) for r in delta_state.read_rows(uri, columns=["id", "v"]).to_pylist())
        assert got == want, table
    conn.close()


def _cursor_seq(config: Path, name: str, env: dict[str, str]) -> int | None:
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "cdc"), "--config", str(config), "status", name],
                         env={**os.environ, **env}, capture_output=True, text=True, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return (json.loads(out.stdout)["cursor"] or {}).get("seq")


def _clear_in_the_ui(airflow: RealAirflow, dag_id: str, run_id: str, shots: Path) -> None:
    """What an operator does: open the failed run in the UI, Clear it (the page's Clear button, also Shift+C),
    confirm. Clearing the run re-runs its tasks: the lease is taken again, the immutable window replays."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        page = None
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies([{"name": "_token", "value": airflow.token, "url": airflow.base}])
            page = context.new_page()
            page.goto(f"{airflow.base}/dags/{dag_id}/runs/{run_id}")
            page.get_by_text("merge_window").first.wait_for(timeout=60_000)
            button = page.get_by_role("button", name=re.compile(r"^clear (dag )?run", re.I))
            if button.count():
                button.first.click(timeout=30_000)
            else:
                page.keyboard.press("Shift+C")
            dialog = page.get_by_role("dialog")
            dialog.wait_for(timeout=30_000)
            page.screenshot(path=str(shots / "clear-dialog.png"))
            dialog.get_by_role("button", name=re.compile(r"^confirm", re.I)).click(timeout=30_000)
            dialog.wait_for(state="hidden", timeout=30_000)
        except Exception:
            if page is not None:
                page.screenshot(path=str(shots / "clear-failed.png"), full_page=True)
            raise
        finally:
            browser.close()


def test_a_failed_merge_is_cleared_by_the_operator_and_lands_once(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, postgres: str
) -> None:
    name = "prod_" + uuid.uuid4().hex[:6]
    db = source_db
    lake = tmp_path / "lake"
    fired = tmp_path / "fault-fired"
    conn = {"conn_type": "mysql", "host": services.mysql_host, "port": services.mysql_port,
            "login": services.mysql_user, "password": services.mysql_password}
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": name, "source": {"conn_id": "cdc_source_prod"}, "tables": {"include": [f"{db}.*"]},
        "start": binlog_position(services), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "lease_seconds": 300,
        "staging_root": str(tmp_path / "staging"), "lake_root": str(lake),
        "schedule": "@daily", "retries": 0, "spark": {"merge_parallelism": 1},
    }]}))
    sql(services, db, *(f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(20))" for t in TABLES),
        *(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b'), (3, 'c')" for t in TABLES))
    env = {"CDC_CONFIG": str(config), "AIRFLOW_CONN_CDC_SOURCE_PROD": json.dumps(conn),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
           # The merge's driver SIGKILLs itself after its first table, once per arming of the marker file.
           "CDC_FAULT": "mid_merge", "CDC_FAULT_ONCE": str(fired)}
    dag_id = f"cdc_{name}"

    with real_airflow(env, triggerer=True) as airflow:
        airflow.login()
        airflow.wait_for_dags([dag_id])
        status, body = airflow.api(f"dags/{dag_id}", {"is_paused": False}, method="PATCH")
        assert status == 200, body

        # 1. The scheduler creates and runs the scheduled run; its merge dies half-way.
        runs = airflow.wait("the scheduler creates the scheduled run",
                            lambda: [r for r in airflow.runs(dag_id) if r["run_type"] == "scheduled"], 300)
        run_id = runs[0]["dag_run_id"]
        assert _finished(airflow, dag_id, run_id) == "failed"
        assert _task_states(airflow, dag_id, run_id)["merge_window"] == "failed"
        assert fired.read_text().split() == ["mid_merge"]
        assert _cursor_seq(config, name, env) in (None, 0)  # nothing acked

        # Clear through the REST API, as an operator's script would.
        status, body = airflow.api(f"dags/{dag_id}/clearTaskInstances", {
            "dry_run": False, "dag_run_id": run_id, "task_ids": ["merge_window"], "only_failed": False,
            "reset_dag_runs": True, "include_downstream": True})
        assert status == 200, body
        assert _finished(airflow, dag_id, run_id) == "success", _task_states(airflow, dag_id, run_id)
        assert _cursor_seq(config, name, env) == 1
        _lake_equals_source(services, db, lake)

        # 2. Again, cleared in the UI: new changes, the fault armed again, a run triggered like the UI's button.
        sql(services, db, *(f"UPDATE {t} SET v = 'z' WHERE id = 2" for t in TABLES),
            *(f"INSERT INTO {t} VALUES (4, 'd')" for t in TABLES))
        fired.unlink()
        status, run = airflow.api(f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
        assert status == 200, run
        second = run["dag_run_id"]
        assert _finished(airflow, dag_id, second) == "failed"
        assert _task_states(airflow, dag_id, second)["merge_window"] == "failed"
        _clear_in_the_ui(airflow, dag_id, second, tmp_path)
        assert _finished(airflow, dag_id, second) == "success", _task_states(airflow, dag_id, second)
        assert _cursor_seq(config, name, env) == 2
        _lake_equals_source(services, db, lake)
