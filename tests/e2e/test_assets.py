"""Airflow Assets for the lake tables, end to end: a real ack (`airflow dags test cdc_<name>`) emits one
asset event per table the window changed (and per output of it: the items keep a change log), with the
window's facts in its extra, and queues the
downstream DAGs of docs/examples/cdc_downstream.py (one scheduled on `orders`, one on `orders & items`)
exactly as the scheduler would trigger them (Airflow's asset-triggered run queue); a window that
changes one table announces that table only; a run with nothing new announces nothing (and skips the merge,
still acking its window). The lake's
checkpoints table and `cdc versions` agree with the events' Delta versions.

Two DAG runs plus a reserialize: about a minute.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.e2e import ROOT, CdcCase, assert_all, binlog_position, sql

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server


def _events(case: CdcCase) -> list[dict]:  # type: ignore[type-arg]
    rows = case.airflow.query(
        "SELECT a.name, a.uri, a.\"group\", CAST(e.extra AS TEXT) FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "WHERE a.name LIKE ? ORDER BY e.id", f"cdc_{case.name}/%",
    )
    return [{"name": r[0], "uri": r[1], "group": r[2], **json.loads(r[3] or "{}")} for r in rows]


def _queued(case: CdcCase) -> set[tuple[str, str]]:
    rows = case.airflow.query(
        "SELECT q.target_dag_id, a.name FROM asset_dag_run_queue q JOIN asset a ON a.id = q.asset_id "
        "WHERE a.name LIKE ?", f"cdc_{case.name}/%",
    )
    return {(r[0], r[1]) for r in rows}


def test_ack_emits_one_asset_event_per_changed_table_and_queues_downstream_dags(
    cdc_case: CdcCase, tmp_path: Path
) -> None:
    case = cdc_case
    db = case.database
    sql(case.services, db,
        "CREATE TABLE orders (id INT PRIMARY KEY, n_items INT NOT NULL)",
        "CREATE TABLE order_items (order_id INT, line INT, PRIMARY KEY (order_id, line))",
        "CREATE TABLE untouched (id INT PRIMARY KEY)")
    # The pipeline starts after the CREATEs: a window that creates a table announces it (it appeared in the
    # lake); this test is about row changes, so its first window holds only those.
    # The items keep a change log (docs/output-modes.md): an Asset of its own, announced with its table.
    case.write_config(binlog_position(case.services),
                      table_options={f"{db}.order_items": {"outputs": ["state", "changelog"]}})

    # A DAGs folder with the pipeline DAGs and the documented downstream example, pointed at this pipeline.
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(ROOT / "dags" / "cdc_pipelines.py", dags / "cdc_pipelines.py")
    shutil.copy(ROOT / "docs" / "examples" / "cdc_downstream.py", dags / "cdc_downstream.py")
    env = {"AIRFLOW__CORE__DAGS_FOLDER": str(dags), "CDC_EXAMPLE_PIPELINE": case.name,
           "CDC_EXAMPLE_ORDERS": f"{db}.orders", "CDC_EXAMPLE_ITEMS": f"{db}.order_items"}
    full_env = {**case.env, **env}
    proc = case.airflow_cli("dags", "reserialize", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for dag_id in ("cdc_downstream_orders", "cdc_downstream_orders_and_items"):
        proc = case.airflow_cli("dags", "unpause", dag_id, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    # Window 1: one transaction writes an order with its items (two tables changed, one not).
    conn = case.services.root_connect(db)
    with conn.cursor() as cur:
        conn.begin()
        cur.execute("INSERT INTO orders VALUES (1, 2)")
        cur.execute("INSERT INTO order_items VALUES (1, 0), (1, 1)")
        conn.commit()
    first = case.run_dag(f"cdc_{case.name}", env=env)
    assert first.state == "success", first.explain()

    events = _events(case)
    assert sorted((e["table"], e.get("output", "")) for e in events) == [
        (f"{db}.order_items", ""), (f"{db}.order_items", "changelog"), (f"{db}.orders", "")], events
    for e in events:
        assert e["pipeline"] == case.name and e["window_seq"] == 1 and e["kind"] == "stream"
        assert e["uri"].startswith("file:///")
        # Airflow keeps the group of Assets a DAG declares (the downstream example's); one only an alias event
        # names (the change log's) gets Airflow's default group.
        assert e["group"] == (f"cdc_{case.name}" if "output" not in e else "asset")
        assert e["uri"].endswith(f"/{db}/{e['table'].rsplit('.', 1)[1]}")
        assert isinstance(e["delta_version"], int) and e["newest_commit_at"].endswith("Z")
    by_table = {e["table"]: e for e in events if "output" not in e}
    assert (by_table[f"{db}.orders"]["inserted"], by_table[f"{db}.order_items"]["inserted"]) == (1, 2)
    (changelog,) = [e for e in events if e.get("output") == "changelog"]
    assert changelog["name"] == f"cdc_{case.name}/_cdc.changelog/{db}/order_items" and changelog["inserted"] == 2
    orders_asset, items_asset = f"cdc_{case.name}/{db}/orders", f"cdc_{case.name}/{db}/order_items"
    assert _queued(case) >= {
        ("cdc_downstream_orders", orders_asset),
        ("cdc_downstream_orders_and_items", orders_asset),
        ("cdc_downstream_orders_and_items", items_asset),
    }, _queued(case)

    # The lake's checkpoints table records the same versions; `cdc versions` prints them.
    out = subprocess.run(
        [sys.executable, "-m", "cdc_core.cli", "--config", str(case.config_path), "versions", case.name],
        capture_output=True, text=True, cwd=ROOT, env=full_env, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    cut = json.loads(out.stdout)
    assert cut["window"] == 1
    assert {n: t["version"] for n, t in cut["tables"].items()} == {n: e["delta_version"] for n, e in by_table.items()}
    assert cut["tables"][f"{db}.order_items"]["outputs"]["changelog"]["version"] == changelog["delta_version"]
    assert "outputs" not in cut["tables"][f"{db}.orders"]

    # Window 2 changes only the items: one event, for that table; a run with nothing new: none.
    sql(case.services, db, "INSERT INTO order_items VALUES (1, 2)")
    second = case.run_dag(f"cdc_{case.name}", env=env)
    assert second.state == "success", second.explain()
    third = case.run_dag(f"cdc_{case.name}", env=env)
    assert third.state == "success", third.explain()
    # Nothing new for these tables: the merge never starts Spark, the empty window is still acked (the
    # run test_pipeline_dags.py would otherwise spend on it).
    assert third.tasks["merge_window"] == "skipped", third.explain()
    assert_all(third, "success", ["acquire_lease", "plan_window", "stage_window", "ack_window", "release_lease"])
    with case.pipeline() as p:
        assert p.coordinator.read_cursor().seq == 3  # acked: the cursor moved past the empty window
    later = _events(case)[len(events):]
    assert [(e["table"], e["window_seq"], e.get("output")) for e in later] == [
        (f"{db}.order_items", 2, None), (f"{db}.order_items", 2, "changelog")], later
    # The ack found the earlier events through the alias (what keeps a re-run from emitting twice).
    assert f"assets.emitted pipeline={case.name} seq=3 events=0 announced_before=2" in third.output, third.explain()
