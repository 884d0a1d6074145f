"""Housekeeping's pure decisions (cdc_core.model.retention) and the pure pieces around them: which staged
windows may go, when records are pruned, the retention floors and how the configuration enforces them,
the maintenance job's argument list and ZooKeeper record, the lease waiting/keeping helpers, the
maintenance job's conflict retries, and the monitor's table section."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_core.coordination import LeaseGrant
from cdc_core.lake.spark_conf import SparkJob
from cdc_core.model import retention
from cdc_core.model.config import load_config
from cdc_core.model.errors import ConfigError, CoordinationError, Fenced, LeaseHeld
from cdc_core.model.retention import AckFacts, record_prune_plan, staged_window_decision

pytestmark = pytest.mark.unit

H = retention.HOUR
NOW = 1_800_000_000.0
DAY = 24 * H


# ---------------------------------------------------------------------------------- staged windows


@pytest.mark.parametrize(
    ("seq", "cursor", "facts", "verdict", "reason"),
    [
        # after the cursor: the pending window, or never planned/acked
        (5, 4, AckFacts("planned"), "keep", "not acked"),
        (6, 4, AckFacts(None), "keep", "not acked"),
        (5, 4, AckFacts("acked", NOW - 10 * DAY), "keep", "not acked"),  # whatever the record says
        # acked, by the record
        (3, 4, AckFacts("acked", NOW - 4 * DAY), "delete", "acked 96.0h ago (record)"),
        (3, 4, AckFacts("acked", NOW - 2 * DAY), "keep", "within the retention"),
        (3, 4, AckFacts("acked", NOW - 3 * DAY), "delete", "acked 72.0h ago"),  # exactly the retention
        (3, 4, AckFacts("acked", None), "keep", "ack time unknown"),
        # a record contradicting the cursor: never "acked"
        (3, 4, AckFacts("planned", NOW - 10 * DAY), "keep", "inconsistent"),
        # the record is gone (pruned): the ack time is bounded by a later window's
        (2, 4, AckFacts(None, acked_by=NOW - 5 * DAY), "delete", "record pruned"),
        (2, 4, AckFacts(None, acked_by=NOW - DAY), "keep", "within the retention"),
        (2, 4, AckFacts(None), "keep", "ack time unknown"),
    ],
)
def test_staged_window_decision(seq: int, cursor: int, facts: AckFacts, verdict: str, reason: str) -> None:
    d = staged_window_decision(seq, cursor, facts, NOW, 3 * DAY)
    assert d.verdict == verdict
    assert reason in d.reason


@given(
    seq=st.integers(1, 100), cursor=st.integers(0, 100), state=st.sampled_from([None, "planned", "acked"]),
    age=st.one_of(st.none(), st.floats(-DAY, 100 * DAY)), bound=st.one_of(st.none(), st.floats(-DAY, 100 * DAY)),
)
def test_never_deletes_an_unacked_or_young_window(seq, cursor, state, age, bound) -> None:  # type: ignore[no-untyped-def]
    facts = AckFacts(state, None if age is None else NOW - age, None if bound is None else NOW - bound)
    d = staged_window_decision(seq, cursor, facts, NOW, 3 * DAY)
    if d.delete:
        assert seq <= cursor
        assert state in (None, "acked")
        known = facts.acked_at if state == "acked" else facts.acked_by
        assert known is not None and NOW - known >= 3 * DAY


@pytest.mark.parametrize(
    ("name", "kind", "seq"),
    [
        ("w0000000012", "window", 12),
        (".w0000000012.tmp-1a2b3c", "temp", 12),
        (".w0000000012.old-abc123", "temp", 12),
        ("w0000000012-1a2b.json", "report", 12),
        ("maintenance-1a2b-1800000000.json", "maintenance_report", None),
        ("w12", "other", None),
        ("notes.txt", "other", None),
        ("w0000000012.json", "other", None),
        ("w00000000012", "other", None),
        ("w0000000012x", "other", None),
        ("w0000000012-zz.json", "other", None),
        (".w0000000012.tmp-", "other", None),
        ("reports", "other", None),
        ("cleanup-due.json", "due", None),
    ],
)
def test_classify_staging_entry(name: str, kind: str, seq: int | None) -> None:
    assert retention.classify_staging_entry(name) == (kind, seq)
    if kind == "maintenance_report":
        assert retention.maintenance_report_name(0x1A2B, 1_800_000_000.9) == name


def test_the_staging_pass_is_next_due_when_the_first_window_it_kept_ages_past_the_retention() -> None:
    kw: dict[str, Any] = {"now": NOW, "retention_seconds": 3 * DAY, "slack_seconds": 600}
    # the first kept window was acked an hour ago: nothing to delete for 3 days less an hour, then the slack
    assert retention.staging_pass_due_at(first_kept_acked=NOW - H, backlog=False, **kw) == NOW + 3 * DAY - H + 600
    # cut short by the per-pass bound: more is due at once, whatever was kept
    assert retention.staging_pass_due_at(first_kept_acked=NOW - H, backlog=True, **kw) == NOW
    # only the pending window kept (or an ack time unknown): look again after the slack
    assert retention.staging_pass_due_at(first_kept_acked=None, backlog=False, **kw) == NOW + 600


@pytest.mark.parametrize(
    ("retention_hours", "lease_seconds", "slack"),
    [
        (72, 600, 2400),  # the defaults: a tenth of 72 h is capped at an hour, and H rounds 20 min up to 1 h
        (1, 600, 360),  # a tenth of the retention
        (72, 60, 3480),
        (72, 1800, 0),  # two leases are exactly an hour: nothing to spare, a pass on every ack as before
        (72, 2000, 3200),  # 4000 s of leases round up to 2 h
    ],
)
def test_the_staging_pass_slack_stays_inside_the_replay_horizon(retention_hours: int, lease_seconds: int,
                                                                slack: float) -> None:
    got = retention.staging_pass_slack_seconds(retention_hours * H, lease_seconds)
    assert got == slack
    # a copy kept `slack` past its retention, re-run then for two leases, is still inside H
    assert retention_hours * H + got + 2 * lease_seconds <= retention.replay_horizon_hours(retention_hours,
                                                                                          lease_seconds) * H


# ------------------------------------------------------------------------------ ZooKeeper records


def test_record_prune_plan() -> None:
    kw: dict[str, Any] = {"now": NOW, "retention_seconds": 7 * DAY, "keep": 100, "max_records": 5000}
    assert not record_prune_plan(records=500, oldest_acked_at=NOW - 6 * DAY, **kw).any
    assert record_prune_plan(records=500, oldest_acked_at=NOW - 8 * DAY, **kw).by_age
    assert not record_prune_plan(records=100, oldest_acked_at=NOW - 80 * DAY, **kw).any  # all within `keep`
    assert not record_prune_plan(records=500, oldest_acked_at=None, **kw).any  # oldest is the pending one
    # the after-ack path waits for a batch: retention + slack
    slack = retention.after_ack_slack_seconds(7 * DAY)
    assert slack == H
    assert not record_prune_plan(records=500, oldest_acked_at=NOW - 7 * DAY - 30 * 60, slack_seconds=slack, **kw).any
    assert record_prune_plan(records=500, oldest_acked_at=NOW - 7 * DAY - 2 * H, slack_seconds=slack, **kw).by_age
    # the hard bound whatever the ages
    plan = record_prune_plan(records=5001, oldest_acked_at=NOW, **kw)
    assert plan.by_count and not plan.by_age
    assert retention.after_ack_slack_seconds(2 * H) == 12 * 60


# ---------------------------------------------------------------------------------------- floors


def test_replay_horizon_and_floors() -> None:
    assert retention.replay_horizon_hours(72, 600) == 73
    assert retention.replay_horizon_hours(72, 1800) == 73
    assert retention.replay_horizon_hours(72, 1801) == 74
    assert retention.replay_horizon_hours(1, 30) == 2
    ok = {"staging_retention_hours": 72, "lease_seconds": 600, "vacuum_retention_hours": 168,
          "log_retention_hours": 720, "txn_retention_hours": 720}
    assert retention.retention_problems(**ok) == []
    assert retention.retention_problems(**{**ok, "vacuum_retention_hours": 73, "txn_retention_hours": 73}) == []
    short = retention.retention_problems(**{**ok, "vacuum_retention_hours": 72})
    assert len(short) == 1 and "vacuum_retention_hours: 72 is shorter than the replay horizon" in short[0]
    assert "at least 73" in short[0]
    txn = retention.retention_problems(**{**ok, "txn_retention_hours": 24})
    assert len(txn) == 1 and "txn_retention_hours" in txn[0]
    log = retention.retention_problems(**{**ok, "log_retention_hours": 100})
    assert len(log) == 1 and "log_retention_hours: 100" in log[0]
    assert retention.managed_table_properties(168, 720, 720) == {
        "delta.setTransactionRetentionDuration": "interval 720 hours",
        "delta.deletedFileRetentionDuration": "interval 168 hours",
        "delta.logRetentionDuration": "interval 720 hours",
    }


def _config(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "pipelines.yaml"
    p.write_text(textwrap.dedent(body))
    return p


PIPELINE = """
pipelines:
  - name: orders
    source: {conn_id: src}
    tables: {include: ["shop.*"]}
