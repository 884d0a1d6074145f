"""The generated DAGs end to end, with real MariaDB, ZooKeeper, Spark+Delta and Airflow (`airflow dags test`):

- scheduled runs land inserts, updates, deletes, a primary-key change, a large transaction, an ADD COLUMN,
  one with a DEFAULT that fills existing rows and a column rename, and every Delta table then equals its
  source table row for row and column for column (a run with nothing new
  skips the merge and still acks: test_assets.py, whose third run is one);
- a merge that dies half-way (after its first table committed) is retried by Airflow and converges
  without duplicates;
- a run started while someone else holds the lease skips entirely and leaves that lease alone;
- a run that reached the source's end, or was skipped, triggers no continuation run.

The backfill and catch-up DAG tests are in test_backfill_and_catch_up_dags.py (a file per worker of a
parallel run: these are the longest e2e tests).

DAG runs are expensive here (10-25 s each), so each test does as few as it can.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cdc_core.run.status import pipeline_status
from tests.support.e2e import (
    CdcCase,
    assert_all,
    assert_lake_equals_source,
    binlog_position,
    continuation_runs,
    seed,
)

pytestmark = pytest.mark.e2e

def test_scheduled_runs_land_every_kind_of_change(cdc_case: CdcCase) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services))
    seed(case)

    first = case.run_pipeline()
    assert first.state == "success", first.explain()
    assert_all(first, "success")
    assert_lake_equals_source(case, ["customers", "orders"])

    big = ", ".join(f"({100_000 + i}, {1 + i % 20}, {i % 997}.{i % 100:02d}, 'bulk')" for i in range(20_000))
    conn = case.services.root_connect(case.database)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE customers SET balance = balance + 1, notes = 'updated' WHERE id <= 5")
            cur.execute("DELETE FROM customers WHERE id IN (18, 19)")
            cur.execute("UPDATE customers SET id = 1000 WHERE id = 7")  # primary-key change
            cur.execute("DELETE FROM orders WHERE id > 40")
            cur.execute("UPDATE orders SET status = 'paid' WHERE id % 2 = 0")
            conn.begin()  # one large transaction
            cur.execute(f"INSERT INTO orders VALUES {big}")
            cur.execute("UPDATE orders SET status = 'bulk-upd' WHERE id BETWEEN 100000 AND 100500")
            conn.commit()
            cur.execute("ALTER TABLE customers ADD COLUMN tier VARCHAR(8) NULL")
            cur.execute("UPDATE customers SET tier = 'gold' WHERE id IN (1, 2, 1000)")
            cur.execute("INSERT INTO customers (id, name, tier) VALUES (5000, 'after ddl', 'new')")
            # Schema changes without row events (docs/schema-changes.md): a default that fills every existing
            # row, and a rename that keeps the values.
            cur.execute("ALTER TABLE customers ADD COLUMN since INT NOT NULL DEFAULT 2024")
            cur.execute("ALTER TABLE customers RENAME COLUMN notes TO remarks")
    finally:
        conn.close()

    second = case.run_pipeline()
    assert second.state == "success", second.explain()
    assert_all(second, "success")
    assert_lake_equals_source(case, ["customers", "orders"])
    # It acked a window that reached the source's end: nothing left, so no continuation run.
    assert second.tasks["more_work"] == "success" and second.tasks["continue_run"] == "skipped", second.explain()
    assert continuation_runs(case) == [], second.explain()
    # (A run with nothing new for the pipeline's tables, which skips the merge and still acks, is the third
    # run of test_assets.py: one DAG run fewer here.)

    with case.pipeline() as p:
        status = pipeline_status(p)
    assert status["cursor"]["seq"] == 2, status
    lease = status["lease"]  # released by the last run (gone, or expired)
    assert lease is None or lease.get("holder") is None or lease["expires_at"] <= time.time(), status


def test_failed_merge_is_retried_and_converges(cdc_case: CdcCase, tmp_path: Path) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services))
    seed(case)
    fired = tmp_path / "faults-fired"

    # The merge job kills itself after its first table committed (once); Airflow retries the task.
    result = case.run_pipeline(env={"CDC_FAULT": "mid_merge", "CDC_FAULT_ONCE": str(fired)})
    assert fired.exists() and "mid_merge" in fired.read_text(), result.explain()
    assert result.state == "success", result.explain()
    assert_all(result, "success")
    assert result.tries["merge_window"] == 2, result.explain()
    assert_lake_equals_source(case, ["customers", "orders"])  # equal counts: no duplicates

    # The monitor's data: the failure is noted (and marked resolved by the later ack), and the acked
    # window carries the Delta versions the retried merge committed.
    with case.pipeline() as p:
        status = pipeline_status(p)
    last = status["last_error"]
    assert last["step"] == "merge_window" and last["seq"] == 1 and last["resolved"] is True, last
    (window,) = status["windows"]
    tables = window["result"]["tables"]
    assert set(tables) == {f"{case.database}.customers", f"{case.database}.orders"}, tables
    assert all(isinstance(t["delta_version"], int) for t in tables.values()), tables
    assert all(isinstance(t["seconds"], (int, float)) for t in tables.values()), tables  # the monitor's chart
    assert window["result"]["durations"]["merge"] > 0, window


def test_run_skips_while_another_run_holds_the_lease(cdc_case: CdcCase) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services))
    seed(case, customers=3, orders=3)

    with case.pipeline() as p:
        grant = p.acquire("someone-else/manual")
        try:
            result = case.run_pipeline()
            status = pipeline_status(p)
        finally:
            p.release(grant)

    assert_all(result, "skipped")
    assert result.tasks["continue_run"] == "skipped", result.explain()  # a skipped run never continues
    assert continuation_runs(case) == [], result.explain()
    assert "someone-else/manual" in result.output, result.explain()
    # release_lease skipped too: the other holder's lease is untouched, and nothing moved.
    assert status["lease"]["holder"] == "someone-else/manual", status
    assert status["cursor"]["seq"] == 0, status
    assert not any(case.lake.iterdir())
