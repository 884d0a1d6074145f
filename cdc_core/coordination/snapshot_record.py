"""The snapshot record family: `<state>/snapshot`, the initial load's requests and progress per table
(cdc_core/model/snapshot_state.py). Changed on its own by operator actions (request, cancel, restart), and
inside a window's plan and ack multi-ops (`chunk_check_op`, `ack_op`, `requests_op`) so that a chunk's
progress and the re-reads a schema change asks for move atomically with the window."""


from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.protocol.states import ZnodeStat

from cdc_core.coordination.fenced import Done, FencedStore, Op, Write, put_op
from cdc_core.coordination.records import LeaseGrant
from cdc_core.model import snapshot_state
from cdc_core.model.window_plan import WindowPlan


class SnapshotRecord:
    """One pipeline's (or group source's) snapshot record."""

    def __init__(self, store: FencedStore) -> None:
        self.store = store
        self.path = store.nodes.snapshot

    def state(self) -> tuple[snapshot_state.SnapshotState, ZnodeStat | None]:
        """The record and its node's stat (None when absent), read in one go."""
        got = self.store.get(self.path, "reading the snapshot record")
        if got is None:
            return snapshot_state.SnapshotState(), None
        if not got[0]:  # created empty by the layout: no snapshot requested yet
            return snapshot_state.SnapshotState(), got[1]
        parse = snapshot_state.SnapshotState.from_dict
        state: snapshot_state.SnapshotState = self.store.parse(got[0], self.path, parse)
        return state, got[1]

    def read(self) -> snapshot_state.SnapshotState:
        """The snapshot record (tables, progress); empty when no snapshot was ever requested."""
        self.store.require_connected("read snapshot")
        return self.state()[0]

    def chunk_check_op(self, unit: str, plan: WindowPlan) -> Op:
        """For storing a snapshot window's plan: the chunk must be the snapshot's next one, still when committed."""
        sstate, sstat = self.state()
        snapshot_state.check_chunk(unit, sstate, plan)
        assert sstat is not None  # an active snapshot has a record
        return ("check", self.path, sstat.version)

    def ack_op(self, plan: WindowPlan, result: dict[str, Any], now: float) -> Op:
        """For acking a snapshot window: the chunk's progress moves with the ack, atomically."""
        state, stat = self.state()
        rows = int(result.get("changes") or 0)
        per_table = {
            str(n): int(t.get("changes") or 0) for n, t in (result.get("tables") or {}).items() if isinstance(t, dict)
        }
        data = snapshot_state.after_ack(state, plan, rows, now, per_table).to_json()
        return put_op(self.path, data, stat)

    def requests_op(
        self,
        rereads: Sequence[snapshot_state.TableRequest],
        renames: Sequence[tuple[str, str, int]],
        now: float,
    ) -> Op | None:
        """For acking a stream window with schema changes: request the re-reads it left, and load again under
        its new name a table renamed while its snapshot was still loading; None when nothing is new."""
        state, stat = self.state()
        loading = [
            snapshot_state.TableRequest(dst, None, t.chunk_rows, sweep_below=v)
            for src, dst, v in renames if (t := state.table(src)) is not None and not t.done
        ]
        wanted = snapshot_state.reread_requests(state, [*rereads, *loading])
        if not wanted:
            return None
        data = snapshot_state.with_requests(state, wanted, now, "schema change").to_json()
        return put_op(self.path, data, stat)

    def update(
        self,
        grant: LeaseGrant,
        what: str,
        decide: Callable[[snapshot_state.SnapshotState], snapshot_state.SnapshotState | None],
        event: str,
        **fields: Any,
    ) -> snapshot_state.SnapshotState:
        """A fenced change of the snapshot record (request, cancel, restart); `decide` None = no-op."""

        def attempt() -> Write | Done:
            state, stat = self.state()
            new = decide(state)
            if new is None:
                return Done(state)
            return Write([put_op(self.path, new.to_json(), stat)], new, event, fields)

        result: snapshot_state.SnapshotState = self.store.fenced(grant, what, attempt)
        return result
