"""The Airflow glue's pure pieces: what the merge task submits (and that the operator never rewrites its
own fields), the one error -> task state mapping, the hook's connection lookups, the one failure
callback, how the monitor page renders (escaped, no secrets), that its routes demand a login, and that
the plugin registers the way Airflow expects."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_manifest import fake_manifest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-unit-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from cdc_airflow import monitor, operators, states, tasks  # noqa: E402

from cdc_core.coordination import LeaseGrant  # noqa: E402
from cdc_core.model.errors import (  # noqa: E402
    CdcError,
    ConfigError,
    CoordinationError,
    Fenced,
    LakeError,
    LeaseHeld,
    MissingKey,
    PositionPurged,
    SchemaConflict,
    SourceError,
    StagingError,
    StateConflict,
    UnknownTable,
    UnsupportedType,
)

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


GRANT = LeaseGrant("orders", "cdc_orders/manual__1", 3, 1_800_000_000.0, 1_799_999_700.0).to_dict()


class _LeaseTI:
    """A task instance whose `acquire_lease` XCom is `grant` (what Airflow resolves at run time)."""

    def __init__(self, grant: Any) -> None:
        self.grant = grant

    def xcom_pull(self, task_ids: str) -> Any:
        assert task_ids == tasks.LEASE_TASK
        return self.grant


def test_the_window_comes_from_the_plan_and_the_grant_from_the_current_lease() -> None:
    # A cleared step re-runs the lease setup: the grant is acquire_lease's latest result, not the plan's time.
    renewed = {**GRANT, "token": 7}
    grant, seq = tasks.window_lease({"seq": 9, "kind": "stream"}, "stage_window", _LeaseTI(renewed))
    assert grant.token == 7 and grant.holder == "cdc_orders/manual__1" and seq == 9


@pytest.mark.parametrize(("window", "grant"), [(None, GRANT), ({"kind": "stream"}, GRANT), ({"seq": 9}, None)])
def test_missing_window_or_grant_fails_without_retry_and_says_what_to_clear(window: Any, grant: Any) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="clear the run from the 'acquire_lease' task"):
        tasks.window_lease(window, "stage_window", _LeaseTI(grant))


# ------------------------------------------------------------------------------ error -> task state

S = states.TaskState


@pytest.mark.parametrize(
    ("error", "in_step", "checking_request"),
    [
        (LeaseHeld("held", holder="x", expires_at=1.0, token=1), S.SKIP, S.SKIP),
        (ConfigError("bad"), S.FAIL, S.FAIL),
        (Fenced("lost", holder="x", token=1), S.FAIL, S.FAIL),
        (SchemaConflict("conflict"), S.FAIL, S.FAIL),  # the same window meets the same table again
        (PositionPurged("gone"), S.RETRY, S.FAIL),
        (UnknownTable("no such table"), S.RETRY, S.FAIL),
        (StateConflict("window pending"), S.RETRY, S.FAIL),
        (SourceError("unreachable"), S.RETRY, S.RETRY),
        (CoordinationError("ZooKeeper suspended"), S.RETRY, S.RETRY),
        (MissingKey("no key"), S.RETRY, S.RETRY),
        (UnsupportedType("type"), S.RETRY, S.RETRY),
        (StagingError("incomplete"), S.RETRY, S.RETRY),
        (LakeError("merge failed"), S.RETRY, S.RETRY),
        (CdcError("other"), S.RETRY, S.RETRY),
        (RuntimeError("not ours"), S.RETRY, S.RETRY),
    ],
)
def test_error_to_task_state(error: BaseException, in_step: Any, checking_request: Any) -> None:
    """The one mapping, from the error's fields: in a step, and while checking a request (the form)."""
    assert states.task_state(error) is in_step
    assert states.task_state(error, checking_request=True) is checking_request


