"""What an operator sees at a glance (`cdc status`, the monitor page): cursor, lease, recent windows, the last
error, snapshot progress, housekeeping, and how far the lake is behind the source. Never contains secrets."""

from __future__ import annotations

from typing import Any

from cdc_core.capture.lag import lag
from cdc_core.model import snapshot_state
from cdc_core.model.errors import CdcError
from cdc_core.run.context import PipelineContext
from cdc_core.run.group import PipelineGroup


def group_status(g: PipelineGroup) -> dict[str, Any]:
    """`pipeline_status` of a pipeline: as is for a single-source pipeline; for a group pipeline one entry
    per source (`sources`: cursor, lag, windows, last error, ... each), with the one lease on top, and
    `failing`: the sources whose last error is not resolved yet (a window acked since resolves it)."""
    if not g.config.is_group:
        return pipeline_status(g.first)
    per_source = {str(sid): pipeline_status(unit) for sid, unit in g.units.items()}
    first = next(iter(per_source.values()))
    return {
        "pipeline": g.name,
        "group": True,
        "lease": first.get("lease"),
        "sources": per_source,
        "failing": sorted(
            sid for sid, st in per_source.items()
            if st.get("error") or st.get("source_error") or (st.get("last_error") and not st["last_error"]["resolved"])
        ),
    }


def pipeline_status(p: PipelineContext) -> dict[str, Any]:
    """Everything an operator wants at a glance; never contains secrets."""
    out: dict[str, Any] = {"pipeline": p.name, "error": None}
    try:
        cursor = p.coordinator.read_cursor()
        lease = p.coordinator.read_lease()
        out["cursor"] = {
            "seq": cursor.seq,
            "position": cursor.position.to_dict() if cursor.position else None,
            "label": cursor.position.label() if cursor.position else None,
            "commit_ts": cursor.position.commit_ts if cursor.position else None,
            "backfill": cursor.backfill.to_dict() if cursor.backfill else None,
        }
        out["lease"] = lease.to_dict() if lease else None
        out["windows"] = [w.to_dict() for w in p.coordinator.recent_windows(10)]
        last_error = p.coordinator.read_last_error()
        if last_error is not None:
            # A window acked after the failure means the pipeline got past it.
            last_error["resolved"] = bool(
                cursor.updated_at and cursor.updated_at > float(last_error.get("at") or 0)
            )
        out["last_error"] = last_error
        out["snapshot"] = snapshot_state.progress_view(p.coordinator.read_snapshot())
    except CdcError as e:
        out["error"] = str(e)
        return out
    try:  # per table: files, size, last maintenance (cdc_core.run.housekeeping)
        from cdc_core.run import housekeeping

        out["maintenance"] = housekeeping.maintenance_status(p)
    except Exception as e:  # an object store's own errors too: tables are an add-on, never hide the cursor
        out["maintenance"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        facts = p.source_facts(refresh=True)
        end = facts.end
        out["source_end"] = {"file": end.file, "offset": end.offset, "gtid": end.gtid} if end else None
        out["lag"] = lag(cursor.position, facts)
        out["alerts"] = lag_alerts(out["lag"], p.config.alerts.max_lag_seconds)
    except CdcError as e:
        out["source_error"] = str(e)
    return out


def lag_alerts(lag_now: dict[str, Any], max_lag_seconds: int | None) -> list[dict[str, Any]]:
    """The pipeline's breached alerts (`alerts.max_lag_seconds`): the lag in seconds above its threshold."""
    seconds = lag_now.get("seconds")
    if max_lag_seconds is None or seconds is None or seconds <= max_lag_seconds:
        return []
    return [{"alert": "lag", "seconds": round(float(seconds), 1), "max_seconds": max_lag_seconds,
             "message": f"the lake is {seconds:.0f} s behind the source, above alerts.max_lag_seconds "
                        f"({max_lag_seconds} s): see docs/operations.md, 'Lag'"}]