"""


def test_config_defaults_and_refusals(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, PIPELINE)).pipeline("orders")
    m = cfg.maintenance
    assert (m.schedule, m.vacuum_retention_hours, m.log_retention_hours, m.txn_retention_hours) == (
        "@daily", 168, 720, 720
    )
    assert (m.window_records_retention_hours, m.window_records_keep, m.window_records_max) == (168, 100, 5000)
    assert m.cleanup_after_ack and m.lease_wait_seconds == 600

    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, "defaults:\n  maintenance: {vacuum_retention_hours: 24}\n" + PIPELINE))
    assert "pipelines.yaml: defaults:" in str(e.value)
    assert "maintenance.vacuum_retention_hours: 24 is shorter than the replay horizon" in str(e.value)

    with pytest.raises(ConfigError, match="txn_retention_hours: 48 is shorter"):
        load_config(_config(tmp_path, PIPELINE + "    maintenance: {txn_retention_hours: 48}\n"))
    # a longer staging retention raises the horizon: the same vacuum value is now too short
    with pytest.raises(ConfigError, match="at least 201"):
        load_config(_config(tmp_path, PIPELINE + "    staging_retention_hours: 200\n"))
    ok = load_config(_config(tmp_path, PIPELINE + textwrap.indent(textwrap.dedent("""\
        staging_retention_hours: 2
        lease_seconds: 60
        maintenance: {vacuum_retention_hours: 3, log_retention_hours: 3, txn_retention_hours: 3, schedule: null}
        table_options: {shop.orders: {zorder_by: [id]}}
        """), "    ")))
    assert ok.pipeline("orders").maintenance.schedule is None
    assert ok.pipeline("orders").table_options["shop.orders"]["zorder_by"] == ["id"]

    with pytest.raises(ConfigError, match=r"delta.logRetentionDuration is managed by the product"):
        load_config(_config(tmp_path, PIPELINE + textwrap.indent(
            "table_options: {shop.orders: {properties: {delta.logRetentionDuration: interval 1 hours}}}\n", "    ")))
    with pytest.raises(ConfigError, match="are partition columns"):
        load_config(_config(tmp_path, PIPELINE + textwrap.indent(
            "table_options: {shop.orders: {partition_by: [day], zorder_by: [day]}}\n", "    ")))
    with pytest.raises(ConfigError, match="window_records_max"):
        load_config(_config(tmp_path, PIPELINE + "    maintenance: {window_records_keep: 50, window_records_max: 20}"))
    with pytest.raises(ConfigError, match=r"maintenance\.schedule: unknown preset"):
        load_config(_config(tmp_path, PIPELINE + "    maintenance: {schedule: '@fortnightly'}\n"))


# ------------------------------------------------------------------------------ the maintenance job


class _StubPipeline:
    """What the argument builders read from a Pipeline."""

    def __init__(self, tmp_path: Path) -> None:
        cfg = load_config(_config(tmp_path, PIPELINE)).pipeline("orders")
        self.config = cfg
        self.name = cfg.name
        self.staging_root = "s3://bucket/staging"
        self.lake_root = "s3://bucket/lake"

    def spark_conf(self) -> dict[str, str]:
        return {"spark.sql.shuffle.partitions": "2"}

    def spark_jars(self) -> str:
        return "/jars/delta.jar"

    def spark_job(self, application: object, args: list[str], name: str) -> SparkJob:
        return SparkJob(str(application), args, name, self.spark_jars(), self.spark_conf(), {})


GRANT = LeaseGrant(pipeline="orders", holder="cdc_orders_maintenance/run1", token=0x1A2B, expires_at=1.0,
                   acquired_at=0.0)


def test_maintenance_arguments_and_command(tmp_path: Path) -> None:
    from cdc_core.lake.job_specs import MaintenanceJobSpec
    from cdc_core.run import housekeeping

    p = _StubPipeline(tmp_path)
    tables = [housekeeping.LakeTable("shop.orders", "shop", "orders", "s3://bucket/lake/shop/orders", "table", ("id",))]
    report = housekeeping.report_uri(p, GRANT, 1_800_000_000)  # type: ignore[arg-type]
    assert report == "s3://bucket/staging/orders/reports/maintenance-1a2b-1800000000.json"
    args = housekeeping.maintenance_application_args(p, GRANT, tables, report, vacuum=False)  # type: ignore[arg-type]
    assert args[0] == "--spec" and len(args) == 2  # one JSON argument (cdc_core.lake.job_specs)
    got = MaintenanceJobSpec.from_json(args[1])
    assert got.pipeline == "orders" and got.token == 0x1A2B
    assert got.tables == [
        {"name": "shop.orders", "uri": "s3://bucket/lake/shop/orders", "kind": "table", "zorder_by": ["id"]}
    ]
    assert (got.vacuum_retention_hours, got.log_retention_hours, got.txn_retention_hours) == (168, 720, 720)
    assert got.min_retention_hours == 73
    assert got.zk_root == "/binlog-delta-cdc"
    assert (got.optimize, got.vacuum) == (True, False)
    assert got.parallelism == 4  # spark.merge_parallelism: the jobs' writer threads
    from spark_apps.maintain_tables import parse_args

    assert parse_args(args) == got  # what the job reads back
    cmd = housekeeping.maintenance_submit_command(p, args, master="spark://m1:7077")  # type: ignore[arg-type]
    assert cmd[:9] == [
        "spark-submit", "--master", "spark://m1:7077", "--deploy-mode", "client", "--name", "cdc-maintain-orders",
        "--jars", "/jars/delta.jar",
    ]
    assert cmd[cmd.index(str(housekeeping.MAINTENANCE_JOB)) + 1:] == args


def test_maintenance_record_is_compact_and_says_what_failed() -> None:
    from cdc_core.run import housekeeping

    report = {
        "tables": [{"name": "shop.orders", "kind": "table", "status": "ok", "error": None, "files_before": 40,
                    "files_after": 1, "bytes_before": 9000, "bytes_after": 4000, "uri": "/lake/shop/orders",
                    "optimize": {"mode": "zorder", "files_removed": 40, "files_added": 1, "bytes_removed": 9000},
                    "vacuum": {"files_deleted": 3, "bytes_deleted": 123, "retention_hours": 168},
                    "log": {"checkpoint_version": 52, "entries_deleted": 0, "entries_before": 90}}],
        "totals": {"files_before": 40, "files_after": 1}, "errors": [],
    }
    rec = housekeeping.maintenance_record(grant=GRANT, started_at=1.0, finished_at=2.0, cleanup_result={"x": 1},
                                          report=report)
    assert rec["status"] == "ok" and rec["token"] == 0x1A2B and rec["holder"] == GRANT.holder
    assert rec["tables"] == [{
        "name": "shop.orders", "kind": "table", "status": "ok", "error": None, "files_before": 40, "files_after": 1,
        "bytes_before": 9000, "bytes_after": 4000,
        "optimize": {"mode": "zorder", "files_removed": 40, "files_added": 1},
        "vacuum": {"files_deleted": 3, "bytes_deleted": 123}, "log": {"checkpoint_version": 52, "entries_deleted": 0},
    }]
    failed = housekeeping.maintenance_record(grant=GRANT, started_at=1.0, finished_at=2.0, cleanup_result=None,
                                             report=None, error="spark-submit exited 1")
    assert failed["status"] == "failed" and failed["errors"] == ["spark-submit exited 1"] and failed["tables"] == []
    json.dumps(rec)


def test_acquire_waiting_retries_while_held_then_gives_up() -> None:
    from cdc_core.run import housekeeping

    class P:
        name = "orders"

        def __init__(self, held: int) -> None:
            self.held = held
            self.calls = 0

        def acquire(self, holder: str) -> LeaseGrant:
            self.calls += 1
            if self.calls <= self.held:
                raise LeaseHeld("held by cdc_orders/run7")
            return GRANT

    t = [0.0]

    def sleep(s: float) -> None:
        t[0] += s

    p = P(held=3)
    assert housekeeping.acquire_waiting(p, "m", 60, poll_seconds=5, sleep=sleep, clock=lambda: t[0]) == GRANT  # type: ignore[arg-type]
    assert p.calls == 4 and t[0] == 15
    t[0] = 0.0
    p = P(held=100)
    with pytest.raises(LeaseHeld):
        housekeeping.acquire_waiting(p, "m", 12, poll_seconds=5, sleep=sleep, clock=lambda: t[0])  # type: ignore[arg-type]
    assert t[0] == 12 and p.calls == 4  # 0, 5, 10, 12: then it gives up
    with pytest.raises(LeaseHeld):
        housekeeping.acquire_waiting(P(held=1), "m", 0, sleep=sleep, clock=lambda: t[0])  # type: ignore[arg-type]


def test_lease_keeper_renews_until_fenced() -> None:
    from cdc_core.coordination.lease_keeper import LeaseKeeper

    calls: list[int] = []
    done = threading.Event()

    def renew() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise CoordinationError("ZooKeeper connection is SUSPENDED")  # passing: retried
        if len(calls) == 4:
            done.set()
            raise Fenced("taken over")

    with LeaseKeeper(renew, 0.01, "orders") as keeper:
        assert done.wait(10)
        keeper._thread.join(10)
    assert len(calls) == 4 and keeper.renewals == 2 and isinstance(keeper.lost, Fenced)


def test_maintenance_job_retries_a_commit_conflict_and_refuses_txn_confs() -> None:
    from spark_apps.maintain_tables import CONFLICT_ATTEMPTS, Maintenance, check_retentions, parse_tables

    class Conf:
        def __init__(self, values: dict[str, str]) -> None:
            self.values = dict(values)

        def get(self, k: str, default: Any = None) -> Any:
            return self.values.get(k, default)

        def set(self, k: str, v: str) -> None:
            self.values[k] = v

        def unset(self, k: str) -> None:
            self.values.pop(k, None)

    class Spark:
        def __init__(self, conf: dict[str, str]) -> None:
            self.conf = Conf(conf)

    fences: list[int] = []
    job = Maintenance(Spark({}), "orders", 7, vacuum_hours=73, log_hours=73, txn_hours=73, min_hours=73,  # type: ignore[arg-type]
                      fence=lambda: fences.append(1), sleep=lambda s: None)
    attempts = [0]
    seen_meta: list[str] = []

    def flaky() -> str:
        attempts[0] += 1
        seen_meta.append(job.spark.conf.get("spark.databricks.delta.commitInfo.userMetadata"))
        if attempts[0] < 3:
            raise RuntimeError("[DELTA_CONCURRENT_APPEND] io.delta.exceptions.ConcurrentAppendException: files added")
        return "done"

    assert job.with_retries("shop.orders", "optimize", flaky) == ("done", 3)
    assert len(fences) == 3  # fenced before every attempt
    assert json.loads(seen_meta[0])["step"] == "optimize"
    assert "spark.databricks.delta.commitInfo.userMetadata" not in job.spark.conf.values  # unset after

    def always() -> None:
        raise RuntimeError("ConcurrentDeleteReadException")

    with pytest.raises(RuntimeError):
        job.with_retries("shop.orders", "optimize", always)

    def other() -> None:
        raise ValueError("something else")

    attempts[0] = 0
    with pytest.raises(ValueError):
        job.with_retries("shop.orders", "optimize", other)
    assert CONFLICT_ATTEMPTS >= 3

    with pytest.raises(ConfigError, match="txnAppId"):
        Maintenance(Spark({"spark.databricks.delta.write.txnAppId": "orders"}), "orders", 7,  # type: ignore[arg-type]
                    vacuum_hours=73, log_hours=73, txn_hours=73, min_hours=73)
    with pytest.raises(ConfigError, match="shorter than the replay horizon 73h"):
        check_retentions(72, 720, 720, 73)
    with pytest.raises(ConfigError, match="kind must be one of"):
        parse_tables('[{"name": "a.b", "uri": "/x", "kind": "view"}]')
    assert parse_tables('[{"name": "a.b", "uri": "/x"}]') == [{"name": "a.b", "uri": "/x", "kind": "table",
                                                               "zorder_by": []}]


def test_monitor_renders_tables_and_last_maintenance() -> None:
    from cdc_airflow import monitor

    status = {
        "pipeline": "orders", "cursor": {"seq": 3}, "lease": None, "windows": [],
        "maintenance": {
            "last": {"status": "ok", "finished_at": NOW - 3600, "totals": {"files_before": 40, "files_after": 2,
                     "vacuum_files": 3, "vacuum_bytes": 2048, "log_entries_deleted": 5},
                     "cleanup": {"staging": {"windows_deleted": 7, "bytes_freed": 10 * 1024 * 1024},
                                 "records": {"records_deleted": 12}}, "errors": []},
            "tables": [
                {"name": "shop.orders", "kind": "table", "files": 2, "size_bytes": 4096, "version": 52,
                 "last_commit_at": "2027-01-15T08:00:00.000Z",
                 "last_maintenance": {"at": NOW - 3600, "status": "ok", "files_before": 40, "files_after": 2,
                                      "vacuum_files": 3, "vacuum_bytes": 2048}},
                {"name": "shop.orders", "kind": "tombstones", "files": 1, "size_bytes": 100, "version": 9,
                 "last_maintenance": None},
                {"name": "shop.<b>", "kind": "table", "error": "LakeError: <gone>"},
            ],
        },
    }
    page = monitor.render_page([status], now=NOW)
    assert 'data-field="tables"' in page
    assert 'data-table="shop.orders"' in page and 'data-table="shop.orders (tombstones)"' in page
    assert "files 40 &rarr; 2, vacuumed 3 (2.0 KiB)" in page
    assert "staged windows 7 (10.0 MiB), ZooKeeper records 12" in page
    assert "never" in page
    assert "<b>" not in page and "&lt;gone&gt;" in page
    assert monitor.render_tables({"error": "CoordinationError: down"}, NOW).startswith('<div class="error"')
    assert monitor.render_tables(None, NOW) == ""


def test_maintenance_threads_keep_the_tables_order_record_failures_and_stop_at_a_fence() -> None:
    """Tables maintained `parallelism` at a time, each thread on its own session (its own commit metadata):
    results in the tables' order, a broken table recorded while the others go on, a fencing verdict raised."""
    from spark_apps.maintain_tables import Maintenance

    class Conf(dict[str, str]):
        def set(self, k: str, v: str) -> None:
            self[k] = v

        def unset(self, k: str) -> None:
            self.pop(k, None)

    class Spark:
        def __init__(self) -> None:
            self.conf = Conf()

        def newSession(self) -> Spark:
            return Spark()

    started = threading.Barrier(3, timeout=10)  # three tables in flight at once, or this times out

    class Job(Maintenance):
        def maintain(self, t: dict[str, Any]) -> dict[str, Any]:
            if t["name"] in ("t0", "t1", "t2"):
                started.wait()
            if t["name"] == "bad":
                raise RuntimeError("OPTIMIZE failed")
            if t["name"] == "fenced":
                raise Fenced("the lease moved on")
            return {"name": t["name"], "session": self.spark, "status": "ok"}

    base = Spark()
    tables = [{"name": n, "kind": "table", "uri": f"/lake/{n}"} for n in ("t0", "t1", "t2", "bad", "t4", "t5")]
    job = Job(base, "orders", 7, vacuum_hours=73, log_hours=73, txn_hours=73, min_hours=73,  # type: ignore[arg-type]
              parallelism=3)
    report = job.run(tables)
    assert [t["name"] for t in report["tables"]] == ["t0", "t1", "t2", "bad", "t4", "t5"]
    assert report["errors"] == ["bad (table): RuntimeError: OPTIMIZE failed"]
    assert report["tables"][3]["status"] == "error"
    sessions = {id(t["session"]) for t in report["tables"] if "session" in t}
    assert len(sessions) == 3 and id(base) not in sessions  # one session per thread, never the base one
    assert all(t["session"].conf["spark.databricks.delta.vacuum.logging.enabled"] == "true"
               for t in report["tables"] if "session" in t)
    assert report["settings"]["parallelism"] == 3

    fenced = [{"name": n, "kind": "table", "uri": f"/lake/{n}"} for n in ("t4", "fenced", "t5")]
    with pytest.raises(Fenced):
        Job(base, "orders", 7, vacuum_hours=73, log_hours=73, txn_hours=73, min_hours=73,  # type: ignore[arg-type]
            parallelism=2).run(fenced)
    with pytest.raises(ConfigError, match="parallelism must be >= 1"):
        Job(base, "orders", 7, vacuum_hours=73, log_hours=73, txn_hours=73, min_hours=73,  # type: ignore[arg-type]
            parallelism=0)


