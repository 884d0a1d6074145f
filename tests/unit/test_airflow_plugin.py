"""The Airflow glue's pure pieces: what the merge task submits, how the monitor page renders (escaped,
no secrets), that its routes demand a login, and that the plugin registers the way Airflow expects."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest

pytestmark = pytest.mark.unit

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-unit-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from cdc_airflow import monitor, operators, tasks  # noqa: E402

from cdc_core.model.errors import ConfigError, LeaseHeld  # noqa: E402

# ------------------------------------------------------------------------------------ merge submit


class StubPipeline:
    name = "orders"

    def __init__(self, args: list[str] | None = None, conf: dict[str, str] | None = None) -> None:
        self._args = args if args is not None else ["--window-dir", "/stage/orders/w0000000007", "--seq", "7"]
        self._conf = conf if conf is not None else {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"}

    def merge_application_args(self, grant: Any, seq: int) -> list[str]:
        return [*self._args, "--token", str(grant["token"])]

    def spark_conf(self) -> dict[str, str]:
        return dict(self._conf)

    def spark_jars(self) -> str:
        return "/jars/delta-spark.jar,/jars/delta-storage.jar"


def test_merge_submit_carries_the_pipelines_args_confs_and_jars() -> None:
    submit = operators.build_merge_submit(
        StubPipeline(),
        {"token": 26},
        7,
        application="/repo/spark_apps/merge_window.py",
        python="/venv/bin/python",
        path="/usr/bin:/bin",
        secrets=["s3cret"],
        environ={},
    )
    assert submit.application == "/repo/spark_apps/merge_window.py"
    assert submit.application_args == ["--window-dir", "/stage/orders/w0000000007", "--seq", "7", "--token", "26"]
    assert submit.conf == {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "1g"}
    assert submit.jars == "/jars/delta-spark.jar,/jars/delta-storage.jar"
    assert submit.name == "cdc-merge-orders-7"
    assert submit.env_vars == {  # no SPARK_LOCAL_IP: only the caller's environment may set it
        "PYSPARK_PYTHON": "/venv/bin/python",
        "PATH": "/venv/bin:/usr/bin:/bin",
    }


def test_spark_env_does_not_repeat_the_venv_on_path() -> None:
    env = operators.spark_submit_env("/venv/bin/python", "/usr/bin:/venv/bin")
    assert env["PATH"] == "/usr/bin:/venv/bin"
    assert "CDC_ZK_AUTH" not in env


def test_zookeeper_credentials_reach_the_job_by_environment_only() -> None:
    submit = operators.build_merge_submit(
        StubPipeline(),
        {"token": 2},
        2,
        application="a.py",
        python="/v/bin/python",
        path="",
        secrets=["zkpw"],
        zk_auth="cdc:zkpw",
    )
    assert submit.env_vars["CDC_ZK_AUTH"] == "digest:cdc:zkpw"
    assert "zkpw" not in repr(submit)


@pytest.mark.parametrize(
    ("args", "conf"),
    [
        (["--source", "mysql://cdc:s3cret@db:3306"], None),
        (None, {"spark.hadoop.fs.s3a.secret.key": "s3cret"}),
    ],
)
def test_merge_submit_refuses_a_credential_on_the_command_line(args: Any, conf: Any) -> None:
    with pytest.raises(ConfigError, match="credential"):
        operators.build_merge_submit(
            StubPipeline(args, conf),
            {"token": 1},
            1,
            application="a.py",
            python="/v/bin/python",
            path="",
            secrets=["s3cret"],
        )


class FakeTI:
    task_id = "merge_window"

    def __init__(self, xcoms: dict[str, Any]) -> None:
        self.xcoms = xcoms

    def xcom_pull(self, task_ids: str) -> Any:
        return self.xcoms.get(task_ids)


def test_grant_and_seq_come_from_the_lease_and_plan_xcoms() -> None:
    grant, seq = operators.pull_grant_and_seq(FakeTI({"acquire_lease": {"token": 3}, "plan_window": {"seq": 9}}))
    assert grant == {"token": 3} and seq == 9


def test_missing_xcom_fails_without_retry_and_says_what_to_clear() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="acquire_lease"):
        operators.pull_grant_and_seq(FakeTI({"plan_window": {"seq": 9}}))


# ------------------------------------------------------------------------------------------- tasks


def test_lease_held_message_names_holder_and_expiry() -> None:
    err = LeaseHeld("held")
    err.holder = "cdc_orders/scheduled__2026"  # type: ignore[attr-defined]
    err.until = 1_800_000_000  # type: ignore[attr-defined]
    msg = tasks.lease_held_message("orders", err)
    assert "cdc_orders/scheduled__2026" in msg and "2027-01-15T08:00:00+00:00" in msg


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2026-11-20T08:00", "2026-11-20T08:00:00+00:00"),  # a browser's datetime-local: the form says UTC
        ("2026-11-20T08:00:00Z", "2026-11-20T08:00:00Z"),
        ("2026-11-20T09:00:00+01:00", "2026-11-20T09:00:00+01:00"),
        ("yesterday", "yesterday"),  # left for cdc_core to reject with its message
        (None, None),
    ],
)
def test_form_timestamps_are_utc(given: Any, expected: Any) -> None:
    assert tasks.form_utc(given) == expected


# ----------------------------------------------------------------------------------------- monitor

NOW = 1_790_000_000.0

STATUS: dict[str, Any] = {
    "pipeline": "orders",
    "error": None,
    "config": {"schedule": "*/10 * * * *", "tables": ["shop.*"], "dags": ["cdc_orders", "cdc_orders_backfill"]},
    "cursor": {
        "seq": 42,
        "position": {"file": "mysql-bin.000007", "offset": 1337, "gtid": "0-1-99", "commit_ts": NOW - 65},
        "label": "mysql-bin.000007:1337 gtid=0-1-99",
        "commit_ts": NOW - 65,
        "backfill": None,
    },
    "lease": {"holder": "cdc_orders/<script>alert(1)</script>", "expires_at": NOW + 300, "token": 17},
    "windows": [
        {
            "plan": {
                "seq": 42,
                "kind": "stream",
                "transactions": 3,
                "start": {"file": "mysql-bin.000007", "offset": 100},
                "end": {"file": "mysql-bin.000007", "offset": 1337},
                "planned_at": NOW - 120,
            },
            "state": "acked",
            "acked_at": NOW - 60,
            "result": {
                "tables": {"shop.orders": {"changes": 12, "delta_version": 5, "status": "committed"}},
                "changes": 12,
                "durations": {"merge": 4.25},
            },
        }
    ],
    "last_error": {
        "step": "merge_window", "seq": 42, "holder": "cdc_orders/manual__1", "at": NOW - 90,
        "message": "LakeError: boom & <b>bad</b>", "resolved": False,
    },
    "source_end": {"file": "mysql-bin.000007", "offset": 2000, "gtid": "0-1-101"},
    "lag": {"bytes": 663, "seconds": 65.0},
}


def test_page_shows_cursor_lag_lease_and_windows() -> None:
    page = monitor.render_page([STATUS], now=NOW)
    for text in (
        "Pipeline orders",
        "mysql-bin.000007:1337",
        "0-1-99",
        "65s",
        "663 B",
        "held",
        "token",
        "17",
        "shop.orders: 12",
        "shop.orders: 5",
        "merge 4.2s",
        "step merge_window, window 42, run cdc_orders/manual__1",
        "acked",
        "cdc_orders_backfill",
    ):
        assert text in page, text


def test_page_escapes_everything() -> None:
    page = monitor.render_page([STATUS], now=NOW)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>bad</b>" not in page and "boom &amp; &lt;b&gt;bad&lt;/b&gt;" in page


def test_page_shows_an_unreachable_pipeline_as_an_error() -> None:
    page = monitor.render_page([{"pipeline": "crm", "error": "CoordinationError: ZooKeeper unreachable"}], now=NOW)
    assert "Pipeline crm" in page and "ZooKeeper unreachable" in page


def test_secrets_are_masked_everywhere() -> None:
    status = {"error": "login cdc:pw123@db failed", "nested": [{"x": "pw123"}], "n": 5}
    masked = monitor.mask_secrets(status, ["pw123"])
    assert masked == {"error": "login cdc:***@db failed", "nested": [{"x": "***"}], "n": 5}


def test_window_view_flattens_a_window_record() -> None:
    view = monitor.window_view(STATUS["windows"][0])
    assert view["seq"] == 42 and view["start"] == "mysql-bin.000007:100" and view["end"] == "mysql-bin.000007:1337"
    assert view["tables"] == {"shop.orders": {"changes": 12, "delta_version": 5, "status": "committed", "version": 5}}
    assert view["durations"] == {"merge": 4.25, "total": 60.0}
    assert view["state"] == "acked"


def test_routes_require_a_login(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    monkeypatch.setattr(monitor, "collect_statuses", lambda: [STATUS])
    client = TestClient(monitor.app)
    for path in ("/", "/api/pipelines"):
        assert client.get(path).status_code == 401

    monitor.app.dependency_overrides[get_user] = object
    try:
        page = client.get("/")
        data = client.get("/api/pipelines")
    finally:
        monitor.app.dependency_overrides.clear()
    assert page.status_code == 200 and "mysql-bin.000007:1337" in page.text
    assert data.status_code == 200 and data.json()["pipelines"][0]["cursor"]["seq"] == 42


def test_plugin_registers_the_app_and_a_top_level_nav_link() -> None:
    from airflow.api_fastapi.core_api.datamodels.plugins import ExternalViewResponse

    plugin = monitor.CdcMonitorPlugin
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/cdc-monitor" and app["app"] is monitor.app
    (view,) = plugin.external_views
    parsed = ExternalViewResponse.model_validate(view)
    assert parsed.nav_top_level is True and parsed.destination == "nav"
    assert parsed.href == "/cdc-monitor/" and parsed.url_route == "cdc-monitor"
    assert set(view) <= set(ExternalViewResponse.model_fields)  # no key Airflow would silently ignore


# ------------------------------------------------------------------------------------------- hooks


def test_source_connection_is_resolved_by_airflow(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_airflow import hooks

    monkeypatch.setenv(
        "AIRFLOW_CONN_SRC_UNIT", '{"conn_type": "mysql", "host": "db1", "port": 3307, "login": "cdc", "password": "pw"}'
    )
    info = hooks.connection_info("src_unit")
    assert (info.host, info.port, info.user, info.password) == ("db1", 3307, "cdc", "pw")
    assert "pw" not in repr(info)


def test_missing_zookeeper_auth_variable_is_named() -> None:
    from types import SimpleNamespace

    from cdc_airflow import hooks

    from cdc_core.model.config import ZooKeeperConfig

    pc = SimpleNamespace(name="orders", zookeeper=ZooKeeperConfig(auth_env="CDC_ZK_AUTH"))
    with pytest.raises(ConfigError, match="CDC_ZK_AUTH"):
        hooks.check_zookeeper_auth(pc, environ={})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'user:password'"):
        hooks.check_zookeeper_auth(pc, environ={"CDC_ZK_AUTH": "no-colon"})  # type: ignore[arg-type]
    hooks.check_zookeeper_auth(pc, environ={"CDC_ZK_AUTH": "u:p"})  # type: ignore[arg-type]


def test_undefined_source_connection_says_how_to_define_it() -> None:
    from cdc_airflow import hooks

    with pytest.raises(ConfigError, match="AIRFLOW_CONN_NO_SUCH_CONN"):
        hooks.connection_info("no_such_conn")


def test_page_shows_snapshot_progress_per_table() -> None:
    from cdc_core.model import snapshot_state
    from cdc_core.model.positions import BinlogPosition, ServerIdentity
    from cdc_core.model.window_plan import WindowPlan

    w = BinlogPosition("mysql-bin.000007", 1337, ServerIdentity("mariadb", 1))
    state = snapshot_state.with_requests(
        snapshot_state.SnapshotState(),
        [
            snapshot_state.TableRequest("shop.orders", 250, 100),
            snapshot_state.TableRequest("shop.<b>items</b>", None, 100),
        ],
        now=NOW - 30,
        by="cli",
    )
    spec = snapshot_state.ChunkSpec("shop.orders", ("id",), 1, 1, None, [100], last=False, chunk_rows=100)
    plan = WindowPlan("orders", 43, w, w, kind="snapshot", info={"snapshot": spec.to_dict()})
    state = snapshot_state.after_ack(state, plan, rows=100, now=NOW - 10)
    page = monitor.render_page([{**STATUS, "snapshot": snapshot_state.progress_view(state)}], now=NOW)
    assert "Snapshot (active: loading shop.orders)" in page
    row = page.split('data-table="shop.orders"')[1].split("</tr>")[0]
    assert "running" in row and "1 / 3" in row and ">100<" in row and ">250<" in row and "33.3%" in row
    assert "<b>items</b>" not in page and "shop.&lt;b&gt;items&lt;/b&gt;" in page
    assert "Snapshot" not in monitor.render_page([STATUS], now=NOW)  # no snapshot ever requested: no section


def test_a_paused_pipeline_dag_with_queued_runs_is_called_out_on_the_page() -> None:
    """A continuation run queued behind a paused cdc_<name> is never silent (issue 15 §4)."""
    dags = {
        "cdc_orders": {"paused": True, "queued": 2, "queued_continuations": 1},
        "cdc_orders_backfill": {"paused": False, "queued": 0, "queued_continuations": 0},
        "cdc_orders_snapshot": {"paused": True, "queued": 0, "queued_continuations": 0},
    }
    warnings = monitor.dag_warnings("orders", dags)
    assert len(warnings) == 2
    assert "cdc_orders is paused: 2 queued run(s), 1 of them triggered by continue_run" in warnings[0]
    assert "cdc_orders_snapshot is paused" in warnings[1] and "airflow dags unpause cdc_orders_snapshot" in warnings[1]
    page = monitor.render_page([{**STATUS, "pipeline": "orders", "airflow": dags}], now=NOW)
    assert page.count('data-field="dag_paused"') == 2 and "(paused)" in page
    # Paused without queued runs is the operator's choice (no schedule wanted): no warning for cdc_<name>.
    assert monitor.dag_warnings("orders", {"cdc_orders": {"paused": True, "queued": 0}}) == []
    assert monitor.dag_warnings("orders", {"error": "no database"}) == []
