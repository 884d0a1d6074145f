"""The manual snapshot DAG end to end (`airflow dags test cdc_<name>_snapshot` with its form), with real
MariaDB, ZooKeeper, Spark+Delta: rows that no binlog range of the pipeline holds (written before its
start position) land through the snapshot, with changes made after the start reconciled, and the
progress shows in the pipeline's status."""

from __future__ import annotations

import pytest

from cdc_core.run.status import pipeline_status
from tests.support.e2e import CdcCase, assert_lake_equals_source, binlog_position, sql

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server

TASKS = ["acquire_lease", "begin_snapshot", "plan_window", "stage_window", "merge_window", "ack_window",
         "release_lease"]


def test_snapshot_dag_loads_existing_rows(cdc_case: CdcCase) -> None:
    case = cdc_case
    sql(
        case.services,
        case.database,
        "CREATE TABLE items (sku VARCHAR(16) NOT NULL, shop INT UNSIGNED NOT NULL, qty INT NULL, "
        "price DECIMAL(10,2) NULL, PRIMARY KEY (shop, sku))",
        "INSERT INTO items VALUES " + ", ".join(
            f"('sku-{i:03d}', {i % 3}, {'NULL' if i % 5 == 0 else i}, {i}.25)" for i in range(60)
        ),
    )
    start = binlog_position(case.services)  # an explicit start after the rows: the binlog alone misses them
    case.write_config(start, snapshot={"chunk_rows": 1000})
    sql(
        case.services,
        case.database,
        "UPDATE items SET qty = -1 WHERE shop = 1",
        "DELETE FROM items WHERE sku = 'sku-003'",
        "INSERT INTO items VALUES ('new', 9, 1, NULL)",
    )
    result = case.run_dag(f"cdc_{case.name}_snapshot", conf={"tables": [f"{case.database}.items"]})
    assert result.state == "success", result.explain()
    bad = {t: result.tasks.get(t) for t in TASKS if result.tasks.get(t) != "success"}
    assert not bad, f"{bad}\n{result.explain()}"
    assert "snapshot.chunk_planned" in result.output and "snapshot.table_done" in result.output, result.explain()
    assert_lake_equals_source(case, ["items"])
    with case.pipeline() as p:
        status = pipeline_status(p)
    (table,) = status["snapshot"]["tables"]
    assert (table["table"], table["status"], table["chunks_done"], table["rows"]) == (
        f"{case.database}.items", "done", 1, 60
    )
    assert status["windows"][0]["plan"]["kind"] == "snapshot"
