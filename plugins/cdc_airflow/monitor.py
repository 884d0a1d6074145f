"""The CDC monitor: one page in Airflow's UI (and its JSON) showing where every pipeline stands.

Served by `airflow api-server` under /cdc-monitor (a FastAPI app registered through the plugin
below) and linked from the sidebar. For every configured pipeline it shows the cursor (binlog
file:offset, GTID, commit time), the lag behind the source (seconds and bytes), the lease (holder,
expiry), the recent windows (seq, range, changes per table, durations, Delta versions, outcome) and
charts of them (lag at ack, sizes, durations, per table: `render_charts`, inline SVG), the snapshot's
progress per table (chunks done / estimated total, rows), the last error, and per Delta table its
files, size and last maintenance (cdc_core.run.housekeeping). The data is
`cdc_core.run.status.pipeline_status`, gathered fresh on every request.

Every route requires an Airflow login (`GetUserDep`: the Bearer header or the `_token` cookie the UI
sets); plugin routes are not protected otherwise. Nothing secret is shown: `status()` carries none,
and as a second line of defence any known credential value is masked before rendering. Every value
is HTML-escaped.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, cast

from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse

from cdc_airflow import charts

URL_PREFIX = "/cdc-monitor"
MASK = "***"

# ------------------------------------------------------------------------------------ gathering


def mask_secrets(value: Any, secrets: Iterable[str]) -> Any:
    """Pure: a copy of `value` with every occurrence of a secret in any string replaced by ***."""
    found = [s for s in secrets if s]
    if not found:
        return value
    if isinstance(value, str):
        for s in found:
            value = value.replace(s, MASK)
        return value
    if isinstance(value, Mapping):
        return {k: mask_secrets(v, found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v, found) for v in value]
    return value


def pipeline_status(pc: Any, source: str | None = None) -> dict[str, Any]:
    """`cdc_core.run.status.pipeline_status` for one configured pipeline (one source of a group pipeline:
    a section per source, named `<pipeline>.<source>`), plus its configuration summary; never raises."""
    from cdc_airflow.hooks import CdcPipelineHook, secrets_of
    from cdc_core.model.sources import unit_name
    from cdc_core.run import status as run_status

    summary = {
        "schedule": pc.schedule,
        "tables": list(pc.tables.include),
        "exclude": list(pc.tables.exclude),
        "dags": [
            f"cdc_{pc.name}", f"cdc_{pc.name}_backfill", f"cdc_{pc.name}_snapshot", f"cdc_{pc.name}_maintenance",
        ],
        "lease_seconds": pc.lease_seconds,
    }
    secrets: list[str] = []
    hook = CdcPipelineHook(unit_name(pc.name, source), config=pc)
    try:
        # One connection at a time, so that whatever was resolved is masked even if a later one fails.
        source_params = hook.source_params()
        secrets = secrets_of(source_params)
        store = hook.object_store()
        secrets = secrets_of(source_params, None, store)
        digest = hook.zookeeper_digest()
        secrets = secrets_of(source_params, ":".join(digest) if digest else None, store)
        from cdc_core.run.pipeline import Pipeline

        with Pipeline.from_config(pc, source_params, store=store, zk_digest=digest, source_id=source,
                                  metrics_sink=None) as p:  # reads only: no metrics
            status = dict(run_status.pipeline_status(p))
    except Exception as e:  # one broken pipeline must not take the page down
        status = {"pipeline": unit_name(pc.name, source), "error": f"{type(e).__name__}: {e}"}
    status["config"] = summary
    status["airflow"] = airflow_dag_states(list(summary["dags"]))
    return cast(dict[str, Any], mask_secrets(status, secrets))  # a dict in, a dict out


def airflow_dag_states(dag_ids: list[str]) -> dict[str, Any]:
    """Per DAG, from Airflow's metadata database: {"paused": bool|None (None: not parsed yet), "queued": n,
    "queued_continuations": n (runs `continue_run` triggered)}; {"error": text} when it cannot be read.
    Never raises (the page shows the pipelines whatever Airflow's database says)."""
    try:
        from airflow.models.dag import DagModel
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from airflow.utils.state import DagRunState
        from sqlalchemy import select

        with create_session() as session:
            paused = {
                d: p
                for d, p in session.execute(
                    select(DagModel.dag_id, DagModel.is_paused).where(DagModel.dag_id.in_(dag_ids))
                ).all()
            }
            queued: dict[str, list[str]] = {}
            for d, run_id in session.execute(
                select(DagRun.dag_id, DagRun.run_id).where(
                    DagRun.dag_id.in_(dag_ids), DagRun.state == DagRunState.QUEUED
                )
            ).all():
                queued.setdefault(d, []).append(run_id)
    except Exception as e:  # no metadata database here (unit tests, a broken DB): say so, do not fail the page
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    return {
        d: {
            "paused": paused.get(d),
            "queued": len(queued.get(d, [])),
            "queued_continuations": sum(1 for r in queued.get(d, []) if r.startswith("continue__")),
        }
        for d in dag_ids
    }


def dag_warnings(pipeline: str, dags: Any) -> list[str]:
    """Pure: what the operator must know about the pipeline's DAGs' pause state (empty when nothing)."""
    if not isinstance(dags, Mapping) or "error" in dags:
        return []
    out = []
    main = f"cdc_{pipeline}"
    for dag_id, st in sorted(dags.items()):
        if not isinstance(st, Mapping) or not st.get("paused"):
            continue
        queued = int(st.get("queued") or 0)
        if dag_id == main:
            if queued:
                cont = int(st.get("queued_continuations") or 0)
                what = f"{queued} queued run(s)" + (f", {cont} of them triggered by continue_run" if cont else "")
                out.append(
                    f"{dag_id} is paused: {what} wait until it is unpaused (the pipeline is not catching up); "
                    f"unpause it in the UI or with `airflow dags unpause {dag_id}`"
                )
        elif dag_id.endswith(("_backfill", "_snapshot")) or queued:
            out.append(
                f"{dag_id} is paused: a run triggered from its form stays queued"
                + (f" ({queued} queued now)" if queued else "")
                + f"; unpause it in the UI or with `airflow dags unpause {dag_id}`"
            )
    return out


def collect_statuses() -> list[dict[str, Any]]:
    """Status of every pipeline in $CDC_CONFIG (a few in parallel: each waits on ZooKeeper and the source)."""
    from cdc_core.model.config import load_config
    from cdc_core.model.errors import ConfigError

    try:
        pipelines = list(load_config().pipelines)
    except ConfigError as e:
        return [{"pipeline": None, "error": f"ConfigError: {e}"}]
    if not pipelines:
        return []
    units = [(pc, source) for pc in pipelines for source in pc.source_ids()]  # a section per source
    with ThreadPoolExecutor(max_workers=min(4, len(units))) as pool:
        return list(pool.map(lambda unit: pipeline_status(*unit), units))


# ------------------------------------------------------------------------------------ rendering


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def fmt_time(ts: Any, now: float | None = None) -> str:
    """Unix seconds -> '2026-01-02 03:04:05Z (12s ago)'; '-' when unknown."""
    if ts is None or ts == "":
        return "-"
    try:
        t = float(ts)
    except (TypeError, ValueError):
        return str(ts)
    text = datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    if now is not None:
        delta = now - t
        text += f" ({fmt_seconds(abs(delta))} {'ago' if delta >= 0 else 'from now'})"
    return text


def fmt_seconds(s: Any) -> str:
    if s is None:
        return "-"
    s = float(s)
    if s < 120:
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    if s < 7200:
        return f"{s / 60:.1f}min"
    if s < 172800:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def fmt_bytes(n: Any) -> str:
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _pos_label(pos: Any) -> str:
    if isinstance(pos, Mapping):
        if "file" in pos:
            return f"{pos.get('file')}:{pos.get('offset')}"
        if "label" in pos:
            return str(pos["label"])
    return "-" if pos is None else str(pos)


def window_view(w: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: one window record (ZooKeeper's, as `status()` returns it) flattened for the table."""
    plan_value, result_value = w.get("plan"), w.get("result")
    plan: Mapping[str, Any] = plan_value if isinstance(plan_value, Mapping) else w
    result: Mapping[str, Any] = result_value if isinstance(result_value, Mapping) else {}
    tables: dict[str, dict[str, Any]] = {}
    for source in (result.get("tables"), w.get("tables")):
        if isinstance(source, Mapping):
            for name, info in source.items():
                entry = tables.setdefault(str(name), {})
                if isinstance(info, Mapping):
                    entry.update(info)
                    if "delta_version" in info:  # the merge job's report names it so
                        entry["version"] = info["delta_version"]
                else:
                    entry["changes"] = info
    versions = result.get("delta_versions") or w.get("delta_versions") or {}
    if isinstance(versions, Mapping):
        for name, v in versions.items():
            tables.setdefault(str(name), {})["version"] = v
    times = {}
    for key in ("planned_at", "staged_at", "merged_at", "acked_at", "failed_at"):
        value = w.get(key, result.get(key, plan.get(key) if key == "planned_at" else None))
        if value is not None:
            times[key] = value
    timings = w.get("timings") or result.get("timings") or result.get("durations") or {}
    durations: dict[str, Any] = dict(timings) if isinstance(timings, Mapping) else {}
    if "planned_at" in times:
        end = times.get("acked_at") or times.get("failed_at")
        if end is not None:
            durations.setdefault("total", float(end) - float(times["planned_at"]))
    error = result.get("error") or w.get("error")
    state = w.get("state") or w.get("outcome") or ("failed" if error else None)
    if result.get("recovered"):
        state = f"{state or 'acked'} (recovered)"
    return {
        "seq": plan.get("seq", w.get("seq")),
        "kind": plan.get("kind", w.get("kind")),
        "start": _pos_label(plan.get("start")),
        "end": _pos_label(plan.get("end")),
        "transactions": plan.get("transactions"),
        "changes": result.get("changes", w.get("changes")),
        "tables": tables,
        "times": times,
        "durations": durations,
        "state": state or "-",
        "error": error,
    }


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2rem;color:#1d2733;background:#fff}
h1{font-size:1.35rem;margin:0 0 .2rem} h2{font-size:1.15rem;margin:0 0 .6rem} h3{font-size:1rem;margin:.8rem 0 .4rem}
.meta{color:#5b6775;font-size:.85rem;margin-bottom:1rem}
section.pipeline{border:1px solid #d5dbe2;border-radius:8px;padding:1rem;margin-bottom:1.2rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0 0 .8rem}
dt{color:#5b6775} dd{margin:0;font-family:ui-monospace,Menlo,monospace;font-size:.9rem}
table{border-collapse:collapse;width:100%;font-size:.85rem}
th,td{border-bottom:1px solid #e6eaef;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f6f8} td.num{text-align:right}
.error{background:#fdecea;color:#8a1c12;border-radius:6px;padding:.5rem .7rem;white-space:pre-wrap;
font-family:ui-monospace,Menlo,monospace;font-size:.85rem;margin:.5rem 0}
.ok{color:#1e7b34} .warn{color:#a15c00} .bad{color:#b42318} .muted{color:#8592a0}
.charts{display:flex;flex-wrap:wrap;gap:0 1.5rem;align-items:flex-start;margin-top:.8rem}
.charts p{flex-basis:100%;font-size:.85rem;margin:.2rem 0}
"""


def _row(label: str, value_html: str, key: str) -> str:
    return f'<dt>{esc(label)}</dt><dd data-field="{esc(key)}">{value_html}</dd>'


def render_pipeline(s: Mapping[str, Any], now: float) -> str:
    name = s.get("pipeline")
    cfg = s.get("config") or {}
    parts = [f'<section class="pipeline" data-pipeline="{esc(name)}">', f"<h2>Pipeline {esc(name)}</h2>"]
    if s.get("error"):
        parts.append(f'<div class="error" data-field="error">{esc(s["error"])}</div>')

    cursor = s.get("cursor") or {}
    pos = cursor.get("position") or {}
    lease = s.get("lease") or {}
    lag = s.get("lag") or {}
    rows = []
    dag_states = s.get("airflow")
    dags: Mapping[str, Any] = dag_states if isinstance(dag_states, Mapping) else {}
    if cfg:
        def dag_link(d: str) -> str:
            dag_state = dags.get(d)
            st: Mapping[str, Any] = dag_state if isinstance(dag_state, Mapping) else {}
            state = "" if st.get("paused") is None else " (paused)" if st["paused"] else ""
            return f'<a href="/dags/{esc(d)}" target="_top">{esc(d)}</a>{esc(state)}'

        rows.append(_row("DAGs", " ".join(dag_link(d) for d in cfg.get("dags") or []), "dags"))
        rows.append(_row("schedule", esc(cfg.get("schedule") or "manual only"), "schedule"))
        rows.append(_row("tables", esc(", ".join(cfg.get("tables") or [])), "tables"))
    if cursor:
        where = f"{pos.get('file')}:{pos.get('offset')}" if pos else "not started"
        rows.append(_row("cursor", esc(where), "cursor"))
        rows.append(_row("cursor GTID", esc(pos.get("gtid") or "-"), "gtid"))
        rows.append(_row("last commit", esc(fmt_time(cursor.get("commit_ts") or pos.get("commit_ts"), now)), "commit"))
        rows.append(_row("windows acked", esc(cursor.get("seq")), "seq"))
        bf = cursor.get("backfill")
        if bf:
            rows.append(
                _row(
                    "backfill",
                    esc(
                        f"active: at {_pos_label(bf.get('position'))}, until {_pos_label(bf.get('until'))}"
                        + (f", tables {', '.join(bf.get('tables') or [])}" if bf.get("tables") else "")
                    ),
                    "backfill",
                )
            )
    if lag or s.get("source_end"):
        secs = lag.get("seconds")
        level = secs or 0  # no lag figure counts as none
        cls = "ok" if level < 900 else "warn" if level < 3600 else "bad"
        alerts = [a for a in s.get("alerts") or [] if a.get("alert") == "lag"]
        cls = "bad" if alerts else cls  # above the pipeline's own threshold (alerts.max_lag_seconds)
        rows.append(_row("lag", f'<span class="{cls}">{esc(fmt_seconds(secs))}</span>', "lag_seconds"))
        for a in alerts:
            rows.append(_row("alert", f'<span class="bad">lag above {esc(fmt_seconds(a.get("max_seconds")))} '
                                      f'(alerts.max_lag_seconds)</span>', "lag_alert"))
        rows.append(_row("lag bytes", esc(fmt_bytes(lag.get("bytes"))), "lag_bytes"))
        end = s.get("source_end") or {}
        if end:
            text = f"{end.get('file')}:{end.get('offset')} gtid={end.get('gtid') or '-'}"
            rows.append(_row("source end", esc(text), "source_end"))
    if s.get("source_error"):
        rows.append(_row("source", f'<span class="bad">{esc(s["source_error"])}</span>', "source_error"))
    if "lease" in s:
        if lease:
            expires = lease.get("expires_at")
            live = expires is not None and float(expires) > now
            state = '<span class="ok">held</span>' if live else '<span class="muted">expired</span>'
            rows.append(_row("lease", f"{state} by {esc(lease.get('holder'))}", "lease"))
            rows.append(_row("lease expires", esc(fmt_time(expires, now)), "lease_expires"))
            if lease.get("token") is not None:
                rows.append(_row("fencing token", esc(lease.get("token")), "token"))
        else:
            rows.append(_row("lease", '<span class="muted">free</span>', "lease"))
    parts.append("<dl>" + "".join(rows) + "</dl>")
    for warning in dag_warnings(str(name), dags):
        parts.append(f'<div class="error" data-field="dag_paused">{esc(warning)}</div>')

    last = s.get("last_error")
    if isinstance(last, Mapping):
        where = ", ".join(
            x for x in (
                f"step {last.get('step')}" if last.get("step") else "",
                f"window {last.get('seq')}" if last.get("seq") is not None else "",
                f"run {last.get('holder')}" if last.get("holder") else "",
                fmt_time(last.get("at"), now),
            ) if x
        )
        label = "last error (a later window was acked)" if last.get("resolved") else "last error"
        css = "muted" if last.get("resolved") else "error"
        parts.append(
            f'<div class="{css}" data-field="last_error">{esc(label)} &mdash; {esc(where)}:<br>'
            f"{esc(last.get('message'))}</div>"
        )
    elif last:
        parts.append(f'<div class="error" data-field="last_error">last error: {esc(last)}</div>')

    parts.append(render_snapshot(s.get("snapshot")))

    parts.append(render_tables(s.get("maintenance"), now))

    windows = [window_view(w) for w in (s.get("windows") or []) if isinstance(w, Mapping)]
    if windows:
        parts.append(
            '<table data-field="windows"><thead><tr><th>seq</th><th>kind</th><th>range</th><th>txns</th>'
            "<th>changes per table</th><th>Delta version</th><th>timing</th><th>outcome</th></tr></thead><tbody>"
        )
        for w in windows:
            changes = "<br>".join(
                f"{esc(t)}: {esc(info.get('changes', info.get('rows', '-')))}"
                for t, info in sorted(w["tables"].items())
            ) or esc(w["changes"] if w["changes"] is not None else "-")
            versions = (
                "<br>".join(
                    f"{esc(t)}: {esc(info['version'])}" for t, info in sorted(w["tables"].items()) if "version" in info
                )
                or "-"
            )
            timing = "<br>".join(f"{esc(k)} {esc(fmt_seconds(v))}" for k, v in w["durations"].items() if v is not None)
            if "planned_at" in w["times"]:
                timing = esc(f"planned {fmt_time(w['times']['planned_at'])}") + ("<br>" + timing if timing else "")
            outcome = esc(w["state"])
            if w["error"]:
                outcome += f'<div class="error">{esc(w["error"])}</div>'
            parts.append(
                f'<tr data-seq="{esc(w["seq"])}"><td class="num">{esc(w["seq"])}</td><td>{esc(w["kind"])}</td>'
                f'<td>{esc(w["start"])} &rarr; {esc(w["end"])}</td><td class="num">{esc(w["transactions"])}</td>'
                f"<td>{changes}</td><td>{versions}</td><td>{timing or '-'}</td><td>{outcome}</td></tr>"
            )
        parts.append("</tbody></table>")
        parts.append(render_charts([w for w in s["windows"] if isinstance(w, Mapping)]))
    elif "windows" in s:
        parts.append('<p class="muted">No windows yet.</p>')
    parts.append("</section>")
    return "".join(parts)


# Tables in the per-table chart: the slowest (or busiest) few.
CHART_TABLES = 8


def chart_figures(w: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: what the charts plot for one window record (ZooKeeper's), None where the record has no such figure.

    `commit_age`: the ack time minus the commit time of the window's last transaction (`plan.end.commit_ts`),
    i.e. how old the window's newest change was when the lake held it: the lag the window had at ack. The ack
    logs that figure (`window.acked commit_age_s`) but does not store it, so it is derived from what the record
    holds (the worker's clock against the source's commit timestamps, whole seconds). A snapshot chunk reads
    rows as of its watermark, not binlog changes: it has none. `plan_to_ack`: acked_at - planned_at."""
    from cdc_core.model.window_plan import KIND_SNAPSHOT

    view = window_view(w)
    plan_value = w.get("plan")
    plan: Mapping[str, Any] = plan_value if isinstance(plan_value, Mapping) else w
    end = plan.get("end")
    commit_ts = end.get("commit_ts") if isinstance(end, Mapping) else None
    acked_at, planned_at = view["times"].get("acked_at"), view["times"].get("planned_at")
    acked = w.get("state") == "acked" and acked_at is not None
    age = None
    if acked and commit_ts is not None and view["kind"] != KIND_SNAPSHOT:
        age = round(float(acked_at) - float(commit_ts), 3)
    return {
        "seq": view["seq"],
        "commit_age": age,
        "changes": view["changes"],
        "transactions": view["transactions"],
        "merge": view["durations"].get("merge"),
        "plan_to_ack": round(float(acked_at) - float(planned_at), 3) if acked and planned_at else None,
        "tables": view["tables"],
    }


def table_totals(figures: Iterable[Mapping[str, Any]]) -> tuple[str, dict[str, float]]:
    """Pure: per table, summed over the windows, its merge seconds ("seconds") if any window records them, else
    its changes ("changes"): window records acked before 2026-11-29 carry no per-table seconds."""
    totals: dict[str, dict[str, float]] = {"seconds": {}, "changes": {}}
    for f in figures:
        for name, info in f["tables"].items():
            for key, found in totals.items():
                value = info.get(key)
                if charts.plotted(value):
                    found[name] = found.get(name, 0) + value
    key = "seconds" if totals["seconds"] else "changes"
    return key, totals[key]


def render_charts(records: Sequence[Mapping[str, Any]]) -> str:
    """Pure: the charts over the recent window records (newest first, as `status()` lists them): lag at ack,
    sizes, durations, and per table the slowest (or busiest) tables. Inline SVG (cdc_airflow.charts)."""
    figures = [chart_figures(w) for w in reversed(records)]  # oldest first: time runs left to right
    seqs = [f["seq"] for f in figures]

    def series(*keys: str) -> list[tuple[str, list[Any]]]:
        names = {"commit_age": "commit age", "plan_to_ack": "plan to ack", "merge": "merge job"}
        return [(names.get(k, k), [f[k] for f in figures]) for k in keys]

    key, per_table = table_totals(figures)
    top = sorted(per_table.items(), key=lambda kv: (-kv[1], kv[0]))[:CHART_TABLES]
    what = "merge seconds" if key == "seconds" else "changes"
    lag_title = "Lag at ack: age of the window's last commit when acked"
    acked, staged = "no window acked yet", "no window staged yet"
    missing = "; nor is merge time per table: the last chart shows the changes per table instead"
    missing = missing if key == "changes" else ""
    out = [
        charts.line_chart(
            "lag", lag_title, seqs, series("commit_age"), y_label="seconds (ack - commit)", empty_text=acked
        ),
        charts.line_chart(
            "sizes", "Window sizes", seqs, series("changes", "transactions"), y_label="count", empty_text=staged
        ),
        charts.line_chart(
            "durations", "Window durations", seqs, series("merge", "plan_to_ack"), y_label="seconds", empty_text=acked
        ),
        charts.bar_chart(
            "tables",
            f"{what.capitalize()} per table, top {CHART_TABLES}, over these {len(seqs)} windows",
            [n for n, _ in top],
            [v for _, v in top],
            value_label=what,
            empty_text=acked,
        ),
        '<p class="muted">Stage seconds are not in the window records (the <code>window.staged</code> log line and '
        f"the <code>stage.duration</code> metric have them){missing}.</p>",
    ]
    return '<div class="charts" data-field="charts">' + "".join(out) + "</div>"


def render_snapshot(snap: Any) -> str:
    """Pure: the snapshot's progress per table (chunks done / estimated total, rows), or '' when none."""
    if not isinstance(snap, Mapping) or not snap.get("tables"):
        return ""
    state = "active: loading " + str(snap.get("current")) if snap.get("active") else "done"
    out = [
        f'<h3 data-field="snapshot_state">Snapshot ({esc(state)})</h3>',
        '<table data-field="snapshot"><thead><tr><th>table</th><th>status</th><th>chunks</th><th>rows</th>'
        "<th>estimate</th><th>progress</th><th>finished</th></tr></thead><tbody>",
    ]
    for t in snap["tables"]:
        if not isinstance(t, Mapping):
            continue
        out.append(
            f'<tr data-table="{esc(t.get("table"))}"><td>{esc(t.get("table"))}</td><td>{esc(t.get("status"))}</td>'
            f'<td class="num">{esc(t.get("chunks_done"))} / {esc(t.get("chunks_total"))}</td>'
            f'<td class="num">{esc(t.get("rows"))}</td>'
            f'<td class="num">{esc("-" if t.get("estimate") is None else t.get("estimate"))}</td>'
            f'<td class="num">{esc(t.get("percent"))}%</td><td>{esc(fmt_time(t.get("finished_at")))}</td></tr>'
        )
    out.append("</tbody></table>")
    return "".join(out)


def render_tables(m: Any, now: float) -> str:
    """Pure: the pipeline's Delta tables (files, size, last maintenance) and its last maintenance run."""
    if not isinstance(m, Mapping):
        return ""
    if m.get("error"):
        return f'<div class="error" data-field="maintenance_error">tables: {esc(m["error"])}</div>'
    parts = []
    last = m.get("last") if isinstance(m.get("last"), Mapping) else None
    if last:
        totals = last.get("totals") or {}
        cleanup = last.get("cleanup") or {}
        staged = cleanup.get("staging") or {}
        records = cleanup.get("records") or {}
        cls = "ok" if last.get("status") == "ok" else "bad"
        text = (
            f'<span class="{cls}">{esc(last.get("status"))}</span> {esc(fmt_time(last.get("finished_at"), now))}: '
            f"data files {esc(totals.get('files_before', '-'))} &rarr; {esc(totals.get('files_after', '-'))}, "
            f"vacuumed {esc(totals.get('vacuum_files', '-'))} files ({esc(fmt_bytes(totals.get('vacuum_bytes')))}), "
            f"log entries {esc(totals.get('log_entries_deleted', '-'))}; staged windows "
            f"{esc(staged.get('windows_deleted', '-'))} ({esc(fmt_bytes(staged.get('bytes_freed')))}), "
            f"ZooKeeper records {esc(records.get('records_deleted', '-'))}"
        )
        parts.append(f'<dl>{_row("last maintenance", text, "last_maintenance")}</dl>')
        for err in last.get("errors") or []:
            parts.append(f'<div class="error" data-field="maintenance_errors">{esc(err)}</div>')
    tables = [t for t in m.get("tables") or [] if isinstance(t, Mapping)]
    if tables:
        parts.append(
            '<table data-field="tables"><thead><tr><th>table</th><th>files</th><th>size</th><th>Delta version</th>'
            "<th>last commit</th><th>last maintenance</th></tr></thead><tbody>"
        )
        for t in tables:
            kind = t.get("kind") or "table"
            name = f"{t.get('name')}" + (f" ({kind})" if kind != "table" else "")  # tombstones, a derived table's base
            lm = t.get("last_maintenance") if isinstance(t.get("last_maintenance"), Mapping) else None
            maint = "never"
            if lm:
                maint = (
                    f"{esc(fmt_time(lm.get('at'), now))}: {esc(lm.get('status'))}, files {esc(lm.get('files_before'))}"
                    f" &rarr; {esc(lm.get('files_after'))}, vacuumed {esc(lm.get('vacuum_files'))} "
                    f"({esc(fmt_bytes(lm.get('vacuum_bytes')))})"
                )
            if t.get("error"):
                maint = f'<span class="bad">{esc(t["error"])}</span>'
            parts.append(
                f'<tr data-table="{esc(name)}"><td>{esc(name)}</td><td class="num">{esc(t.get("files"))}</td>'
                f'<td class="num">{esc(fmt_bytes(t.get("size_bytes")))}</td>'
                f'<td class="num">{esc(t.get("version"))}</td>'
                f"<td>{esc(t.get('last_commit_at') or '-')}</td><td>{maint}</td></tr>"
            )
        parts.append("</tbody></table>")
    return "".join(parts)


def render_page(statuses: Iterable[Mapping[str, Any]], now: float | None = None) -> str:
    """Pure: the whole HTML page for these statuses (every value escaped)."""
    now = time.time() if now is None else now
    body = "".join(render_pipeline(s, now) for s in statuses) or '<p class="muted">No pipelines configured.</p>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="refresh" content="30">'
        "<title>CDC pipelines</title>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>CDC pipelines</h1>"
        f'<div class="meta">Binlog &rarr; Delta. Generated {esc(fmt_time(now))}; refreshes every 30 s. '
        f'JSON: <a href="{URL_PREFIX}/api/pipelines">{URL_PREFIX}/api/pipelines</a></div>'
        f"{body}</body></html>"
    )


# ------------------------------------------------------------------------------------------ app


def create_app() -> FastAPI:
    app = FastAPI(title="CDC monitor", docs_url=None, redoc_url=None, openapi_url=None)

    # Sync handlers: FastAPI runs them in its thread pool, so ZooKeeper and MySQL calls never block the loop.
    @app.get("/", response_class=HTMLResponse)
    def index(user: GetUserDep) -> HTMLResponse:
        return HTMLResponse(render_page(collect_statuses()), headers={"Cache-Control": "no-store"})

    @app.get("/api/pipelines")
    def api_pipelines(user: GetUserDep) -> JSONResponse:
        import json

        payload = {"generated_at": time.time(), "pipelines": collect_statuses()}
        # Round-trip through json with default=str so any odd value (Decimal, datetime) serialises.
        return JSONResponse(json.loads(json.dumps(payload, default=str)), headers={"Cache-Control": "no-store"})

    return app


app = create_app()


class CdcMonitorPlugin(AirflowPlugin):
    name = "cdc_monitor"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "CDC monitor"}]
    external_views = [
        {
            "name": "CDC pipelines",
            "href": f"{URL_PREFIX}/",  # the trailing slash matters: without it Airflow's UI answers
            "destination": "nav",
            "url_route": "cdc-monitor",
            "nav_top_level": True,
        }
    ]
