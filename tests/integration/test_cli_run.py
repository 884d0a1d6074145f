"""`cdc run` as an operator uses it: it lands until caught up (capped windows included) in one invocation,
and a `cdc run` killed while holding the lease does not block the next one for the lease's 600 s.

Real MariaDB, ZooKeeper and spark-submit (one merge, in the kill test).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def env(services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    name = "run_" + uuid.uuid4().hex[:6]
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_RUN", json.dumps(conn))
    root = services.root_connect(source_db)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    root.close()
    pipeline = {
        "name": name,
        "source": {"conn_id": "cdc_source_run"},
        "tables": {"include": [f"{source_db}.*"]},
        "start": services.binlog_end(),
        "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"),
        "lake_root": str(tmp_path / "lake"),
        "schedule": None,
        "lease_seconds": 600,
        "caps": {"max_transactions": 1},
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    return {"name": name, "config": str(config), "db": source_db}


def cdc(env: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["--config", env["config"], *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip() else None), err


def test_run_catches_up_several_capped_windows_in_one_invocation(
    services: Any, env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    root = services.root_connect(env["db"])
    with root.cursor() as cur:  # four transactions without row changes: windows of one (caps), no Spark
        for table in ("a", "b", "c", "d"):
            cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY)")
    root.close()
    code, once, err = cdc(env, capsys, "run", env["name"], "--once")
    assert code == 0, err
    assert [w["transactions"] for w in once["windows"]] == [1]

    # Other tests' transactions on the shared server are windows too (a run goes on until caught up): at least
    # this test's three, each of one transaction.
    code, ran, err = cdc(env, capsys, "run", env["name"])
    assert code == 0, err
    sizes = [w["transactions"] for w in ran["windows"]]
    assert len(sizes) >= 3 and set(sizes) == {1} and ran["stopped"] == "caught_up", ran
    code, status, err = cdc(env, capsys, "status", env["name"])
    assert code == 0, err
    assert status["cursor"]["seq"] == 1 + len(sizes)

    # Nothing left of its own: one empty window; or, with other tests' transactions, at most two windows.
    code, capped, err = cdc(env, capsys, "run", env["name"], "--max-windows", "2")
    assert code == 0, err
    sizes = [w["transactions"] for w in capped["windows"]]
    assert 1 <= len(sizes) <= 2 and capped["stopped"] in ("empty_window", "caught_up", "max_windows"), capped
    assert sizes[-1] == 0 if capped["stopped"] == "empty_window" else 0 not in sizes, capped


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2:].split()[0]


def test_a_killed_run_does_not_block_the_next_one(
    services: Any, env: dict[str, Any], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    name = env["name"]
    root = services.root_connect(env["db"])
    with root.cursor() as cur:
        cur.execute("INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}')" for i in range(1, 51)))
    root.close()

    # A real `cdc run` process plans its window and pauses there (fault point, SIGSTOP), holding the lease.
    proc = subprocess.Popen(
        [sys.executable, "-m", "cdc_core.cli", "--config", env["config"], "run", name],
        env={**os.environ, "CDC_FAULT": "after_plan", "CDC_FAULT_ACTION": "stop"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while _state(proc.pid) != "T":
            assert proc.poll() is None and time.monotonic() < deadline, "the run never reached after_plan"
            time.sleep(0.1)
        code, status, err = cdc(env, capsys, "status", name)
        lease = status["lease"]
        assert lease["holder"].startswith(f"cli/run/{os.uname().nodename}/{proc.pid}/")
        assert lease["process"]["pid"] == proc.pid

        # Alive (only paused): the next run leaves it alone and skips.
        with caplog.at_level(logging.INFO):
            code, _, err = cdc(env, capsys, "run", name)
        assert code == 75 and "skipped" in err and "is running" in err
        assert "lease.holder_kept" in caplog.text

        proc.send_signal(signal.SIGKILL)  # killed: no finally blocks, no release
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    # Dead: the next run breaks its lease (the documented way: the epoch moves on) and lands everything.
    caplog.clear()
    with caplog.at_level(logging.INFO):
        code, ran, err = cdc(env, capsys, "run", name)
    assert code == 0, err
    assert time.time() < lease["expires_at"]  # it did not wait for the 600 s lease to expire
    assert "lease.dead_holder" in caplog.text and f"/{proc.pid}/" in caplog.text
    # The killed run's planned window is replayed first. With `max_transactions: 1` it may hold another test's
    # transaction from the shared binlog (no captured change), so the 50 rows are counted over the run's windows.
    assert ran["windows"][0]["recovered"] == "replay"
    assert sum(w["changes"] for w in ran["windows"]) == 50, ran["windows"]
    code, status, err = cdc(env, capsys, "status", name)
    # Lag is not asserted: the shared MariaDB's binlog also holds other tests' transactions written meanwhile.
    assert status["lease"] is None and status["cursor"]["seq"] == ran["windows"][-1]["seq"]

    from cdc_core.capture.source import connect
    from cdc_core.cli import source_params_for
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline
    from cdc_core.run.verify import compare_table

    pc = load_config(env["config"]).pipeline(name)
    with Pipeline.from_config(pc, source_params_for(pc)) as p:
        conn = connect(p.source)
        try:
            diff = compare_table(conn, env["db"], "t", p.table_uri(env["db"], "t"), ("id",))
        finally:
            conn.close()
    assert diff.equal and diff.source_rows == diff.lake_rows == 50, diff.summary()


def test_a_captured_table_that_a_cascade_can_change_is_refused_until_accepted(
    services: Any, env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A foreign key's cascade changes child rows without row events (MariaDB logs the parent's row only): the
    run refuses such a captured table, naming the constraint and the ways out, until the configuration accepts
    it (tables.cascading_foreign_keys)."""
    db = env["db"]
    root = services.root_connect(db)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE parent (id INT PRIMARY KEY)")
        cur.execute("CREATE TABLE child (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_child FOREIGN KEY (pid) "
                    "REFERENCES parent (id) ON DELETE CASCADE ON UPDATE RESTRICT)")
        cur.execute("CREATE TABLE plain (id INT PRIMARY KEY, pid INT, CONSTRAINT fk_plain FOREIGN KEY (pid) "
                    "REFERENCES parent (id))")  # RESTRICT: the application deletes its rows itself
    root.close()
    code, out, err = cdc(env, capsys, "run", env["name"], "--once")
    assert code == 3, (out, err)
    assert f"{db}.child (fk_child: ON DELETE CASCADE from {db}.parent)" in err and "fk_plain" not in err, err
    assert "tables.cascading_foreign_keys" in err and "tables.exclude" in err, err
    code, _, err = cdc(env, capsys, "validate", "--check-sources")
    assert code != 0 and "fk_child" in err, err

    tables_setting(env, "cascading_foreign_keys", [f"{db}.child"])
    code, _, err = cdc(env, capsys, "run", env["name"], "--once")
    assert code == 0, err


