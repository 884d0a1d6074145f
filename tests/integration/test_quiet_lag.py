"""Lag on a quiet source: after a binlog rotation or a server restart with no new transaction, the next
run moves the cursor over the events that carry no row change, and `cdc status` reports lag 0.

Real MariaDB + ZooKeeper: the fault suite's private pair (tests/faults/services.py), because the
server is restarted. Windows here carry no row changes, so no Spark job starts.
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
from tests.support.cli import private_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server


def _newest_binlog_settled(ps: Any) -> bool:
    """MariaDB writes a rotated file's last Binlog_checkpoint in the background: wait for it, so the
    source's end no longer moves by itself (then "lag 0" cannot be a race with it)."""
    conn = ps.root_connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            newest = cur.fetchone()[0]
            cur.execute(f"SHOW BINLOG EVENTS IN '{newest}'")
            checkpoints = [row[5] for row in cur.fetchall() if row[2] == "Binlog_checkpoint"]
    finally:
        conn.close()
    return bool(checkpoints) and checkpoints[-1] == newest


def _wait_settled(ps: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not _newest_binlog_settled(ps):
        assert time.monotonic() < deadline, "the newest binlog never got its own Binlog_checkpoint"
        time.sleep(0.1)


@pytest.fixture
def quiet(private_services: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    ps = private_services
    db = "q_" + uuid.uuid4().hex[:8]
    root = ps.root_connect()
    with root.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
    root.close()
    pipeline = private_pipeline(ps, db, tmp_path, monkeypatch, prefix="quiet", alerts={"max_lag_seconds": 1})
    name = pipeline["name"]
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    yield {"name": name, "config": str(config), "db": db}
    ps.wait_mariadb()
    root = ps.root_connect()
    with root.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    root.close()


def _cdc(env: dict[str, Any], capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    code = main(["--config", env["config"], *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_lag_returns_to_zero_after_rotation_and_restart(
    private_services: Any, quiet: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ps, name = private_services, quiet["name"]
    root = ps.root_connect(quiet["db"])
    with root.cursor() as cur:  # one transaction to land, so the cursor has a commit time
        cur.execute("INSERT INTO t VALUES (1, 'a')")
    # Binlog times have one-second resolution: a later second for a backfill that replays only what follows.
    second = int(time.time()) + 1
    while time.time() < second:
        time.sleep(0.05)
    replay_from = datetime.fromtimestamp(second, UTC).isoformat()
    with root.cursor() as cur:
        cur.execute("CREATE TABLE u (id INT PRIMARY KEY)")  # a transaction without row changes: no Spark
    root.close()
    first = _cdc(quiet, capsys, "run", name, "--max-windows", "1")
    assert first["windows"][0]["transactions"] == 2

    for fault in ("rotation", "restart"):
        if fault == "rotation":
            root = ps.root_connect()
            with root.cursor() as cur:
                cur.execute("FLUSH BINARY LOGS")
            root.close()
        else:
            ps.restart_mariadb()
            ps.wait_mariadb()
        _wait_settled(ps)
        before = _cdc(quiet, capsys, "status", name)
        assert before["lag"]["binlog_bytes"] > 0, f"{fault}: the source's end did not move past the cursor"
        # Before the next run already: the cursor's GTID state holds everything, so no change is pending.
        assert (before["lag"]["bytes"], before["lag"]["seconds"]) == (0, 0.0), (fault, before["lag"])
        ran = _cdc(quiet, capsys, "run", name)
        assert all(w["transactions"] == 0 for w in ran["windows"]), f"{fault}: a quiet source has no transaction"
        status = _cdc(quiet, capsys, "status", name)
        end, cursor = status["source_end"], status["cursor"]["position"]
        assert (cursor["file"], cursor["offset"]) == (end["file"], end["offset"]), (fault, cursor, end)
        assert status["lag"] == {"bytes": 0, "seconds": 0.0, "binlog_bytes": 0}, (fault, status["lag"])
        assert status["alerts"] == [], fault  # caught up: no lag alert, however old the last commit
        assert cursor["gtid"] == first_gtid(first), fault
        assert status["cursor"]["commit_ts"] is not None  # kept from the last transaction: failover by time works
        again = _cdc(quiet, capsys, "resolve", name)  # the moved cursor resumes (file on the server, GTIDs ok)
        assert again["rule"] == "cursor" and again["label"] == status["cursor"]["label"]

    # A backfill up to the moved cursor (after the rotation's and the restart's events) ends there.
    backfill = _cdc(quiet, capsys, "backfill", name, "--from", replay_from)
    assert backfill["windows"] and backfill["until"] == status["cursor"]["label"], backfill
    after = _cdc(quiet, capsys, "status", name)
    assert after["cursor"]["backfill"] is None, "the backfill never reached its end"
    assert after["cursor"]["position"] == status["cursor"]["position"]  # the stream cursor did not move

    # Nothing is skipped from the moved cursor: the next transaction is the first one the next window sees.
    root = ps.root_connect(quiet["db"])
    with root.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2, 'b')")
    root.close()
    # Now a change is pending and the last landed commit is older than alerts.max_lag_seconds (1 s).
    (alert,) = _cdc(quiet, capsys, "status", name)["alerts"]
    assert (alert["alert"], alert["max_seconds"]) == ("lag", 1) and alert["seconds"] > 1, alert
    from cdc_core.cli import source_params_for
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline

    pc = load_config(quiet["config"]).pipeline(name)
    with Pipeline.from_config(pc, source_params_for(pc)) as p:
        start = p.resolve(p.coordinator.read_cursor().position).position
        found = [b for b in p.scanner().scan_transactions(start.file, start.offset, start.gtid, start.epoch)]
    assert len(found) == 1 and found[0].events >= 3  # GTID, table map, rows, commit of INSERT (2, 'b')
    assert first_gtid(first) is not None


def first_gtid(first_run: dict[str, Any]) -> Any:
    """The GTID state after the one landed transaction (quiet windows commit nothing, so it stays)."""
    end = first_run["windows"][0]["end"]
    return end.split(" gtid=")[1] if " gtid=" in end else None
