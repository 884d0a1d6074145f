"""The protocol's rules as pure functions over what was just read: who may take the lease, which plan may be
stored, how an ack moves the cursor, when a backfill may start."""


from __future__ import annotations

import logging
from dataclasses import replace
from typing import Literal

from cdc_core.coordination.records import Cursor, LeaseRecord, WindowRecord
from cdc_core.model.errors import ConfigError, StateConflict
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, KIND_STREAM, WindowPlan
from cdc_core.model.windows import INFO_XA_OPEN

log = logging.getLogger("cdc.coordination")


# ------------------------------------------------------------------------ the rules (pure functions)

LeaseDecision = Literal["create", "reenter", "takeover", "held"]


def lease_decision(current: LeaseRecord | None, holder: str, now: float) -> LeaseDecision:
    """What an acquirer may do, given the lease record it read and its own clock.

    Expiry only decides when a takeover is *allowed*. It is never what keeps two runs apart: every
    change a run makes is a multi-op that checks the lease node's version, and a takeover deletes and
    re-creates the node (new czxid = new token, new version). So if clocks disagree and a takeover
    happens "too early", the previous holder is merely fenced early: it can change nothing.
    """
    if current is None:
        return "create"
    if now >= current.expires_at:
        return "takeover"
    if current.holder == holder:
        return "reenter"  # a retried acquire task of the same run: same token
    return "held"


def same_position(a: BinlogPosition, b: BinlogPosition) -> bool:
    return a.same_point(b) and a.server.same_server(b.server)


def check_plan(pipeline: str, cursor: Cursor, pending: WindowRecord | None, plan: WindowPlan) -> None:
    """Raise StateConflict unless `plan` may be stored as the pipeline's next window."""
    where = f"pipeline {pipeline!r}: cannot store window {plan.seq}"
    if plan.pipeline != pipeline:
        raise StateConflict(f"{where}: the plan belongs to pipeline {plan.pipeline!r}")
    if pending is not None:
        raise StateConflict(
            f"{where}: window {pending.seq} ({pending.plan.kind}) is planned and not acked; a stored plan is "
            "immutable and must be replayed and acked first (re-run the run's steps from 'plan')"
        )
    if plan.seq != cursor.seq + 1:
        raise StateConflict(
            f"{where}: the cursor's last acked window is {cursor.seq}, so the next one must be {cursor.seq + 1}; "
            "re-plan from the current cursor"
        )
    if plan.kind == KIND_SNAPSHOT:
        # Which chunk may come next is the snapshot record's business (`snapshot_state.check_chunk`); here, the
        # stream's side of the DBLog argument: the stream must not be past the chunk's watermark.
        if cursor.position is None:
            raise StateConflict(f"{where}: a snapshot chunk needs the stream's start position set first")
        if not plan.start.same_point(plan.end):
            raise StateConflict(f"{where}: a snapshot chunk is one point in the binlog (its watermark): start == end")
        if not plan.start.server.same_server(cursor.position.server) or plan.start < cursor.position:
            raise StateConflict(
                f"{where}: a snapshot chunk's watermark ({plan.start.label()} on {plan.start.server}) must be at or "
                f"after the stream cursor {cursor.position.label()} on {cursor.position.server}; re-plan"
            )
    elif plan.kind == KIND_STREAM:
        if cursor.backfill is not None:
            raise StateConflict(
                f"{where}: a backfill is active (next at {cursor.backfill.position.label()}, until "
                f"{cursor.backfill.until.label()}); plan backfill windows until it finishes, or cancel it"
            )
        if cursor.position is not None and not same_position(plan.start, cursor.position):
            raise StateConflict(
                f"{where}: a stream window must start at the cursor {cursor.position.label()} "
                f"({cursor.position.server}), not at {plan.start.label()} ({plan.start.server}); re-plan from "
                "the cursor (after a failover, rebase the cursor first)"
            )
    elif plan.kind == KIND_BACKFILL:
        bf = cursor.backfill
        if bf is None:
            raise StateConflict(f"{where}: it is a backfill window but no backfill is active; start one first")
        if not same_position(plan.start, bf.position):
            raise StateConflict(
                f"{where}: a backfill window must start where the backfill stands ({bf.position.label()}), "
                f"not at {plan.start.label()}; re-plan from the cursor's backfill position"
            )
        if bf.tables and set(plan.tables or ()) != set(bf.tables):
            raise StateConflict(
                f"{where}: the backfill covers tables {sorted(bf.tables)}, the plan {sorted(plan.tables or ())}"
            )


def cursor_after_ack(pipeline: str, cursor: Cursor, plan: WindowPlan, now: float) -> Cursor:
    """The cursor once `plan` is acked; StateConflict when the plan does not follow the cursor."""
    where = f"pipeline {pipeline!r}: cannot ack window {plan.seq}"
    if plan.seq != cursor.seq + 1:
        raise StateConflict(
            f"{where}: the cursor's last acked window is {cursor.seq}; only window {cursor.seq + 1} can be acked"
        )
    if plan.kind == KIND_STREAM:
        if cursor.position is not None and not same_position(plan.start, cursor.position):
            raise StateConflict(
                f"{where}: it starts at {plan.start.label()} but the cursor stands at {cursor.position.label()}"
            )
        # The stream position only ever moves forward, from the plan's start to its end.
        if cursor.position is not None and plan.end < cursor.position:
            raise StateConflict(f"{where}: it would move the cursor backward to {plan.end.label()}")
        return Cursor(seq=plan.seq, position=plan.end, backfill=cursor.backfill, updated_at=now)
    if plan.kind == KIND_BACKFILL:
        bf = cursor.backfill
        if bf is None or not same_position(plan.start, bf.position):
            raise StateConflict(
                f"{where}: it is a backfill window starting at {plan.start.label()} but the backfill "
                + ("is not active" if bf is None else f"stands at {bf.position.label()}")
            )
        # Done at its `until`, or before it when an XA transaction prepared before `until` commits after it: its
        # group and what follows stay unreplayed (the stream landed them; cdc_core.model.windows).
        done = plan.end >= bf.until or INFO_XA_OPEN in plan.info
        rest = None if done else replace(bf, position=plan.end)
        return Cursor(seq=plan.seq, position=cursor.position, backfill=rest, updated_at=now)
    if plan.kind == KIND_SNAPSHOT:  # a chunk moves the seq only; its progress moves in the same multi-op
        return Cursor(seq=plan.seq, position=cursor.position, backfill=cursor.backfill, updated_at=now)
    raise StateConflict(f"{where}: window kind {plan.kind!r} cannot be acked by this version")


def check_backfill_request(
    pipeline: str, cursor: Cursor, from_position: BinlogPosition, until_position: BinlogPosition
) -> None:
    where = f"pipeline {pipeline!r}: cannot start a backfill"
    if cursor.backfill is not None:
        raise StateConflict(
            f"{where}: one is already active (next at {cursor.backfill.position.label()}, until "
            f"{cursor.backfill.until.label()}, requested by {cursor.backfill.requested_by!r}); cancel it first"
        )
    if until_position < from_position:
        raise ConfigError(
            f"{where}: it would end ({until_position.label()}) before it starts ({from_position.label()})"
        )
    if cursor.position is not None and (
        not until_position.server.same_server(cursor.position.server) or until_position > cursor.position
    ):
        raise StateConflict(
            f"{where}: it must end at or before the cursor {cursor.position.label()} on {cursor.position.server} "
            f"(asked until {until_position.label()} on {until_position.server}); a backfill replays landed changes"
        )
