"""The manual backfill DAG and the catch-up trigger end to end, with real MariaDB, ZooKeeper, Spark+Delta
and Airflow (`airflow dags test`):

- a backfill from a timestamp repairs a damaged Delta table (dry run first: reports, changes nothing);
- a run whose window a cap cut short triggers the next run of `cdc_<name>` at once (one queued DagRun,
  created by its `continue_run` task), and the capped window landed only its own transactions (a run that
  reached the source's end triggers none: test_pipeline_dags.py).

DAG runs are expensive here (10-40 s each), so each test does as few as it can.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cdc_core.run.backfill import begin_backfill
from cdc_core.run.status import pipeline_status
from tests.support.e2e import (
    WINDOW_TASKS,
    CdcCase,
    assert_all,
    assert_lake_equals_source,
    binlog_position,
    continuation_runs,
    delta_rows,
    seed,
    source_rows,
    sql,
)

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server


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
        status = pipeline_status(p)
    assert status["cursor"]["seq"] == 1, status
    lease = status["lease"]  # released before the trigger fired: the next run can take it
    assert lease is None or lease.get("holder") is None or lease["expires_at"] <= time.time(), status
    window = status["windows"][0]["plan"]
    assert window["info"]["capped"] == "max_transactions" and window["transactions"] == 2, window

    # What the capped window landed: a prefix of our inserts (the cap counts every transaction of the
    # shared binlog, so other tests' transactions may fill it); the next run carries on from the cursor.
    table = case.table_path("t")
    if table.exists():
        landed = [r[0] for r in delta_rows(table, ["id", "v"])]
        assert landed == list(range(len(landed))) and len(landed) <= 2, landed


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
        before = pipeline_status(p)["cursor"]

    _damage(case.table_path("customers"))
    cols, expected = source_rows(case.services, case.database, "customers")
    assert delta_rows(case.table_path("customers"), cols) != expected

    dry = case.run_backfill({"start_ts": since, "dry_run": True})
    assert dry.tasks["begin_backfill"] == "success", dry.explain()
    assert dry.tasks["release_lease"] == "success", dry.explain()
    for t in ("plan_window", "stage_window", "merge_window", "ack_window"):
        assert dry.tasks[t] == "skipped", dry.explain()
    with case.pipeline() as p:
        after_dry = pipeline_status(p)
    assert after_dry["cursor"]["backfill"] is None, after_dry
    assert after_dry["cursor"]["position"] == before["position"], after_dry

    backfill = case.run_backfill({"start_ts": since, "tables": [f"{case.database}.customers"]})
    assert backfill.state == "success", backfill.explain()
    assert_all(backfill, "success", ["acquire_lease", "begin_backfill", *WINDOW_TASKS[1:]])
    assert_lake_equals_source(case, ["customers", "orders"])

    with case.pipeline() as p:
        after = pipeline_status(p)["cursor"]
    from cdc_core.model.positions import BinlogPosition

    assert BinlogPosition.from_dict(after["position"]) >= BinlogPosition.from_dict(before["position"]), after


def test_cancel_from_the_backfill_form_stops_the_active_backfill(cdc_case: CdcCase) -> None:
    """The form's `cancel` does what `cdc backfill --cancel` does (the same cdc_core call), and refuses,
    without retries and changing nothing, while a backfill window is planned and not acked."""
    case = cdc_case
    case.write_config(binlog_position(case.services))
    since = datetime.fromtimestamp(int(time.time()) - 1, tz=UTC).isoformat().replace("+00:00", "Z")
    seed(case, customers=3, orders=3)
    first = case.run_pipeline()  # a backfill replays what the pipeline landed
    assert first.state == "success", first.explain()

    def begin(plan: bool) -> None:
        with case.pipeline() as p:
            grant = p.acquire("e2e/backfill")
            try:
                begin_backfill(p, grant, since)
                if plan:
                    p.plan(grant)  # the backfill's first window: planned, not acked
            finally:
                p.release(grant)

    def backfill_state() -> object:
        with case.pipeline() as p:
            return pipeline_status(p)["cursor"]["backfill"]

    begin(plan=False)
    assert backfill_state() is not None
    cancel = case.run_backfill({"cancel": True})
    assert cancel.state == "success", cancel.explain()
    assert_all(cancel, "success", ["acquire_lease", "begin_backfill", "release_lease"])
    assert_all(cancel, "skipped", ["plan_window", "stage_window", "merge_window", "ack_window", "continue_run"])
    assert backfill_state() is None, cancel.explain()

    begin(plan=True)
    refused = case.run_backfill({"cancel": True})
    assert refused.state == "failed", refused.explain()
    assert refused.tasks["begin_backfill"] == "failed" and refused.tries["begin_backfill"] == 1, refused.explain()
    assert "is planned and not acked" in refused.output and "then cancel again" in refused.output, refused.explain()
    assert refused.tasks["release_lease"] == "success", refused.explain()  # the lease is given back
    assert backfill_state() is not None  # nothing changed
