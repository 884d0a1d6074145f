"""The generated DAGs, parsed by Airflow's own DagBag from a temporary pipelines file: ids, task order,
trigger rules, setup/teardown, one run at a time, retries with back-off, and the backfill form."""

from __future__ import annotations

import copy
import os
import tempfile
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

# Airflow reads AIRFLOW_HOME once, at first import: give this process a throwaway one unless a
# caller already chose (never the user's ~/airflow).
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-unit-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

CONFIG = """
defaults:
  zookeeper: {hosts: "127.0.0.1:22181", root: /cdc-unit}
  lease_seconds: 300
  staging_root: staging
  lake_root: lake
  spark: {conn_id: spark_unit}
  schedule: "*/5 * * * *"
  retries: 4
pipelines:
  - name: orders
    source: {conn_id: src_orders}
    tables: {include: ["shop.orders", "shop.items"]}
  - name: manual-only
    source: {conn_id: src_other}
    tables: {include: ["crm.*"]}
    schedule: null
    retries: 0
    lease_seconds: 40
"""

WINDOW = ["plan_window", "stage_window", "merge_window", "ack_window", "release_lease", "more_work", "continue_run"]
CONTINUE = {"more_work": {"release_lease"}, "continue_run": {"more_work"}}


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cfg = tmp_path_factory.mktemp("cfg") / "pipelines.yaml"
    cfg.write_text(textwrap.dedent(CONFIG))
    old = os.environ.get("CDC_CONFIG")
    os.environ["CDC_CONFIG"] = str(cfg)
    try:
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(ROOT / "dags" / "cdc_pipelines.py"))
    finally:
        if old is None:
            os.environ.pop("CDC_CONFIG", None)
        else:
            os.environ["CDC_CONFIG"] = old
    return bag


