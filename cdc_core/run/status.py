"""What an operator sees at a glance (`cdc status`, the monitor page): cursor, lease, recent windows, the last
error, snapshot progress, housekeeping, and how far the lake is behind the source. Never contains secrets."""

from __future__ import annotations

import time
from typing import Any

from cdc_core.capture.source import SourceFacts
from cdc_core.model import snapshot_state
from cdc_core.model.errors import CdcError
from cdc_core.model.positions import BinlogPosition
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
    except CdcError as e:
        out["source_error"] = str(e)
    return out


def lag(position: BinlogPosition | None, facts: SourceFacts) -> dict[str, Any]:
    """How far the lake is behind the source: changes not yet landed, in binlog bytes and in seconds.

    `binlog_bytes`: the binlog between the cursor and the source's current end (summed over the files
    between). `bytes` / `seconds`: the same, and the time since the cursor's last landed commit, but 0
    when what lies between holds no transaction: on a GTID source whose end state the cursor's GTID
    state already contains, the bytes are only events without row changes (a rotation's or a restart's
    headers, checkpoints); the next run moves the cursor over them (cdc_core.model.windows). Without GTIDs
    such bytes count until that run.
    """
    if position is None:
        return {"bytes": None, "seconds": None, "binlog_bytes": None}
    behind = 0
    for f in facts.binlogs:
        if f.index < position.sort_key()[1]:
            continue
        if f.name == position.file:
            behind += max(0, f.size - position.offset)
        else:
            behind += f.size
    pending = behind if behind == 0 or not _no_transaction_after(position, facts) else 0
    seconds = None
    if position.commit_ts is not None:
        seconds = 0.0 if pending == 0 else max(0.0, time.time() - position.commit_ts)
    return {"bytes": pending, "seconds": seconds, "binlog_bytes": behind}


def _no_transaction_after(position: BinlogPosition, facts: SourceFacts) -> bool:
    """The cursor's GTID state holds every transaction the source has logged (same server, GTIDs on)."""
    end = facts.end.gtid if facts.end is not None else None
    if position.gtid is None or end is None or not position.server.same_server(facts.identity):
        return False
    try:
        if facts.flavor == "mariadb":
            from cdc_core.capture.source import mariadb_gtid_state

            return bool(mariadb_gtid_state(position.gtid).contains(mariadb_gtid_state(end)))
        from cdc_core.model.positions import parse_gtid_set

        return bool(parse_gtid_set(position.gtid, facts.flavor).contains(parse_gtid_set(end, facts.flavor)))  # type: ignore[arg-type]
    except (CdcError, ValueError):
        return False
