"""The pipeline's metrics, derived from its structured events (`Pipeline.log_event`), in one table.

Every step already logs one `event key=value ...` line; the metrics are those events' numbers, so a metric
can never say something the log does not. `EVENT_METRICS` is the table (docs/operations.md lists it for
dashboards): per event, which metric of which kind from which field.

Names are `<prefix>.<metric>` with the pipeline (`<pipeline>` or `<pipeline>.<source>`) as a tag, and, for
StatsD servers without tags, also `<prefix>.<metric>.<pipeline>` (Airflow names its per-DAG metrics the same
way). Where they go:
- `cdc` commands: a StatsD server (`metrics.statsd` in the config, or env CDC_STATSD=host:port), over UDP;
- Airflow tasks: Airflow's own `Stats` (StatsD or OpenTelemetry, as its `[metrics]` section says), which
  the Airflow glue passes in (cdc_airflow); cdc_core never imports Airflow.

Metrics never fail a run: a sink that raises is logged once and dropped.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("cdc.metrics")

STATSD_ENV = "CDC_STATSD"

COUNTER, GAUGE, TIMING = "counter", "gauge", "timing"


@dataclass(frozen=True)
class Metric:
    """One metric an event yields: `kind` of `name`, its value from the event's `field` (None: 1)."""

    name: str
    kind: str
    field: str | None = None
    scale: float = 1.0  # e.g. 1000: seconds in the event, milliseconds in a timing
    when: tuple[str, str] | None = None  # only when the event's field (first) has this value (second)


# event -> the metrics it yields (docs/operations.md, "Metrics").
EVENT_METRICS: Mapping[str, tuple[Metric, ...]] = {
    "lease.acquired": (Metric("lease.acquired", COUNTER),),
    "lease.dead_holder": (Metric("lease.broken", COUNTER),),
    "window.planned": (
        Metric("window.planned", COUNTER),
        Metric("window.transactions", COUNTER, "transactions"),
        Metric("window.events", COUNTER, "events"),
        Metric("window.bytes", COUNTER, "bytes"),
    ),
    # After planning a window: the binlog bytes with changes still behind it (0 once caught up).
    "source.behind": (Metric("lag.bytes", GAUGE, "bytes"),),
    "window.staged": (
        Metric("window.changes", COUNTER, "changes"),
        Metric("window.before_images", COUNTER, "before_images"),  # only tables with a change log stage them
        Metric("window.tables", GAUGE, "tables"),
        Metric("stage.duration", TIMING, "secs", 1000),
    ),
    "window.merged": (Metric("merge.duration", TIMING, "secs", 1000),),
    "window.acked": (
        Metric("window.acked", COUNTER),
        # How old the newest change the lake now holds was when it became visible: commit-to-lake latency.
        Metric("lag.seconds", GAUGE, "commit_age_s"),
    ),
    "window.replay": (Metric("window.replayed", COUNTER),),
    "step.failed": (
        Metric("step.failed", COUNTER),
        # A run that lost its lease changed nothing (fencing): how often a zombie or a slow run was stopped.
        Metric("lease.fenced", COUNTER, when=("error_type", "Fenced")),
    ),
    "maintenance.recorded": (
        Metric("maintenance.runs", COUNTER),
        Metric("maintenance.failed", COUNTER, "failed"),
    ),
    "snapshot.progress": (Metric("snapshot.rows", GAUGE, "rows"),),
}


class Sink(Protocol):
    """Where metrics go; Airflow's `Stats` has this shape (`incr`, `gauge`, `timing` with `tags`)."""

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, str] | None = None) -> None: ...

    def gauge(self, stat: str, value: float, rate: float = 1, delta: bool = False, *,
              tags: dict[str, str] | None = None) -> None: ...

    def timing(self, stat: str, dt: float, *, tags: dict[str, str] | None = None) -> None: ...


