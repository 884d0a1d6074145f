"""A group pipeline's DAGs end to end: two MariaDB shards with overlapping keys routed into one lake table,
through `airflow dags test` (real MariaDB x2, ZooKeeper, Spark+Delta, Airflow; the CLI side is
tests/integration/test_group_pipeline.py):

- a scheduled run of `cdc_<name>` runs a task group `source_<id>` per source, every task succeeds, the lake
  table equals the union of both shards' rows under their `_cdc_source`/`_cdc_source_table`, and each
  source's own cursor (`<root>/pipelines/<name>/sources/<id>/cursor`) advanced;
- a backfill of one source through `cdc_<name>_backfill` (`source` in the form) replays only that source (a
  lake row of it deleted behind the pipeline's back comes back) while the other source plans an ordinary
  stream window; no duplicates;
- with one shard stopped, that source's task group fails (no retries here), the other's ack succeeds,
  the run is failed and the failure is noted under the failing source.

Three DAG runs; their merges run on the test session's warm merge server (`warm_merges`), not a spark-submit each.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.e2e import CdcCase, DagRunResult
from tests.support.source_facts import drop_databases, run_sql

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server

SOURCES = ("eu1", "eu2")
SCHEMAS = {"eu1": "shop_00", "eu2": "shop_01"}  # one schema per shard, routed into shop.orders
STEPS = ("plan_window", "stage_window", "merge_window", "ack_window")


def source_rows(shards: dict[str, Any]) -> set[tuple[Any, ...]]:
    """The union of the shards' rows as the lake should hold them: (_cdc_source, _cdc_source_table, id, ...)."""
    out = set()
    for sid, shard in shards.items():
        conn = shard.root_connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT id, amount, note FROM `{SCHEMAS[sid]}`.orders")
                out |= {(sid, f"{SCHEMAS[sid]}.orders", *row) for row in cur.fetchall()}
        finally:
            conn.close()
    return out


def lake_rows(case: CdcCase) -> set[tuple[Any, ...]]:
    from cdc_core.lake import delta_state

    rows = delta_state.read_rows(
        str(case.lake / "shop" / "orders"), columns=["_cdc_source", "_cdc_source_table", "id", "amount", "note"]
    )
    listed = [tuple(r.values()) for r in rows.to_pylist()]
    assert len(listed) == len(set(listed)), f"duplicate rows in the lake: {sorted(listed)}"
    return set(listed)


def source_state(case: CdcCase, shards: dict[str, Any], sid: str) -> dict[str, Any]:
    """One source's cursor, windows (newest first) and last error, from its own ZooKeeper nodes."""
    from cdc_core.capture.source import SourceParams
    from cdc_core.model.config import load_config
    from cdc_core.run.pipeline import Pipeline

    pc = load_config(case.config_path).pipeline(case.name)
    with Pipeline.from_config(pc, SourceParams(**shards[sid].source_params), source_id=sid) as p:
        c = p.coordinator
        return {"cursor": c.read_cursor(), "windows": [w.plan for w in c.recent_windows(10)],
                "last_error": c.read_last_error()}


def assert_group(result: DagRunResult, sid: str, state: str, steps: tuple[str, ...] = STEPS) -> None:
    bad = {t: result.tasks.get(f"source_{sid}.{t}") for t in steps if result.tasks.get(f"source_{sid}.{t}") != state}
    assert not bad, f"source_{sid}: expected {state}: {bad}\n{result.explain()}"


