"""The generated maintenance DAGs (dags/cdc_maintenance.py), parsed by Airflow's own DagBag from a
temporary pipelines file: ids, schedule (default daily, per pipeline, or manual), task order,
setup/teardown, one run at a time, and the Spark operator."""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="cdc-unit-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

CONFIG = """
defaults:
  zookeeper: {hosts: "127.0.0.1:22181", root: /cdc-unit}
  lease_seconds: 300
  spark: {conn_id: spark_unit}
  retries: 2
pipelines:
  - name: orders
    source: {conn_id: src_orders}
    tables: {include: ["shop.*"]}
  - name: weekly
    source: {conn_id: src_other}
    tables: {include: ["crm.*"]}
    maintenance: {schedule: "0 3 * * 0"}
  - name: manual
    source: {conn_id: src_other}
    tables: {include: ["crm.*"]}
    maintenance: {schedule: null}
"""


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cfg = tmp_path_factory.mktemp("cfg") / "pipelines.yaml"
    cfg.write_text(textwrap.dedent(CONFIG))
    old = os.environ.get("CDC_CONFIG")
    os.environ["CDC_CONFIG"] = str(cfg)
    try:
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(ROOT / "dags" / "cdc_maintenance.py"))
    finally:
        if old is None:
            os.environ.pop("CDC_CONFIG", None)
        else:
            os.environ["CDC_CONFIG"] = old
    return bag


def test_one_maintenance_dag_per_pipeline_with_its_schedule(dagbag) -> None:  # type: ignore[no-untyped-def]
    assert dagbag.import_errors == {}
    assert sorted(dagbag.dag_ids) == ["cdc_manual_maintenance", "cdc_orders_maintenance", "cdc_weekly_maintenance"]
    assert dagbag.dags["cdc_orders_maintenance"].schedule == "@daily"
    assert dagbag.dags["cdc_weekly_maintenance"].schedule == "0 3 * * 0"
    assert dagbag.dags["cdc_manual_maintenance"].schedule is None  # triggered from the UI only
    for dag in dagbag.dags.values():
        assert dag.max_active_runs == 1 and dag.catchup is False
        assert "maintenance" in dag.tags


def test_maintenance_dag_shape(dagbag) -> None:  # type: ignore[no-untyped-def]
    from airflow.sdk import TriggerRule
    from airflow.sdk.definitions.xcom_arg import XComArg

    dag = dagbag.dags["cdc_orders_maintenance"]
    up = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    assert up == {
        "acquire_lease": set(),
        "clean_up": {"acquire_lease"},
        "maintain_tables": {"clean_up", "acquire_lease"},
        "release_lease": {"maintain_tables", "acquire_lease"},
    }
    assert dag.get_task("acquire_lease").is_setup
    release = dag.get_task("release_lease")
    assert release.is_teardown and release.trigger_rule == TriggerRule.ALL_DONE_SETUP_SUCCESS
    maintain = dag.get_task("maintain_tables")
    assert type(maintain).__name__ == "CdcMaintenanceOperator"
    assert maintain.pipeline == "orders" and maintain.conn_id == "spark_unit"
    # The grant and the cleanup's result are TaskFlow results, rendered into the operator's template fields.
    assert isinstance(maintain.grant, XComArg) and maintain.grant.operator.task_id == "acquire_lease"
    assert isinstance(maintain.cleaned, XComArg) and maintain.cleaned.operator.task_id == "clean_up"
    assert dag.get_task("clean_up").op_kwargs["grant"].operator.task_id == "acquire_lease"
    assert {t.retries for t in dag.tasks} == {2}
    assert {len(t.on_failure_callback) for t in dag.tasks} == {1}  # the one failure note, from default_args
