"""The warm merge option end to end: `cdc merge-server` (a real long-running Spark application) and `cdc run`
with `spark.merge_server`, on real MariaDB, ZooKeeper and Delta; the server SIGKILLed between windows and in
the middle of a merge (after its first table committed), restarted, and the lake still equals the source
with the cursor where it belongs.

One test, one server process at a time (three Spark start-ups in all: the first, after the kill between
windows, after the kill mid-merge), three merge requests.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.lake import merge_client
from tests.support.cli import cli_pipeline
from tests.support.merge_server import ServerProcess
from tests.support.ports import free_port

pytestmark = pytest.mark.integration

TABLES = ("a", "b")


@pytest.fixture
def env(services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.delenv(merge_client.ADDRESS_ENV, raising=False)
    address = f"127.0.0.1:{free_port()}"
    p = cli_pipeline(
        services, source_db, zk_root, tmp_path, prefix="warm",
        ddl=[f"CREATE TABLE {t} (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)" for t in TABLES],
        settings=lambda name: {
            "staging_root": str(tmp_path / "staging"),
            "lake_root": str(tmp_path / "lake"),
            # One table after the other, so the server dies with exactly the first table of the window committed.
            "spark": {"merge_server": {"address": address, "timeout_seconds": 900}, "merge_parallelism": 1},
        },
    )
    for key, value in p["env"].items():  # the CLI runs in this process: its source connection, as env
        if key.startswith("AIRFLOW_CONN_"):
            monkeypatch.setenv(key, value)
    return {**p, "address": address}


def cdc(env: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["--config", env["config"], *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip() else None), err


def _write(services: Any, db: str, start: int, n: int) -> None:
    """One transaction touching both tables: inserts, an update and a delete of earlier rows."""
    root = services.root_connect(db)
    with root.cursor() as cur:
        for t in TABLES:
            rows = ", ".join(f"({i}, 'v{i}', {i * 7})" for i in range(start, start + n))
            cur.execute(f"INSERT INTO {t} VALUES {rows}")
            if start > 1:
                cur.execute(f"UPDATE {t} SET v = CONCAT(v, '+'), n = n + 1 WHERE id % 3 = 0 AND id < {start}")
                cur.execute(f"DELETE FROM {t} WHERE id = {start - 1}")
    root.commit()
    root.close()


def _landed(env: dict[str, Any], seq: int) -> dict[str, bool]:
    from cdc_core.lake import delta_state
    from cdc_core.model.layout import table_uri

    lake = str(Path(env["config"]).parent / "lake")
    return {t: (delta_state.last_txn_version(table_uri(lake, env["db"], t), env["name"]) or 0) >= seq for t in TABLES}


def _assert_lake_equals_source(env: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--config", env["config"], "verify", env["name"]])
    out, err = capsys.readouterr()
    assert code == 0 and out.count("equal") >= len(TABLES), f"{out}\n{err}"


def test_warm_merges_land_exactly_once_through_server_kills(
    services: Any, env: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = ServerProcess(env["config"], env["name"], env["address"], tmp_path)
    try:
        server.start()
        # 1. A window lands through the server, not spark-submit.
        _write(services, env["db"], 1, 30)
        code, ran, err = cdc(env, capsys, "run", env["name"])
        assert code == 0, err
        assert merge_client.ping(env["address"])["merges"] == 1
        _assert_lake_equals_source(env, capsys)
        seq = ran["windows"][-1]["seq"]

        # 2. Killed between windows: the merge step fails, retryable, nothing skipped, the cursor stays.
        server.kill()
        _write(services, env["db"], 31, 10)
        code, _, err = cdc(env, capsys, "run", env["name"])
        assert code == 8 and "cannot reach the merge server" in err and "safe to retry" in err, err
        code, status, err = cdc(env, capsys, "status", env["name"])
        assert status["cursor"]["seq"] == seq and status["lease"] is None

        # 3. Restarted, it dies (SIGKILL) in the middle of replaying that window: first table committed, second not.
        marker = tmp_path / "mid_merge.fired"
        server.start({"CDC_FAULT": "mid_merge", "CDC_FAULT_ONCE": str(marker)})
        code, _, err = cdc(env, capsys, "run", env["name"])
        assert code == 8 and "without an answer" in err, err
        server.wait_gone()
        assert server.proc is not None and server.proc.returncode == -signal.SIGKILL
        assert marker.read_text() == "mid_merge"
        assert sorted(_landed(env, seq + 1).values()) == [False, True]  # half a window in the lake
        code, status, err = cdc(env, capsys, "status", env["name"])
        assert status["cursor"]["seq"] == seq

        # 4. Restarted again: the window replays exactly once (the committed table is skipped by its txn version).
        _write(services, env["db"], 41, 10)
        server.start()
        code, ran, err = cdc(env, capsys, "run", env["name"])
        assert code == 0, err
        assert ran["windows"][0]["recovered"] == "replay" and ran["windows"][0]["seq"] == seq + 1
        assert _landed(env, ran["windows"][-1]["seq"]) == dict.fromkeys(TABLES, True)
        _assert_lake_equals_source(env, capsys)
        code, status, err = cdc(env, capsys, "status", env["name"])
        assert status["cursor"]["seq"] == ran["windows"][-1]["seq"] and status["lease"] is None

        # 5. SIGTERM: a clean stop.
        server.proc.send_signal(signal.SIGTERM)
        server.wait_gone()
        assert server.proc.returncode == 0 and "merge_server.stopped" in server.log.read_text()
    finally:
        server.close()
