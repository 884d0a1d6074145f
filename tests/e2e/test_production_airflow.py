"""The production shape, one full cycle (issue 20 §3 and §4): a real Airflow deployment runs the pipeline on a
Spark standalone cluster with staging and lake on an S3-compatible object store, through the faults that cross
process boundaries, and the lake ends equal to the source with every window acked once.

- Airflow: PostgreSQL (Debian's package, scripts/postgres.sh) as the metadata database, LocalExecutor, and the
  API server, scheduler, DAG processor and triggerer as separate processes (tests/support/real_airflow.py). The
  pipeline DAG is unpaused; its scheduled run is created and run by the scheduler itself.
- Spark: a master and two workers (scripts/spark_cluster.sh); the DAG's SparkSubmitOperator submits there.
- Object store: S3Proxy (scripts/object_store.sh); credentials only in the aws-type Airflow connection.

Faults (fault points armed with CDC_FAULT_ACTION=stop: the process freezes itself, the test acts, then
resumes or kills it):
1. The stage task is frozen after its window is staged; the object store is restarted; the task resumes.
2. The merge's driver (the Python driver and its spark-submit JVM) is SIGKILLed after its first table
   committed: the merge task fails, the run fails, the cursor does not move.
3. The operator clears the failed task through the REST API; while the retried merge runs on the cluster, a
   worker (and its executor) is SIGKILLed. Whatever Spark does (re-runs the lost tasks, or fails the job and
   the operator clears again), the window lands once.
4. New changes, the stage task killed once the window is staged, and the failed run cleared in the real UI
   (Playwright driving Debian's Chromium clicks Clear and confirms): the whole run re-runs, the staged window
   is replayed from its plan and lands once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.lake import delta_state, object_store
from cdc_core.model.connections import parse_connection
from cdc_core.model.naming import path_component
from tests.support.e2e import ROOT, binlog_position, sql
from tests.support.jvm_archive import lean_executor_confs
from tests.support.object_store import ObjectStore, running_object_store
from tests.support.ports import free_port
from tests.support.real_airflow import RealAirflow, real_airflow
from tests.support.spark_cluster import Cluster, running_cluster

# The suite's lean JVMs, the cluster's executors included (tests/support/jvm_archive.py): this test's subject
# is the faults; Spark's own execution on a cluster is the cluster tier's (tests/cluster, `spark_defaults`).
pytestmark = [pytest.mark.e2e]

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


def _lake_equals_source(services: Any, db: str, lake: str, storage: object_store.Storage) -> None:
    conn = services.root_connect(db)
    for table in TABLES:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, v FROM {table} ORDER BY id")
            want = [tuple(r) for r in cur.fetchall()]
        uri = f"{lake}/{path_component(db)}/{path_component(table)}"
        rows = delta_state.read_rows(uri, columns=["id", "v"], storage=storage).to_pylist()
        got = sorted((r["id"], r["v"]) for r in rows)
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


def _wait_frozen(airflow: RealAirflow, marker: Path, point: str) -> int:
    """The PID of the process the fault point froze (SIGSTOP); it wrote it next to the marker."""
    pidfile = Path(f"{marker}.{point}.pid")

    def frozen() -> int | None:
        if not pidfile.exists():
            return None
        pid = int(pidfile.read_text())
        return pid if "\nState:\tT" in Path(f"/proc/{pid}/status").read_text() else None

    pid = int(airflow.wait(f"a process frozen at {point}", frozen, 600))
    pidfile.unlink()
    return pid


def _kill_driver(pid: int) -> None:
    """SIGKILL the merge's driver: the Python driver the fault froze and the spark-submit JVM that runs it."""
    parent = int(next(line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith("PPid:")))
    jvm = "SparkSubmit" in Path(f"/proc/{parent}/cmdline").read_bytes().decode(errors="replace")
    os.kill(pid, signal.SIGKILL)
    if jvm:
        os.kill(parent, signal.SIGKILL)


def _kill_worker_when_merging(airflow: RealAirflow, cluster: Cluster, dag_id: str, run_id: str) -> None:
    """SIGKILL worker 1 (and the executor it launched) once the retried merge job has planned its tables, i.e.
    while it merges: the task log of the merge's newest attempt shows the job's `merge.plan` line."""
    task_dir = airflow.logs.parent / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=merge_window"

    def merging() -> bool:
        attempts = sorted(task_dir.glob("attempt=*.log"), key=lambda f: int(f.stem.split("=")[1]))
        return len(attempts) >= 2 and "event=merge.plan" in attempts[-1].read_text(errors="replace")

    airflow.wait("the retried merge plans its tables on the cluster", merging, 600)
    os.killpg(cluster.worker_pid(1), signal.SIGKILL)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with running_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def store() -> Iterator[ObjectStore]:
    with running_object_store() as s:
        yield s


