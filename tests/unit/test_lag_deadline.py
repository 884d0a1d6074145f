"""The pipeline DAG's lag deadline (cdc_airflow.alerts) and its configuration: pure, no Airflow run (the real
deadline firing in a scheduler and triggerer is tests/e2e/test_scheduler.py's third test)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from cdc_airflow import alerts

from cdc_core.model.config import load_config
from cdc_core.model.errors import ConfigError

pytestmark = pytest.mark.unit


def _pipeline(tmp_path: Any, extra: str = "") -> Any:
    path = tmp_path / "pipelines.yaml"
    path.write_text(
        "pipelines:\n  - name: orders\n    source: {conn_id: src}\n    tables: {include: ['shop.*']}\n"
        "    zookeeper: {hosts: '127.0.0.1:2181'}\n    staging_root: /tmp/s\n    lake_root: /tmp/l\n" + extra
    )
    return load_config(path).pipelines[0]


def test_no_deadline_without_max_lag_seconds(tmp_path: Any) -> None:
    assert alerts.lag_deadline(_pipeline(tmp_path)) is None


def test_the_deadline_counts_from_the_queued_run_and_logs_by_default(tmp_path: Any) -> None:
    from airflow.sdk.definitions.deadline import DeadlineReference

    deadline = alerts.lag_deadline(_pipeline(tmp_path, "    alerts: {max_lag_seconds: 600}\n"))
    assert deadline.interval == timedelta(seconds=600)
    assert deadline.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert deadline.callback.path == "cdc_airflow.alerts.lag_deadline_missed"
    assert deadline.callback.kwargs == {"pipeline": "orders", "max_lag_seconds": 600}


def test_a_notifier_by_dotted_path_gets_its_kwargs(tmp_path: Any) -> None:
    extra = ("    alerts:\n      max_lag_seconds: 60\n      notify:\n"
             "        callable: airflow.providers.smtp.notifications.smtp.SmtpNotifier\n"
             "        kwargs: {to: oncall@example.com, subject: cdc orders behind}\n")
    deadline = alerts.lag_deadline(_pipeline(tmp_path, extra))
    assert deadline.callback.path == "airflow.providers.smtp.notifications.smtp.SmtpNotifier"
    assert deadline.callback.kwargs == {"to": "oncall@example.com", "subject": "cdc orders behind"}


@pytest.mark.parametrize(
    ("notify", "message"),
    [
        ("{callable: 'not a path'}", "alerts.notify.callable"),
        ("{callable: mod.fn, kwargs: {context: 1}}", "'context' is Airflow's"),
        ("{kwargs: {}}", "alerts.notify.callable"),
    ],
)
def test_a_bad_notify_is_a_config_error_naming_the_field(tmp_path: Any, notify: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _pipeline(tmp_path, f"    alerts: {{max_lag_seconds: 5, notify: {notify}}}\n")


def test_the_default_callback_names_the_pipeline_the_run_and_the_setting(caplog: pytest.LogCaptureFixture) -> None:
    context = {"dag_run": {"dag_id": "cdc_orders", "dag_run_id": "manual__1", "queued_at": "2026-11-29T09:00:00Z"}}
    with caplog.at_level(logging.WARNING, logger="cdc.alerts"):
        asyncio.run(alerts.lag_deadline_missed(context, pipeline="orders", max_lag_seconds=5))
    text = caplog.text
    assert "event=alert.lag_deadline" in text and "pipeline=orders" in text and "run_id=manual__1" in text
    assert "max_lag_seconds=5" in text


def test_a_group_pipelines_sources_may_have_their_own_threshold(tmp_path: Any) -> None:
    """`sources[].alerts` (issue 38 §3, "per pipeline and per source"): each source's status uses its own, the
    others the pipeline's; the one DAG's deadline is the pipeline's, else the smallest of its sources'."""
    from cdc_core.run.status import lag_alerts

    path = tmp_path / "pipelines.yaml"
    path.write_text(
        "pipelines:\n  - name: shop\n    tables: {include: ['shop.*']}\n"
        "    zookeeper: {hosts: '127.0.0.1:2181'}\n    staging_root: /tmp/s\n    lake_root: /tmp/l\n"
        "    sources:\n      - {id: eu, conn_id: eu, alerts: {max_lag_seconds: 120}}\n"
        "      - {id: us, conn_id: us, alerts: {max_lag_seconds: 900}}\n      - {id: ap, conn_id: ap}\n"
    )
    pc = load_config(path).pipelines[0]
    assert [pc.for_source(s).alerts.max_lag_seconds for s in ("eu", "us", "ap")] == [120, 900, None]
    assert alerts.lag_deadline(pc).interval == timedelta(seconds=120)
    lag = {"seconds": 300.0}
    assert lag_alerts(lag, pc.for_source("eu").alerts.max_lag_seconds)[0]["max_seconds"] == 120
    assert lag_alerts(lag, pc.for_source("us").alerts.max_lag_seconds) == []
    with_pipeline = path.read_text().replace("    sources:\n", "    alerts: {max_lag_seconds: 3600}\n    sources:\n")
    path.write_text(with_pipeline)
    pc = load_config(path).pipelines[0]
    assert alerts.lag_deadline(pc).interval == timedelta(seconds=3600)
    assert pc.for_source("ap").alerts.max_lag_seconds == 3600  # a source without its own: the pipeline's