def test_raise_for_gives_airflow_what_the_state_says() -> None:
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    def raised(err: BaseException, **kw: Any) -> BaseException:
        try:
            states.raise_for(err, "orders", **kw)
        except BaseException as e:
            return e
        raise AssertionError("raise_for returned")

    held = raised(LeaseHeld("msg", holder="cdc_orders/scheduled__2026", expires_at=1_800_000_000, token=7))
    assert isinstance(held, AirflowSkipException)
    assert "cdc_orders/scheduled__2026" in str(held) and "2027-01-15T08:00:00+00:00" in str(held)
    fenced = raised(Fenced("run x lost its lease"))
    assert type(fenced) is AirflowFailException and str(fenced) == "Fenced: run x lost its lease"
    refused = raised(PositionPurged("too old"), checking_request=True)
    assert isinstance(refused, states.RequestRefused) and str(refused) == "PositionPurged: too old"
    lake = LakeError("boom")
    assert raised(lake) is lake  # re-raised as is: Airflow retries it


def test_lease_held_carries_holder_expiry_and_token_and_keeps_its_message() -> None:
    import pickle

    err = LeaseHeld("pipeline 'orders': the lease is held by 'a'", holder="a", expires_at=5.0, token=0x1F)
    assert str(err) == "pipeline 'orders': the lease is held by 'a'"
    assert (err.holder, err.expires_at, err.token, err.exit_code) == ("a", 5.0, 0x1F, 75)
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.holder, back.expires_at, back.token) == (str(err), "a", 5.0, 0x1F)
    fenced = pickle.loads(pickle.dumps(Fenced("lost", holder="h", token=2)))
    assert (str(fenced), fenced.holder, fenced.token, fenced.retryable) == ("lost", "h", 2, False)
    # Without the facts (an old raiser): the skip message still says what happened.
    assert "held by another run (held)" in states.lease_held_message("orders", LeaseHeld("held"))


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


def test_page_marks_a_lag_above_the_pipelines_alert_threshold() -> None:
    calm = monitor.render_page([STATUS], now=NOW)
    assert 'data-field="lag_alert"' not in calm
    breached = {**STATUS, "alerts": [{"alert": "lag", "seconds": 65.0, "max_seconds": 60}]}
    page = monitor.render_page([breached], now=NOW)
    assert 'data-field="lag_alert"' in page and "lag above 60s (alerts.max_lag_seconds)" in page
    assert '<span class="bad">65s</span>' in page


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


def _pc(**zookeeper: Any) -> Any:
    from cdc_core.model.config import PipelineConfig

    return PipelineConfig.model_validate(
        {
            "name": "orders",
            "source": {"conn_id": "src_unit"},
            "tables": {"include": ["shop.*"]},
            "zookeeper": {"hosts": "127.0.0.1:2181", **zookeeper},
            "object_store": {"conn_id": "store_unit"},
        }
    )


