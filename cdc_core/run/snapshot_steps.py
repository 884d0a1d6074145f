"""Initial load, the run's steps: request, plan, stage and log snapshot chunks under the lease (docs/snapshot.md)."""


from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from cdc_core.capture.snapshot_reads import estimate_rows, plan_next_chunk_from_source, read_chunk
from cdc_core.capture.source import connect
from cdc_core.model import transforms
from cdc_core.model.changes import RowChange, TableSchema
from cdc_core.model.errors import ConfigError, CoordinationError
from cdc_core.model.snapshot_state import (
    STATUS_DONE,
    ChunkSpec,
    SnapshotState,
    TableProgress,
    TableRequest,
    cancelled,
    chunks_of,
    restarted,
    with_requests,
)
from cdc_core.model.window_plan import WindowPlan
from cdc_core.run.context import PipelineContext

if TYPE_CHECKING:
    from cdc_core.coordination import Cursor, LeaseGrant
    from cdc_core.model.manifest import Manifest

log = logging.getLogger("cdc.snapshot")


# ------------------------------------------------------------------------ the pipeline's side


def _describe_one(p: PipelineContext, name: str, plan: WindowPlan | None = None) -> TableSchema | None:
    """The table as it is now (None when gone), with the full-row-key settings of `plan` when given."""
    from cdc_core.model.errors import UnknownTable

    try:
        if plan is None:
            return p.describe((name,)).get(name)
        _, full_row_key = p.plan_capture(plan)
        schema, _, table = name.partition(".")
        found: TableSchema | None = p.schema_lookup(full_row_key)(schema, table)
        return found
    except UnknownTable:
        return None


def _describe_many(p: PipelineContext, names: Sequence[str], plan: WindowPlan | None = None) -> dict[str, TableSchema]:
    """Several tables as they are now, in one information_schema round (absent: gone)."""
    from cdc_core.capture.source import TableFilter, describe_tables
    from cdc_core.model.errors import UnknownTable

    full_row_key = p.plan_capture(plan)[1] if plan is not None else tuple(p.config.tables.full_row_key)
    conn = connect(p.source)
    try:
        try:
            found: dict[str, TableSchema] = describe_tables(
                conn, TableFilter(include=tuple(names), exclude=()), p.name, full_row_key
            )
            return found
        except UnknownTable:  # one of them is gone: ask one by one
            pass
    finally:
        conn.close()
    out: dict[str, TableSchema] = {}
    for n in names:
        one = _describe_one(p, n, plan)
        if one is not None:
            out[n] = one
    return out


def request(
    p: PipelineContext,
    grant: LeaseGrant,
    tables: Sequence[str] | None = None,
    chunk_rows: int | None = None,
    requested_by: str = "",
) -> SnapshotState:
    """Request a snapshot of `tables` (None: every table the pipeline captures). Fenced on the lease."""
    captured = p.describe()
    if tables:
        unknown = sorted(set(tables) - set(captured))
        if unknown:
            raise ConfigError(
                f"pipeline {p.name!r}: cannot snapshot {unknown}: not captured by this pipeline (it captures "
                f"{sorted(captured)}); add them to tables.include first"
            )
        names = list(dict.fromkeys(tables))
    else:
        names = sorted(captured)
    rows = chunk_rows if chunk_rows is not None else p.config.snapshot.chunk_rows
    if rows < 1:
        raise ConfigError(f"pipeline {p.name!r}: snapshot chunk_rows must be >= 1 (got {rows})")
    conn = connect(p.source)
    try:
        reqs = [TableRequest(n, estimate_rows(conn, n), rows) for n in names]
    finally:
        conn.close()
    by = requested_by or grant.holder
    if not reqs:
        p.log_event("snapshot.nothing_to_do", grant, reason="the pipeline captures no existing table")
        return p.coordinator.read_snapshot()
    state = p.coordinator.update_snapshot(
        grant, "request a snapshot", lambda s: with_requests(s, reqs, time.time(), by), "snapshot.requested",
        tables=",".join(names),
    )
    for r in reqs:
        p.log_event("snapshot.table_requested", grant, table=r.table, estimate=r.estimate, chunk_rows=r.chunk_rows)
    return state


def cancel(p: PipelineContext, grant: LeaseGrant, tables: Sequence[str] | None = None) -> SnapshotState:
    return p.coordinator.update_snapshot(
        grant, "cancel the snapshot", lambda s: cancelled(s, tables, time.time()), "snapshot.cancelled",
        tables=",".join(tables) if tables else "all",
    )


def on_first_start(p: PipelineContext, grant: LeaseGrant) -> None:
    """A new pipeline (no stream position yet) with `snapshot.on_start`: request every captured table.

    Called before the stream's start is set, so the start is at or before every chunk's watermark
    (nothing between the snapshot and the stream is missed). A crash between this request and the
    start being set repeats the request next time, harmlessly (no chunk can have run: chunks need
    the start).
    """
    if not p.config.snapshot_on_start():
        return
    state = p.coordinator.read_snapshot()
    # Tables already waiting (an earlier attempt that crashed before setting the start, or a table
    # requested by hand before the first run) are not requested again.
    waiting = {t.table for t in state.tables if not t.done}
    missing = [t for t in sorted(p.describe()) if t not in waiting]
    if missing:
        request(p, grant, missing, requested_by=f"on_start:{grant.holder}")


