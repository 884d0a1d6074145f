"""The window record family: the cursor and the window records (`<state>/cursor`, `<state>/windows/<seq>`).

A window's plan is stored immutably (`store_plan`), and its ack marks the record acked and moves the cursor
past it in one fenced multi-op (`ack_window`); housekeeping deletes old acked records (`prune_windows`) and
leaves, in the same multi-op, a mark of the newest one it deleted (`<state>/pruned`: seq and ack time), so that
the staged copy of a window whose record is gone can still be proven old enough to delete (`pruned_marks`).
Which plan may be stored and how an ack moves the cursor are pure rules (`check_plan`, `cursor_after_ack`,
cdc_core/coordination/rules.py) applied to what was just read; the multi-op then makes sure nothing read
changed meanwhile. Every operation that relies on "no pending window" writes the cursor too, so they
serialise on its version (the cursor changes of cdc_core/coordination/cursor.py included).
"""


from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from cdc_core.coordination.fenced import RACE_ATTEMPTS, Done, FencedStore, Op, Write, put_op
from cdc_core.coordination.paths import WINDOW_NODE_RE
from cdc_core.coordination.records import STATE_ACKED, STATE_PLANNED, Cursor, LeaseGrant, WindowRecord, dumps
from cdc_core.coordination.rules import check_plan, cursor_after_ack
from cdc_core.coordination.snapshot_record import SnapshotRecord
from cdc_core.model import faults, retention, snapshot_state
from cdc_core.model.errors import CoordinationError, StateConflict
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, WindowPlan

# Deleting many window records: stay far below ZooKeeper's 1 MB request limit.
PRUNE_BATCH = 200