def test_hook_resolves_every_connection_through_airflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Source, object store and ZooKeeper credentials all through Airflow's lookup (`get_connection`: the
    metadata database, AIRFLOW_CONN_* or a secrets backend), never from the configuration file."""
    from cdc_airflow.hooks import CdcPipelineHook

    monkeypatch.setenv(
        "AIRFLOW_CONN_SRC_UNIT", '{"conn_type": "mysql", "host": "db1", "port": 3307, "login": "cdc", "password": "pw"}'
    )
    monkeypatch.setenv("AIRFLOW_CONN_ZK_UNIT", '{"conn_type": "generic", "login": "zkuser", "password": "zkpw"}')
    monkeypatch.setenv(
        "AIRFLOW_CONN_STORE_UNIT",
        '{"conn_type": "aws", "login": "AKIA1", "password": "s3pw", "extra": {"endpoint_url": "http://s3:9000"}}',
    )
    asked: list[str] = []
    real = CdcPipelineHook.get_connection

    def spy(conn_id: str) -> Any:
        asked.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(CdcPipelineHook, "get_connection", staticmethod(spy))
    hook = CdcPipelineHook("orders", config=_pc(conn_id="zk_unit"))
    source = hook.source_params()
    assert (source.host, source.port, source.user, source.password) == ("db1", 3307, "cdc", "pw")
    assert hook.zookeeper_digest() == ("zkuser", "zkpw")
    store = hook.object_store()
    assert store is not None and store.endpoint_url == "http://s3:9000"
    assert asked == ["src_unit", "zk_unit", "store_unit"]


def test_hook_reads_an_auth_env_variable_as_before() -> None:
    from cdc_airflow.hooks import CdcPipelineHook

    pc = _pc(auth_env="CDC_ZK_AUTH")
    assert CdcPipelineHook("orders", pc, environ={"CDC_ZK_AUTH": "u:p"}).zookeeper_digest() == ("u", "p")
    assert CdcPipelineHook("orders", _pc(), environ={}).zookeeper_digest() is None
    with pytest.raises(ConfigError, match="CDC_ZK_AUTH"):
        CdcPipelineHook("orders", pc, environ={}).zookeeper_digest()
    with pytest.raises(ConfigError, match="'user:password'"):
        CdcPipelineHook("orders", pc, environ={"CDC_ZK_AUTH": "no-colon"}).zookeeper_digest()


def test_zookeeper_connection_without_a_password_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_airflow.hooks import CdcPipelineHook

    monkeypatch.setenv("AIRFLOW_CONN_ZK_UNIT", '{"conn_type": "generic", "login": "zkuser"}')
    with pytest.raises(ConfigError, match=r"zookeeper\.conn_id names the connection 'zk_unit'"):
        CdcPipelineHook("orders", config=_pc(conn_id="zk_unit")).zookeeper_digest()
    monkeypatch.delenv("AIRFLOW_CONN_ZK_UNIT")
    with pytest.raises(ConfigError, match=r"'zk_unit' \(zookeeper.conn_id\) is not defined"):
        CdcPipelineHook("orders", config=_pc(conn_id="zk_unit")).zookeeper_digest()


def test_undefined_source_connection_says_how_to_define_it() -> None:
    from cdc_airflow.hooks import CdcPipelineHook

    with pytest.raises(ConfigError, match="AIRFLOW_CONN_NO_SUCH_CONN"):
        CdcPipelineHook("orders", config=_pc()).connection_info("no_such_conn", "source.conn_id", "mysql")


def test_hook_opens_the_pipeline_with_what_it_resolved(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_airflow import hooks

    from cdc_core.run import pipeline

    seen: dict[str, Any] = {}

    def from_config(config: Any, source: Any, zk_client: Any = None, **kw: Any) -> Any:
        seen.update(config=config, source=source, **kw)
        return "pipeline"

    monkeypatch.setattr(pipeline.Pipeline, "from_config", staticmethod(from_config))
    monkeypatch.setattr(hooks.CdcPipelineHook, "source_params", lambda self: "source")
    monkeypatch.setattr(hooks.CdcPipelineHook, "object_store", lambda self: None)
    monkeypatch.setattr(hooks.CdcPipelineHook, "zookeeper_digest", lambda self: ("u", "p"))
    pc = _pc()
    assert hooks.CdcPipelineHook("orders", config=pc).get_conn() == "pipeline"
    assert seen == {"config": pc, "source": "source", "store": None, "zk_digest": ("u", "p"), "source_id": None,
                    # the pipeline's metrics through Airflow's Stats; the hash key is read as the CLI does (no conn_id)
                    "metrics_sink": hooks.airflow_stats(), "hash_key": None}

    class Opened:
        closed = False

        def close(self) -> None:
            self.closed = True

    opened = Opened()
    monkeypatch.setattr(pipeline.Pipeline, "from_config", staticmethod(lambda *a, **kw: opened))
    hook = hooks.CdcPipelineHook("orders", config=pc)
    with hook.pipeline() as p:  # what every task does
        assert p is opened and not p.closed
    assert opened.closed and hook.pipeline_name == "orders"


def test_zookeeper_connection_from_the_environment_for_the_cli() -> None:
    """Without Airflow (the cdc CLI) the same `zookeeper.conn_id` is read from AIRFLOW_CONN_<ID>."""
    from cdc_core.model.config.sections import ZooKeeperConfig

    zk = ZooKeeperConfig(conn_id="zk_unit")
    assert zk.digest({"AIRFLOW_CONN_ZK_UNIT": "generic://zkuser:zk%40pw@"}) == ("zkuser", "zk@pw")
    as_json = '{"conn_type": "zookeeper", "login": "u", "password": "p"}'
    assert zk.digest({"AIRFLOW_CONN_ZK_UNIT": as_json}) == ("u", "p")
    with pytest.raises(ConfigError, match="AIRFLOW_CONN_ZK_UNIT"):
        zk.digest({})
    with pytest.raises(ValueError, match="not both"):
        ZooKeeperConfig(conn_id="zk_unit", auth_env="CDC_ZK_AUTH")


# ------------------------------------------------------------------------------ the Spark operators


def _open_pipeline(monkeypatch: pytest.MonkeyPatch, events: list[str], *, tables: int = 1) -> Any:
    """A real `Pipeline` (the merge step and the maintenance run are the product's own) whose outside systems
    are stubs: ZooKeeper renews and records, the staged window has `tables` tables."""
    from types import SimpleNamespace

    from cdc_core.capture.source import SourceParams
    from cdc_core.model.config import PipelineConfig
    from cdc_core.run import merge_step, stage
    from cdc_core.run.pipeline import Pipeline

    cfg = PipelineConfig(name="orders", source={"conn_id": "x"}, tables={"include": ["shop.*"]},
                         staging_root="/nonexistent/staging", lake_root="/nonexistent/lake")
    coordinator: Any = SimpleNamespace(
        renew=lambda grant, ttl: grant,
        record_maintenance=lambda grant, record: events.append(f"record {record['status']}"),
    )
    p = Pipeline(config=cfg, source=SourceParams(host="h", port=1, user="u", password="dbpw"), coordinator=coordinator)
    monkeypatch.setattr(stage, "manifest", lambda p, seq: fake_manifest(*["shop.orders"] * tables, changes=12))
    monkeypatch.setattr(p, "spark_jars", lambda: "/jars/delta.jar")
    monkeypatch.setattr(p, "zk_auth", lambda: "zkuser:zkpw")
    monkeypatch.setattr(merge_step, "merge_application_args",
                        lambda p, g, seq: ["--seq", str(seq), "--token", str(g.token)])
    monkeypatch.setattr(merge_step, "merge_server_address", lambda p: None)

    @contextlib.contextmanager
    def keep_lease(grant: Any) -> Iterator[Any]:
        events.append(f"keep lease {grant.token:#x}")
        yield SimpleNamespace(lost=None)
        events.append("lease kept")

    monkeypatch.setattr(p, "keep_lease", keep_lease)
    return p


class _SparkSubmitHooks:
    """Stands in for the provider's `SparkSubmitHook`: records each submission, and fails it the way the
    provider does (a plain AirflowException; the process's exit code on its Popen) when `rc` says so."""

    def __init__(self, events: list[str], rc: int = 0, output: str = "") -> None:
        self.events, self.rc, self.output = events, rc, output
        self.submitted: list[tuple[dict[str, Any], str]] = []

    def __call__(self, conn_id: str, submit: Any) -> Any:
        outer = self

        class Hook:
            _submit_sp: Any = None

            def submit(self, application: str) -> None:
                from types import SimpleNamespace

                from airflow.sdk.exceptions import AirflowException

                outer.submitted.append((operators.spark_submit_hook_kwargs(conn_id, submit), application))
                outer.events.append("spark-submit")
                self._submit_sp = SimpleNamespace(returncode=outer.rc)
                if outer.rc:
                    raise AirflowException(
                        f"Cannot execute: spark-submit {application}. Error code is: {outer.rc}.\n"
                        f"Last spark-submit output:\n{outer.output}"
                    )

        return Hook()


class _FakeHook:
    """`CdcPipelineHook` opening the pipeline `p`."""

    def __init__(self, p: Any) -> None:
        self.p = p

    def __call__(self, pipeline: str, *a: Any, **kw: Any) -> _FakeHook:
        assert pipeline == "orders"
        return self

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[Any]:
        yield self.p

    @staticmethod
    def secrets(p: Any) -> list[str]:
        return ["dbpw", "zkpw"]


def _merge_task(monkeypatch: pytest.MonkeyPatch, rc: int = 0, output: str = "", tables: int = 1) -> Any:
    from types import SimpleNamespace

    from cdc_airflow import hooks

    events: list[str] = []
    p = _open_pipeline(monkeypatch, events, tables=tables)
    spark = _SparkSubmitHooks(events, rc, output)
    monkeypatch.setattr(hooks, "CdcPipelineHook", _FakeHook(p))
    monkeypatch.setattr(operators, "spark_submit_hook", spark)
    op = operators.CdcMergeOperator(task_id="merge_window", pipeline="orders", conn_id="spark_unit")
    op.window = {"seq": 7, "kind": "stream"}  # what Airflow renders from plan_window's XCom
    return SimpleNamespace(op=op, p=p, spark=spark, events=events)


def test_merge_operator_submits_through_a_hook_and_never_rewrites_its_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _merge_task(monkeypatch)
    t.op.log
    before = dict(vars(t.op))
    t.op.execute({"ti": _LeaseTI(GRANT)})  # the grant: acquire_lease's current result
    assert vars(t.op) == before  # nothing of the operator (fields, provider attributes) changed at execute time
    ((kwargs, application),) = t.spark.submitted
    assert application.endswith("spark_apps/merge_window.py")
    assert kwargs["conn_id"] == "spark_unit" and kwargs["name"] == "cdc-merge-orders-7"
    assert kwargs["application_args"] == ["--seq", "7", "--token", "3"]
    assert kwargs["env_vars"]["CDC_ZK_AUTH"] == "digest:zkuser:zkpw"  # the environment, never the command line
    assert "zkpw" not in " ".join(kwargs["application_args"]) and "zkpw" not in str(kwargs["conf"])
    # The run's lease is renewed while the job runs (a window of many tables may outlast the lease).
    assert t.events == ["keep lease 0x3", "spark-submit", "lease kept"]


@pytest.mark.parametrize(
    ("rc", "line", "raised", "named"),
    [
        (2, "merge_window: ConfigError: spec parallelism must be >= 1, got 0", "fail", "ConfigError"),
        (7, "merge_window: SchemaConflict: table shop.t column 'a'", "fail", "SchemaConflict"),
        (5, "merge_window: Fenced: fenced: the lease is now held by token 0x4", "fail", "Fenced"),
        (4, "merge_window: CoordinationError: ZooKeeper unreachable; retry", CoordinationError, None),
        (8, "merge_window: LakeError: a table of another pipeline", LakeError, None),
        (1, "merge_window: unexpected Py4JError: boom", LakeError, None),
        (137, "", LakeError, None),
    ],
)
def test_the_merge_tasks_state_comes_from_the_jobs_exit_code(
    monkeypatch: pytest.MonkeyPatch, rc: int, line: str, raised: Any, named: str | None
) -> None:
    """SparkSubmitHook raises a plain AirflowException for every failed spark-submit; the operator decodes
    the exit code as the CLI does: what no retry can fix fails the task at once, anything else is retried."""
    from airflow.sdk.exceptions import AirflowFailException

    t = _merge_task(monkeypatch, rc, f"INFO starting\n{line}\nINFO Shutdown hook called")
    with pytest.raises(AirflowFailException if raised == "fail" else raised) as e:
        t.op.execute({"ti": _LeaseTI(GRANT)})
    if named:
        assert str(e.value).startswith(f"{named}: pipeline 'orders': ")
        assert type(e.value.__cause__).__name__ == named
    else:
        assert type(e.value) is raised and f"merge of window 7 failed (exit {rc})" in str(e.value)
    assert t.events == ["keep lease 0x3", "spark-submit", "lease kept"]


def test_a_hook_that_failed_before_spark_submit_ended_is_retried_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowException

    t = _merge_task(monkeypatch)

    def no_driver(self: Any, application: str) -> None:
        raise AirflowException("No driver id is known: something went wrong when executing the spark submit command")

    class Hook:
        submit = no_driver

    monkeypatch.setattr(operators, "spark_submit_hook", lambda conn_id, submit: Hook())
    with pytest.raises(AirflowException, match="No driver id is known"):
        t.op.execute({"ti": _LeaseTI(GRANT)})


def test_an_empty_window_skips_the_merge_task_without_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    t = _merge_task(monkeypatch, tables=0)
    with pytest.raises(AirflowSkipException, match="window 7 has no changes"):
        t.op.execute({"ti": _LeaseTI(GRANT)})
    assert t.events == [] and t.spark.submitted == []


def test_the_merge_operator_sends_the_window_to_the_merge_server_when_one_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warm option in the DAG: the pipeline's merge path (`Pipeline.merge_locally`, the CLI's: server
    request, fence and error mapping), no spark-submit."""
    from airflow.sdk.exceptions import AirflowFailException

    from cdc_core.lake import merge_client

    t = _merge_task(monkeypatch)
    from cdc_core.run import merge_step

    monkeypatch.setattr(merge_step, "merge_server_address", lambda p: "127.0.0.1:7199")
    monkeypatch.setattr(operators, "spark_submit_hook", lambda *a: pytest.fail("spark-submit with a merge server"))
    sent: list[tuple[str, list[str]]] = []
    answer = merge_client.MergeAnswer(0, "{}\n", "")

    def request(address: str, args: list[str], timeout: float | None = None) -> merge_client.MergeAnswer:
        sent.append((address, args))
        return answer

    monkeypatch.setattr(merge_client, "request_merge", request)
    t.op.execute({"ti": _LeaseTI(GRANT)})
    assert sent == [("127.0.0.1:7199", ["--seq", "7", "--token", "3"])]
    answer = merge_client.MergeAnswer(5, "", "merge_window: Fenced: fenced\n")  # the server's answer, decoded alike
    with pytest.raises(AirflowFailException, match=r"^Fenced: .*no longer holds the lease"):
        t.op.execute({"ti": _LeaseTI(GRANT)})


def test_hook_exit_reads_the_real_providers_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hook_exit` reads the exit code and output tail the Spark provider's own `SparkSubmitHook.submit` leaves
    when spark-submit fails (a fake spark-submit on PATH): the guard for the provider attribute it reads."""
    from airflow.sdk.exceptions import AirflowException

    fake = tmp_path / "spark-submit"
    fake.write_text("#!/bin/sh\necho starting\necho 'merge_window: Fenced: lost' >&2\necho 'INFO Shutdown'\nexit 5\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNIT_FAKE", '{"conn_type": "spark", "host": "local[2]"}')
    submit = operators.JobSubmit(application="app.py", application_args=[], jars="", conf={}, env_vars={}, name="n")
    hook = operators.spark_submit_hook("spark_unit_fake", submit)
    with pytest.raises(AirflowException) as e:
        hook.submit("app.py")
    ended = operators.hook_exit(hook, e.value)
    assert ended is not None and ended.rc == 5
    assert ended.stdout.splitlines() == ["starting", "merge_window: Fenced: lost", "INFO Shutdown"]
    # Without the Popen, the exit code the message states.
    assert operators.hook_exit(object(), e.value) == ended
    assert operators.hook_exit(object(), AirflowException("No driver id is known")) is None


def test_the_maintenance_task_records_the_run_and_fails_as_the_job_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """The maintenance operator runs the CLI's maintenance (`housekeeping.maintain`) with its hook: the run is
    recorded (failed), then a configuration error fails the task without retries and a lake error retries."""
    from airflow.sdk.exceptions import AirflowFailException
    from cdc_airflow import hooks
    from cdc_airflow.maintenance import CdcMaintenanceOperator

    from cdc_core.run import housekeeping

    events: list[str] = []
    p = _open_pipeline(monkeypatch, events)
    table = housekeeping.LakeTable("shop.orders", "shop", "orders", "/nonexistent/lake/shop/orders", "table", ())
    monkeypatch.setattr(housekeeping, "discover_tables", lambda *a, **k: [table])
    monkeypatch.setattr(hooks, "CdcPipelineHook", _FakeHook(p))
    op = CdcMaintenanceOperator(task_id="maintain_tables", pipeline="orders", conn_id="spark_unit")
    op.grant, op.cleaned = GRANT, {"staging": {}}

    monkeypatch.setattr(operators, "spark_submit_hook", _SparkSubmitHooks(events, 2, "maintain_tables: ConfigError: x"))
    with pytest.raises(AirflowFailException, match=r"^ConfigError: pipeline 'orders': maintenance of the pipeline"):
        op.execute({})
    assert events == ["keep lease 0x3", "spark-submit", "lease kept", "record failed"]

    events.clear()
    monkeypatch.setattr(operators, "spark_submit_hook", _SparkSubmitHooks(events, 8, "maintain_tables: LakeError: t"))
    with pytest.raises(LakeError, match="safe to retry"):
        op.execute({})
    assert events[-1] == "record failed"

    events.clear()
    monkeypatch.setattr(operators, "spark_submit_hook", _SparkSubmitHooks(events, 5, "maintain_tables: Fenced: x"))
    with pytest.raises(AirflowFailException, match=r"^Fenced: .*the maintenance job refused to write"):
        op.execute({})
    assert "record failed" not in events  # nothing is recorded under a lost lease


def test_spark_hook_arguments_are_a_pure_function_of_the_submission() -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    submit = operators.build_merge_submit(
        StubPipeline(), {"token": 26}, 7, application="a.py", python="/v/bin/python", path="/bin", environ={}
    )
    kwargs = operators.spark_submit_hook_kwargs("spark_unit", submit)
    assert kwargs == {
        "conn_id": "spark_unit",
        "conf": submit.conf,
        "jars": submit.jars,
        "name": "cdc-merge-orders-7",
        "application_args": submit.application_args,
        "env_vars": submit.env_vars,
    }
    hook = operators.spark_submit_hook("spark_unit", submit)
    assert isinstance(hook, SparkSubmitHook) and hook._application_args == submit.application_args


# ------------------------------------------------------------------------------ the failure callback


def test_one_failure_callback_notes_the_step_its_window_and_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowSkipException
    from cdc_airflow import hooks

    notes: list[tuple[Any, ...]] = []

    class Noting:
        def note_failure(self, step: str, error: BaseException, *, seq: Any = None, holder: str = "") -> None:
            notes.append((step, str(error), seq, holder))

    class Hook:
        def __init__(self, pipeline: str) -> None:
            assert pipeline == "orders"

        @contextmanager
        def pipeline(self) -> Any:
            yield Noting()

    monkeypatch.setattr(hooks, "CdcPipelineHook", Hook)
    note = tasks.failure_note("orders")
    ti = SimpleNamespace(task_id="stage_window", dag_id="cdc_orders")
    staged = SimpleNamespace(op_kwargs={"window": {"seq": 42}})
    note({"exception": LakeError("boom"), "ti": ti, "run_id": "manual__1", "task": staged})
    planning = SimpleNamespace(op_kwargs={"grant": GRANT})
    note({"exception": RuntimeError("x"), "ti": ti, "run_id": "manual__2", "task": planning})
    merging = SimpleNamespace(window={"seq": 43})
    note({"exception": RuntimeError("spark"), "ti": ti, "run_id": "manual__3", "task": merging})
    # A refused form (nothing changed) and a skip are not pipeline failures.
    note({"exception": states.RequestRefused("ConfigError: bad form"), "ti": ti, "run_id": "r", "task": staged})
    note({"exception": AirflowSkipException("held"), "ti": ti, "run_id": "r", "task": staged})
    assert notes == [
        ("stage_window", "boom", 42, "cdc_orders/manual__1"),
        ("stage_window", "x", None, "cdc_orders/manual__2"),
        ("stage_window", "spark", 43, "cdc_orders/manual__3"),
    ]


def test_a_group_pipelines_failed_step_is_noted_under_its_own_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of the task group `source_eu2` is eu2's failure (its last error, its monitor section), not the
    first source's; the lease steps stay the pipeline's."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from cdc_airflow import hooks

    opened: list[str] = []

    class Hook:
        def __init__(self, pipeline: str) -> None:
            opened.append(pipeline)

        @contextmanager
        def pipeline(self) -> Any:
            yield SimpleNamespace(note_failure=lambda *a, **k: None)

    monkeypatch.setattr(hooks, "CdcPipelineHook", Hook)
    note = tasks.failure_note("shop")
    for task_id in ("source_eu2.plan_window", "source_us-1.merge_window", "acquire_lease", "stage_window"):
        ti = SimpleNamespace(task_id=task_id, dag_id="cdc_shop")
        note({"exception": RuntimeError("down"), "ti": ti, "run_id": "r", "task": None})
    assert opened == ["shop.eu2", "shop.us-1", "shop", "shop"]


def test_the_failure_callback_never_fails_the_task_further(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from cdc_airflow import hooks

    class Broken:
        def __init__(self, pipeline: str) -> None:
            raise CoordinationError("ZooKeeper unreachable")

    monkeypatch.setattr(hooks, "CdcPipelineHook", Broken)
    ti = SimpleNamespace(task_id="plan_window", dag_id="cdc_orders")
    tasks.failure_note("orders")({"exception": LakeError("boom"), "ti": ti, "run_id": "r", "task": None})


# --------------------------------------------------------------------------------- backfill cancel


def test_cancel_uses_the_clis_cdc_core_call_and_refuses_a_pending_window(monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager
    from types import SimpleNamespace

    from cdc_airflow import hooks

    calls: list[Any] = []
    active = SimpleNamespace(to_dict=lambda: {"position": "mysql-bin.000001:4", "until": "mysql-bin.000002:4"})
    pending = {"now": False}

    class Coordinator:
        def read_cursor(self) -> Any:
            return SimpleNamespace(backfill=active)

        def cancel_backfill(self, grant: Any) -> None:
            if pending["now"]:
                raise StateConflict(
                    "pipeline 'orders': cannot cancel the backfill: window 8 (backfill) is planned and not acked; "
                    "replay and ack it first"
                )
            calls.append(grant)

    class Hook:
        def __init__(self, pipeline: str) -> None:
            pass

        @contextmanager
        def pipeline(self) -> Any:
            yield SimpleNamespace(name="orders", coordinator=Coordinator(), log_event=lambda *a, **k: None)

    monkeypatch.setattr(hooks, "CdcPipelineHook", Hook)
    grant = LeaseGrant.from_dict(GRANT)
    out = tasks.cancel_backfill("orders", grant)
    assert out == {"pipeline": "orders", "cancelled": active.to_dict()} and calls == [grant]
    pending["now"] = True
    refused = r"window 8 \(backfill\) is planned and not acked.*then cancel again"
    with pytest.raises(states.RequestRefused, match=refused):
        tasks.cancel_backfill("orders", grant)  # failed without retries: this run holds the lease


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


# ------------------------------------------------------------------------------------- group pipelines


def _group_pc() -> Any:
    from cdc_core.model.config import PipelineConfig

    return PipelineConfig.model_validate(
        {
            "name": "shop",
            "sources": [{"id": "eu1", "conn_id": "shard_eu1"}, {"id": "eu2", "conn_id": "shard_eu2"}],
            "tables": {"include": ["shop_*.orders"]},
            "zookeeper": {"hosts": "127.0.0.1:2181"},
        }
    )


def test_a_group_pipeline_has_a_monitor_section_per_source(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_core.model import config

    pcs = (_pc(), _group_pc())
    from types import SimpleNamespace

    monkeypatch.setattr(config, "load_config", lambda: SimpleNamespace(pipelines=pcs))
    asked: list[tuple[str, Any]] = []

    def status(pc: Any, source: Any = None) -> dict[str, Any]:
        asked.append((pc.name, source))
        return {"pipeline": pc.name if source is None else f"{pc.name}.{source}"}

    monkeypatch.setattr(monitor, "pipeline_status", status)
    got = [s["pipeline"] for s in monitor.collect_statuses()]
    assert sorted(got) == ["orders", "shop.eu1", "shop.eu2"]
    assert sorted(asked, key=str) == sorted([("orders", None), ("shop", "eu1"), ("shop", "eu2")], key=str)


def test_the_hook_opens_one_source_of_a_group_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    """`shop.eu2` (a task of source eu2's task group) opens eu2 with eu2's connection; the bare pipeline name
    (the lease steps) opens its first source; an unknown source is a ConfigError naming the sources."""
    from cdc_airflow import hooks

    from cdc_core.run import pipeline

    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(pipeline.Pipeline, "from_config",
                        staticmethod(lambda config, source, zk_client=None, **kw: seen.append(kw) or "p"))
    monkeypatch.setattr(hooks.CdcPipelineHook, "connection_info", lambda self, conn_id, role, kind: conn_id)
    monkeypatch.setattr(hooks.CdcPipelineHook, "object_store", lambda self: None)
    monkeypatch.setattr(hooks.CdcPipelineHook, "zookeeper_digest", lambda self: None)
    from cdc_core.capture import source as capture_source

    monkeypatch.setattr(capture_source.SourceParams, "from_connection", staticmethod(lambda info: f"params:{info}"))
    pc = _group_pc()
    assert hooks.CdcPipelineHook("shop.eu2", config=pc).source_params() == "params:shard_eu2"
    hooks.CdcPipelineHook("shop.eu2", config=pc).get_conn()
    hooks.CdcPipelineHook("shop", config=pc).get_conn()
    assert [kw["source_id"] for kw in seen] == ["eu2", "eu1"]
    with pytest.raises(ConfigError, match="has no source 'eu9'"):
        hooks.CdcPipelineHook("shop.eu9", config=pc).source_params()