def test_pruned_record_marks_stay_few_and_bound_every_pruned_window_tightly() -> None:
    """Records pruned by count one per ack, far faster than the staging retention passes (the long run's shape,
    where the old bound, the oldest record left, never aged): the marks stay about MARKS_PER_HORIZON, every pruned
    window's bound is an upper bound of its ack time at most one spacing (plus one window) late, and windows acked
    longer ago than the horizon get a bound older than it (their staged copies may go)."""
    horizon, step = 3600.0, 3.0  # a window every 3 s: 1,200 per horizon, records kept: 100
    marks: list[retention.Mark] = []
    acked = {seq: 1000.0 + seq * step for seq in range(1, 20_001)}
    for seq in range(101, 20_001):  # each ack prunes the record 100 behind
        now = acked[seq]
        marks = retention.marks_after_prune(marks, (seq - 100, acked[seq - 100]), now, horizon)
        assert len(marks) <= retention.MARKS_PER_HORIZON + 2
    now = acked[20_000]
    spacing = horizon / retention.MARKS_PER_HORIZON
    for seq in range(1, 19_901):
        bound = retention.acked_by_mark(marks, seq)
        if bound is None:  # pruned after the last mark: young, bounded by the next record meanwhile
            assert seq > marks[-1][0] and acked[seq] > now - horizon / 2, seq
            continue
        assert bound >= acked[seq], seq
        if acked[seq] >= now - horizon:  # within the horizon: tight
            assert bound - acked[seq] <= spacing + step, (seq, bound - acked[seq])
        elif acked[seq] < now - horizon - spacing - step:  # well past it: provably older than the horizon
            assert bound < now - horizon, seq
    assert retention.acked_by_mark(marks, 19_901) is None  # not pruned: its own record answers
    assert retention.marks_after_prune(marks, marks[-1], now, horizon) == marks  # a replayed prune: unchanged