def plan_chunk(p: PipelineContext, grant: LeaseGrant, cursor: Cursor, state: SnapshotState) -> WindowPlan | None:
    """The next chunk's plan (not stored), or None when no chunk can be planned now."""
    cur = state.current()
    if cur is None or cursor.position is None:
        return None
    facts = p.source_facts(refresh=True)
    if not facts.identity.same_server(cursor.position.server):
        return None  # a failover: the binlog path rebases the cursor first
    table = _describe_one(p, cur.table)
    if table is not None and cur.key and tuple(table.key) != tuple(cur.key):
        name = cur.table
        p.log_event("snapshot.key_changed", grant, table=name, old=",".join(cur.key), new=",".join(table.key))
        state = p.coordinator.update_snapshot(
            grant, "restart a table whose key changed", lambda s: restarted(s, name, time.time(), "key changed"),
            "snapshot.restarted", table=name,
        )
        cur = state.current()
        if cur is None:
            return None
    max_tables = p.config.snapshot.max_tables_per_window
    following: list[tuple[TableProgress, TableSchema | None]] = []
    if max_tables > 1:
        nxt = [t for t in state.tables if not t.done and t.table != cur.table][: max_tables - 1]
        if nxt:
            described = _describe_many(p, [t.table for t in nxt])
            following = [(t, described.get(t.table)) for t in nxt]
    plan = plan_next_chunk_from_source(
        p.source, facts.identity, epoch=cursor.position.epoch, pipeline=p.name, seq=cursor.seq + 1, progress=cur,
        table=table, now=time.time(), holder=grant.holder, following=following, max_tables=max_tables,
    )
    if plan.start < cursor.position:
        # Cannot happen on one server (the watermark is read after the cursor was written); should the
        # server say otherwise, let a binlog window go first rather than fail the plan step.
        p.log_event(
            "snapshot.watermark_behind_cursor", grant, watermark=plan.start.label(), cursor=cursor.position.label()
        )
        return None
    return replace(plan, capture=p.capture_settings(plan.tables))  # re-staging describes the table the same way


def log_planned(p: PipelineContext, grant: LeaseGrant, plan: WindowPlan, state: SnapshotState) -> None:
    specs = chunks_of(plan)
    for spec in specs:
        t = state.table(spec.table)
        total = t.chunks_total() if t is not None else spec.chunk
        p.log_event(
            "snapshot.chunk_planned", grant, seq=plan.seq, table=spec.table,
            chunk=f"{spec.chunk}/{max(total, spec.chunk)}", lower=json.dumps(spec.lower), upper=json.dumps(spec.upper),
            last=spec.last, watermark=plan.start.label(), version=spec.version,
            **({"window_tables": len(specs)} if len(specs) > 1 else {}),
        )


def stage_chunk(p: PipelineContext, grant: LeaseGrant, plan: WindowPlan) -> Manifest:
    """Read and stage the window's chunk(s) (bounded memory); the first chunk of a table declares it, so
    an empty source table still gets its (empty) Delta table."""
    from cdc_core.lake import staging
    from cdc_core.model import faults

    specs = chunks_of(plan)
    wanted = [s.table for s in specs if not s.missing]
    if len(specs) == 1:
        one = _describe_one(p, specs[0].table, plan) if wanted else None
        described = {specs[0].table: one} if one is not None else {}
    else:
        described = dict(_describe_many(p, wanted, plan)) if wanted else {}
    t0 = time.time()
    last = [t0]
    done_rows = [0]

    def on_rows(rows: int) -> None:
        faults.point("mid_stage")  # crash suite: a chunk half read
        now = time.time()
        if now - last[0] >= 10:
            last[0] = now
            p.log_event("snapshot.reading", grant, seq=plan.seq, table=current[0], rows=done_rows[0] + rows)
            p.renew(grant)  # a long chunk keeps the lease alive (and notices a lost one)

    current = [specs[0].table]
    declare: list[TableSchema] = []
    readers: list[tuple[ChunkSpec, TableSchema]] = []
    for spec in specs:
        table = described.get(spec.table)
        if table is None:
            if not spec.missing:
                p.log_event("snapshot.table_gone", grant, seq=plan.seq, table=spec.table)
            continue
        readers.append((spec, table))
        if spec.chunk == 1:
            declare.append(table)

    def changes() -> Iterator[RowChange]:
        for spec, table in readers:
            current[0] = spec.table
            n = 0
            for change in read_chunk(
                p.source, plan, table, on_rows=on_rows, spec=spec, first_ordinal=done_rows[0] + 1,
                zero_dates=p.config.zero_dates,
            ):
                n += 1
                yield change
            done_rows[0] += n

    shaping = transforms.planned(p.config.transform, plan, lambda: p.capture_settings(plan.tables), p.name,
                                 p.transform_key)  # the rules the chunk was planned with
    manifest = staging.stage_window(plan, changes(), p.staging_root, declare=tuple(declare), storage=p.storage,
                                    transforms=shaping)
    p.log_event(
        "snapshot.chunk_staged", grant, seq=plan.seq, table=specs[0].table, chunk=specs[0].chunk,
        rows=manifest.changes, secs=f"{time.time() - t0:.2f}",
        **({"window_tables": len(specs)} if len(specs) > 1 else {}),
    )
    return manifest


def log_acked(p: PipelineContext, grant: LeaseGrant, plan: WindowPlan) -> None:
    try:
        state = p.coordinator.read_snapshot()
    except CoordinationError:
        return
    for spec in chunks_of(plan):
        t = state.table(spec.table)
        if t is None:
            continue
        p.log_event(
            "snapshot.progress", grant, seq=plan.seq, table=t.table, status=t.status,
            chunks=f"{t.chunks}/{t.chunks_total()}", rows=t.rows, estimate=t.estimate,
        )
        if t.status == STATUS_DONE and t.last_seq == plan.seq:
            p.log_event("snapshot.table_done", grant, table=t.table, chunks=t.chunks, rows=t.rows)
