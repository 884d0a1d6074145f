"""Delta table maintenance against real Spark + Delta, ZooKeeper and (for the pipeline tests) MariaDB:

- after N windows the maintenance job compacts every table (tombstones included) to a handful of
  files; contents, time travel to the last pre-maintenance version and the txn identifiers are
  unchanged; the managed retention properties are set (at creation by the merge job, by maintenance on
  older tables); an old orphan file is vacuumed and reported; a later replay is still "already
  committed"; a fenced maintenance changes nothing;
- expired txn identifiers read as absent in delta-rs (cdc_core.lake.delta_state) and Spark alike, and a
  replay of the window restores them without changing the contents (why the floors exist);
- pipeline level: a crash before the ack, then `cdc maintain` (`MaintenanceRun`: lease takeover,
  staging + ZooKeeper cleanup with a shifted clock, the maintenance job, the record), then the next run
  recovers; a merge job (spark-submit, its own process) running while maintenance compacts still lands
  exactly once.

One Spark session for the module (start-up costs ~10 s); the pipeline tests merge in-process through
`Pipeline.run_cycle(merge=...)` except where the test is about separate processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from delta.tables import DeltaTable

from cdc_core.capture.source import SourceParams, TableFilter
from cdc_core.coordination import PipelineCoordinator
from cdc_core.coordination.fence import zk_fence_check
from cdc_core.lake import delta_state
from cdc_core.lake.spark_conf import spark_env
from cdc_core.model import layout, retention
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import Fenced, LakeError
from cdc_core.run import housekeeping
from cdc_core.run.pipeline import Pipeline
from cdc_core.run.status import pipeline_status
from spark_apps import maintain_tables
from spark_apps.maintain_tables import Maintenance
from spark_apps.merge import STATUS_ALREADY, merge_window, table_uri, tombstone_uri
from tests.support.source_facts import run_sql
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "orders"
ID = Col("id", pa.int32(), "INT")
NOTE = Col("note", pa.string(), "STRING")
H = 25  # the horizon of the settings below: staging 24h + twice a 30 s lease, rounded up
PROPS = retention.managed_table_properties(H, H, H)


def contents(spark: Any, uri: str, version: int | None = None) -> list[tuple[Any, ...]]:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    df = reader.load(uri)
    return sorted(tuple(r) for r in df.collect())


def head_version(spark: Any, uri: str) -> int:
    return int(DeltaTable.forPath(spark, uri).history(1).collect()[0]["version"])


def properties(spark: Any, uri: str) -> dict[str, str]:
    return dict(DeltaTable.forPath(spark, uri).detail().collect()[0]["properties"])


N = 6  # windows before maintenance: each leaves at least one small file per table


def n_windows(spark: Any, staging: Path, lake: Path) -> None:
    """N windows into shop.orders: inserts in every window (a MERGE writes them as new small files),
    an update and a delete of window-1 keys in every other one (those rewrite the touched file, and
    the deletes give orders a tombstone table). Window 1 creates orders without the managed
    properties (a table from before this release); window 2 creates its tombstone table, with them."""
    clock = VersionClock()
    for seq in range(1, N + 1):
        w = WindowBuilder(staging, PIPE, seq, clock=clock)
        base = seq * 10
        changes: list[tuple[str, dict[str, Any]]] = [("I", {"id": base + i, "note": f"n{seq}.{i}"}) for i in range(4)]
        if seq % 2 == 0:
            changes += [("U", {"id": 10, "note": f"u{seq}"}), ("D", {"id": 10 + seq // 2, "note": None})]
        w.file("shop", "orders", ("id",), [ID, NOTE], changes)
        manifest, wdir = w.build()
        props = PROPS if seq > 1 else {}  # window 1 creates orders the old way
        report = merge_window(spark, manifest, wdir, str(lake), PIPE, seq, 1, table_properties=props)
        assert all(t["status"] != STATUS_ALREADY for t in report["tables"].values())


def test_maintenance_compacts_and_keeps_contents_time_travel_and_txn_identifiers(
    spark, services, staging_dir: Path, lake_dir: Path, zk_client, zk_root: str
) -> None:
    n_windows(spark, staging_dir, lake_dir)
    orders = table_uri(str(lake_dir), "shop", "orders")
    tomb = tombstone_uri(str(lake_dir), "shop", "orders")
    tables = housekeeping.discover_tables(
        str(lake_dir), TableFilter(include=("shop.*",)), {"shop.orders": {"zorder_by": ["id"]}}
    )
    assert [(t.name, t.kind, t.zorder_by) for t in tables] == [
        ("shop.orders", "table", ("id",)), ("shop.orders", "tombstones", ()),
    ]
    before = {u: (head_version(spark, u), contents(spark, u), delta_state.table_summary(u, app_id=PIPE))
              for u in (orders, tomb)}
    files_before = {u: s["files"] for u, (_, _, s) in before.items()}
    assert all(n >= 3 for n in files_before.values()), files_before  # small files left by the windows
    assert all(s["txn_version"] == N for _, _, s in before.values())
    # A file no commit references (an aborted write), older than the retention: VACUUM's to delete.
    orphans = (Path(orders) / "part-orphan-aborted.parquet", Path(tomb) / "part-orphan-aborted.parquet")
    old = time.time() - 10 * 86400
    for orphan in orphans:
        orphan.write_bytes(b"\0" * 4096)
        os.utime(orphan, (old, old))

    coord = PipelineCoordinator(zk_client, zk_root, PIPE)
    grant = coord.acquire("maintenance-test", 600)
    fence, close = zk_fence_check(services.zk_hosts, zk_root, PIPE, grant.token)
    try:
        job = Maintenance(spark, PIPE, grant.token, vacuum_hours=H, log_hours=H, txn_hours=H, min_hours=H, fence=fence,
                          parallelism=2)  # the table and its tombstones at once, a session each
        report = job.run([t.to_dict() for t in tables])
    finally:
        close()
    assert report["errors"] == []
    by = {(t["name"], t["kind"]): t for t in report["tables"]}
    for key, uri in ((("shop.orders", "table"), orders), (("shop.orders", "tombstones"), tomb)):
        r = by[key]
        version, rows, summary = before[uri]
        after = delta_state.table_summary(uri, app_id=PIPE)
        assert r["status"] == "ok"
        assert after["files"] <= 2 < summary["files"], (key, after["files"])  # a handful
        assert r["files_after"] == after["files"] and r["files_before"] == summary["files"]
        assert contents(spark, uri) == rows  # the same rows
        assert contents(spark, uri, version) == rows  # time travel to the last version before maintenance
        assert after["txn_version"] == N  # the idempotent-write identity survived OPTIMIZE, VACUUM, checkpoint
        assert delta_state.last_txn_version(uri, PIPE) == N
        assert {k: properties(spark, uri).get(k) for k in PROPS} == PROPS
        assert r["log"]["checkpoint_version"] >= version
    assert by[("shop.orders", "table")]["properties_set"] == sorted(PROPS)  # created the old way: aligned
    assert by[("shop.orders", "tombstones")]["properties_set"] == []  # created with them by the merge job
    assert by[("shop.orders", "table")]["optimize"]["mode"] == "zorder"
    # The Z-ordered table is Spark's; its tombstone table (small, no deletion vectors) delta-rs' (milliseconds per
    # step instead of a Spark job's seconds): the same steps, and every assertion above holds for both.
    assert [by[k]["writer"] for k in (("shop.orders", "table"), ("shop.orders", "tombstones"))] == ["spark", "delta-rs"]
    assert not any(orphan.exists() for orphan in orphans)
    for r in by.values():
        assert r["vacuum"]["files_deleted"] >= 1 and r["vacuum"]["bytes_deleted"] >= 4096, r
    assert report["totals"]["files_after"] <= 4

    # Replaying window N after maintenance: still "already committed" everywhere.
    clock = VersionClock(start=10**6)
    replay = WindowBuilder(staging_dir, PIPE, N, clock=clock).file(
        "shop", "orders", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "must not land"})]
    ).build()
    rep = merge_window(spark, replay[0], replay[1], str(lake_dir), PIPE, N, grant.token, table_properties=PROPS)
    assert {t["status"] for t in rep["tables"].values()} == {STATUS_ALREADY}
    assert contents(spark, orders) == before[orders][1]

    # A maintenance run whose lease was taken over changes nothing.
    coord.release(grant)
    other = coord.acquire("someone-else", 600)
    v = head_version(spark, orders)
    fence, close = zk_fence_check(services.zk_hosts, zk_root, PIPE, grant.token)
    try:
        with pytest.raises(Fenced):
            Maintenance(spark, PIPE, grant.token, vacuum_hours=H, log_hours=H, txn_hours=H, min_hours=H,
                        fence=fence, parallelism=2).run([t.to_dict() for t in tables])
    finally:
        close()
    assert head_version(spark, orders) == v
    coord.release(other)


def test_expired_txn_identifiers_read_as_absent_and_a_replay_restores_them(spark, staging_dir, lake_dir) -> None:
    """Why the txn retention has a floor: delta-rs (delta_state) and Spark both drop an identifier older
    than delta.setTransactionRetentionDuration at read time, so the window would look "not landed".
    A replay then re-applies it (contents unchanged: versions only let newer changes win) and the
    identifier is back."""
    w = WindowBuilder(staging_dir, PIPE, 3).file("shop", "t", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "a"})])
    manifest, wdir = w.build()
    short = {retention.PROP_TXN_RETENTION: "interval 2 seconds"}
    merge_window(spark, manifest, wdir, str(lake_dir), PIPE, 3, 1, table_properties=short)
    uri = table_uri(str(lake_dir), "shop", "t")
    rows = contents(spark, uri)
    deadline = time.monotonic() + 60
    while delta_state.last_txn_version(uri, PIPE) is not None:
        assert time.monotonic() < deadline, "the txn identifier never expired"
        time.sleep(0.5)
    # Spark agrees on a fresh snapshot. A cached one keeps the expiry cut-off of its creation (this
    # session's, from the first merge), hence the cache clear; a merge job is a new process per window.
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog
    delta_log.clearCache()
    none = spark._jvm.scala.Option.empty()
    snap = delta_log.forTable(spark._jsparkSession, uri).update(False, none, none)
    assert not snap.transactions().get(PIPE).isDefined()
    report = merge_window(spark, manifest, wdir, str(lake_dir), PIPE, 3, 1, table_properties=short)
    assert report["tables"]["shop.t"]["status"] != STATUS_ALREADY  # re-applied...
    assert contents(spark, uri) == rows  # ...without changing anything
    # ...and its commit carries the identity again (read from the log: with a 2 s retention any
    # reader may already have expired it again by now).
    last = max(Path(uri, "_delta_log").glob("*.json"))
    txns = [json.loads(line)["txn"] for line in last.read_text().splitlines() if '"txn"' in line]
    assert [(t["appId"], t["version"]) for t in txns] == [(PIPE, 3)]


# ---------------------------------------------------------------------------------- pipeline level


ORDERS_DDL = """
CREATE TABLE orders (
  id INT NOT NULL PRIMARY KEY,
  note VARCHAR(64) NULL,
  qty INT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


class ShiftedClock:
    """Wall-clock time plus an offset the test moves (acks "days ago", lease expiry)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset

    def __call__(self) -> float:
        return time.time() + self.offset


def sql(services: Any, database: str, *statements: str) -> None:
    run_sql(services, *statements, database=database)


def make_pipeline(services: Any, zk_client: Any, zk_root: str, database: str, root: Path, clock: ShiftedClock,
                  start: dict[str, Any], **overrides: Any) -> Pipeline:
    cfg = PipelineConfig.model_validate(
        {
            "name": "hk",
            "source": {"conn_id": "unused_in_process"},
            "tables": {"include": [f"{database}.*"]},
            "start": start,
            "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
            "lease_seconds": 30,
            "staging_root": str(root / "staging"),
            "lake_root": str(root / "lake"),
            "staging_retention_hours": 24,
            # one window per run whatever else the shared binlog holds
            "caps": {"max_events": 5_000_000, "max_bytes": 4 * 1024**3, "max_transactions": 1_000_000},
            "maintenance": {
                "vacuum_retention_hours": H, "log_retention_hours": H, "txn_retention_hours": H,
                "window_records_retention_hours": 24, "window_records_keep": 1, "window_records_max": 10,
                "lease_wait_seconds": 0, **overrides.pop("maintenance", {}),
            },
            **overrides,
        },
        context={"base_dir": root},
    )
    coordinator = PipelineCoordinator(zk_client, zk_root, "hk", clock=clock)
    return Pipeline(config=cfg, source=SourceParams(**services.source_params), coordinator=coordinator)


def in_process_merge(spark: Any, p: Pipeline) -> Any:
    """The merge step in this process's Spark session, with exactly the job's arguments' semantics."""
    m = p.config.maintenance

    def merge(grant: Any, seq: int) -> dict[str, Any]:
        return merge_window(
            spark, p.manifest(seq), layout.window_dir(p.staging_root, p.name, seq), p.lake_root, p.name, seq,
            grant.token, delete_mode=p.config.delete_mode,
            table_properties=retention.managed_table_properties(
                m.vacuum_retention_hours, m.log_retention_hours, m.txn_retention_hours
            ),
        )

    return merge


def job_here(spark: Any) -> Any:
    """`MaintenanceRun`'s runner: spark_apps/maintain_tables.py with exactly the command's arguments, in
    this module's Spark session instead of a spark-submit (the e2e test and bench pay for that one)."""

    def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        argv = cmd[cmd.index(str(housekeeping.MAINTENANCE_JOB)) + 1 :]
        assert cmd[0] == "spark-submit" and env["SPARK_LOCAL_IP"] == "127.0.0.1"
        report = maintain_tables._run(argv, session=spark)
        return subprocess.CompletedProcess(cmd, 1 if report["errors"] else 0, json.dumps(report), "")

    return run


def source_rows(services: Any, database: str) -> list[tuple[Any, ...]]:
    conn = services.root_connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, note, qty FROM orders")
            return sorted(cur.fetchall())
    finally:
        conn.close()


def lake_rows(spark: Any, p: Pipeline, database: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(p.table_uri(database, "orders"))
    return sorted(tuple(r) for r in df.select("id", "note", "qty").collect())


def test_crash_before_ack_then_cdc_maintain_then_the_next_run_recovers(
    spark, services, source_db: str, zk_client, zk_root: str, tmp_path: Path
) -> None:
    clock = ShiftedClock(-10 * 86400)  # windows 1-2 are acked "ten days ago"
    start = services.binlog_end()
    # Cleanup happens in `cdc maintain` here (the after-ack path is tested in test_housekeeping_cleanup.py).
    p = make_pipeline(services, zk_client, zk_root, source_db, tmp_path, clock, start,
                      maintenance={"cleanup_after_ack": False})
    merge = in_process_merge(spark, p)
    sql(services, source_db, ORDERS_DDL, "INSERT INTO orders VALUES (1,'a',1),(2,'b',2),(3,'c',3),(4,'d',4)")
    p.run_cycle("run-1", merge=merge)
    sql(services, source_db, "UPDATE orders SET qty = qty + 10 WHERE id <= 2", "DELETE FROM orders WHERE id = 3")
    p.run_cycle("run-2", merge=merge)
    clock.offset = 0  # now
    sql(services, source_db, "INSERT INTO orders VALUES (5,'e',5),(6,'f',6)")
    p.run_cycle("run-3", merge=merge)
    # Window 4: planned, staged, merged into Delta... and the run dies before the ack.
    sql(services, source_db, "INSERT INTO orders VALUES (7,'g',7)", "DELETE FROM orders WHERE id = 1")
    crashed = p.acquire("run-4-crashes")
    step = p.plan(crashed)
    assert step.seq == 4
    p.stage(crashed, 4)
    merge(crashed, 4)
    assert delta_state.last_txn_version(p.table_uri(source_db, "orders"), "hk") == 4

    sroot = tmp_path / "staging" / "hk"
    (sroot / "reports").mkdir(exist_ok=True)
    for seq in (1, 2, 4):  # merge reports (the in-process merge writes none) and a staging leftover
        (sroot / "reports" / f"w{seq:010d}-1a2b.json").write_text("{}")
    (sroot / ".w0000000002.tmp-abc123").mkdir()
    (sroot / ".w0000000002.tmp-abc123" / "part-00000.parquet").write_bytes(b"x" * 100)
    (sroot / "operator-notes.txt").write_text("not ours to delete")
    pending_before = zk_client.get(p.coordinator.window_path(4))[0]
    cursor_before = zk_client.get(p.coordinator.cursor_path)[0]
    files_before = delta_state.table_summary(p.table_uri(source_db, "orders"))["files"]

    # `cdc maintain` (the same object the CLI runs): the crashed run's lease expires first.
    clock.offset = p.config.lease_seconds + 5
    maint = make_pipeline(services, zk_client, zk_root, source_db, tmp_path, clock, start,
                          maintenance={"cleanup_after_ack": False})
    record = housekeeping.MaintenanceRun(maint, "cli/maintain/test", wait_seconds=0, runner=job_here(spark)).run()
    assert record["status"] == "ok", record
    assert sorted(x.name for x in sroot.iterdir()) == ["operator-notes.txt", "reports", "w0000000003", "w0000000004"]
    reports = sorted(x.name for x in (sroot / "reports").iterdir())
    assert reports[-1] == "w0000000004-1a2b.json"  # the pending window's
    assert len(reports) == 2 and reports[0].startswith("maintenance-")  # this run's job report
    staged = record["cleanup"]["staging"]
    assert (staged["windows_deleted"], staged["reports_deleted"], staged["leftovers_deleted"]) == (2, 2, 1)
    assert staged["bytes_freed"] > 100 and staged["unknown_entries"] == 1
    assert maint.coordinator.window_record_seqs() == [3, 4]  # the last acked one and the pending one
    assert record["cleanup"]["records"]["records_deleted"] == 2
    assert zk_client.get(p.coordinator.window_path(4))[0] == pending_before  # untouched
    assert zk_client.get(p.coordinator.cursor_path)[0] == cursor_before
    tables = {(t["name"], t["kind"]): t for t in record["tables"]}
    # (each MERGE rewrites this small table's touched file: test 1 is the one about many small files)
    assert tables[(f"{source_db}.orders", "table")]["files_after"] == 1 <= files_before
    assert (f"{source_db}.orders", "tombstones") in tables
    assert maint.coordinator.read_lease() is None  # released
    status = pipeline_status(maint)["maintenance"]
    assert status["last"]["status"] == "ok" and status["last"]["holder"] == "cli/maintain/test"
    row = next(t for t in status["tables"] if t["kind"] == "table")
    assert row["files"] == 1 and row["last_maintenance"]["files_before"] == files_before

    # The next run recovers window 4 (it landed: acked now, not replayed) and goes on.
    sql(services, source_db, "UPDATE orders SET qty = 99 WHERE id = 7")
    out = p.run_cycle("run-5", merge=merge)
    assert [w.planned.seq for w in out.windows] == [5]
    assert out.windows[0].planned.recovered == "acked landed window 4"
    assert p.coordinator.read_cursor().seq == 5
    assert lake_rows(spark, p, source_db) == source_rows(services, source_db)
    assert delta_state.last_txn_version(p.table_uri(source_db, "orders"), "hk") == 5


def test_a_merge_running_during_maintenance_lands_exactly_once(
    spark, services, source_db: str, zk_client, zk_root: str, tmp_path: Path
) -> None:
    clock = ShiftedClock()
    p = make_pipeline(services, zk_client, zk_root, source_db, tmp_path, clock, services.binlog_end())
    merge = in_process_merge(spark, p)
    sql(services, source_db, ORDERS_DDL)
    for w in range(2):
        values = ",".join(f"({w * 100 + i},'n{i}',{i})" for i in range(1, 101))
        sql(services, source_db, f"INSERT INTO orders VALUES {values}", f"DELETE FROM orders WHERE id = {w * 100 + 1}")
        p.run_cycle(f"run-{w}", merge=merge)
    sql(services, source_db, "UPDATE orders SET qty = qty + 1000",  # every file of the table is rewritten
        "INSERT INTO orders VALUES (1000,'late',1)", "DELETE FROM orders WHERE id = 2")
    grant = p.acquire("run-merging")
    seq = p.plan(grant).seq
    p.stage(grant, seq)
    tables = [t.to_dict() for t in housekeeping.discover_tables(p.lake_root, p.table_filter())]
    assert len(tables) == 2  # orders and its tombstones

    # The merge job in its own process (as the DAG submits it), maintenance passes here meanwhile.
    env = {**os.environ, **spark_env()}
    proc = subprocess.Popen(p.spark_submit_command(grant, seq), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    passes = 0
    try:
        # A few passes while the job runs (each compacts what the job committed meanwhile); more would
        # only slow the job down on a small machine.
        while passes == 0 or (proc.poll() is None and passes < 3):
            report = Maintenance(spark, p.name, grant.token, vacuum_hours=H, log_hours=H, txn_hours=H,
                                 min_hours=H).run(tables)
            assert report["errors"] == [], report["errors"]  # a conflict is retried, never an error
            passes += 1
        output = proc.communicate(timeout=600)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    history = DeltaTable.forPath(spark, p.table_uri(source_db, "orders")).history().select(
        "version", "operation").collect()
    print(f"merge exit {proc.returncode}; {passes} maintenance passes; history:",
          [(r["version"], r["operation"]) for r in sorted(history)])
    if proc.returncode != 0:  # it lost its commit race twice: the window is not acked, so it is replayed
        assert "lost two commit races" in output or "Concurrent" in output, output[-3000:]
        with pytest.raises(LakeError, match="Delta does not hold it"):
            p.ack(grant, seq)
        merge(grant, seq)
    p.ack(grant, seq)
    p.release(grant)
    for t in tables:
        assert delta_state.last_txn_version(t["uri"], p.name) == seq  # landed once, under its identity
    rows = lake_rows(spark, p, source_db)
    assert rows == source_rows(services, source_db)
    assert len({r[0] for r in rows}) == len(rows)
