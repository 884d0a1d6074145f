"""A pipeline driven through the real `cdc` CLI in subprocesses, for the tiers that need separate processes
(tests/cluster, tests/integration/test_object_store.py): its config file, its environment, the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def cli_pipeline(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, *, prefix: str, ddl: str | Sequence[str],
    settings: Callable[[str], dict[str, Any]], env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One pipeline over `source_db` (its tables created by `ddl`: one statement or several), starting at the
    binlog's end, with `settings(name)` on top; its source connection in the returned environment (plus `env`)."""
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    conn_id = f"cdc_source_{prefix}"
    conn = services.airflow_connection
    write(services, source_db, *([ddl] if isinstance(ddl, str) else ddl))
    cfg = {
        "name": name, "source": {"conn_id": conn_id}, "tables": {"include": [f"{source_db}.*"]},
        "start": services.binlog_end(), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root}, "schedule": None, **settings(name),
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [cfg]}))
    full_env = {**os.environ, f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn), **(env or {})}
    return {"name": name, "config": str(config), "env": full_env, "db": source_db}


def cdc(p: dict[str, Any], *args: str, env: dict[str, str] | None = None, wait: bool = True) -> Any:
    """`cdc --config <p's file> <args>` in a subprocess: its CompletedProcess, or the Popen when not `wait`."""
    cmd = [sys.executable, "-m", "cdc_core.cli", "--config", p["config"], *args]
    full_env = {**p["env"], **(env or {})}
    if not wait:
        return subprocess.Popen(cmd, env=full_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    return subprocess.run(cmd, env=full_env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)


def write(services: Any, db: str, *statements: str) -> None:
    conn = services.root_connect(db)
    with conn.cursor() as cur:
        for s in statements:
            cur.execute(s)
    conn.commit()
    conn.close()


def private_pipeline(ps: Any, db: str, tmp_path: Path, monkeypatch: Any, *, prefix: str,
                     **settings: Any) -> dict[str, Any]:
    """A pipeline over `db` on the private server pair (tests/faults/services.py) for the in-process CLI, starting
    at the binlog's end, with `settings` on top: its connection in this process's environment (`monkeypatch`)."""
    conn_id = f"cdc_source_{prefix}"
    conn = {"conn_type": "mysql", "host": ps.mysql_host, "port": ps.mysql_port, "login": ps.mysql_user,
            "password": ps.mysql_password}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return {
        "name": f"{prefix}_{uuid.uuid4().hex[:6]}", "source": {"conn_id": conn_id}, "tables": {"include": [f"{db}.*"]},
        "start": ps.binlog_end(), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": ps.zk_hosts, "root": f"/cdc-{prefix}-{uuid.uuid4().hex[:8]}"},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None, **settings,
    }
