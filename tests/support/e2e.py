"""End-to-end helpers: a throwaway Airflow (SQLite, the repo's dags/ and plugins/) per test session,
and per test a pipeline of its own over a fresh source database, ZooKeeper root, lake and staging area.

Airflow runs `airflow dags test` as an operator would run it, with the environment of
scripts/airflow_env.sh; each run parses the DAG file with the test's own CDC_CONFIG. A case with the
session's warm Airflow (tests/support/warm_airflow.py, the e2e `cdc_case` fixture) runs the command in a
process forked from one that has Airflow imported already, otherwise as a subprocess of its own (the fault
suite's DAG test). Results are read from Airflow's metadata database (task states, tries), from ZooKeeper
(cursor, lease) and from the Delta tables themselves.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import textwrap
import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from cdc_core.lake.merge_client import ADDRESS_ENV
from tests.support.warm_airflow import WarmAirflow

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"


def airflow_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """scripts/airflow_env.sh's environment for AIRFLOW_HOME=home, without this shell's AIRFLOW_*/CDC_*."""
    # The jar caches are no service setting: a checkout without its own .cache (a git worktree) points
    # them at another's, and the DAGs' spark-submit must see the same (cdc_core/lake/spark_conf.py).
    keep = ("CDC_IVY_DIR", "CDC_S3A_IVY_DIR")
    clean = {k: v for k, v in os.environ.items() if k in keep or not k.startswith(("AIRFLOW", "CDC_"))}
    clean["CDC_AIRFLOW_HOME"] = str(home)
    clean.update(extra or {})
    out = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'scripts' / 'airflow_env.sh'} >/dev/null && env -0"],
        env=clean,
        capture_output=True,
        check=True,
        cwd=ROOT,
    ).stdout
    env = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    env.update(
        {
            # Retries come quickly in tests (the DAG caps them at half the lease; the base is Airflow's).
            "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@dataclass
class AirflowHome:
    home: Path
    env: dict[str, str]

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def airflow(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(VENV_BIN / "airflow"), *args],
            env=env or self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(self.db)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()


@dataclass
class DagRunResult:
    dag_id: str
    run_id: str
    state: str
    tasks: dict[str, str]  # task_id -> final state
    tries: dict[str, int]  # task_id -> try number of the final try
    output: str = field(repr=False)
    seconds: dict[str, float] = field(default_factory=dict)  # task_id -> duration of the final try

    def explain(self) -> str:
        return (
            f"{self.dag_id} {self.run_id} {self.state} {self.tasks}\ntask seconds: {self.seconds}\n"
            f"--- output (tail) ---\n{self.output[-6000:]}"
        )


@dataclass
class CdcCase:
    """One test's pipeline: its config file, database, ZooKeeper root and storage, and how to run its DAGs."""

    name: str
    database: str
    zk_root: str
    lake: Path
    staging: Path
    config_path: Path
    airflow: AirflowHome
    services: Any
    conn_id: str = "cdc_source_e2e"
    warm: WarmAirflow | None = None  # the session's warm Airflow: the same commands without Airflow's start-up

    def airflow_cli(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 900
    ) -> subprocess.CompletedProcess[str]:
        """`airflow <args>` with this case's environment (plus `env`), on the warm Airflow when there is one."""
        full = {**self.env, **(env or {})}
        if self.warm is not None and self.warm.accepts(full):
            return self.warm.airflow(*args, env=full, timeout=timeout)
        return self.airflow.airflow(*args, env=full, timeout=timeout)

    @property
    def env(self) -> dict[str, str]:
        s = self.services
        conn = {
            "conn_type": "mysql",
            "host": s.mysql_host,
            "port": s.mysql_port,
            "login": s.mysql_user,
            "password": s.mysql_password,
        }
        # A test with the `warm_merges` fixture merges on the session's warm merge server (the Airflow
        # environment drops this process's CDC_* variables, so it is passed on here).
        warm = {k: os.environ[k] for k in (ADDRESS_ENV,) if os.environ.get(k)}
        return {
            **self.airflow.env,
            "CDC_CONFIG": str(self.config_path),
            f"AIRFLOW_CONN_{self.conn_id.upper()}": json.dumps(conn),
            **warm,
        }

    def write_config(self, start: dict[str, Any], **overrides: Any) -> None:
        pipeline = {
            "name": self.name,
            "source": {"conn_id": self.conn_id},
            "tables": {"include": [f"{self.database}.*"]},
            "start": start,
            "zookeeper": {"hosts": self.services.zk_hosts, "root": self.zk_root},
            "lease_seconds": 300,
            "staging_root": str(self.staging),
            "lake_root": str(self.lake),
            "schedule": None,
            "retries": 1,
            # One window per run in these tests, whatever else the shared binlog holds.
            "caps": {"max_events": 5_000_000, "max_bytes": 4 * 1024**3, "max_transactions": 1_000_000},
            **overrides,
        }
        self.config_path.write_text(json.dumps({"pipelines": [pipeline]}, indent=2))

    # ---------------------------------------------------------------------------------- Airflow

    def run_dag(
        self, dag_id: str, conf: dict[str, Any] | None = None, env: dict[str, str] | None = None
    ) -> DagRunResult:
        before = {r[0] for r in self.airflow.query("SELECT run_id FROM dag_run WHERE dag_id = ?", dag_id)}
        args = ["dags", "test", dag_id]
        if conf is not None:
            args += ["-c", json.dumps(conf)]
        started = time.monotonic()
        proc = self.airflow_cli(*args, env=env)
        output = proc.stdout + proc.stderr
        runs = [
            r
            for r in self.airflow.query("SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id", dag_id)
            if r[0] not in before
        ]
        assert runs, f"`airflow dags test {dag_id}` created no run (exit {proc.returncode}):\n{output[-6000:]}"
        run_id, state = runs[0]  # the run `dags test` ran; one its `continue_run` task triggered comes after
        rows = self.airflow.query(
            "SELECT task_id, state, try_number, duration FROM task_instance WHERE dag_id = ? AND run_id = ?",
            dag_id,
            run_id,
        )
        result = DagRunResult(
            dag_id, run_id, state, {r[0]: r[1] for r in rows}, {r[0]: r[2] for r in rows}, output,
            {r[0]: round(r[3], 1) for r in rows if r[3] is not None},
        )
        print(f"{dag_id} {run_id}: {state} in {time.monotonic() - started:.1f} s; task seconds {result.seconds}")
        return result

    def run_pipeline(self, env: dict[str, str] | None = None) -> DagRunResult:
        return self.run_dag(f"cdc_{self.name}", env=env)

    def run_backfill(self, conf: dict[str, Any]) -> DagRunResult:
        return self.run_dag(f"cdc_{self.name}_backfill", conf=conf)

    # ------------------------------------------------------------------------------ cdc_core side

    def pipeline(self):  # type: ignore[no-untyped-def]
        """The same pipeline opened in this process (status, lease), with the test's config."""
        from cdc_core.capture.source import SourceParams
        from cdc_core.model.config import load_config
        from cdc_core.run.pipeline import Pipeline

        pc = load_config(self.config_path).pipeline(self.name)
        return Pipeline.from_config(pc, SourceParams(**self.services.source_params))

    def table_path(self, table: str) -> Path:
        from cdc_core.model.naming import path_component

        return self.lake / path_component(self.database) / path_component(table)


