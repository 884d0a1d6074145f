"""One real cycle over hostile names, as a least-privilege user, with ZooKeeper digest auth, through the CLI.

`cdc run` (Pipeline.run_cycle: lease, plan, stage, spark-submit merge, ack) captures a database whose
name holds backticks, both quotes, a dot pair, a slash, a backslash, `_`/`%`, CJK and a trailing dash,
with tables named `select`, `..`, `.` and `-rf a/b\\c it's "q" ...` and columns named `order`,
`a.b`, `sp ace`, `it's "q" \\`b\\``, `日本語`, `-x`, plus a column added mid-window. It proves, in one
Spark cycle (the expensive part):

- hostile names: every Delta table equals its source table (cdc_core.run.verify), one lake directory per
  table, and nothing is written outside the lake and staging roots;
- least privilege: the capture user has only REPLICATION SLAVE, BINLOG MONITOR and SELECT on the one
  captured schema (granted with `_`/`%` escaped), and the cycle works;
- secrets (CLI half): the source password and the ZooKeeper password appear nowhere: not in the CLI's
  stdout/stderr (debug logs on), the staged files, manifests and reports, the Delta log, the ZooKeeper
  nodes, nor the spark-submit command line (recorded by a shim on PATH, as `ps` would show it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from cdc_core.model.naming import path_component, quote_mysql
from cdc_core.run.verify import compare_table
from tests.support.security import (
    HOSTILE_TABLES,
    create_database,
    drop_database,
    files_outside,
    find_secrets_in_files,
    find_secrets_in_text,
    hostile_database,
    least_privilege_grants,
    mariadb_user,
    zk_tree,
)
from tests.support.source_facts import run_sql

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEY = "order"
COLUMNS = (KEY, "a.b", "sp ace", "it's \"q\" `b`", "日本語", "-x")
ADDED = "new col.x"  # added mid-window: ALTER TABLE on the Delta side (schema evolution + column mapping)
CONN_ID = "cdc_source_hostile"
DELETES_IN = ("select",)  # tombstone tables cost Spark time: one shows their paths are safe too


def q(name: str) -> str:
    return quote_mysql(name)


def master_status(services: Any) -> tuple[str, int]:
    conn = services.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            return str(row[0]), int(row[1])
    finally:
        conn.close()


def spark_submit_shim(bin_dir: Path, log: Path) -> None:
    """A `spark-submit` first on PATH that records its argv (what `ps` shows) and runs the real one."""
    real = ROOT / ".venv" / "bin" / "spark-submit"
    bin_dir.mkdir(parents=True)
    shim = bin_dir / "spark-submit"
    shim.write_text(f'#!/usr/bin/env bash\nprintf "%s\\0" "$@" >> {json.dumps(str(log))}\nexec {real} "$@"\n')
    shim.chmod(0o755)


def test_hostile_names_cycle_as_least_privilege_user_leaks_no_secret(
    services: Any, zk_root: str, tmp_path: Path
) -> None:
    db = hostile_database()
    box = tmp_path / "box"  # everything the pipeline writes must stay in box/roots/{lake,staging}
    lake, staging = box / "roots" / "lake", box / "roots" / "staging"
    lake.mkdir(parents=True)
    staging.mkdir(parents=True)
    name = "hostile_" + uuid.uuid4().hex[:6]
    zk_user, zk_password = "cdc-" + uuid.uuid4().hex[:6], "zk-secret-" + uuid.uuid4().hex
    auth_env = "CDC_TEST_ZK_AUTH_" + uuid.uuid4().hex[:6].upper()

    zk = KazooClient(hosts=services.zk_hosts, auth_data=[("digest", f"{zk_user}:{zk_password}")])
    zk.start(timeout=15)
    create_database(services, db)
    try:
        cols = ", ".join(f"{q(c)} INT" if c in (KEY, "a.b", "-x") else f"{q(c)} VARCHAR(40)" for c in COLUMNS)
        run_sql(services, *[f"CREATE TABLE {q(db)}.{q(t)} ({cols}, PRIMARY KEY ({q(KEY)}))" for t in HOSTILE_TABLES])
        file, offset = master_status(services)  # the window starts after the tables exist, before any row
        col_list = ", ".join(q(c) for c in COLUMNS)
        statements = []
        for i, t in enumerate(HOSTILE_TABLES):
            full = f"{q(db)}.{q(t)}"
            statements += [
                f"INSERT INTO {full} ({col_list}) VALUES "
                f"(1, {i}, 'one', 'it''s \"1\" `x`', '日本', -1), (2, 2, 'two', NULL, '表', -2), "
                f"(3, 3, 'three', 'x', 'y', -3)",
                f"UPDATE {full} SET {q('sp ace')} = 'TWO', {q('a.b')} = 22 WHERE {q(KEY)} = 2",
            ]
            if t in DELETES_IN:  # deletes and key changes also write the hard-delete tombstone tables
                statements += [
                    f"DELETE FROM {full} WHERE {q(KEY)} = 3",
                    f"UPDATE {full} SET {q(KEY)} = 10 WHERE {q(KEY)} = 1",  # a primary-key change
                ]
        sel = f"{q(db)}.{q('select')}"
        statements += [
            f"ALTER TABLE {sel} ADD COLUMN {q(ADDED)} VARCHAR(10)",
            f"INSERT INTO {sel} ({q(KEY)}, {q(ADDED)}) VALUES (4, 'added')",
            f"UPDATE {sel} SET {q(ADDED)} = 'later' WHERE {q(KEY)} = 2",
        ]
        run_sql(services, *statements)

        config = tmp_path / "pipelines.yaml"
        config.write_text(
            json.dumps(
                {
                    "pipelines": [
                        {
                            "name": name,
                            "source": {"conn_id": CONN_ID},
                            "tables": {"include": [f"{q(db)}.*"]},  # a literal schema in backticks
                            "start": {"kind": "file", "file": file, "offset": offset},
                            "zookeeper": {"hosts": services.zk_hosts, "root": zk_root, "auth_env": auth_env},
                            "staging_root": str(staging),
                            "lake_root": str(lake),
                            "schedule": None,
                            "caps": {"max_events": 5_000_000, "max_bytes": 4 * 1024**3, "max_transactions": 1_000_000},
                        }
                    ]
                }
            )
        )
        with mariadb_user(services, least_privilege_grants([db])) as user:
            argv_log = tmp_path / "spark-submit.argv"
            spark_submit_shim(tmp_path / "shim", argv_log)
            cwd = tmp_path / "cwd"
            cwd.mkdir()
            conn = {"conn_type": "mysql", "host": services.mysql_host, "port": services.mysql_port,
                    "login": user.name, "password": user.password}
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_CONN_", "CDC_"))},
                f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(conn),
                auth_env: f"{zk_user}:{zk_password}",
                "PATH": f"{tmp_path / 'shim'}{os.pathsep}{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
                "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'plugins'}",
                "SPARK_LOCAL_IP": "127.0.0.1",
            }
            proc = subprocess.run(
                [sys.executable, "-m", "cdc_core.cli", "-v", "--config", str(config), "run", name],
                env=env, cwd=cwd, capture_output=True, text=True, timeout=600, check=False,
            )
            output = proc.stdout + proc.stderr
            assert proc.returncode == 0, output[-8000:]
            result = json.loads(proc.stdout)
            assert result["windows"][0]["changes"] > 0, result

            # --- hostile names: the lake equals the source, table by table, value by value
            root_conn = services.root_connect()
            try:
                for t in HOSTILE_TABLES:
                    uri = f"{lake}/{path_component(db)}/{path_component(t)}"
                    diff = compare_table(root_conn, db, t, uri, (KEY,))
                    assert diff.equal and diff.source_rows > 0, diff.summary()
            finally:
                root_conn.close()
            schema_dir = lake / path_component(db)
            assert sorted(p.name for p in schema_dir.iterdir()) == sorted(path_component(t) for t in HOSTILE_TABLES)
            # + the pipeline's checkpoints table (docs/downstream.md): a name no encoded table can have
            expected_top = [path_component(db), "_cdc_tombstones", "_cdc.meta"]
            assert sorted(p.name for p in lake.iterdir()) == sorted(expected_top)
            tombstones = lake / "_cdc_tombstones" / path_component(db)
            assert sorted(p.name for p in tombstones.iterdir()) == sorted(path_component(t) for t in DELETES_IN)
            # ... and nothing landed outside the two roots (a `..` or `/` that escaped would show up here)
            assert files_outside(box, [lake, staging]) == []

            # --- secrets: nowhere
            secrets = [user.password, zk_password]
            nodes = zk_tree(zk, zk_root)
            assert any(p.endswith("/cursor") for p in nodes), sorted(nodes)
            argv = argv_log.read_bytes().decode().split("\0")
            specs = [json.loads(a) for a in argv if a.startswith('{"')]  # the shim saw the real command line
            assert any(s.get("zk_hosts") and s.get("lake_root") == str(lake) for s in specs), argv
            leaks = (
                find_secrets_in_text("cdc run output", output, secrets)
                + find_secrets_in_text("spark-submit argv", " ".join(argv), secrets)
                + find_secrets_in_text("zookeeper nodes", repr(nodes), secrets)
                + find_secrets_in_files([staging, lake], secrets)
            )
            assert leaks == [], leaks
    finally:
        drop_database(services, db)
        zk.delete(zk_root, recursive=True)  # the nodes are ACL'd: the fixture's open client may not
        zk.stop()
        zk.close()
