"""The cursor's moves outside an ack: the first stream position, a rebase after a failover, and a backfill's
start and cancel. Each is a fenced compare-and-set of the cursor that requires no pending window (a planned
window is replayed and acked first), decided by a pure rule over the cursor just read."""


from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from cdc_core.coordination.fenced import Done, Write
from cdc_core.coordination.records import BackfillState, Cursor, LeaseGrant, dumps
from cdc_core.coordination.rules import check_backfill_request, same_position
from cdc_core.coordination.windows import WindowLog
from cdc_core.model.errors import StateConflict
from cdc_core.model.positions import BinlogPosition


class CursorMoves:
    """Moves of one pipeline's (or group source's) cursor that no window carries."""

    def __init__(self, windows: WindowLog) -> None:
        self.windows = windows
        self.store = windows.store
        self.pipeline = windows.pipeline

    def _change(
        self, grant: LeaseGrant, what: str, decide: Callable[[Cursor], Cursor | None], event: str, **fields: Any
    ) -> Cursor:
        """A fenced cursor change that requires no pending window. `decide` returns None for a no-op."""

        def attempt() -> Write | Done:
            cursor, cstat, _, pending = self.windows.pending()
            if pending is not None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot {what}: window {pending[0].seq} ({pending[0].plan.kind}) is "
                    "planned and not acked; replay and ack it first"
                )
            new = decide(cursor)
            if new is None:
                return Done(cursor)
            return Write([self.windows.cursor_op(cstat, dumps(new.to_dict()))], new, event, fields)

        result: Cursor = self.store.fenced(grant, what, attempt)
        return result

    def start_backfill(
        self,
        grant: LeaseGrant,
        from_position: BinlogPosition,
        until_position: BinlogPosition,
        tables: tuple[str, ...] | list[str] = (),
        requested_by: str = "",
    ) -> Cursor:
        """Make the next windows a backfill from `from_position` until `until_position` (at most the cursor)."""

        def decide(cursor: Cursor) -> Cursor:
            check_backfill_request(self.pipeline, cursor, from_position, until_position)
            now = self.store.clock()
            bf = BackfillState(from_position, until_position, tuple(tables), requested_by or grant.holder, now)
            return replace(cursor, backfill=bf, updated_at=now)

        return self._change(
            grant, "start a backfill", decide, "backfill.started",
            start=from_position.label().replace(" ", "_"), until=until_position.label().replace(" ", "_"),
        )

    def cancel_backfill(self, grant: LeaseGrant) -> Cursor:
        """Drop the active backfill (a no-op when none is active)."""

        def decide(cursor: Cursor) -> Cursor | None:
            if cursor.backfill is None:
                return None
            return replace(cursor, backfill=None, updated_at=self.store.clock())

        return self._change(grant, "cancel the backfill", decide, "backfill.cancelled")

    def set_start(self, grant: LeaseGrant, position: BinlogPosition) -> Cursor:
        """Set the first stream position of a pipeline that has none yet (same position again: no-op)."""

        def decide(cursor: Cursor) -> Cursor | None:
            if cursor.position is not None:
                if same_position(cursor.position, position):
                    return None
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot set the start to {position.label()}: the cursor already "
                    f"stands at {cursor.position.label()} (a cursor never jumps; a backfill replays older changes)"
                )
            return replace(cursor, position=position, updated_at=self.store.clock())

        return self._change(
            grant, "set the start position", decide, "cursor.started", position=position.label().replace(" ", "_")
        )

    def rebase_cursor(self, grant: LeaseGrant, position: BinlogPosition, reason: str = "") -> Cursor:
        """Re-express the cursor on another server after a failover (the same logical point).

        The cursor never moves backward: on the same server the new position must not be earlier; on
        another server it must carry a later epoch (positions of different servers do not compare).
        """

        def decide(cursor: Cursor) -> Cursor | None:
            old = cursor.position
            if old is None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot rebase a cursor that has no position; set the start"
                )
            if same_position(old, position):
                return None
            if cursor.backfill is not None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot rebase the cursor while a backfill is active; "
                    "finish or cancel it"
                )
            same_server = old.server.same_server(position.server)
            if (same_server and position < old) or (not same_server and position.epoch <= old.epoch):
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: rebasing the cursor from {old.label()} ({old.server}, "
                    f"epoch {old.epoch}) to {position.label()} ({position.server}, epoch {position.epoch}) would "
                    "move it backward or sideways; a position on another server must carry a later epoch"
                )
            return replace(cursor, position=position, updated_at=self.store.clock())

        return self._change(
            grant, "rebase the cursor", decide, "cursor.rebased",
            position=position.label().replace(" ", "_"), reason=repr(reason),
        )
