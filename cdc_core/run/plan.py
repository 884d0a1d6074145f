"""The plan step: recover, then the window to work on, stored immutably in ZooKeeper before anything else.

Recovery first (BookKeeper's): a pending window whose Delta commits all landed is acked now
(cdc_core.run.ack.recover); a pending window not (fully) merged is returned unchanged, to be replayed
exactly. Only then is a new window planned from the cursor: a stream or backfill window cut from a scan of
the binlog (cdc_core.model.windows), or, while a snapshot is active, a snapshot chunk in turn.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from cdc_core.capture.lag import lag
from cdc_core.coordination import LeaseGrant
from cdc_core.model import faults, snapshot_state
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, KIND_STREAM, WindowCaps, WindowPlan
from cdc_core.model.windows import INFO_XA_OPEN, plan_window
from cdc_core.run import ack, lake_tables, snapshot_steps
from cdc_core.run.context import PipelineContext

log = logging.getLogger("cdc.plan")

RECOVERED_REPLAY = "replay"


@dataclass(frozen=True)
class PlannedWindow:
    """The window a run works on next (stored in ZooKeeper): planned now, or pending and replayed.

    `recovered`: what recovery did first (`ack.recover`'s note, or `RECOVERED_REPLAY` for a replayed pending
    window), else None. `snapshot`: a snapshot chunk's label (cdc_core.model.snapshot_state.chunk_label)."""

    seq: int
    kind: str
    empty: bool
    start: str
    end: str
    transactions: int
    recovered: str | None = None
    snapshot: dict[str, Any] | None = None

    @classmethod
    def of(cls, plan: WindowPlan, recovered: str | None) -> PlannedWindow:
        return cls(
            seq=plan.seq, kind=plan.kind, empty=plan.is_empty, start=plan.start.label(), end=plan.end.label(),
            transactions=plan.transactions, recovered=recovered,
            snapshot=snapshot_state.chunk_label(plan) if plan.kind == KIND_SNAPSHOT else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """The step's answer as the DAG's XCom and the CLI's JSON carry it."""
        out: dict[str, Any] = {
            "seq": self.seq, "kind": self.kind, "empty": self.empty, "start": self.start, "end": self.end,
            "transactions": self.transactions, "recovered": self.recovered,
        }
        if self.kind == KIND_SNAPSHOT:
            out["snapshot"] = self.snapshot
        return out


def plan(p: PipelineContext, grant: LeaseGrant) -> PlannedWindow:
    """Recover, then return the window to work on: a pending one (replayed exactly) or a new one.

    While a snapshot is active, chunks and binlog windows alternate (`snapshot_state.chunk_turn`); a
    binlog window with nothing in it gives its turn to the next chunk.
    """
    grant = p.renew(grant)
    recovered = ack.recover(p, grant)
    pending = p.coordinator.pending_window()
    if pending is not None:
        p.log_event("window.replay", grant, seq=pending.plan.seq, kind=pending.plan.kind)
        faults.point("after_plan")  # the plan to work on is known, replayed or new (crash suite)
        return PlannedWindow.of(pending.plan, recovered or RECOVERED_REPLAY)
    cursor = p.coordinator.read_cursor()
    first_rule = None
    if cursor.position is None and cursor.backfill is None:
        first_rule = _first_start(p, grant)
        cursor = p.coordinator.read_cursor()
    snap = p.coordinator.read_snapshot()
    if snapshot_state.chunk_turn(snap, cursor.seq):
        chunk = snapshot_steps.plan_chunk(p, grant, cursor, snap)
        if chunk is not None:
            return _store(p, grant, chunk, recovered, snap)
    if cursor.backfill is None:
        lake_tables.check_lake(p, grant, cursor.seq + 1)  # a deleted/re-created Delta table stops stream windows
    new = _binlog_plan(p, grant, cursor, first_rule)
    if new.is_empty and snap.active:
        chunk = snapshot_steps.plan_chunk(p, grant, cursor, p.coordinator.read_snapshot())
        if chunk is not None:
            return _store(p, grant, chunk, recovered, snap)
    return _store(p, grant, new, recovered, snap)


def _first_start(p: PipelineContext, grant: LeaseGrant) -> str:
    """A new pipeline: request the initial snapshot (when configured), then set the stream's start.

    In this order, so that the start is at or before every chunk's watermark (see docs/snapshot.md).
    """
    snapshot_steps.on_first_start(p, grant)
    resolution = p.resolve(None)
    p.coordinator.set_start(grant, resolution.position)
    p.log_event("cursor.initialised", grant, rule=resolution.rule, position=resolution.position.label())
    return resolution.rule


def _binlog_plan(p: PipelineContext, grant: LeaseGrant, cursor: Any, first_rule: str | None = None) -> WindowPlan:
    """The next stream or backfill window from the cursor (not stored yet)."""
    facts = p.source_facts(refresh=True)
    caps = WindowCaps(**p.config.caps.model_dump())
    seq = cursor.seq + 1
    if cursor.backfill is not None:
        bf = cursor.backfill
        start = bf.position
        kind = KIND_BACKFILL
        stop: tuple[str, int] | None = (bf.until.file, bf.until.offset)
        tables = tuple(bf.tables) if bf.tables else None
        info: dict[str, Any] = {"backfill_until": bf.until.label()}
    else:
        resolution = p.resolve(cursor.position)
        start = resolution.position
        if not start.same_point(cursor.position) or start.server != cursor.position.server:
            # Failover: the same logical point expressed on the new server.
            p.coordinator.rebase_cursor(grant, start, reason=resolution.rule)
            p.log_event("cursor.rebased", grant, rule=resolution.rule, position=start.label())
        kind = KIND_STREAM
        stop = None
        tables = None
        info = {"rule": first_rule or resolution.rule}
    scanner = p.scanner(facts)
    # A window that reaches the source's end (a backfill: its `until`) also takes the events after its
    # last transaction that carry no row change (rotate, headers, checkpoints): the cursor of a quiet
    # source reaches the end, so its lag returns to zero, and a backfill whose `until` follows such
    # events still ends (cdc_core.model.windows).
    boundaries = scanner.scan_to_end(
        start.file, start.offset, start.gtid, start.epoch, stop=stop, start_commit_ts=start.commit_ts,
    )
    cut = plan_window(p.name, seq, start, boundaries, caps, kind=kind, now=time.time(), tables=tables)
    if INFO_XA_OPEN in cut.info:
        held = cut.info[INFO_XA_OPEN]
        log.warning(
            "pipeline %r: window %d ends at %s, before an XA transaction prepared at %s that the source has neither "
            "committed nor rolled back (%d open): the pipeline lands nothing after it until it has. `XA RECOVER` on "
            "the source lists prepared transactions", p.name, seq, cut.end.label(), held["prepared_at"], held["open"],
        )
        p.log_event("window.xa_open", grant, seq=seq, prepared_at=held["prepared_at"], open=held["open"])
    behind = lag(cut.end, facts)  # what stays for later windows once this one lands (the metric lag.bytes)
    p.log_event("source.behind", grant, seq=seq, bytes=behind["bytes"], binlog_bytes=behind["binlog_bytes"])
    if cut.info.get("capped") and facts.end is not None:
        # What "behind" meant when the cap cut the window (see `loop.more_work`).
        info["source_end"] = {"file": facts.end.file, "offset": facts.end.offset}
    return WindowPlan(
        **{**cut.__dict__, "info": {**cut.info, **info, "holder": grant.holder},
           "capture": p.capture_settings(tables)}
    )


def _store(
    p: PipelineContext, grant: LeaseGrant, plan: WindowPlan, recovered: str | None,
    snap: snapshot_state.SnapshotState,
) -> PlannedWindow:
    p.coordinator.store_plan(grant, plan)
    if plan.kind == KIND_SNAPSHOT:
        snapshot_steps.log_planned(p, grant, plan, snap)
    else:
        p.log_event(
            "window.planned", grant, seq=plan.seq, kind=plan.kind, start=plan.start.label(), end=plan.end.label(),
            transactions=plan.transactions, events=plan.events, bytes=plan.bytes,
        )
    faults.point("after_plan")
    return PlannedWindow.of(plan, recovered)
