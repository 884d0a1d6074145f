"""Fixed cost of a window: an empty window and a 1-change window, end to end, by CLI and by DAG.

- CLI: `cdc --config X run <pipeline>` (acquire, plan, stage, merge with spark-submit when the window
  has changes, ack, release), as an operator runs it, timed from process start to exit.
- DAG: `airflow dags test cdc_<pipeline>` against a throwaway Airflow (SQLite, the repo's dags/ and
  plugins/, tests/support/e2e.py), timed likewise; the reference is `airflow dags test` of an empty
  DAG (one task that does nothing) and of a DAG of the same shape as ours whose tasks do nothing.
- Context: a trivial `spark-submit` (JVM start, no session) and a Spark session start.

An empty window must never start Spark: the DAG's merge task must be `skipped`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import ROOT, VENV_BIN, SourceInfo, Stat, log, ratio, short_error

EMPTY_DAG = """
from datetime import datetime
from airflow.sdk import DAG, task

with DAG(dag_id="bench_empty", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    @task
    def nothing():
        return None
    nothing()

with DAG(dag_id="bench_same_shape", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
    @task
    def step(name):
        return name
    lease = step.override(task_id="acquire_lease")("lease")
    plan = step.override(task_id="plan_window")("plan")
    stage = step.override(task_id="stage_window")("stage")
    merge = step.override(task_id="merge_window")("merge")
    ack = step.override(task_id="ack_window")("ack")
    release = step.override(task_id="release_lease")("release")
    lease >> plan >> stage >> merge >> ack >> release
"""


class _Services:
    """What tests/support/e2e.CdcCase reads from the `services` fixture, for the bench's server."""

    def __init__(self, si: SourceInfo) -> None:
        self.si = si
        self.mysql_host, self.mysql_port = si.host, si.port
        self.mysql_user, self.mysql_password = si.user, si.password
        self.zk_hosts = si.zk_hosts
        self.source_params = {"host": si.host, "port": si.port, "user": si.user, "password": si.password}

    def root_connect(self, database: str | None = None) -> Any:
        return self.si.root_connect(database)

    def binlog_end(self) -> dict[str, object]:
        """The source's current end of binlog as a pipeline `start:` block (like tests/conftest.py's)."""
        from cdc_core.capture.source import inspect_source

        conn = self.root_connect()
        try:
            end = inspect_source(conn).end
        finally:
            conn.close()
        assert end is not None, "the bench's server has binary logging off"
        return {"kind": "file", "file": end.file, "offset": end.offset}


def _timed(
    cmd: list[str], env: dict[str, str], timeout: float = 1800
) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    return time.perf_counter() - t0, proc


def spark_context_figures(repeats: int) -> dict[str, Any]:
    """A trivial spark-submit (no session) and a Delta session start, for context."""
    from cdc_core.lake.spark_conf import spark_confs, spark_env

    env = {**os.environ, **spark_env()}
    trivial = Stat(unit="s")
    session = Stat(unit="s")
    script = ROOT / ".local" / "bench_trivial_submit.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text("print('ok')\n")
    confs = spark_confs()
    session_code = (
        "import time; t=time.perf_counter(); from pyspark.sql import SparkSession\n"
        "b=SparkSession.builder.master('local[2]')\n"
        + "".join(f"b=b.config({k!r}, {v!r})\n" for k, v in confs.items())
        + "s=b.getOrCreate(); print('SESSION', time.perf_counter()-t); s.stop()\n"
    )
    for _ in range(repeats):
        secs, proc = _timed([str(VENV_BIN / "spark-submit"), "--master", "local[2]", str(script)], env)
        if proc.returncode == 0:
            trivial.values.append(secs)
        secs, proc = _timed([sys.executable, "-c", session_code], env)
        for line in proc.stdout.splitlines():
            if line.startswith("SESSION"):
                session.values.append(float(line.split()[1]))
    script.unlink(missing_ok=True)
    return {"trivial_spark_submit_seconds": trivial.to_dict(), "spark_session_start_seconds": session.to_dict()}


def run(si: SourceInfo, workdir: Path, repeats: int, dag: bool = True) -> dict[str, Any]:
    from tests.support.e2e import AirflowHome, CdcCase, airflow_env, binlog_position

    out: dict[str, Any] = {"errors": []}
    services = _Services(si)
    db = f"bench_fixed_{uuid.uuid4().hex[:6]}"
    conn = si.root_connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(20))")
    home = workdir / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    af = AirflowHome(home=home, env=airflow_env(home))
    case = CdcCase(
        name="bf_" + uuid.uuid4().hex[:6],
        database=db,
        zk_root=f"/bench-fixed-{uuid.uuid4().hex[:8]}",
        lake=workdir / "lake",
        staging=workdir / "staging",
        config_path=workdir / "pipelines.json",
        airflow=af,
        services=services,
    )
    case.lake.mkdir(exist_ok=True)
    case.staging.mkdir(exist_ok=True)
    case.write_config(binlog_position(services))
    next_id = [1]

    def one_change() -> None:
        with conn.cursor() as cur:
            cur.execute(f"INSERT INTO `{db}`.t VALUES (%s, 'x')", (next_id[0],))
        next_id[0] += 1

    cli = [str(VENV_BIN / "cdc"), "--config", str(case.config_path), "run", case.name]
    env = {**case.env, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    try:
        log("fixed cost: CLI warm-up (first window, creates the cursor)")
        _timed(cli, env)
        empty, change = Stat(unit="s"), Stat(unit="s")
        for i in range(repeats):
            log(f"fixed cost: CLI empty window {i + 1}/{repeats}")
            secs, proc = _timed(cli, env)
            (
                empty.values.append(secs)
                if proc.returncode == 0
                else out["errors"].append(f"cli empty: {proc.stderr[-300:]}")
            )
        log("fixed cost: CLI 1-change warm-up (creates the Delta table)")
        one_change()
        _timed(cli, env)
        for i in range(repeats):
            one_change()
            log(f"fixed cost: CLI 1-change window {i + 1}/{repeats}")
            secs, proc = _timed(cli, env)
            (
                change.values.append(secs)
                if proc.returncode == 0
                else out["errors"].append(f"cli 1-change: {proc.stderr[-300:]}")
            )
        out["cli_empty_window_seconds"] = empty.to_dict()
        out["cli_one_change_window_seconds"] = change.to_dict()

        if dag:
            log("fixed cost: airflow db migrate")
            proc = af.airflow("db", "migrate", timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"airflow db migrate failed: {proc.stderr[-500:]}")
            ref_dir = workdir / "ref_dags"
            ref_dir.mkdir(exist_ok=True)
            (ref_dir / "bench_empty.py").write_text(EMPTY_DAG)
            ref_env = {**af.env, "AIRFLOW__CORE__DAGS_FOLDER": str(ref_dir)}
            dag_empty, ref_empty, ref_shape, dag_change = (Stat(unit="s") for _ in range(4))
            merge_states = []
            for i in range(repeats):
                log(f"fixed cost: DAG round {i + 1}/{repeats}: empty reference DAGs")
                secs, proc = _timed([str(VENV_BIN / "airflow"), "dags", "test", "bench_empty"], ref_env)
                (
                    ref_empty.values.append(secs)
                    if proc.returncode == 0
                    else out["errors"].append(f"ref dag: {proc.stderr[-300:]}")
                )
                secs, proc = _timed([str(VENV_BIN / "airflow"), "dags", "test", "bench_same_shape"], ref_env)
                (
                    ref_shape.values.append(secs)
                    if proc.returncode == 0
                    else out["errors"].append(f"ref dag: {proc.stderr[-300:]}")
                )
                log(f"fixed cost: DAG round {i + 1}/{repeats}: empty CDC window")
                t0 = time.perf_counter()
                result = case.run_pipeline()
                secs = time.perf_counter() - t0
                merge_states.append(result.tasks.get("merge_window"))
                (
                    dag_empty.values.append(secs)
                    if result.state == "success"
                    else out["errors"].append(f"dag empty: {result.state} {result.tasks}")
                )
            for i in range(max(1, repeats - 1)):
                one_change()
                log(f"fixed cost: DAG 1-change window {i + 1}")
                t0 = time.perf_counter()
                result = case.run_pipeline()
                secs = time.perf_counter() - t0
                (
                    dag_change.values.append(secs)
                    if result.state == "success"
                    else out["errors"].append(f"dag 1-change: {result.state} {result.tasks}")
                )
            out.update(
                dag_empty_window_seconds=dag_empty.to_dict(),
                dag_reference_empty_dag_seconds=ref_empty.to_dict(),
                dag_reference_same_shape_seconds=ref_shape.to_dict(),
                dag_one_change_window_seconds=dag_change.to_dict(),
                empty_window_merge_task_states=merge_states,
                empty_window_started_spark=any(s != "skipped" for s in merge_states),
                dag_empty_over_empty_dag_seconds=(
                    round(dag_empty.median - ref_empty.median, 2) if dag_empty.values and ref_empty.values else None
                ),
                dag_empty_over_same_shape_seconds=(
                    round(dag_empty.median - ref_shape.median, 2) if dag_empty.values and ref_shape.values else None
                ),
                dag_empty_to_empty_dag=ratio(dag_empty.median, ref_empty.median),
            )
    except Exception as e:
        out["errors"].append(short_error(e))
        log(f"  fixed cost failed: {short_error(e)}")
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        conn.close()
        _zk_cleanup(si.zk_hosts, case.zk_root)
    out["config"] = json.loads(case.config_path.read_text()) if case.config_path.exists() else None
    log("fixed cost: context (a trivial spark-submit, a Spark session start)")
    try:
        out["spark"] = spark_context_figures(max(1, repeats - 1))
    except Exception as e:
        out["errors"].append(f"spark context: {short_error(e)}")
    return out


def _zk_cleanup(hosts: str, root: str) -> None:
    try:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=hosts)
        zk.start(timeout=10)
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()
    except Exception as e:
        log(f"  ZooKeeper cleanup of {root} failed: {short_error(e)}")
