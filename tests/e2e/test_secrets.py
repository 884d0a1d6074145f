"""Secrets never leak through Airflow: one real `airflow dags test` run of a pipeline whose source user has a
distinctive password (and only the least privileges) and whose ZooKeeper nodes are digest-protected with a
distinctive password, then a search for both secrets (and their escaped forms) in everything the run left:

- the run's captured stdout/stderr and every task log under AIRFLOW_HOME;
- the whole Airflow metadata database (XComs, rendered template fields, task instances, ...);
- the spark-submit command line (recorded by a `spark-submit` shim first on PATH: what `ps` shows);
- the staging area (Parquet, manifests, merge reports), the lake (Delta logs and data), the ZooKeeper nodes;
- the monitoring page, HTML and JSON, served by the plugin's FastAPI app in a process with the run's env.

The ZooKeeper credential comes either from the environment variable `zookeeper.auth_env` names, or from the
connection `zookeeper.conn_id` names, served to Airflow by a secrets backend (Airflow's LocalFilesystemBackend:
no AIRFLOW_CONN_* variable and no row in the metadata database; the `cdc maintain` CLI reads the same
connection from AIRFLOW_CONN_<ID>).

The CLI half of the same check (and the same for hostile names) is tests/integration/test_hostile_names.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.support.e2e import ROOT, CdcCase, assert_lake_equals_source, binlog_position, sql
from tests.support.security import (
    find_secrets_in_files,
    find_secrets_in_text,
    least_privilege_grants,
    mariadb_user,
    zk_tree,
)

pytestmark = pytest.mark.e2e

MONITOR_PROBE = """
import json
from airflow.api_fastapi.core_api.security import get_user
from fastapi.testclient import TestClient
from cdc_airflow import monitor
monitor.app.dependency_overrides[get_user] = object  # the login itself is tested elsewhere
client = TestClient(monitor.app)
page, data = client.get("/"), client.get("/api/pipelines")
print(json.dumps({"html": page.text, "json": data.json(), "codes": [page.status_code, data.status_code]}))
"""


@pytest.mark.parametrize("zk_credential", ["auth_env", "secrets_backend"])
def test_no_secret_in_logs_xcoms_db_command_lines_files_nodes_or_the_monitor(
    cdc_case: CdcCase, tmp_path: Path, zk_credential: str
) -> None:
    case = cdc_case
    zk_user, zk_password = "cdc-" + uuid.uuid4().hex[:6], "zk-secret-" + uuid.uuid4().hex
    auth_env = "E2E_ZK_AUTH_" + uuid.uuid4().hex[:6].upper()
    zk_conn_id = "e2e_zk_" + uuid.uuid4().hex[:6]
    if zk_credential == "auth_env":
        zk_config: dict[str, str] = {"auth_env": auth_env}
        zk_env = {auth_env: f"{zk_user}:{zk_password}"}  # every process: the DAG run, the monitor, the CLI
        cli_env: dict[str, str] = {}
    else:
        zk_config = {"conn_id": zk_conn_id}
        connections = tmp_path / "connections.json"  # outside every searched directory
        connections.write_text(json.dumps({zk_conn_id: {"conn_type": "generic", "login": zk_user,
                                                        "password": zk_password}}))
        zk_env = {
            "AIRFLOW__SECRETS__BACKEND": "airflow.secrets.local_filesystem.LocalFilesystemBackend",
            "AIRFLOW__SECRETS__BACKEND_KWARGS": json.dumps({"connections_file_path": str(connections)}),
        }
        # The cdc CLI reads connections from the environment only (README, "Configuration").
        cli_env = {f"AIRFLOW_CONN_{zk_conn_id.upper()}": json.dumps(
            {"conn_type": "generic", "login": zk_user, "password": zk_password})}
    owner = KazooClient(hosts=case.services.zk_hosts, auth_data=[("digest", f"{zk_user}:{zk_password}")])
    owner.start(timeout=15)
    try:
        with mariadb_user(case.services, least_privilege_grants([case.database]), prefix="cdc_e2e") as user:
            case.services = dataclasses.replace(case.services, mysql_user=user.name, mysql_password=user.password)
            case.write_config(
                binlog_position(case.services),
                zookeeper={"hosts": case.services.zk_hosts, "root": case.zk_root, **zk_config},
            )
            sql(case.services, case.database,
                "CREATE TABLE accounts (id INT PRIMARY KEY, owner VARCHAR(40), balance DECIMAL(10,2))",
                "INSERT INTO accounts VALUES (1, 'ann', 10.50), (2, 'bob', 0), (3, 'cy', 7)",
                "UPDATE accounts SET balance = 11 WHERE id = 1",
                "DELETE FROM accounts WHERE id = 3")
            shim_dir, argv_log = tmp_path / "shim", tmp_path / "spark-submit.argv"
            shim_dir.mkdir()
            shim = shim_dir / "spark-submit"
            shim.write_text(
                f'#!/usr/bin/env bash\nprintf "%s\\0" "$@" >> {json.dumps(str(argv_log))}\n'
                f'exec {ROOT / ".venv" / "bin" / "spark-submit"} "$@"\n'
            )
            shim.chmod(0o755)
            # The merge task puts its interpreter's bin/ first on PATH unless PATH already holds it: list it
            # after the shim (that is the venv the `airflow` script's shebang names, maybe not ROOT/.venv).
            interpreter_bin = Path((ROOT / ".venv" / "bin" / "airflow").read_text().splitlines()[0][2:]).parent
            path = os.pathsep.join([str(shim_dir), str(interpreter_bin), case.env["PATH"]])
            env = {**zk_env, "PATH": path}

            result = case.run_pipeline(env=env)
            (tmp_path / "dags-test.out").write_text(result.output)  # for a look after a failure
            assert result.state == "success", result.explain()
            assert result.tasks["merge_window"] == "success", result.explain()
            assert_lake_equals_source(case, ["accounts"])

            probe = subprocess.run(
                [sys.executable, "-c", MONITOR_PROBE], env={**case.env, **env}, cwd=ROOT,
                capture_output=True, text=True, timeout=300, check=False,
            )
            assert probe.returncode == 0, probe.stderr[-4000:]
            monitor = json.loads(probe.stdout.strip().splitlines()[-1])
            assert monitor["codes"] == [200, 200], monitor
            (status,) = monitor["json"]["pipelines"]
            assert status["error"] is None and status["cursor"]["seq"] >= 1, status  # a real status, not an error

            # `cdc maintain` on the same ACL'd pipeline: its Spark job's fence check must authenticate, so it
            # gets CDC_ZK_AUTH from the same job environment as the merge (never on its command line). Once, with
            # the credential from a connection: with `auth_env` the CLI builds that environment the same way
            # (Pipeline.spark_job_env), and tests/integration/test_hostile_names.py runs `cdc run`'s Spark job with
            # an `auth_env` credential and searches its command line and output for the secret.
            maint = None
            if zk_credential == "secrets_backend":
                maint = subprocess.run(
                    [sys.executable, "-m", "cdc_core.cli", "--config", str(case.config_path), "maintain", case.name,
                     "--wait", "60"],
                    env={**case.env, **env, **cli_env}, cwd=ROOT, capture_output=True, text=True, timeout=600,
                    check=False,
                )
                (tmp_path / "maintain.out").write_text(maint.stdout + maint.stderr)
                assert maint.returncode == 0, (maint.stdout + maint.stderr)[-4000:]

            secrets = [user.password, zk_password]
            argv = argv_log.read_bytes().decode().split("\0")
            assert any('"window_dir": ' in a for a in argv), argv  # the shim saw the real submit (its --spec)
            if maint is not None:
                assert any(a.startswith("cdc-maintain-") for a in argv), argv  # and the maintenance job's
            airflow_home = case.airflow.home
            leaks = (
                find_secrets_in_text("airflow dags test output", result.output, secrets)
                + find_secrets_in_text("spark-submit argv", " ".join(argv), secrets)
                + find_secrets_in_text("monitor html", monitor["html"], secrets)
                + find_secrets_in_text("monitor json", json.dumps(monitor["json"]), secrets)
                + find_secrets_in_text("monitor process output", probe.stdout + probe.stderr, secrets)
                + (find_secrets_in_text("cdc maintain output", maint.stdout + maint.stderr, secrets) if maint else [])
                + find_secrets_in_text("zookeeper nodes", repr(zk_tree(owner, case.zk_root)), secrets)
                + find_secrets_in_files([airflow_home, case.staging, case.lake], secrets)  # logs, DB (XComs, ...)
            )
            assert leaks == [], leaks
            xcoms = case.airflow.query("SELECT COUNT(*) FROM xcom WHERE run_id = ?", result.run_id)[0][0]
            assert xcoms >= 2  # the grant and the window step were there to search
            # `airflow dags test` runs the tasks in-process: their logs are in its output (searched above),
            # and whatever it writes under AIRFLOW_HOME is searched too.
            assert "window.merging pipeline=" in result.output and "lease.acquired" in result.output, result.explain()
    finally:
        owner.delete(case.zk_root, recursive=True)  # ACL'd nodes: the fixture's open client may not
        owner.stop()
        owner.close()
