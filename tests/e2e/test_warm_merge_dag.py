"""The warm merge option through the DAG (`airflow dags test cdc_<name>`): with CDC_MERGE_SERVER in the
worker's environment, merge_window sends the window to a real merge server (the product's
spark_apps/merge_server.py, one long-running Spark application: the test session's, `warm_merges`) instead of
spark-submit, and the lake equals the source; with the server gone (nothing listens at the address any more),
merge_window fails (retried, never skipped), the ack does not run and the cursor stays where it was. A server
killed under a running pipeline, and `cdc merge-server <name>` as an operator starts it, are
tests/integration/test_warm_merge.py's.

Two DAG runs on the session's server: no server start of its own.
"""

from __future__ import annotations

import pytest

from cdc_core.lake import merge_client
from cdc_core.run.status import pipeline_status
from tests.support.e2e import CdcCase, assert_all, assert_lake_equals_source, binlog_position, sql
from tests.support.ports import free_port

pytestmark = pytest.mark.e2e


def test_the_dag_merges_on_the_warm_merge_server_and_fails_retryably_without_it(
    cdc_case: CdcCase, warm_merges: str
) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services))
    sql(case.services, case.database,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
        "UPDATE t SET v = 'b2' WHERE id = 2",
        "DELETE FROM t WHERE id = 3")
    address = warm_merges  # CdcCase.env passes it on to the DAG run
    merges = merge_client.ping(address)["merges"]
    first = case.run_pipeline()
    assert_all(first, "success")
    assert merge_client.ping(address)["merges"] == merges + 1, first.explain()  # the server merged it, not spark-submit
    assert f"merge_server={address}" in first.output, first.explain()
    assert_lake_equals_source(case, ["t"])

    gone = f"127.0.0.1:{free_port()}"  # the server gone: nothing listens there
    sql(case.services, case.database, "INSERT INTO t VALUES (4, 'd')")
    second = case.run_pipeline(env={"CDC_MERGE_SERVER": gone})
    assert second.state == "failed", second.explain()
    assert second.tasks["merge_window"] == "failed" and second.tries["merge_window"] == 2, second.explain()
    assert second.tasks["ack_window"] == "upstream_failed", second.explain()
    assert "cannot reach the merge server" in second.output, second.explain()
    with case.pipeline() as p:
        status = pipeline_status(p)
    assert status["cursor"]["seq"] == 1, status