def binlog_position(services) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """The source's current end as a `start:` block (kind file), taken before a test writes anything."""
    return dict(services.binlog_end())


def _norm(v: Any) -> Any:
    if isinstance(v, Decimal):
        return v.normalize() if v == v.to_integral_value() else v
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    return v


def source_rows(services, database: str, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:  # type: ignore[no-untyped-def]
    conn = services.root_connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM `{table}`")
            cols = [d[0] for d in cur.description]
            rows = sorted(tuple(_norm(v) for v in r) for r in cur.fetchall())
    finally:
        conn.close()
    return cols, rows


def delta_rows(path: Path, columns: list[str]) -> list[tuple[Any, ...]]:
    """The Delta table's rows (read with delta-rs, no Spark), projected on the source's columns."""
    from cdc_core.lake.delta_state import read_rows

    table = read_rows(str(path))  # deletion vectors applied, column-mapped tables too
    missing = [c for c in columns if c not in table.column_names]
    assert not missing, f"{path}: Delta table lacks source columns {missing} (has {table.column_names})"
    if "_cdc_deleted" in table.column_names:  # soft-delete mode keeps deleted rows, flagged
        table = table.filter(~table["_cdc_deleted"].fill_null(False))
    data = table.select(columns).to_pylist()
    return sorted(tuple(_norm(r[c]) for c in columns) for r in data)


def assert_lake_equals_source(case: CdcCase, tables: list[str]) -> None:
    for t in tables:
        cols, expected = source_rows(case.services, case.database, t)
        actual = delta_rows(case.table_path(t), cols)
        assert len(actual) == len(expected), f"{t}: Delta has {len(actual)} rows, source {len(expected)}"
        assert actual == expected, f"{t}: Delta differs from the source: first differences " + str(
            [(a, e) for a, e in zip(actual, expected, strict=False) if a != e][:5]
        )


def sql(services, database: str, *statements: str) -> None:  # type: ignore[no-untyped-def]
    conn = services.root_connect(database)
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(textwrap.dedent(s))
    finally:
        conn.close()


# ------------------------------------------------------------------ the pipeline DAG tests

WINDOW_TASKS = ["acquire_lease", "plan_window", "stage_window", "merge_window", "ack_window", "release_lease"]

CUSTOMERS = """
CREATE TABLE customers (
  id INT NOT NULL PRIMARY KEY,
  name VARCHAR(64) NOT NULL,
  balance DECIMAL(12,2) NULL,
  born DATE NULL,
  seen DATETIME(6) NULL,
  score DOUBLE NULL,
  notes TEXT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""
ORDERS = """
CREATE TABLE orders (
  id BIGINT NOT NULL PRIMARY KEY,
  customer_id INT NOT NULL,
  amount DECIMAL(10,2) NOT NULL,
  status VARCHAR(16) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


def seed(case: CdcCase, customers: int = 20, orders: int = 50) -> None:
    rows = ", ".join(
        f"({i}, 'customer {i} ü', {i * 10}.{i % 100:02d}, '19{50 + i % 50}-0{1 + i % 9}-1{i % 10}', "
        f"'2026-01-0{1 + i % 9} 10:00:0{i % 10}.{i:06d}', {i}.25, {'NULL' if i % 3 else repr('note ' + str(i))})"
        for i in range(1, customers + 1)
    )
    order_rows = ", ".join(f"({i}, {1 + i % customers}, {i}.50, 'new')" for i in range(1, orders + 1))
    sql(
        case.services,
        case.database,
        CUSTOMERS,
        ORDERS,
        f"INSERT INTO customers VALUES {rows}",
        f"INSERT INTO orders VALUES {order_rows}",
    )


def assert_all(result, state: str, tasks: list[str] = WINDOW_TASKS) -> None:  # type: ignore[no-untyped-def]
    bad = {t: result.tasks.get(t) for t in tasks if result.tasks.get(t) != state}
    assert not bad, f"expected {state}: {bad}\n{result.explain()}"


def continuation_runs(case: CdcCase) -> list[tuple[str, str, str, str]]:
    """(run_id, state, run_type, conf) of the runs of cdc_<name> that a `continue_run` task created."""
    return case.airflow.query(
        "SELECT run_id, state, run_type, CAST(conf AS TEXT) FROM dag_run WHERE dag_id = ? AND run_id LIKE "
        "'continue\\_\\_%' ESCAPE '\\' ORDER BY id",
        f"cdc_{case.name}",
    )