def test_a_captured_system_versioned_table_is_refused_until_excluded(
    services: Any, env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """MariaDB keeps each updated or deleted row of a system-versioned table as a history row and logs it as a row
    change (probed: a DELETE landed as a live row, and `cdc verify` did not even list the table). The run and
    `cdc validate --check-sources` refuse such a captured table, naming it and the ways out; excluded, the rest
    lands."""
    db = env["db"]
    root = services.root_connect(db)
    with root.cursor() as cur:
        cur.execute("CREATE TABLE audited (id INT PRIMARY KEY, a INT) WITH SYSTEM VERSIONING")
        cur.execute("CREATE TABLE plain_sv (id INT PRIMARY KEY, a INT)")
        cur.execute("INSERT INTO audited VALUES (1, 1), (2, 2)")
        cur.execute("DELETE FROM audited WHERE id = 2")
        cur.execute("INSERT INTO plain_sv VALUES (1, 1)")
    root.close()
    code, out, err = cdc(env, capsys, "run", env["name"], "--once")
    assert code == 3, (out, err)
    assert f"system-versioned (WITH SYSTEM VERSIONING): {db}.audited." in err and "plain_sv" not in err, err
    assert "tables.exclude" in err and "DROP SYSTEM VERSIONING" in err, err
    code, _, err = cdc(env, capsys, "validate", "--check-sources")
    assert code != 0 and f"{db}.audited" in err, err
    code, out, err = cdc(env, capsys, "verify", env["name"])  # found the lake equal: it had not looked
    assert code != 0 and f"system-versioned (WITH SYSTEM VERSIONING): {db}.audited." in err, (out, err)

    tables_setting(env, "exclude", [f"{db}.audited"])
    code, _, err = cdc(env, capsys, "run", env["name"])
    assert code == 0, err
    code = main(["--config", env["config"], "verify", env["name"]])
    out, err = capsys.readouterr()
    assert code == 0 and f"{db}.plain_sv" in out and "audited" not in out, (out, err)


def tables_setting(env: dict[str, Any], key: str, value: Any) -> None:
    """Set one `tables.<key>` of the test pipeline's configuration file."""
    config = json.loads(Path(env["config"]).read_text())
    config["pipelines"][0]["tables"][key] = value
    Path(env["config"]).write_text(json.dumps(config))