class StatsdSink:
    """Plain StatsD over UDP (fire and forget): `name:value|c`, `|g`, `|ms`. Tags are not part of plain
    StatsD: the pipeline is in the name (module docstring)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.target = (host, int(port))
        self.family = socket.AF_INET6 if ":" in host else socket.AF_INET

    def _send(self, line: str) -> None:
        # A socket per line (a few per window): nothing stays open for the pipeline's owner to close.
        with socket.socket(self.family, socket.SOCK_DGRAM) as sock:
            sock.sendto(line.encode(), self.target)

    def incr(self, stat: str, count: int = 1, rate: float = 1, *, tags: dict[str, str] | None = None) -> None:
        self._send(f"{stat}:{count}|c")

    def gauge(self, stat: str, value: float, rate: float = 1, delta: bool = False, *,
              tags: dict[str, str] | None = None) -> None:
        self._send(f"{stat}:{_number(value)}|g")

    def timing(self, stat: str, dt: float, *, tags: dict[str, str] | None = None) -> None:
        self._send(f"{stat}:{_number(dt)}|ms")


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.3f}"


class Metrics:
    """A pipeline's metrics: `observe(event, fields)` sends what EVENT_METRICS says to the sink."""

    def __init__(self, sink: Sink | None, pipeline: str, prefix: str = "cdc") -> None:
        self.sink, self.pipeline, self.prefix = sink, pipeline, prefix

    def observe(self, event: str, fields: Mapping[str, Any]) -> None:
        if self.sink is None:
            return
        for m in EVENT_METRICS.get(event, ()):
            try:
                self._send(m, fields)
            except Exception as e:  # metrics never fail a run
                log.warning("metrics.dropped sink=%s error=%s: no more metrics from this process",
                            type(self.sink).__name__, e)
                self.sink = None
                return

    def _send(self, m: Metric, fields: Mapping[str, Any]) -> None:
        if m.when is not None and str(fields.get(m.when[0])) != m.when[1]:
            return
        raw = 1 if m.field is None else fields.get(m.field)
        if raw is None or raw == "":
            return  # the event did not carry it this time
        value = float(raw) * m.scale
        tags = {"pipeline": self.pipeline, **{k: str(fields[k]) for k in ("step", "error_type") if k in fields}}
        names = [f"{self.prefix}.{m.name}", f"{self.prefix}.{m.name}.{self.pipeline}"]
        assert self.sink is not None
        for name in names:
            if m.kind == COUNTER:
                self.sink.incr(name, int(value), tags=tags)
            elif m.kind == GAUGE:
                self.sink.gauge(name, value, tags=tags)
            else:
                self.sink.timing(name, value, tags=tags)


CONFIGURED: Any = object()  # `metrics_for`'s default sink: the configured StatsD server, if any


def metrics_for(pipeline: str, settings: Any, sink: Sink | object | None = CONFIGURED) -> Metrics:
    """A pipeline's metrics: to `sink` (Airflow's `Stats`, or None for none), by default to the StatsD
    server of `settings` (the pipeline's `metrics:` section) or env CDC_STATSD."""
    if sink is CONFIGURED:
        return for_cli(pipeline, settings.statsd, settings.prefix)
    return Metrics(sink, pipeline, settings.prefix)  # type: ignore[arg-type]


def statsd_address(configured: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The StatsD server of a `cdc` command: env CDC_STATSD, else the config's `metrics.statsd`."""
    env = os.environ if env is None else env
    return env.get(STATSD_ENV) or configured


def for_cli(pipeline: str, configured: str | None, prefix: str) -> Metrics:
    """A `cdc` command's metrics: to StatsD when an address is configured, else nowhere."""
    from cdc_core.model.config.sections import check_host_port
    from cdc_core.model.errors import ConfigError

    address = statsd_address(configured)
    if not address:
        return Metrics(None, pipeline, prefix)
    try:
        check_host_port(address, "127.0.0.1:8125")
    except ValueError as e:
        raise ConfigError(f"{STATSD_ENV}={address!r}: {e} (or unset it: no metrics)") from None
    return Metrics(StatsdSink(address), pipeline, prefix)
