"""A real `cdc run` sends the pipeline's metrics to StatsD (env CDC_STATSD; cdc_core/run/metrics.py): a real
UDP listener receives the lease, the window's plan, its changes, the stage and merge durations, the ack and
the lag, and the numbers are the window's own. Real MariaDB and ZooKeeper; the window merges on the session's
warm merge server (the subject is the metrics, not how the merge job starts)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.run.metrics import STATSD_ENV
from tests.support.e2e import binlog_position, sql
from tests.support.statsd import received

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]


def test_a_run_sends_its_windows_numbers_to_statsd(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, statsd_listener: socket.socket,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    name = "met_" + source_db[-6:]
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_METRICS", json.dumps(conn))
    monkeypatch.setenv(STATSD_ENV, f"127.0.0.1:{statsd_listener.getsockname()[1]}")
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": name, "source": {"conn_id": "cdc_source_metrics"}, "tables": {"include": [f"{source_db}.*"]},
        "start": binlog_position(services), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
        "metrics": {"prefix": "etl.cdc"},
    }]}))
    sql(services, source_db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", "UPDATE t SET v = 'z' WHERE id = 2",
        "DELETE FROM t WHERE id = 3")

    code = main(["--config", str(config), "run", name, "--once"])  # one window: others write the binlog too
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    windows = json.loads(out)["windows"]
    assert [w["changes"] for w in windows] == [5], windows

    got = received(statsd_listener)
    assert got["etl.cdc.lease.acquired"] == ["1|c"]
    assert got[f"etl.cdc.window.planned.{name}"] == ["1|c"]
    assert got["etl.cdc.window.changes"] == ["5|c"]
    assert got["etl.cdc.window.tables"] == ["1|g"]
    (transactions,) = got["etl.cdc.window.transactions"]
    assert int(transactions.removesuffix("|c")) >= 4  # the inserts, update and delete (and the CREATE)
    assert got["etl.cdc.window.acked"] == ["1|c"]
    for timing in ("etl.cdc.stage.duration", "etl.cdc.merge.duration"):
        (value,) = got[timing]
        assert value.endswith("|ms") and float(value.removesuffix("|ms")) >= 0, value
    (behind,) = got["etl.cdc.lag.bytes"]  # what the source held when the window was planned: all in it
    assert behind == "0|g", behind
    (lag,) = got["etl.cdc.lag.seconds"]
    assert lag.endswith("|g") and 0 <= float(lag.removesuffix("|g")) < 600, lag
