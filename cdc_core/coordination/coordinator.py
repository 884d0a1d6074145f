"""Coordination in ZooKeeper: one pipeline's lease, cursor and window records, fenced on the lease.

Layout (several pipelines never share a node; see docs/zookeeper-layout.md)::

    <root>/pipelines/<name>                     the pipeline node; its data version is the lease epoch
    <root>/pipelines/<name>/lease               the lease record (JSON); its czxid is the fencing token
    <root>/pipelines/<name>/cursor              last acked window seq + stream position + backfill (JSON)
    <root>/pipelines/<name>/windows/<seq:010d>  one immutable window plan + its state (planned|acked)
    <root>/pipelines/<name>/snapshot            the initial load's progress per table (JSON; model/snapshot_state.py)

`PipelineCoordinator` is the only object that touches ZooKeeper for a pipeline: a facade over the fenced
core (`FencedStore`, fenced.py: connection state, reads, the lease check and the one multi-op every fenced
write goes through, which starts with the epoch and lease-version checks) and one class per record family:
the lease (lease.py), the cursor and window records with plan, ack and prune (windows.py), the cursor's
moves outside an ack (cursor.py: start, rebase, backfill), the snapshot record (snapshot_record.py), the
lake registry (lake_record.py) and the operators' notes (notes.py: last error, maintenance result).

The rules of the protocol (which plan may be stored, how an ack moves the cursor) are pure functions
(`lease_decision`, `check_plan`, `cursor_after_ack`, `check_backfill_request`) that the families apply to
what they just read; the multi-op then makes sure nothing they read changed meanwhile.
"""


from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient

from cdc_core.coordination.cursor import CursorMoves
from cdc_core.coordination.fenced import FencedStore
from cdc_core.coordination.lake_record import LakeRecord
from cdc_core.coordination.lease import Lease
from cdc_core.coordination.notes import LastError, MaintenanceNote
from cdc_core.coordination.records import Cursor, LeaseGrant, LeaseInfo, WindowRecord
from cdc_core.coordination.snapshot_record import SnapshotRecord
from cdc_core.coordination.windows import WindowLog
from cdc_core.model import faults, retention, snapshot_state
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowPlan


class PipelineCoordinator:
    """The only object that touches ZooKeeper for one pipeline (or one source of a group pipeline): a facade
    over the fenced core (`FencedStore`: connection state, reads, the one fenced commit) and one class per
    record family."""

    def __init__(
        self,
        client: KazooClient,
        root: str,
        pipeline: str,
        *,
        clock: Callable[[], float] = faults.clock,
        before_commit: Callable[[str], None] | None = None,
        source: str | None = None,
    ):
        """`clock`: the time leases are granted and checked against. `before_commit`: called with the
        operation's name just before each fenced multi-op is committed (races in tests, diagnostics).
        `source`: one source of a group pipeline (cdc_core.model.sources): its state (cursor, windows,
        snapshot, lake registry, last error) lives under `sources/<id>/`, the lease stays the pipeline's."""
        self.store = FencedStore(client, root, pipeline, clock=clock, before_commit=before_commit, source=source)
        self.lease = Lease(self.store)
        self.snapshot = SnapshotRecord(self.store)
        self.windows = WindowLog(self.store, self.snapshot)
        self.cursor_moves = CursorMoves(self.windows)
        self.lake = LakeRecord(self.store)
        self.last_error = LastError(self.store)
        self.maintenance = MaintenanceNote(self.store)
        self.client = client
        self.root = root
        self.pipeline = pipeline
        self.source = source
        self.unit = self.store.unit  # whose windows these are (their plans' `pipeline`)
        nodes = self.store.nodes
        self.base = nodes.base
        self.lease_path = nodes.lease
        self.state_base = nodes.state_base
        self.cursor_path = nodes.cursor
        self.windows_path = nodes.windows
        self.snapshot_path = nodes.snapshot
        self.lake_path = nodes.lake
        self.last_error_path = nodes.last_error
        self.maintenance_path = nodes.maintenance

    def __repr__(self) -> str:
        return f"PipelineCoordinator(pipeline={self.pipeline!r}, base={self.base!r}, state={self.state})"

    def close(self) -> None:
        """Stop tracking the client's state (the client itself belongs to the caller)."""
        self.store.close()

    @property
    def before_commit(self) -> Callable[[str], None] | None:
        """Called with the operation's name just before each fenced multi-op is committed (settable)."""
        return self.store.before_commit

    @before_commit.setter
    def before_commit(self, hook: Callable[[str], None] | None) -> None:
        self.store.before_commit = hook

    @property
    def state(self) -> str:
        return self.store.state

    @property
    def needs_reverify(self) -> bool:
        """True after a LOST session until the lease has been verified again."""
        return self.store.needs_reverify

    # ------------------------------------------------------------------------------------- lease

    def acquire(self, holder: str, ttl_seconds: float, *, process: dict[str, Any] | None = None) -> LeaseGrant:
        """Take the pipeline's lease, or raise LeaseHeld (`Lease.acquire`)."""
        return self.lease.acquire(holder, ttl_seconds, process=process)

    def verify(self, grant: LeaseGrant) -> int:
        """The lease node's current data version, after checking it is still `grant`'s lease (else Fenced)."""
        return self.store.verify(grant)

    def renew(self, grant: LeaseGrant, ttl_seconds: float) -> LeaseGrant:
        """Extend the lease; Fenced when it is no longer ours (`Lease.renew`)."""
        return self.lease.renew(grant, ttl_seconds)

    def release(self, grant: LeaseGrant) -> None:
        """Give the lease up; a no-op when it is no longer ours."""
        self.lease.release(grant)

    def break_lease(self, holder: str) -> LeaseInfo:
        """Operator action: remove a live lease held by `holder` (`Lease.break_lease`)."""
        return self.lease.break_lease(holder)

    def read_lease(self) -> LeaseInfo | None:
        """The current lease for monitoring, or None when nobody holds one."""
        return self.lease.read()

    # ----------------------------------------------------------------------- cursor and windows

    def window_path(self, seq: int) -> str:
        return self.windows.window_path(seq)

    def read_cursor(self) -> Cursor:
        """The cursor; seq 0 and no position when the pipeline never acked anything."""
        return self.windows.read_cursor()

    def pending_window(self) -> WindowRecord | None:
        """The planned, un-acked window (at most one exists), or None."""
        return self.windows.pending_window()

    def get_window(self, seq: int) -> WindowRecord | None:
        return self.windows.get_window(seq)

    def recent_windows(self, limit: int = 10) -> list[WindowRecord]:
        """The newest `limit` window records, newest first."""
        return self.windows.recent_windows(limit)

    def window_record_seqs(self) -> list[int]:
        """Sequence numbers of the stored window records, ascending (one listing; for housekeeping)."""
        return self.windows.window_record_seqs()

    def store_plan(self, grant: LeaseGrant, plan: WindowPlan) -> WindowRecord:
        """Store the next window's plan, immutably (`WindowLog.store_plan`)."""
        return self.windows.store_plan(grant, plan)

    def ack_window(
        self, grant: LeaseGrant, seq: int, result: dict[str, Any],
        rereads: Sequence[snapshot_state.TableRequest] = (),
        renames: Sequence[tuple[str, str, int]] = (),
    ) -> Cursor:
        """Mark window `seq` acked and move the cursor past it, in one fenced multi-op (`WindowLog.ack_window`)."""
        return self.windows.ack_window(grant, seq, result, rereads, renames)

    def pruned_marks(self) -> list[tuple[int, float]]:
        """(seq, ack time) marks of pruned window records (`WindowLog.pruned_marks`), ascending; [] before any."""
        return self.windows.pruned_marks()

    def prune_windows(self, grant: LeaseGrant, keep_last: int, older_than_seconds: float,
                      marks_horizon_seconds: float = retention.DEFAULT_MARKS_HORIZON) -> int:
        """Delete old acked window records (`WindowLog.prune_windows`); returns how many."""
        return self.windows.prune_windows(grant, keep_last, older_than_seconds, marks_horizon_seconds)

    def start_backfill(
        self,
        grant: LeaseGrant,
        from_position: BinlogPosition,
        until_position: BinlogPosition,
        tables: tuple[str, ...] | list[str] = (),
        requested_by: str = "",
    ) -> Cursor:
        """Make the next windows a backfill from `from_position` until `until_position` (at most the cursor)."""
        return self.cursor_moves.start_backfill(grant, from_position, until_position, tables, requested_by)

    def cancel_backfill(self, grant: LeaseGrant) -> Cursor:
        """Drop the active backfill (a no-op when none is active)."""
        return self.cursor_moves.cancel_backfill(grant)

    def set_start(self, grant: LeaseGrant, position: BinlogPosition) -> Cursor:
        """Set the first stream position of a pipeline that has none yet (same position again: no-op)."""
        return self.cursor_moves.set_start(grant, position)

    def rebase_cursor(self, grant: LeaseGrant, position: BinlogPosition, reason: str = "") -> Cursor:
        """Re-express the cursor on another server after a failover (`CursorMoves.rebase_cursor`)."""
        return self.cursor_moves.rebase_cursor(grant, position, reason)

    # ------------------------------------------------------------------- snapshot, lake, notes

    def read_snapshot(self) -> snapshot_state.SnapshotState:
        """The snapshot record (tables, progress); empty when no snapshot was ever requested."""
        return self.snapshot.read()

    def update_snapshot(
        self,
        grant: LeaseGrant,
        what: str,
        decide: Callable[[snapshot_state.SnapshotState], snapshot_state.SnapshotState | None],
        event: str,
        **fields: Any,
    ) -> snapshot_state.SnapshotState:
        """A fenced change of the snapshot record (request, cancel, restart); `decide` None = no-op."""
        return self.snapshot.update(grant, what, decide, event, **fields)

    def read_lake(self) -> dict[str, Any] | None:
        """The lake table registry's data (cdc_core.model.lake_registry), None when nothing was registered yet."""
        return self.lake.read()

    def update_lake(
        self, grant: LeaseGrant, change: Callable[[dict[str, Any] | None], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Replace the lake registry's data with `change(current)` in one fenced compare-and-set."""
        return self.lake.update(grant, change)

    def record_error(self, holder: str, step: str, seq: int | None, message: str) -> None:
        """Note the last failure for the monitor; best effort and not fenced (`LastError.record`)."""
        self.last_error.record(holder, step, seq, message)

    def read_last_error(self) -> dict[str, Any] | None:
        """The last failure noted by `record_error`, or None."""
        return self.last_error.read()

    def record_maintenance(self, grant: LeaseGrant, result: dict[str, Any]) -> None:
        """Store the last maintenance run's result (replacing the previous one), fenced on the lease."""
        self.maintenance.record(grant, result)

    def read_maintenance(self) -> dict[str, Any] | None:
        """The last maintenance run's result, or None when maintenance never ran."""
        return self.maintenance.read()
