"""The pipeline's metrics from its events (cdc_core/run/metrics.py): the table, the StatsD wire format, and
that a broken sink never fails a run."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import ConfigError
from cdc_core.run import metrics
from cdc_core.run.metrics import EVENT_METRICS, Metrics, StatsdSink
from tests.support.statsd import received

pytestmark = pytest.mark.unit


class Recorder:
    """A sink with Airflow Stats' shape that keeps what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float, dict[str, str] | None]] = []

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, str] | None = None) -> None:
        self.sent.append(("incr", stat, count, tags))

    def gauge(self, stat: str, value: float, rate: float = 1, delta: bool = False, *,
              tags: dict[str, str] | None = None) -> None:
        self.sent.append(("gauge", stat, value, tags))

    def timing(self, stat: str, dt: float, *, tags: dict[str, str] | None = None) -> None:
        self.sent.append(("timing", stat, dt, tags))


def test_a_staged_window_yields_its_changes_tables_and_duration_per_pipeline() -> None:
    rec = Recorder()
    Metrics(rec, "orders.shard1").observe("window.staged", {"seq": 4, "tables": 3, "changes": 150, "secs": "0.41"})
    tags = {"pipeline": "orders.shard1"}
    assert rec.sent == [
        ("incr", "cdc.window.changes", 150, tags), ("incr", "cdc.window.changes.orders.shard1", 150, tags),
        ("gauge", "cdc.window.tables", 3.0, tags), ("gauge", "cdc.window.tables.orders.shard1", 3.0, tags),
        ("timing", "cdc.stage.duration", 410.0, tags), ("timing", "cdc.stage.duration.orders.shard1", 410.0, tags),
    ]
    rec.sent.clear()  # a window of a table with a change log also counts the updates' before images it staged
    Metrics(rec, "orders.shard1").observe("window.staged", {"seq": 5, "tables": 1, "changes": 9, "before_images": 4,
                                                            "secs": "0.1"})
    assert ("incr", "cdc.window.before_images", 4, tags) in rec.sent


def test_events_without_metrics_or_without_the_field_send_nothing() -> None:
    rec = Recorder()
    m = Metrics(rec, "p", prefix="etl.cdc")
    m.observe("window.merging", {"seq": 1})
    m.observe("window.acked", {"seq": 1, "cursor": None})  # a cursor without a commit time: no lag
    assert rec.sent == [("incr", "etl.cdc.window.acked", 1, {"pipeline": "p"}),
                        ("incr", "etl.cdc.window.acked.p", 1, {"pipeline": "p"})]
    rec.sent.clear()
    m.observe("step.failed", {"step": "merge_window", "seq": 2})
    assert rec.sent[0] == ("incr", "etl.cdc.step.failed", 1, {"pipeline": "p", "step": "merge_window"})


def test_a_sink_that_raises_is_dropped_and_the_run_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        def incr(self, *a: Any, **kw: Any) -> None:
            raise OSError("network unreachable")

    m = Metrics(Broken(), "p")
    m.observe("lease.acquired", {})
    m.observe("lease.acquired", {})
    assert m.sink is None
    assert caplog.text.count("metrics.dropped") == 1


def test_every_metric_of_the_table_is_well_formed() -> None:
    for event, ms in EVENT_METRICS.items():
        assert "." in event and ms, event
        for m in ms:
            assert m.kind in (metrics.COUNTER, metrics.GAUGE, metrics.TIMING), m
            assert m.name == m.name.lower() and " " not in m.name, m


def test_statsd_lines_reach_a_real_udp_listener(statsd_listener: socket.socket) -> None:
    m = Metrics(StatsdSink(f"127.0.0.1:{statsd_listener.getsockname()[1]}"), "p")
    m.observe("window.merged", {"seq": 1, "secs": "12.0"})
    m.observe("window.acked", {"seq": 1, "commit_age_s": 2.5})
    assert received(statsd_listener) == {
        "cdc.merge.duration": ["12000|ms"], "cdc.merge.duration.p": ["12000|ms"], "cdc.window.acked": ["1|c"],
        "cdc.window.acked.p": ["1|c"], "cdc.lag.seconds": ["2.500|g"], "cdc.lag.seconds.p": ["2.500|g"]}


def test_the_cli_sends_to_the_configured_or_the_environments_statsd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(metrics.STATSD_ENV, raising=False)
    assert metrics.for_cli("p", None, "cdc").sink is None
    assert isinstance(metrics.for_cli("p", "127.0.0.1:8125", "cdc").sink, StatsdSink)
    monkeypatch.setenv(metrics.STATSD_ENV, "127.0.0.1:9125")
    sink = metrics.for_cli("p", "127.0.0.1:8125", "cdc").sink
    assert isinstance(sink, StatsdSink) and sink.target == ("127.0.0.1", 9125)
    monkeypatch.setenv(metrics.STATSD_ENV, "statsd")
    with pytest.raises(ConfigError, match=r"CDC_STATSD='statsd': must be host:port, e.g. 127.0.0.1:8125"):
        metrics.for_cli("p", None, "cdc")


def test_the_metrics_section_is_validated() -> None:
    base = {"name": "p", "source": {"conn_id": "src"}, "tables": {"include": ["db.*"]}}
    cfg = PipelineConfig.model_validate({**base, "metrics": {"statsd": "statsd.internal:8125", "prefix": "etl.cdc"}})
    assert (cfg.metrics.statsd, cfg.metrics.prefix) == ("statsd.internal:8125", "etl.cdc")
    assert PipelineConfig.model_validate(base).metrics.statsd is None
    with pytest.raises(ValueError, match="must be host:port"):
        PipelineConfig.model_validate({**base, "metrics": {"statsd": "8125"}})


def test_a_fenced_step_also_counts_as_a_fenced_run_and_maintenance_reports_its_outcome() -> None:
    rec = Recorder()
    m = Metrics(rec, "p")
    m.observe("step.failed", {"step": "ack_window", "error_type": "Fenced", "error": "Fenced: lost the lease"})
    m.observe("step.failed", {"step": "merge_window", "error_type": "LakeError", "error": "LakeError: ..."})
    names = [name for _, name, _, _ in rec.sent if not name.endswith(".p")]
    assert names == ["cdc.step.failed", "cdc.lease.fenced", "cdc.step.failed"]
    assert rec.sent[0][3] == {"pipeline": "p", "step": "ack_window", "error_type": "Fenced"}
    rec.sent.clear()
    m.observe("maintenance.recorded", {"status": "failed", "tables": 3, "failed": 1})
    assert [(name, v) for _, name, v, _ in rec.sent if not name.endswith(".p")] == [
        ("cdc.maintenance.runs", 1), ("cdc.maintenance.failed", 1)]


def test_the_grafana_dashboard_charts_metrics_the_pipelines_send() -> None:
    import json
    import re

    from cdc_core.model.config.sections import MetricsConfig
    from cdc_core.model.layout import PROJECT_ROOT

    dash = json.loads((PROJECT_ROOT / "docs" / "grafana" / "cdc-pipelines.json").read_text())
    (prefix,) = [v for v in dash["templating"]["list"] if v["name"] == "prefix"]
    assert prefix["query"] == MetricsConfig().prefix
    sent = {m.name for ms in EVENT_METRICS.values() for m in ms}
    for panel in dash["panels"]:
        (target,) = [t["target"] for t in panel["targets"]]
        m = re.search(r"\$prefix\.([a-z_.]+?)\.\*", target)
        assert m and m.group(1) in sent, (panel["title"], target)

