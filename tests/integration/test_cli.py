"""The `cdc` command line against the real MariaDB and ZooKeeper: what an operator or a script sees.

Every case uses windows without changes for the captured tables, so no Spark job starts: the CLI's
merge path is the same `spark-submit` the merge tests run (tests/integration/test_merge_window.py).
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.model.errors import ConfigError, LeaseHeld

pytestmark = pytest.mark.integration


@pytest.fixture
def cli_env(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """A config file with one pipeline over this test's database, and its source connection in the env."""
    name = "cli_" + uuid.uuid4().hex[:6]
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_CLI", json.dumps(conn))
    pipeline = {
        "name": name,
        "source": {"conn_id": "cdc_source_cli"},
        "tables": {"include": [f"{source_db}.*"]},
        "start": services.binlog_end(),
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"),
        "lake_root": str(tmp_path / "lake"),
        "schedule": None,
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    # Binlog times have one-second resolution: a second before the table's creation.
    before_table = datetime.fromtimestamp(int(time.time()) - 1, UTC).isoformat()
    conn_root = services.root_connect(source_db)
    with conn_root.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    conn_root.close()
    return {"name": name, "config": str(config), "db": source_db, "password": services.mysql_password,
            "before_table": before_table}


def cdc(env: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["--config", env["config"], *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_run_status_and_resolve(
    cli_env: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name, db = cli_env["name"], cli_env["db"]
    code, out, _ = cdc(cli_env, capsys, "validate")
    assert code == 0 and f"ok: pipeline {name!r}" in out
    assert " -> " not in out  # offline: no source was asked for its tables
    code, out, err = cdc(cli_env, capsys, "validate", "--check-sources")
    assert code == 0, err
    assert f"  {db}.t -> {db}.t (unrouted)" in out

    # A route that takes no captured table is refused once the source shows it (offline: a glob include
    # cannot tell).
    routed = json.loads(Path(cli_env["config"]).read_text())
    pattern = rf"{db}\.nope_[0-9]+"
    routed["pipelines"][0]["routes"] = [{"from": pattern, "to": "merged.t"}]
    config = tmp_path / "routed.yaml"
    config.write_text(json.dumps(routed))
    code, out, err = main(["--config", str(config), "validate"]), *capsys.readouterr()
    assert code == 0 and "route 1: " in out, err
    code, out, err = main(["--config", str(config), "validate", "--check-sources"]), *capsys.readouterr()
    assert code == ConfigError.exit_code
    assert f"route 1 ({pattern!r} -> merged.t) takes no table captured on the source(s)" in err
    assert f"  {db}.t -> {db}.t (unrouted)" in out

    code, out, err = cdc(cli_env, capsys, "run", name)
    assert code == 0, err
    run = json.loads(out)
    assert run["pipeline"] == name and [w["seq"] for w in run["windows"]] == [1]
    assert run["windows"][0]["changes"] == 0  # the CREATE TABLE only: no Spark job

    code, out, err = cdc(cli_env, capsys, "status", name)
    assert code == 0, err
    status = json.loads(out)
    assert status["cursor"]["seq"] == 1 and status["lease"] is None and status["error"] is None
    assert status["lag"]["bytes"] is not None
    assert cli_env["password"] not in out + err

    code, out, err = cdc(cli_env, capsys, "resolve", name)
    assert code == 0, err
    resolved = json.loads(out)
    assert resolved["label"] == status["cursor"]["label"] and "cursor" in resolved["rule"]


def test_verify_reads_a_table_no_window_has_landed_yet_as_empty(
    cli_env: dict[str, Any], capsys: pytest.CaptureFixture[str], services: Any
) -> None:
    """A captured table nothing has changed since the start has no Delta table: equal while the source
    is empty too, its rows reported missing (not a crash) once it has some."""
    name, db = cli_env["name"], cli_env["db"]
    code, out, err = cdc(cli_env, capsys, "verify", name)
    assert code == 0, err
    assert f"{db}.t: equal (0 rows; no Delta table yet)" in out
    conn = services.root_connect(db)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'a')")
    conn.commit()
    conn.close()
    code, out, err = cdc(cli_env, capsys, "verify", name)
    assert code == 1, out + err
    assert f"{db}.t: source 1 rows, lake 0 (no Delta table); missing 1 [(1,)]" in out
    assert "the lake differs from the source" in err


def test_exit_codes_for_a_held_lease_and_bad_input(
    cli_env: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = cli_env["name"]
    from cdc_core.capture.source import SourceParams
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline

    pc = load_config(cli_env["config"]).pipeline(name)
    with Pipeline.from_config(pc, SourceParams(host="unused", port=1, user="u", password="p")) as p:
        p.acquire("someone-else/run-1")

    code, _, err = cdc(cli_env, capsys, "run", name)
    assert code == LeaseHeld.exit_code == 75
    assert "skipped" in err and "someone-else/run-1" in err

    code, out, err = cdc(cli_env, capsys, "lease", "show", name)
    assert code == 0, err
    shown = json.loads(out)["lease"]
    assert shown["holder"] == "someone-else/run-1" and shown["token"] > 0 and shown["expires_at_iso"]
    assert shown["expired"] is False

    code, out, err = cdc(cli_env, capsys, "lease", "break", name, "--holder", "someone-else/run-1")
    assert code == 0, err
    assert json.loads(out)["broken"]["holder"] == "someone-else/run-1"
    assert json.loads(out)["broken"]["token"] == shown["token"]
    code, out, err = cdc(cli_env, capsys, "lease", "show", name)
    assert code == 0 and json.loads(out) == {"pipeline": name, "lease": None}, err
    code, _, err = cdc(cli_env, capsys, "run", name)
    assert code == 0, err

    code, _, err = cdc(cli_env, capsys, "backfill", name, "--from", "yesterday-ish")
    assert code == ConfigError.exit_code and "start_ts" in err
    future = datetime.fromtimestamp(time.time() + 3600, UTC).isoformat()
    code, _, err = cdc(cli_env, capsys, "backfill", name, "--from", future)
    assert code != 0 and "future" in err

    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"pipelines": [{"name": "x", "source": {"conn_id": "c"}, "caps": {"max_events": -1}}]}))
    code, _, err = main(["--config", str(bad), "validate"]), *capsys.readouterr()
    assert code == ConfigError.exit_code and "caps.max_events" in err


def test_backfill_dry_run_reports_and_changes_nothing(
    cli_env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    name = cli_env["name"]
    code, _, err = cdc(cli_env, capsys, "backfill", name, "--from", cli_env["before_table"], "--dry-run")
    assert code != 0 and "never run" in err  # nothing landed yet: nothing to replay

    code, out, err = cdc(cli_env, capsys, "run", name)  # window 1: the CREATE TABLE, no row changes
    assert code == 0, err
    code, out, err = cdc(cli_env, capsys, "status", name)
    before = json.loads(out)["cursor"]

    code, out, err = cdc(cli_env, capsys, "backfill", name, "--from", cli_env["before_table"], "--dry-run")
    assert code == 0, err
    report = json.loads(out)
    assert report["dry_run"] is True and report["until"] == before["label"]
    assert report["transactions"] >= 1 and "windows" not in report
    code, out, err = cdc(cli_env, capsys, "status", name)
    after = json.loads(out)["cursor"]
    assert after == before and after["backfill"] is None  # a dry run changes nothing


def test_an_active_backfill_is_cancelled_from_the_cli(
    cli_env: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    name = cli_env["name"]
    code, _, err = cdc(cli_env, capsys, "run", name)
    assert code == 0, err
    code, _, err = cdc(cli_env, capsys, "backfill", name)
    assert code == 2 and "--from is required" in err

    code, out, err = cdc(cli_env, capsys, "backfill", name, "--from", cli_env["before_table"],
                         "--max-windows", "0")
    assert code == 0, err  # started, no window landed yet
    code, out, err = cdc(cli_env, capsys, "status", name)
    before = json.loads(out)["cursor"]
    assert before["backfill"] is not None

    code, out, err = cdc(cli_env, capsys, "backfill", name, "--cancel")
    assert code == 0, err
    assert json.loads(out)["cancelled"]["until"] == before["backfill"]["until"]
    code, out, err = cdc(cli_env, capsys, "status", name)
    after = json.loads(out)["cursor"]
    assert after["backfill"] is None and after["seq"] == before["seq"] and after["label"] == before["label"]
    code, out, err = cdc(cli_env, capsys, "backfill", name, "--cancel")  # nothing active: a no-op
    assert code == 0 and json.loads(out)["cancelled"] is None, err
