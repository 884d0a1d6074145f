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
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_support import ROOT, VENV_BIN, airflow_env

from cdc_core.cli import main

pytestmark = pytest.mark.e2e

STARTED = {"running", "success", "failed", "up_for_retry", "skipped", "upstream_failed", "up_for_reschedule"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read().decode()
            return resp.status, json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)


def _wait(what: str, check: Any, timeout: float, procs: dict[str, subprocess.Popen[bytes]], logs: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        dead = {n: p.returncode for n, p in procs.items() if p.poll() is not None}
        if dead or time.monotonic() > deadline:
            tails = "\n".join(
                f"--- {f.name} ---\n" + f.read_text(errors="replace")[-3000:] for f in sorted(logs.glob("*.log"))
            )
            pytest.fail(f"{what}: {'exited ' + str(dead) if dead else 'timed out'}\n{tails}")
        time.sleep(0.5)


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
def airflow_ui(pipeline: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """API server + scheduler + DAG processor on a fresh AIRFLOW_HOME under .local/, stopped by PID."""
    home = ROOT / ".local" / f"airflow-ui-test-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    env = airflow_env(home, {"CDC_AIRFLOW_PORT": str(port)})
    env.update({"CDC_CONFIG": pipeline["config"], **pipeline["env"]})
    logs = home / "logs-test"
    logs.mkdir(parents=True)
    migrate = subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=600, check=False)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, args in (
            ("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]),
            ("scheduler", ["scheduler"]),
            ("dag-processor", ["dag-processor"]),
        ):
            with (logs / f"{name}.log").open("wb") as out:
                procs[name] = subprocess.Popen(
                    [str(VENV_BIN / "airflow"), *args], env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        yield {"base": f"http://127.0.0.1:{port}", "procs": procs, "logs": logs, "name": pipeline["name"],
               "before": pipeline["before"]}
    finally:
        for p in procs.values():  # each leads its own group: SIGTERM to the group stops its children too
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


def test_a_backfill_triggered_like_the_form_starts(airflow_ui: dict[str, Any]) -> None:
    base, name, procs, logs = airflow_ui["base"], airflow_ui["name"], airflow_ui["procs"], airflow_ui["logs"]
    _wait("API server health", lambda: _call(f"{base}/api/v2/monitor/health")[0] == 200, 180, procs, logs)
    status, body = _call(f"{base}/auth/token", body={"username": "admin", "password": "admin"})
    assert status in (200, 201), body
    token = body["access_token"]
    backfill = f"cdc_{name}_backfill"
    _wait("the DAG processor parsed the DAGs",
          lambda: all(_call(f"{base}/api/v2/dags/{d}", token)[0] == 200 for d in (backfill, f"cdc_{name}")),
          180, procs, logs)
    # What the form's Trigger button sends.
    status, run = _call(
        f"{base}/api/v2/dags/{backfill}/dagRuns", token,
        {"logical_date": None, "conf": {"start_ts": airflow_ui["before"], "end_ts": None, "tables": None,
                                        "dry_run": True}},
    )
    assert status == 200, run
    run_id = run["dag_run_id"]

    def started() -> list[str]:
        code, tis = _call(f"{base}/api/v2/dags/{backfill}/dagRuns/{run_id}/taskInstances", token)
        if code != 200:
            return []
        return [f"{t['task_id']}={t['state']}" for t in tis["task_instances"] if t["state"] in STARTED]

    got = _wait(f"a task instance of {run_id} starts (not queued forever)", started, 180, procs, logs)
    assert any(s.startswith("acquire_lease=") for s in got), got
    assert _call(f"{base}/api/v2/dags/{backfill}", token)[1]["is_paused"] is False
    assert _call(f"{base}/api/v2/dags/cdc_{name}", token)[1]["is_paused"] is True  # the operator's choice
