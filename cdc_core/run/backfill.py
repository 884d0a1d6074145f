"""Backfill: replay the binlog from a timestamp into the lake (repairs damaged tables; the cursor never moves
backward). Validation runs before the lease so bad input changes nothing; the start and the cancel are fenced."""

from __future__ import annotations

import time
from typing import Any

from cdc_core.capture.source import TableFilter
from cdc_core.coordination import LeaseGrant
from cdc_core.model import lake_registry
from cdc_core.model.errors import ConfigError, StateConflict
from cdc_core.model.logfmt import iso_seconds
from cdc_core.model.positions import StartSpec
from cdc_core.run.context import PipelineContext


def check_backfill(
    p: PipelineContext,
    start_ts: Any,
    end_ts: Any = None,
    tables: list[str] | tuple[str, ...] | None = None,
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Validate a backfill request (form, CLI flags) without changing anything anywhere.

    Reads the source and the cursor only, so it runs before the lease is taken: invalid input
    leaves ZooKeeper, staging and the lake exactly as they were. Returns the request normalised
    ({start_at, end_at, tables, start}); raises a CdcError naming the field, the value and the fix.
    """
    from cdc_core.model.config import parse_utc_timestamp
    from cdc_core.model.naming import parse_table_pattern

    who = f"pipeline {p.name!r}: backfill"
    if start_ts is None or (isinstance(start_ts, str) and not start_ts.strip()):
        raise ConfigError(f"{who} start_ts is required: the UTC instant to replay from, e.g. 2026-11-20T08:00:00Z")
    start_at = parse_utc_timestamp(start_ts, what=f"{who} start_ts")
    end_at = parse_utc_timestamp(end_ts, what=f"{who} end_ts") if end_ts not in (None, "") else None
    now = time.time()
    if start_at > now:
        raise ConfigError(
            f"{who} start_ts {iso_seconds(start_at)} is in the future (now {iso_seconds(now)}); "
            "a backfill replays changes "
            "already committed: give a past instant"
        )
    if end_at is not None and end_at <= start_at:
        raise ConfigError(
            f"{who} end_ts {iso_seconds(end_at)} is not after start_ts {iso_seconds(start_at)}; "
            "give a later end_ts, or none "
            "to replay up to the pipeline's cursor"
        )
    if tables is not None and (isinstance(tables, str) or not all(isinstance(t, str) for t in tables)):
        raise ConfigError(f"{who} tables must be a list of schema.table names (got {tables!r:.80})")
    for t in tables or ():
        try:
            parse_table_pattern(t)
        except ValueError as e:
            raise ConfigError(f"{who} tables: {e}") from None
    chosen: list[str] = []
    if tables:
        captured = p.describe()
        for t in tables:
            flt = TableFilter(include=(t,))
            hits = [name for name, s in captured.items() if flt.matches(s.schema, s.table)]
            chosen += [h for h in hits if h not in chosen]
            if not hits:
                shown = ", ".join(sorted(captured)[:20]) + (" ..." if len(captured) > 20 else "")
                raise ConfigError(
                    f"{who} table {t!r} is not captured by this pipeline (it does not exist on the source, or "
                    f"tables.include/exclude leave it out); the pipeline captures: {shown or 'no tables'}. "
                    "Pick from these, or leave tables empty to replay every captured table"
                )
    cursor = p.coordinator.read_cursor()
    if cursor.position is None:
        raise StateConflict(
            f"pipeline {p.name!r} has never run; a backfill replays what it already landed: run the "
            "pipeline first"
        )
    if cursor.backfill is not None and not dry_run:
        raise StateConflict(
            f"{who} cannot start: one is already in progress (next at {cursor.backfill.position.label()}, until "
            f"{cursor.backfill.until.label()}, requested by {cursor.backfill.requested_by!r}); the pipeline's "
            "next runs finish it, start another one after that"
        )
    start = p.resolve(None, StartSpec(kind="timestamp", at=start_at)).position  # PositionPurged if too old
    # The concrete captured tables (table ids), never the patterns: a pattern could also match a
    # table the pipeline does not capture, and the backfill would land it.
    return {"start_at": start_at, "end_at": end_at, "tables": sorted(chosen), "start": start}


def begin_backfill(
    p: PipelineContext,
    grant: LeaseGrant,
    start_ts: str | float,
    end_ts: str | float | None = None,
    tables: list[str] | tuple[str, ...] | None = None,
    *,
    dry_run: bool = False,
) -> dict[str, Any]:
    checked = check_backfill(p, start_ts, end_ts, tables, dry_run=dry_run)
    end_at = checked["end_at"]
    grant = p.renew(grant)
    cursor = p.coordinator.read_cursor()
    if cursor.position is None:
        raise StateConflict(f"pipeline {p.name!r} has never run; a backfill replays what it already landed")
    start = checked["start"]
    tables = checked["tables"] or None
    lake_registry.check_backfill_start(
        lake_registry.LakeRegistry.from_dict(p.coordinator.read_lake()), p.name, start, tuple(tables or ())
    )
    until = cursor.position
    if end_at is not None:
        end_pos = (
            p.resolve(None, StartSpec(kind="timestamp", at=end_at)).position if end_at < time.time() else until
        )
        until = min(end_pos, until) if end_pos.server == until.server else until
    until = max(until, start)
    report = {
        "pipeline": p.name,
        "from": start.label(),
        "until": until.label(),
        "tables": list(tables or []),
        "dry_run": dry_run,
    }
    if dry_run:
        txns = changes = 0
        scan = p.scanner().scan_transactions(
            start.file, start.offset, start.gtid, start.epoch, stop=(until.file, until.offset)
        )
        for b in scan:
            txns += 1
            changes += b.events
        report.update(transactions=txns, events=changes)
        p.log_event("backfill.dry_run", grant, **{k: v for k, v in report.items() if k != "pipeline"})
        return report
    p.coordinator.start_backfill(grant, start, until, tuple(tables or ()), requested_by=grant.holder)
    p.log_event("backfill.started", grant, start=start.label(), until=until.label())
    return report


def cancel_backfill(p: PipelineContext, grant: LeaseGrant, *, how_to_land: str) -> dict[str, Any]:
    """Stop the active backfill (what it replayed stays; the stream goes on): `cdc backfill --cancel` and the
    backfill form's cancel. Refused while a backfill window is planned but not acked: that window must land
    first (`how_to_land` says how, for the caller's surface), then cancel again."""
    before = p.coordinator.read_cursor().backfill
    try:
        p.coordinator.cancel_backfill(grant)
    except StateConflict as e:
        raise StateConflict(f"{e} ({how_to_land}; then cancel again)") from None
    p.log_event("backfill.cancelled", grant, had_backfill=before is not None)
    return {"pipeline": p.name, "cancelled": before.to_dict() if before is not None else None}