class WindowLog:
    """One pipeline's (or group source's) cursor and window records."""

    def __init__(self, store: FencedStore, snapshot: SnapshotRecord) -> None:
        self.store = store
        self.snapshot = snapshot  # a snapshot window's plan and ack carry the snapshot record's op
        self.pipeline = store.pipeline
        self.cursor_path = store.nodes.cursor
        self.windows_path = store.nodes.windows

    def window_path(self, seq: int) -> str:
        return self.store.nodes.window(seq)

    # ------------------------------------------------------------------------------------- reads

    def seqs(self) -> list[int]:
        """Sequence numbers of the stored window records, ascending (one listing)."""
        with self.store.zk("listing window records"):
            try:
                names = self.store.client.get_children(self.windows_path)
            except NoNodeError:
                return []
        return sorted(int(n) for n in names if WINDOW_NODE_RE.match(n))

    def cursor(self) -> tuple[Cursor, ZnodeStat | None, bytes]:
        """The cursor, its node's stat (None when absent) and its raw bytes (rewritten unchanged)."""
        got = self.store.get(self.cursor_path, "reading the cursor")
        if got is None:
            # Absent means "never acked anything" only if no window was ever stored.
            if self.seqs():
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: {self.cursor_path} is missing but window records exist under "
                    f"{self.windows_path}; restore the cursor node (it is never deleted by the product)"
                )
            initial = Cursor()
            return initial, None, dumps(initial.to_dict())
        return self.store.parse(got[0], self.cursor_path, Cursor.from_dict), got[1], got[0]

    def window(self, seq: int) -> tuple[WindowRecord, ZnodeStat] | None:
        path = self.window_path(seq)
        got = self.store.get(path, f"reading window {seq}")
        if got is None:
            return None
        record: WindowRecord = self.store.parse(got[0], path, WindowRecord.from_dict)
        if record.seq != seq or record.plan.pipeline != self.store.unit:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: {path} holds window {record.seq} of {record.plan.pipeline!r}; "
                "the node was copied or edited by hand: restore it"
            )
        return record, got[1]

    def pending(self) -> tuple[Cursor, ZnodeStat | None, bytes, tuple[WindowRecord, ZnodeStat] | None]:
        """The cursor and the pending window: the only one that can be pending is cursor.seq + 1."""
        for _ in range(RACE_ATTEMPTS):
            cursor, cstat, raw = self.cursor()
            got = self.window(cursor.seq + 1)
            if got is None or got[0].state == STATE_PLANNED:
                return cursor, cstat, raw, got
            # Acked: the cursor moved on between the two reads (they change in one multi-op). Re-read.
        raise StateConflict(
            f"pipeline {self.pipeline!r}: window {cursor.seq + 1} is acked but the cursor says {cursor.seq}; "
            "the records keep changing or were edited by hand"
        )

    def cursor_op(self, cstat: ZnodeStat | None, data: bytes) -> Op:
        # An absent cursor is created in the same multi-op (NodeExists if someone was first).
        return put_op(self.cursor_path, data, cstat)

    def read_cursor(self) -> Cursor:
        """The cursor; seq 0 and no position when the pipeline never acked anything."""
        self.store.require_connected("read cursor")
        return self.cursor()[0]

    def pending_window(self) -> WindowRecord | None:
        """The planned, un-acked window (at most one exists), or None."""
        self.store.require_connected("read pending window")
        got = self.pending()[3]
        return got[0] if got else None

    def get_window(self, seq: int) -> WindowRecord | None:
        self.store.require_connected(f"read window {seq}")
        got = self.window(seq)
        return got[0] if got else None

    def recent_windows(self, limit: int = 10) -> list[WindowRecord]:
        """The newest `limit` window records, newest first."""
        self.store.require_connected("read recent windows")
        out: list[WindowRecord] = []
        for seq in reversed(self.seqs()):
            if len(out) >= limit:
                break
            got = self.window(seq)
            if got is not None:  # pruned meanwhile
                out.append(got[0])
        return out

    def window_record_seqs(self) -> list[int]:
        """Sequence numbers of the stored window records, ascending (one listing; for housekeeping)."""
        self.store.require_connected("list window records")
        return self.seqs()

    # ----------------------------------------------------------------------------- plan and ack

    def store_plan(self, grant: LeaseGrant, plan: WindowPlan) -> WindowRecord:
        """Store the next window's plan, immutably. Storing the identical pending plan again is a no-op."""
        record = WindowRecord(plan=plan)

        def attempt() -> Write | Done:
            cursor, cstat, raw, pending = self.pending()
            if pending is not None and pending[0].plan.to_dict() == plan.to_dict():
                return Done(pending[0])  # a retried plan step whose first attempt landed
            check_plan(self.store.unit, cursor, pending[0] if pending else None, plan)
            # Rewriting the cursor unchanged (CAS) both checks and bumps its version: every operation
            # that relies on "no pending window" writes the cursor too, so they serialise on it.
            ops = [("create", self.window_path(plan.seq), dumps(record.to_dict())), self.cursor_op(cstat, raw)]
            if plan.kind == KIND_SNAPSHOT:  # the chunk must be the snapshot's next one, still when committed
                ops.append(self.snapshot.chunk_check_op(self.store.unit, plan))
            return Write(ops, record, "window.stored", {"seq": plan.seq, "kind": plan.kind})

        result: WindowRecord = self.store.fenced(grant, f"store plan {plan.seq}", attempt)
        return result

    def ack_window(
        self, grant: LeaseGrant, seq: int, result: dict[str, Any],
        rereads: Sequence[snapshot_state.TableRequest] = (),
        renames: Sequence[tuple[str, str, int]] = (),
    ) -> Cursor:
        """Mark window `seq` acked and move the cursor past it, in one fenced multi-op.

        `rereads`: tables the window's schema changes left to be re-read from the source (docs/schema-changes.md):
        requested in the same multi-op, unless already requested for that change or a later one. `renames`:
        (table, new name, change version) of the window's table renames: a table renamed while its snapshot is
        still loading is loaded again under its new name (the rows it had not loaded yet are in no binlog).
        Acking an already-acked window returns the cursor unchanged (a retried ack step).
        """
        try:
            json.dumps(result)
        except (TypeError, ValueError) as e:
            raise CoordinationError(
                f"pipeline {self.pipeline!r}: the ack result of window {seq} is not JSON ({e})"
            ) from None

        def attempt() -> Write | Done:
            got = self.window(seq)
            if got is None:
                raise StateConflict(
                    f"pipeline {self.pipeline!r}: cannot ack window {seq}: it was never planned "
                    f"(no {self.window_path(seq)})"
                )
            record, wstat = got
            cursor, cstat, _ = self.cursor()
            if record.state == STATE_ACKED:
                return Done(cursor)
            now = self.store.clock()
            new_cursor = cursor_after_ack(self.pipeline, cursor, record.plan, now)
            acked = replace(record, state=STATE_ACKED, result=dict(result), acked_at=now)
            ops = [
                ("set", self.window_path(seq), dumps(acked.to_dict()), wstat.version),
                self.cursor_op(cstat, dumps(new_cursor.to_dict())),
            ]
            if record.plan.kind == KIND_SNAPSHOT:  # the chunk's progress moves with the ack, atomically
                ops.append(self.snapshot.ack_op(record.plan, result, now))
            elif rereads or renames:
                requests = self.snapshot.requests_op(rereads, renames, now)
                if requests is not None:
                    ops.append(requests)
            fields = {"seq": seq, "kind": record.plan.kind}
            faults.point("mid_ack")  # crash suite: lease checked, records read, nothing committed yet
            if new_cursor.position is not None:
                fields["cursor"] = new_cursor.position.label().replace(" ", "_")
            if record.plan.kind == KIND_BACKFILL:
                fields["backfill_done"] = new_cursor.backfill is None
            return Write(ops, new_cursor, "window.acked", fields)

        cursor: Cursor = self.store.fenced(grant, f"ack window {seq}", attempt)
        return cursor

    # ------------------------------------------------------------------------------------ prune

    def pruned_marks(self) -> list[tuple[int, float]]:
        """The pruned-record marks, ascending: (seq, ack time) of records prune_windows deleted, every window up to
        seq acked no later than that time (cdc_core.model.retention.marks_after_prune says which are kept); []
        before any prune (an installation from before the marks starts them at its next prune)."""
        got = self.store.get(self.store.nodes.pruned, "reading the pruned-record marks")
        return [] if got is None else self.store.parse(got[0], self.store.nodes.pruned, _pruned_marks)

    def prune_windows(self, grant: LeaseGrant, keep_last: int, older_than_seconds: float,
                      marks_horizon_seconds: float = retention.DEFAULT_MARKS_HORIZON) -> int:
        """Delete acked window records beyond the newest `keep_last` and older than `older_than_seconds`, and
        leave a mark of the newest deleted (`pruned_marks`) in the same multi-op.

        Never the pending window nor the last acked one. Returns how many records were deleted.
        """
        deleted = 0
        self.store.require_connected("prune windows")
        self.store.ours(grant, "prune windows")
        cursor = self.cursor()[0]
        seqs = self.seqs()
        kept = set(seqs[-keep_last:]) if keep_last > 0 else set()
        # `< cursor.seq` leaves out the last acked window and the pending one (cursor.seq + 1).
        candidates = [s for s in seqs if s < cursor.seq and s not in kept]
        cutoff = self.store.clock() - older_than_seconds
        for start in range(0, len(candidates), PRUNE_BATCH):
            batch = candidates[start : start + PRUNE_BATCH]

            def attempt(batch: list[int] = batch) -> Write | Done:
                ops: list[Op] = []
                newest: tuple[int, float] | None = None
                for seq in batch:
                    got = self.window(seq)
                    if got is None:
                        continue
                    record, wstat = got
                    if record.state == STATE_ACKED and record.acked_at is not None and record.acked_at < cutoff:
                        ops.append(("delete", self.window_path(seq), wstat.version))
                        newest = (seq, record.acked_at)
                if newest is None:
                    return Done(0)
                deleted = len(ops)
                path = self.store.nodes.pruned
                node = self.store.get(path, "reading the pruned-record marks")
                marks = [] if node is None else self.store.parse(node[0], path, _pruned_marks)
                after = retention.marks_after_prune(marks, newest, self.store.clock(), marks_horizon_seconds)
                if after != marks:
                    data = dumps({"format": 1, "marks": [[m_seq, m_at] for m_seq, m_at in after]})
                    ops.append(put_op(path, data, None if node is None else node[1]))
                return Write(ops, deleted, "windows.pruned", {"count": deleted, "up_to": batch[-1]})

            deleted += self.store.fenced(grant, "prune windows", attempt)
        return deleted


def _pruned_marks(d: dict[str, Any]) -> list[tuple[int, float]]:
    return sorted((int(m_seq), float(m_at)) for m_seq, m_at in d["marks"])