def test_group_pipeline_dags_land_backfill_one_source_and_fail_only_the_stopped_source(
    cdc_case: CdcCase, shard_servers: Any, zk_client: Any
) -> None:
    case = cdc_case
    shards = dict(zip(SOURCES, list(shard_servers)[:2], strict=True))
    conns = {}
    sources = []
    for sid, shard in shards.items():
        conn_id = f"shard_{sid}_{case.name}"
        conns[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps({
            "conn_type": "mysql", "host": shard.mysql_host, "port": shard.mysql_port,
            "login": shard.mysql_user, "password": shard.mysql_password,
        })
        schema = SCHEMAS[sid]
        drop_databases(shard, r"shop\_%")
        run_sql(shard, f"DROP DATABASE IF EXISTS `{schema}`", f"CREATE DATABASE `{schema}`",
                f"CREATE TABLE `{schema}`.orders (id INT PRIMARY KEY, amount INT NOT NULL, note VARCHAR(20))")
        sources.append({"id": sid, "conn_id": conn_id, "start": shard.binlog_end()})
    case.config_path.write_text(json.dumps({"pipelines": [{
        "name": case.name, "sources": sources, "tables": {"include": ["shop_*.orders"]},
        "routes": [{"from": r"shop_[0-9]+\.orders", "to": "shop.orders"}],
        "snapshot": {"on_start": False},
        "zookeeper": {"hosts": case.services.zk_hosts, "root": case.zk_root},
        "lease_seconds": 300, "staging_root": str(case.staging), "lake_root": str(case.lake), "schedule": None,
        "retries": 0,  # a stopped shard fails its task group at once
        "caps": {"max_events": 5_000_000, "max_bytes": 4 * 1024**3, "max_transactions": 1_000_000},
    }]}))

    def run(dag_id: str, conf: dict[str, Any] | None = None) -> DagRunResult:
        return case.run_dag(dag_id, conf=conf, env=conns)

    # Binlog timestamps have one-second resolution: the backfill replays from a second before our changes.
    since = datetime.fromtimestamp(int(time.time()) - 1, tz=UTC).isoformat().replace("+00:00", "Z")
    for sid, shard in shards.items():  # equal keys on both shards
        schema = SCHEMAS[sid]
        run_sql(shard, f"INSERT INTO `{schema}`.orders VALUES (1, 10, '{sid}'), (2, 20, NULL), (3, 30, 'x')",
                f"UPDATE `{schema}`.orders SET amount = amount + 1 WHERE id = 2")
    run_sql(shards["eu2"], "DELETE FROM shop_01.orders WHERE id = 3", "INSERT INTO shop_01.orders VALUES (4, 40, 'y')")
    expected = source_rows(shards)
    assert len(expected) == 6 and {r[2] for r in expected if r[0] == "eu1"} == {1, 2, 3}, expected

    # 1. The scheduled DAG: a task group per source, both land, the lake is the union, both cursors move.
    first = run(f"cdc_{case.name}")
    assert first.state == "success", first.explain()
    for sid in SOURCES:
        assert_group(first, sid, "success")
    assert {first.tasks[t] for t in ("acquire_lease", "release_lease", "more_work")} == {"success"}, first.explain()
    assert first.tasks["continue_run"] == "skipped", first.explain()  # both reached their source's end
    assert lake_rows(case) == expected
    base = f"{case.zk_root}/pipelines/{case.name}"
    assert sorted(zk_client.get_children(f"{base}/sources")) == sorted(SOURCES)
    assert zk_client.exists(f"{base}/cursor") is None  # no pipeline-level cursor: each source has its own
    after_first = {}
    for sid in SOURCES:
        raw = json.loads(zk_client.get(f"{base}/sources/{sid}/cursor")[0])
        assert raw["seq"] == 1 and raw["position"] is not None, (sid, raw)
        state = source_state(case, shards, sid)
        (window,) = state["windows"]
        assert window.kind == "stream" and window.pipeline == f"{case.name}.{sid}", window
        assert window.transactions >= 2 and state["cursor"].position > window.start, state
        after_first[sid] = state["cursor"]

    # 2. Backfill one source (eu1) from before the changes: a row of it deleted behind the pipeline's back
    # comes back; eu2 only plans an ordinary (empty) stream window, nothing of it is replayed.
    from deltalake import DeltaTable

    DeltaTable(str(case.lake / "shop" / "orders")).delete("_cdc_source = 'eu1' AND id = 1")
    assert lake_rows(case) != expected
    backfill = run(f"cdc_{case.name}_backfill", {"start_ts": since, "source": "eu1"})
    assert backfill.state == "success", backfill.explain()
    for sid in SOURCES:
        assert_group(backfill, sid, "success", ("plan_window", "stage_window", "ack_window"))
    assert backfill.tasks["source_eu1.merge_window"] == "success", backfill.explain()
    assert backfill.tasks["source_eu2.merge_window"] == "skipped", backfill.explain()  # empty window
    assert lake_rows(case) == expected  # repaired, and no duplicates (lake_rows checks)
    eu1, eu2 = (source_state(case, shards, sid) for sid in SOURCES)
    assert [(w.seq, w.kind) for w in eu1["windows"]] == [(2, "backfill"), (1, "stream")], eu1
    assert eu1["windows"][0].transactions >= 2, eu1  # our inserts and the update, replayed
    assert eu1["cursor"].backfill is None and eu1["cursor"].seq == 2, eu1  # completed in one window
    assert eu1["cursor"].position == after_first["eu1"].position, eu1  # a replay never moves the stream cursor
    assert [(w.seq, w.kind) for w in eu2["windows"]] == [(2, "stream"), (1, "stream")], eu2
    assert eu2["windows"][0].transactions == 0 and eu2["cursor"].backfill is None, eu2

    # 3. Shard eu2 stops: its task group fails (no retries), eu1's window is planned, staged and acked in the
    # same run (empty, so no Spark: landing beside a stopped shard is the integration test's), the run fails.
    shards["eu2"].stop_mariadb()
    try:
        down = run(f"cdc_{case.name}")
    finally:
        shards["eu2"].start_mariadb()
        shards["eu2"].wait_mariadb()
    assert down.state == "failed", down.explain()
    assert_group(down, "eu1", "success", ("plan_window", "stage_window", "ack_window"))
    assert down.tasks["source_eu1.merge_window"] == "skipped", down.explain()
    assert down.tasks["source_eu2.plan_window"] == "failed", down.explain()
    assert_group(down, "eu2", "upstream_failed", STEPS[1:])
    assert down.tasks["release_lease"] == "success", down.explain()  # the lease is given back
    assert lake_rows(case) == expected
    eu1, eu2 = (source_state(case, shards, sid) for sid in SOURCES)
    assert [(w.seq, w.kind) for w in eu1["windows"][:1]] == [(3, "stream")] and eu1["cursor"].seq == 3, eu1
    assert eu2["cursor"].seq == 2 and len(eu2["windows"]) == 2, eu2  # nothing planned
    # The failure is noted under the source that failed, not the other.
    assert eu2["last_error"] is not None and eu2["last_error"]["step"] == "source_eu2.plan_window", eu2
    assert eu1["last_error"] is None, eu1
