"""The maintenance DAG end to end (`airflow dags test cdc_<name>_maintenance`), with real ZooKeeper,
Spark+Delta and Airflow: staged windows acked long ago and their window records are cleaned up, the
pipeline's Delta table is compacted to one file with its contents unchanged, the run's result is
recorded in ZooKeeper and shows in the pipeline's status (the monitor page's data), and the lease is
released.

The history is prepared without a pipeline run (DAG runs cost 15-25 s here): two windows planned and
acked "three days ago" through the coordinator, their staged directories, and a Delta table of five
small commits written with delta-rs.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_core.coordination import PipelineCoordinator
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import WindowPlan
from cdc_core.run.status import pipeline_status
from tests.support.e2e import CdcCase, binlog_position

pytestmark = pytest.mark.e2e

TASKS = ["acquire_lease", "clean_up", "maintain_tables", "release_lease"]


def test_maintenance_dag_cleans_compacts_and_records(cdc_case: CdcCase, zk_client) -> None:  # type: ignore[no-untyped-def]
    case = cdc_case
    case.write_config(
        binlog_position(case.services),
        staging_retention_hours=1,
        maintenance={"window_records_retention_hours": 1, "window_records_keep": 1, "lease_wait_seconds": 0},
    )
    days_ago = [-3 * 86400.0]
    coord = PipelineCoordinator(zk_client, case.zk_root, case.name, clock=lambda: time.time() + days_ago[0])
    server = ServerIdentity("mariadb", 1)
    grant = coord.acquire("history", 600)
    coord.set_start(grant, BinlogPosition("mysql-bin.000001", 4, server))
    for seq in (1, 2):
        start, end = BinlogPosition("mysql-bin.000001", seq * 100 - 96, server), BinlogPosition(
            "mysql-bin.000001", seq * 100 + 4, server
        )
        coord.store_plan(grant, WindowPlan(case.name, seq, start, end, transactions=1, events=1))
        wdir = case.staging / case.name / f"w{seq:010d}"
        (wdir / "tables").mkdir(parents=True)
        (wdir / "tables" / "part-00000.parquet").write_bytes(b"p" * 1000)
        (wdir / "manifest.json").write_text("{}")
        coord.ack_window(grant, seq, {})
    coord.release(grant)
    days_ago[0] = 0.0

    table = case.table_path("orders")
    for i in range(5):
        write_deltalake(str(table), pa.table({"id": [i * 2, i * 2 + 1], "note": [f"n{i}", f"m{i}"]}), mode="append")
    rows = sorted(DeltaTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert len(DeltaTable(str(table)).file_uris()) == 5

    result = case.run_dag(f"cdc_{case.name}_maintenance")
    assert result.state == "success", result.explain()
    assert {t: result.tasks.get(t) for t in TASKS} == dict.fromkeys(TASKS, "success"), result.explain()

    assert not (case.staging / case.name / "w0000000001").exists()
    assert not (case.staging / case.name / "w0000000002").exists()
    assert coord.window_record_seqs() == [2]  # the last acked record stays
    assert coord.read_cursor().seq == 2
    dt = DeltaTable(str(table))
    assert len(dt.file_uris()) == 1
    assert sorted(dt.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == rows
    assert coord.read_lease() is None

    record = coord.read_maintenance()
    assert record is not None and record["status"] == "ok", record
    assert record["holder"].startswith(f"cdc_{case.name}_maintenance/")
    assert record["cleanup"]["staging"]["windows_deleted"] == 2
    assert record["cleanup"]["records"]["records_deleted"] == 1
    assert [(t["name"], t["files_before"], t["files_after"]) for t in record["tables"]] == [
        (f"{case.database}.orders", 5, 1)
    ]
    with case.pipeline() as p:
        status = pipeline_status(p)["maintenance"]
    assert status["last"]["finished_at"] == record["finished_at"]
    assert [(t["name"], t["files"], t["last_maintenance"]["files_before"]) for t in status["tables"]] == [
        (f"{case.database}.orders", 1, 5)
    ]
    coord.close()