def test_every_pipeline_gets_a_scheduled_a_backfill_and_a_snapshot_dag(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == [
        "cdc_manual-only",
        "cdc_manual-only_backfill",
        "cdc_manual-only_snapshot",
        "cdc_orders",
        "cdc_orders_backfill",
        "cdc_orders_snapshot",
    ]


def test_scheduled_dag_shape(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk import TriggerRule

    dag = dagbag.dags["cdc_orders"]
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert dag.schedule == "*/5 * * * *"
    assert set(dag.task_ids) == {"acquire_lease", *WINDOW}
    up = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    assert up == {
        "acquire_lease": set(),
        "plan_window": {"acquire_lease"},
        "stage_window": {"plan_window"},
        "merge_window": {"stage_window", "plan_window"},  # the window (and its grant) as a TaskFlow argument
        "ack_window": {"stage_window", "merge_window", "plan_window"},
        "release_lease": {"ack_window", "acquire_lease"},
        **CONTINUE,
    }
    tr = {t.task_id: t.trigger_rule for t in dag.tasks}
    # ack after a skipped (empty) merge, never after a failed one
    assert tr["ack_window"] == TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS
    # release: a teardown of acquire_lease (runs after any outcome; skipped when acquire was skipped)
    assert tr["release_lease"] == TriggerRule.ALL_DONE_SETUP_SUCCESS
    assert dag.get_task("release_lease").is_teardown
    assert dag.get_task("acquire_lease").is_setup
    for task_id in ("plan_window", "stage_window", "merge_window"):
        assert tr[task_id] == TriggerRule.ALL_SUCCESS


@pytest.mark.parametrize("dag_id", ["cdc_orders", "cdc_orders_backfill", "cdc_orders_snapshot"])
def test_continuation_after_the_teardown_never_changes_the_run_state(dagbag, dag_id: str) -> None:  # type: ignore[no-untyped-def]
    """more_work runs after release_lease whatever its state; the trigger only when more_work says so;
    the run's state still comes from ack_window (a leaf: its only downstream is the teardown)."""
    from airflow.models.dagrun import DagRun
    from airflow.providers.standard.operators.python import ShortCircuitOperator
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
    from airflow.sdk import TriggerRule

    dag = dagbag.dags[dag_id]
    more, carry_on = dag.get_task("more_work"), dag.get_task("continue_run")
    assert isinstance(more, ShortCircuitOperator) and more.ignore_downstream_trigger_rules
    assert more.trigger_rule == TriggerRule.ALL_DONE
    assert isinstance(carry_on, TriggerDagRunOperator)
    assert carry_on.trigger_rule == TriggerRule.ALL_SUCCESS
    assert carry_on.trigger_dag_id == "cdc_orders"
    assert carry_on.wait_for_completion is False
    assert carry_on.skip_when_already_exists is True  # a retried trigger finds its run: never a second one
    assert carry_on.trigger_run_id == "{{ ti.xcom_pull(task_ids='more_work')['trigger_run_id'] }}"
    assert not more.is_teardown and not carry_on.is_teardown

    class _TI:
        def __init__(self, task_id: str) -> None:
            self.task_id, self.state = task_id, None

    # Airflow's own rule for which tasks decide a run's state (it does not use `self`).
    tis = [_TI(t) for t in dag.task_ids]
    leaves = {ti.task_id for ti in DagRun._tis_for_dagrun_state(None, dag=dag, tis=tis)}  # type: ignore[arg-type]
    assert leaves == {"ack_window", "continue_run"}


def test_more_work_continues_only_after_a_successful_ack_that_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from cdc_airflow import tasks

    class _TI:
        def __init__(self, ack: object) -> None:
            self.ack = ack

        def xcom_pull(self, task_ids: str) -> object:
            assert task_ids == "ack_window"
            return self.ack

    def decide(ack: object) -> object:
        monkeypatch.setattr(tasks, "get_current_context", lambda: {"ti": _TI(ack)})
        return tasks.more_work.function()

    yes = {"more": True, "reason": "capped", "detail": "...", "seq": 7, "trigger_run_id": "continue__w7__t1f"}
    assert decide({"seq": 7, "acked": True, "more_work": yes}) == yes
    assert decide({"seq": 7, "acked": True, "more_work": {**yes, "more": False, "reason": "caught_up"}}) is False
    assert decide(None) is False  # the ack failed, was skipped (lease held, dry run): no XCom
    assert decide({"seq": 7, "acked": True}) is False  # an ack result without an answer
    assert tasks.continue_run_id(7, 0x1F) == "continue__w7__t1f"
    assert tasks.continue_run_id(8, 0x1F) != tasks.continue_run_id(7, 0x1F)


def test_retries_with_exponential_backoff_capped_below_the_lease(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["cdc_orders"]
    for t in dag.tasks:
        assert t.retries == 4
        assert t.retry_exponential_backoff == 2.0
        assert t.max_retry_delay == timedelta(seconds=150)
    manual = dagbag.dags["cdc_manual-only"]
    assert {t.retries for t in manual.tasks} == {0}
    assert {t.max_retry_delay for t in manual.tasks} == {timedelta(seconds=30)}


def test_merge_task_is_the_cdc_spark_operator(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk.definitions.xcom_arg import XComArg

    merge = dagbag.dags["cdc_orders"].get_task("merge_window")
    assert type(merge).__name__ == "CdcMergeOperator"
    assert merge.pipeline == "orders"
    assert merge.conn_id == "spark_unit"
    assert tuple(merge.template_fields) == ("window",)
    # The window (with its lease grant) is plan_window's result, rendered by Airflow at execute time.
    assert isinstance(merge.window, XComArg) and merge.window.operator.task_id == "plan_window"


def test_steps_take_the_grant_and_the_window_as_taskflow_arguments(dagbag) -> None:  # type: ignore[no-untyped-def]
    """No step pulls an XCom by task id (but more_work: see its docstring); the data flow is the arguments."""
    from airflow.sdk.definitions.xcom_arg import XComArg

    def source(dag_id: str, task_id: str) -> dict[str, str]:
        task = dagbag.dags[dag_id].get_task(task_id)
        # A TaskFlow task's arguments, or an operator's templated fields (the ack: CdcAckOperator).
        kwargs = getattr(task, "op_kwargs", None) or {k: getattr(task, k) for k in task.template_fields}
        return {k: v.operator.task_id for k, v in kwargs.items() if isinstance(v, XComArg)}

    assert source("cdc_orders", "plan_window") == {"grant": "acquire_lease"}
    assert source("cdc_orders", "stage_window") == {"window": "plan_window"}
    assert source("cdc_orders", "ack_window") == {"window": "plan_window"}
    assert source("cdc_orders", "release_lease") == {"grant": "acquire_lease"}
    assert source("cdc_orders_backfill", "begin_backfill") == {"grant": "acquire_lease"}
    assert source("cdc_orders_snapshot", "begin_snapshot") == {"grant": "acquire_lease"}


@pytest.mark.parametrize("dag_id", ["cdc_orders", "cdc_orders_backfill", "cdc_orders_snapshot"])
def test_one_failure_callback_from_default_args(dagbag, dag_id: str) -> None:  # type: ignore[no-untyped-def]
    """Every task notes its failures (and failed tries) through the same callback, set once in default_args."""
    dag = dagbag.dags[dag_id]
    (note,) = dag.default_args["on_failure_callback"] if isinstance(
        dag.default_args["on_failure_callback"], list) else [dag.default_args["on_failure_callback"]]
    assert note.__name__ == "note_failure"
    for t in dag.tasks:
        assert list(t.on_failure_callback) == [note], t.task_id
        assert list(t.on_retry_callback) == [note], t.task_id


def test_dags_serialize_for_the_scheduler(dagbag) -> None:  # type: ignore[no-untyped-def]
    """What the DAG processor stores (XComArgs in the merge operator's template field, callbacks)."""
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id in ("cdc_orders", "cdc_orders_backfill", "cdc_orders_snapshot"):
        data = DagSerialization.to_dict(dagbag.dags[dag_id])
        back = DagSerialization.from_dict(data)
        assert set(back.task_ids) == set(dagbag.dags[dag_id].task_ids)
        assert back.get_task("merge_window").has_on_failure_callback


def test_manual_pipeline_has_no_schedule(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.dags["cdc_manual-only"].schedule is None
    assert dagbag.dags["cdc_manual-only"].max_active_runs == 1


def test_backfill_dag_shape(dagbag) -> None:  # type: ignore[no-untyped-def]
    dag = dagbag.dags["cdc_orders_backfill"]
    assert dag.schedule is None
    assert dag.max_active_runs == 1
    up = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    assert up["begin_backfill"] == {"acquire_lease"}
    assert up["plan_window"] == {"begin_backfill", "acquire_lease"}
    assert up["ack_window"] == {"stage_window", "merge_window", "plan_window"}
    assert up["release_lease"] == {"ack_window", "acquire_lease"}
    assert {k: up[k] for k in CONTINUE} == CONTINUE
    assert dag.get_task("release_lease").is_teardown
    assert dag.get_task("continue_run").trigger_dag_id == "cdc_orders"  # the scheduled DAG finishes the backfill
    # the backfill's plan step skips itself (and so the rest) on a dry run or a cancel
    assert dag.get_task("plan_window").op_kwargs["skip_unless_replaying"] is True
    assert "skip_unless_replaying" not in dagbag.dags["cdc_orders"].get_task("plan_window").op_kwargs


def test_backfill_form_params(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["cdc_orders_backfill"]
    schema = {k: dag.params.get_param(k).schema for k in dag.params}
    assert schema["start_ts"]["type"] == ["null", "string"]  # required unless cancelling (the first task says so)
    assert schema["start_ts"]["format"] == "date-time"
    assert schema["end_ts"]["type"] == ["null", "string"]
    assert schema["tables"]["items"] == {"type": "string"}
    assert schema["dry_run"]["type"] == "boolean"
    assert schema["cancel"]["type"] == "boolean"

    def validate(conf: dict[str, object]) -> dict[str, object]:
        params = copy.deepcopy(dag.params)  # what a triggered run does: the form's values over the defaults
        for key, value in conf.items():
            params[key] = value
        return params.validate()

    ok = validate({"start_ts": "2026-11-20T08:00:00Z"})
    assert ok == {"start_ts": "2026-11-20T08:00:00Z", "end_ts": None, "tables": None, "dry_run": False, "cancel": False}
    assert validate({"cancel": True})["cancel"] is True
    full = validate(
        {
            "start_ts": "2026-11-20T08:00:00Z",
            "end_ts": "2026-11-21T00:00:00Z",
            "tables": ["shop.orders"],
            "dry_run": True,
        }
    )
    assert full["tables"] == ["shop.orders"] and full["dry_run"] is True
    with pytest.raises(ParamValidationError):
        validate({"start_ts": "2026-11-20T08:00:00Z", "tables": "shop.orders"})
    with pytest.raises(ParamValidationError):
        validate({"start_ts": "2026-11-20T08:00:00Z", "dry_run": "yes"})
    with pytest.raises(ParamValidationError):
        validate({"cancel": "yes"})


def test_backfill_form_is_a_start_or_a_cancel() -> None:
    """The form's request (checked before the lease): start_ts required unless cancelling, and a cancel
    takes nothing else (as `cdc backfill --cancel` refuses other flags)."""
    from cdc_airflow import tasks

    from cdc_core.model.errors import ConfigError

    empty = {"start_ts": None, "end_ts": None, "tables": None, "dry_run": False, "cancel": False}
    assert tasks.backfill_request({**empty, "cancel": True}) == {"cancel": True}
    assert tasks.backfill_request({**empty, "start_ts": "2026-11-20T08:00", "tables": ["shop.orders"]}) == {
        "start_ts": "2026-11-20T08:00:00+00:00", "end_ts": None, "tables": ["shop.orders"], "dry_run": False,
    }
    # No start_ts and no cancel: passed on, for Pipeline.check_backfill's own "start_ts is required" message.
    assert tasks.backfill_request(empty)["start_ts"] is None
    for extra in ({"start_ts": "2026-11-20T08:00:00Z"}, {"dry_run": True}, {"tables": ["shop.orders"]}):
        with pytest.raises(ConfigError, match="backfill cancel takes no"):
            tasks.backfill_request({**empty, "cancel": True, **extra})


def test_snapshot_dag_shape_and_form(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk.exceptions import ParamValidationError

    dag = dagbag.dags["cdc_orders_snapshot"]
    assert dag.schedule is None and dag.max_active_runs == 1
    up = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    assert up["begin_snapshot"] == {"acquire_lease"}
    assert up["plan_window"] == {"begin_snapshot", "acquire_lease"}
    assert up["ack_window"] == {"stage_window", "merge_window", "plan_window"}
    assert up["release_lease"] == {"ack_window", "acquire_lease"}
    assert {k: up[k] for k in CONTINUE} == CONTINUE
    assert dag.get_task("release_lease").is_teardown
    assert dag.get_task("continue_run").trigger_dag_id == "cdc_orders"  # the scheduled DAG runs the next chunks

    def validate(conf: dict[str, object]) -> dict[str, object]:
        params = copy.deepcopy(dag.params)
        for key, value in conf.items():
            params[key] = value
        return params.validate()

    assert validate({}) == {"tables": None, "chunk_rows": None}  # every table, the configured chunk size
    assert validate({"tables": ["shop.orders"], "chunk_rows": 500})["tables"] == ["shop.orders"]
    with pytest.raises(ParamValidationError):
        validate({"chunk_rows": 0})
    with pytest.raises(ParamValidationError):
        validate({"tables": "shop.orders"})


def test_dag_file_reports_a_bad_config_as_an_import_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.dag_processing.dagbag import DagBag

    cfg = tmp_path / "pipelines.yaml"
    cfg.write_text("pipelines:\n  - name: Bad Name\n    source: {conn_id: x}\n    tables: {include: [a.b]}\n")
    monkeypatch.setenv("CDC_CONFIG", str(cfg))
    bag = DagBag(dag_folder=str(ROOT / "dags" / "cdc_pipelines.py"))
    assert not bag.dag_ids
    (error,) = bag.import_errors.values()
    assert "pipeline 'Bad Name'" in error and "name" in error


def test_manual_dags_are_ready_when_triggered_and_the_scheduled_one_keeps_airflows_default(dagbag) -> None:  # type: ignore[no-untyped-def]
    """A paused manual DAG leaves the run its form triggers queued forever (issue 15 §4)."""
    for name in ("orders", "manual-only"):
        assert dagbag.dags[f"cdc_{name}_backfill"].is_paused_upon_creation is False
        assert dagbag.dags[f"cdc_{name}_snapshot"].is_paused_upon_creation is False
        assert dagbag.dags[f"cdc_{name}"].is_paused_upon_creation is None  # [core] dags_are_paused_at_creation


@pytest.mark.parametrize("dag_id", ["cdc_orders", "cdc_orders_backfill", "cdc_orders_snapshot"])
def test_ack_emits_asset_events_through_the_pipeline_alias(dagbag, dag_id: str) -> None:  # type: ignore[no-untyped-def]
    """The ack's outlet and inlet is the pipeline's AssetAlias (docs/downstream.md); a table's Asset names
    its Delta location as a file:// URI, grouped per pipeline."""
    from airflow.sdk import AssetAlias
    from cdc_airflow.assets import asset_for, asset_uri

    ack = dagbag.dags[dag_id].get_task("ack_window")
    alias = AssetAlias(name="cdc_orders_tables", group="cdc_orders")
    assert ack.outlets == [alias] and ack.inlets == [alias]
    asset = asset_for("orders", "/data/lake", "shop", "order items")
    assert (asset.name, asset.uri, asset.group) == (
        "cdc_orders/shop/order~20items", "file:///data/lake/shop/order~20items", "cdc_orders"
    )
    assert asset_uri("s3a://bucket/lake/shop/orders") == "s3://bucket/lake/shop/orders"
    history = asset_for("orders", "/data/lake/", "shop", "order items", "history")  # a table's outputs: their own
    assert (history.name, history.uri) == (
        "cdc_orders/_cdc.history/shop/order~20items", "file:///data/lake/_cdc.history/shop/order~20items")
    changelog = asset_for("orders", "s3://bucket/lake", "shop", "orders", "changelog")
    assert (changelog.name, changelog.uri) == (
        "cdc_orders/_cdc.changelog/shop/orders", "s3://bucket/lake/_cdc.changelog/shop/orders")