def test_the_full_cycle_through_cross_process_faults_lands_every_window_once(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, postgres: str, cluster: Cluster,
    store: ObjectStore,
) -> None:
    name = "prod_" + uuid.uuid4().hex[:6]
    db = source_db
    lake = store.url(name, "lake")
    marker = tmp_path / "fault-fired"
    conn = services.airflow_connection
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": name, "source": {"conn_id": "cdc_source_prod"}, "tables": {"include": [f"{db}.*"]},
        "start": binlog_position(services), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "lease_seconds": 300,
        # Spark merges the tables (no conditional puts): the faults of steps 2-3 are a Spark job's on the
        # cluster; delta-rs on the store is tests/integration/test_small_writer_object_store.py's subject.
        "staging_root": store.url(name, "staging"), "lake_root": lake,
        "object_store": {"conn_id": "cdc_s3", "conditional_puts": "off"},
        "schedule": "@daily", "retries": 0,
        "spark": {"conn_id": "spark_cluster", "merge_parallelism": 1,
                  "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2", **lean_executor_confs()}},
    }]}))
    sql(services, db, *(f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(20))" for t in TABLES),
        *(f"INSERT INTO {t} SELECT seq, CONCAT('v', seq) FROM seq_1_to_8000" for t in TABLES))
    env = {"CDC_CONFIG": str(config), "AIRFLOW_CONN_CDC_SOURCE_PROD": json.dumps(conn),
           "AIRFLOW_CONN_CDC_S3": store.connection, "AIRFLOW_CONN_SPARK_CLUSTER": cluster.connection,
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres, "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
           "CDC_FAULT": "after_stage,mid_merge", "CDC_FAULT_ACTION": "stop", "CDC_FAULT_ONCE": str(marker)}
    storage = object_store.Storage(object_store.from_connection(parse_connection("cdc_s3", store.connection)))
    dag_id = f"cdc_{name}"

    with real_airflow(env, triggerer=True) as airflow:
        airflow.login()
        airflow.wait_for_dags([dag_id])
        status, body = airflow.api(f"dags/{dag_id}", {"is_paused": False}, method="PATCH")
        assert status == 200, body

        # 1. The scheduler creates and runs the scheduled run; the store restarts between stage and merge.
        runs = airflow.wait("the scheduler creates the scheduled run",
                            lambda: [r for r in airflow.runs(dag_id) if r["run_type"] == "scheduled"], 300)
        run_id = runs[0]["dag_run_id"]
        stage = _wait_frozen(airflow, marker, "after_stage")
        store.stop()
        store.start()
        os.kill(stage, signal.SIGCONT)

        # 2. The merge's driver is killed half-way: the run fails, nothing is acked.
        _kill_driver(_wait_frozen(airflow, marker, "mid_merge"))
        assert _finished(airflow, dag_id, run_id) == "failed"
        assert _task_states(airflow, dag_id, run_id)["merge_window"] == "failed"
        assert _cursor_seq(config, name, env) in (None, 0)

        # 3. Cleared through the REST API; a worker dies while the retried merge runs.
        status, body = airflow.api(f"dags/{dag_id}/clearTaskInstances", {
            "dry_run": False, "dag_run_id": run_id, "task_ids": ["merge_window"], "only_failed": False,
            "reset_dag_runs": True, "include_downstream": True})
        assert status == 200, body
        _kill_worker_when_merging(airflow, cluster, dag_id, run_id)
        if _finished(airflow, dag_id, run_id) == "failed":  # Spark gave up with the executor: clear again
            status, body = airflow.api(f"dags/{dag_id}/clearTaskInstances", {
                "dry_run": False, "dag_run_id": run_id, "task_ids": ["merge_window"], "only_failed": True,
                "reset_dag_runs": True, "include_downstream": True})
            assert status == 200, body
        assert _finished(airflow, dag_id, run_id) == "success", _task_states(airflow, dag_id, run_id)
        assert _cursor_seq(config, name, env) == 1
        _lake_equals_source(services, db, lake, storage)
        restarted = cluster.script("start")  # the killed worker back
        assert restarted.returncode == 0, restarted.stderr[-3000:]

        # 4. Again, cleared in the UI: new changes, a run triggered like the UI's button, its stage task killed
        # once the window is staged (a driver killed mid-merge is step 2's fault, on this same path: a third
        # merge start on the cluster would prove nothing new), the failed run cleared in the UI.
        sql(services, db, *(f"UPDATE {t} SET v = 'z' WHERE id % 3 = 0" for t in TABLES),
            *(f"INSERT INTO {t} VALUES (30001, 'd')" for t in TABLES), "DELETE FROM orders WHERE id % 5 = 0")
        marker.write_text("mid_merge")  # only after_stage fires this time
        status, run = airflow.api(f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
        assert status == 200, run
        second = run["dag_run_id"]
        os.kill(_wait_frozen(airflow, marker, "after_stage"), signal.SIGKILL)  # the task process, window staged
        assert _finished(airflow, dag_id, second) == "failed"
        states = _task_states(airflow, dag_id, second)
        assert states["stage_window"] == "failed" and states["merge_window"] != "success", states
        assert _cursor_seq(config, name, env) == 1  # nothing acked
        _clear_in_the_ui(airflow, dag_id, second, tmp_path)
        assert _finished(airflow, dag_id, second) == "success", _task_states(airflow, dag_id, second)
        assert _cursor_seq(config, name, env) == 2
        _lake_equals_source(services, db, lake, storage)

        secret = store.secret.encode()
        task_logs = [f for f in (airflow.logs.parent / "logs").rglob("*") if f.is_file()]
        assert task_logs, "no task logs to check"
        leaked = [str(f) for f in [*task_logs, *store.files()] if secret in f.read_bytes()]
        assert not leaked, f"the object store's secret is in task logs or objects: {leaked}"
