"""The generated DAGs end to end, with real MariaDB, ZooKeeper, Spark+Delta and Airflow (`airflow dags test`):

- scheduled runs land inserts, updates, deletes, a primary-key change, a large transaction and an
  ADD COLUMN, and every Delta table then equals its source table row for row; a run with nothing new
  skips the merge and still acks;
- a merge that dies half-way (after its first table committed) is retried by Airflow and converges
  without duplicates;
- a run started while someone else holds the lease skips entirely and leaves that lease alone;
- a backfill from a timestamp repairs a damaged Delta table (dry run first: reports, changes nothing);
- a run whose window a cap cut short triggers the next run of `cdc_<name>` at once (one queued DagRun,
  created by its `continue_run` task); a run that reached the source's end, or was skipped, triggers none.

DAG runs are expensive here (10-25 s each), so each test does as few as it can.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e_support import (
    CdcCase,
    assert_lake_equals_source,
    binlog_position,
    delta_rows,
    source_rows,
    sql,
)

pytestmark = pytest.mark.e2e

WINDOW_TASKS = ["acquire_lease", "plan_window", "stage_window", "merge_window", "ack_window", "release_lease"]

CUSTOMERS = """
CREATE TABLE customers (
  id INT NOT NULL PRIMARY KEY,
  name VARCHAR(64) NOT NULL,
  balance DECIMAL(12,2) NULL,
  born DATE NULL,
  seen DATETIME(6) NULL,
  score DOUBLE NULL,
  notes TEXT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""
ORDERS = """
CREATE TABLE orders (
  id BIGINT NOT NULL PRIMARY KEY,
  customer_id INT NOT NULL,
  amount DECIMAL(10,2) NOT NULL,
  status VARCHAR(16) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


def seed(case: CdcCase, customers: int = 20, orders: int = 50) -> None:
    rows = ", ".join(
        f"({i}, 'customer {i} ü', {i * 10}.{i % 100:02d}, '19{50 + i % 50}-0{1 + i % 9}-1{i % 10}', "
        f"'2026-01-0{1 + i % 9} 10:00:0{i % 10}.{i:06d}', {i}.25, {'NULL' if i % 3 else repr('note ' + str(i))})"
        for i in range(1, customers + 1)
    )
    order_rows = ", ".join(f"({i}, {1 + i % customers}, {i}.50, 'new')" for i in range(1, orders + 1))
    sql(
        case.services,
        case.database,
        CUSTOMERS,
        ORDERS,
        f"INSERT INTO customers VALUES {rows}",
        f"INSERT INTO orders VALUES {order_rows}",
    )


def assert_all(result, state: str, tasks: list[str] = WINDOW_TASKS) -> None:  # type: ignore[no-untyped-def]
    bad = {t: result.tasks.get(t) for t in tasks if result.tasks.get(t) != state}
    assert not bad, f"expected {state}: {bad}\n{result.explain()}"


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
    finally:
        conn.close()

    second = case.run_pipeline()
    assert second.state == "success", second.explain()
    assert_all(second, "success")
    assert_lake_equals_source(case, ["customers", "orders"])

    # Nothing new for these tables: the merge never starts Spark, the window is still acked.
    third = case.run_pipeline()
    assert third.state == "success", third.explain()
    assert third.tasks["merge_window"] == "skipped", third.explain()
    assert_all(third, "success", ["acquire_lease", "plan_window", "stage_window", "ack_window", "release_lease"])
    assert_lake_equals_source(case, ["customers", "orders"])

    with case.pipeline() as p:
        status = p.status()
    assert status["cursor"]["seq"] == 3, status
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
        status = p.status()
    last = status["last_error"]
    assert last["step"] == "merge_window" and last["seq"] == 1 and last["resolved"] is True, last
    (window,) = status["windows"]
    tables = window["result"]["tables"]
    assert set(tables) == {f"{case.database}.customers", f"{case.database}.orders"}, tables
    assert all(isinstance(t["delta_version"], int) for t in tables.values()), tables
    assert window["result"]["durations"]["merge"] > 0, window


def test_run_skips_while_another_run_holds_the_lease(cdc_case: CdcCase) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services))
    seed(case, customers=3, orders=3)

    with case.pipeline() as p:
        grant = p.acquire("someone-else/manual")
        try:
            result = case.run_pipeline()
            status = p.status()
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


def continuation_runs(case: CdcCase) -> list[tuple[str, str, str, str]]:
    """(run_id, state, run_type, conf) of the runs of cdc_<name> that a `continue_run` task created."""
    return case.airflow.query(
        "SELECT run_id, state, run_type, CAST(conf AS TEXT) FROM dag_run WHERE dag_id = ? AND run_id LIKE "
        "'continue\\_\\_%' ESCAPE '\\' ORDER BY id",
        f"cdc_{case.name}",
    )


def test_a_run_cut_short_by_a_cap_triggers_the_next_run_at_once(cdc_case: CdcCase) -> None:
    case = cdc_case
    sql(case.services, case.database, "CREATE TABLE t (id INT NOT NULL PRIMARY KEY, v INT NOT NULL)")
    # At most 2 transactions per window, and at least 5 of ours after the start: the first window is capped.
    case.write_config(binlog_position(case.services), caps={"max_transactions": 2})
    sql(case.services, case.database, *(f"INSERT INTO t VALUES ({i}, {i})" for i in range(5)))

    first = case.run_pipeline()
    assert first.state == "success", first.explain()
    assert_all(first, "success", [*WINDOW_TASKS, "more_work", "continue_run"])
    runs = continuation_runs(case)
    assert len(runs) == 1, (runs, first.explain())
    run_id, state, run_type, conf = runs[0]
    assert run_id.startswith("continue__w1__t"), runs  # after window 1, named after the lease token
    assert (state, run_type) == ("queued", "operator_triggered"), runs  # not waited for: starts after this run
    assert first.run_id in conf and "capped" in conf, runs
    with case.pipeline() as p:
        status = p.status()
    assert status["cursor"]["seq"] == 1, status
    lease = status["lease"]  # released before the trigger fired: the next run can take it
    assert lease is None or lease.get("holder") is None or lease["expires_at"] <= time.time(), status
    window = status["windows"][0]["plan"]
    assert window["info"]["capped"] == "max_transactions" and window["transactions"] == 2, window

    # Caps wide open: the next window reaches the source's end, so nothing more is triggered.
    case.write_config(binlog_position(case.services))
    second = case.run_pipeline()
    assert second.state == "success", second.explain()
    assert second.tasks["more_work"] == "success" and second.tasks["continue_run"] == "skipped", second.explain()
    assert continuation_runs(case) == runs, second.explain()
    assert_lake_equals_source(case, ["t"])


def _damage(path: Path) -> None:
    """Delete two rows and falsify a value in a Delta table behind the pipeline's back."""
    from deltalake import DeltaTable

    dt = DeltaTable(str(path))
    dt.delete("id IN (2, 3)")
    dt.update(updates={"name": "'damaged'", "balance": "0"}, predicate="id = 4")


def test_backfill_from_a_timestamp_repairs_a_damaged_table(cdc_case: CdcCase) -> None:
    case = cdc_case
    case.write_config(binlog_position(case.services))
    # Binlog timestamps have one-second resolution: start the replay a second before our first write.
    since = datetime.fromtimestamp(int(time.time()) - 1, tz=UTC).isoformat().replace("+00:00", "Z")
    seed(case)

    first = case.run_pipeline()
    assert first.state == "success", first.explain()
    assert_lake_equals_source(case, ["customers", "orders"])
    with case.pipeline() as p:
        before = p.status()["cursor"]

    _damage(case.table_path("customers"))
    cols, expected = source_rows(case.services, case.database, "customers")
    assert delta_rows(case.table_path("customers"), cols) != expected

    dry = case.run_backfill({"start_ts": since, "dry_run": True})
    assert dry.tasks["begin_backfill"] == "success", dry.explain()
    assert dry.tasks["release_lease"] == "success", dry.explain()
    for t in ("plan_window", "stage_window", "merge_window", "ack_window"):
        assert dry.tasks[t] == "skipped", dry.explain()
    with case.pipeline() as p:
        after_dry = p.status()
    assert after_dry["cursor"]["backfill"] is None, after_dry
    assert after_dry["cursor"]["position"] == before["position"], after_dry

    backfill = case.run_backfill({"start_ts": since, "tables": [f"{case.database}.customers"]})
    assert backfill.state == "success", backfill.explain()
    assert_all(backfill, "success", ["acquire_lease", "begin_backfill", *WINDOW_TASKS[1:]])
    assert_lake_equals_source(case, ["customers", "orders"])

    with case.pipeline() as p:
        after = p.status()["cursor"]
    from cdc_core.positions import BinlogPosition

    assert BinlogPosition.from_dict(after["position"]) >= BinlogPosition.from_dict(before["position"]), after
