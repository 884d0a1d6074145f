"""The pipeline DAG's metrics go through Airflow's own `Stats` (its `[metrics]` section: StatsD here): a real
UDP listener receives the metrics of a real `airflow dags test` run, with Airflow's prefix, and the numbers
are the window's (cdc_core/run/metrics.py; docs/operations.md "Metrics"). Windows merge on the session's warm
merge server: the subject is the metrics, not how the merge job starts."""

from __future__ import annotations

import socket

import pytest

from tests.support.e2e import CdcCase, assert_lake_equals_source, binlog_position, sql
from tests.support.statsd import received

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]


def test_a_dag_run_sends_the_pipelines_metrics_through_airflows_statsd(
    cdc_case: CdcCase, statsd_listener: socket.socket
) -> None:
    case = cdc_case
    sql(case.services, case.database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    case.write_config(binlog_position(case.services))
    sql(case.services, case.database, "INSERT INTO t VALUES (1, 'a'), (2, 'b')", "UPDATE t SET v = 'c' WHERE id = 1")
    statsd = {"AIRFLOW__METRICS__STATSD_ON": "True", "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
              "AIRFLOW__METRICS__STATSD_PORT": str(statsd_listener.getsockname()[1]),
              "AIRFLOW__METRICS__STATSD_PREFIX": "af"}
    result = case.run_pipeline(env=statsd)
    assert result.state == "success", result.explain()
    assert_lake_equals_source(case, ["t"])

    got = received(statsd_listener)
    ours = {k: v for k, v in got.items() if k.startswith("af.cdc.")}
    assert ours.get("af.cdc.window.changes") == ["3|c"], ours
    assert ours.get(f"af.cdc.window.acked.{case.name}") == ["1|c"], ours
    assert ours.get("af.cdc.lease.acquired") == ["1|c"], ours
    for timing in ("af.cdc.stage.duration", "af.cdc.merge.duration"):
        assert len(ours.get(timing, [])) == 1 and ours[timing][0].endswith("|ms"), (timing, ours)
    assert len(ours.get("af.cdc.lag.seconds", [])) == 1, ours
