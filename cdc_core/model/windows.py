"""Window planning: cut the next window from a stream of transaction boundaries (pure, no I/O).

A window runs from a transaction boundary to the end of the last *complete* transaction that fits the
caps (events, bytes, transactions). The first transaction is always taken whole, even when it alone
exceeds a cap, so a huge transaction cannot stall the pipeline. The boundary iterator is consumed
lazily and abandoned as soon as the window is full, so planning never scans more of the binlog than
the window needs (plus at most one transaction, to learn that it does not fit).

A window cut short by a cap records which cap in `info["capped"]` (absent when the boundaries ran
out first), so that after its ack the pipeline can tell that more is waiting (`continuation`).

A window that takes every transaction up to the end of the binlog (a backfill window: up to its
`until`) also takes the events after them that carry no row change (`binlog.QuietTail`: rotate, format
description, GTID list, binlog checkpoint, ...), so the cursor of a quiet source reaches the source's
end and its lag returns to zero after a rotation or a restart, and a backfill whose `until` follows
such events ends there. Such a window may hold no transaction and still move the cursor; it
never splits a transaction (the tail ends before any open one) and replays exactly like any other.

A prepared XA transaction is committed by a later group of its own (`cdc_core.capture.binlog.xa`), so a window
holds both or neither: it never ends while one is open. Caps wait for the outcome (a window may then exceed
them, as a huge transaction does); a window whose boundaries run out first ends before the prepared group
(`info["xa_open"]`) and the pipeline waits there until the source commits or rolls it back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from cdc_core.model.errors import ConfigError
from cdc_core.model.positions import BinlogPosition, binlog_file_index
from cdc_core.model.window_plan import KIND_SNAPSHOT, KIND_STREAM, WindowCaps, WindowPlan


@dataclass(frozen=True)
class TxnBoundary:
    """One committed transaction as the scanner saw it (no row data).

    `end` is the position right after its commit event (GTID state after it, commit time from the
    commit event's header, same server identity and epoch as the scan). `start_gtid` is the GTID state
    before it and `prev_commit_ts` the commit time of the transaction before it (None when unknown):
    with them `start_position()` is a valid position too. `events` counts the events a reader decodes
    (GTID/BEGIN, row events, commit; a table map only the first time a scan meets its table) and
    `bytes` the transaction's size in the binlog: both only size windows, they are not an identity.
    `xa_open`: XA transactions prepared since the scan's start and still open after this one (neither committed
    nor rolled back, `cdc_core.capture.binlog.xa`): a window may end here only when there are none.
    """

    start_file: str
    start_offset: int
    end: BinlogPosition
    gtid: str | None
    events: int
    bytes: int
    is_ddl: bool = False
    start_gtid: str | None = None
    prev_commit_ts: float | None = None
    xa_open: int = 0

    @property
    def commit_ts(self) -> float | None:
        return self.end.commit_ts

    def start_position(self) -> BinlogPosition:
        return BinlogPosition(
            file=self.start_file,
            offset=self.start_offset,
            server=self.end.server,
            gtid=self.start_gtid,
            commit_ts=self.prev_commit_ts,
            epoch=self.end.epoch,
        )


@dataclass(frozen=True)
class QuietTail:
    """The end of the events that follow the last complete transaction of a scan and carry no row
    change: rotate, format description, GTID list / previous GTIDs, binlog checkpoint, stop, ... (only
    when no transaction is open there). A stream window that reaches the end of the binlog ends here,
    so that a quiet source's cursor reaches the source's end and its lag returns to zero.

    `end` carries the GTID state and commit time of the last transaction before it (unchanged: these
    events commit nothing), the scan's server identity and epoch.
    """

    end: BinlogPosition



# WindowPlan.info: a window cut back to before an XA transaction still open at the end of its scan (where its
# prepared group begins, how many were open): the next window starts there, once the source has its outcome.
INFO_XA_OPEN = "xa_open"


def _check_caps(caps: WindowCaps) -> None:
    for name in ("max_events", "max_bytes", "max_transactions"):
        if getattr(caps, name) < 1:
            raise ConfigError(f"window cap {name} must be at least 1, got {getattr(caps, name)}")


def plan_window(
    pipeline: str,
    seq: int,
    start: BinlogPosition,
    boundaries: Iterable[TxnBoundary | QuietTail],
    caps: WindowCaps,
    *,
    kind: str = KIND_STREAM,
    now: float | None = None,
    tables: tuple[str, ...] | None = None,
    info: dict[str, Any] | None = None,
) -> WindowPlan:
    """The window starting at `start`: as many whole transactions from `boundaries` as the caps allow.

    `boundaries` must be the transactions following `start` in binlog order (as
    `BinlogScanner.scan_transactions` yields them). No transactions give an empty window
    (end == start), unless a `QuietTail` follows: a window that was not cut short by a cap then ends
    at the tail (transactions 0 when it is all there is).
    """
    _check_caps(caps)
    start_key = (binlog_file_index(start.file), start.offset)
    end = start
    txns = events = size = 0
    capped: str | None = None
    # A window never ends while an XA transaction it saw prepared is open (cdc_core.capture.binlog.xa): caps wait
    # for its outcome, and boundaries that run out first cut the window back to before its prepared group.
    xa_open = 0
    safe = (end, txns, events, size)  # the last end with no XA transaction open
    held: TxnBoundary | None = None  # the first transaction after `safe`
    for b in boundaries:
        if isinstance(b, QuietTail):
            # Only reached when no cap cut the window: the boundaries ran out before the tail.
            if xa_open:
                break
            if b.end > end and b.end.server.same_server(start.server):
                end = replace(
                    b.end,
                    epoch=start.epoch,
                    gtid=end.gtid if b.end.gtid is None else b.end.gtid,
                    commit_ts=end.commit_ts if b.end.commit_ts is None else b.end.commit_ts,
                )
            break
        if (binlog_file_index(b.start_file), b.start_offset) < start_key:
            raise ConfigError(
                f"window {seq} of {pipeline!r}: transaction at {b.start_file}:{b.start_offset} starts before the "
                f"window start {start.label()} (the boundaries do not follow the start)"
            )
        if txns and not xa_open:
            capped = _exceeded(caps, txns + 1, events + b.events, size + b.bytes, strictly=True)
            if capped:
                break
        if not b.end.server.same_server(start.server):
            raise ConfigError(
                f"window {seq} of {pipeline!r}: transaction end {b.end.label()} is on {b.end.server}, "
                f"the window start on {start.server}"
            )
        if not xa_open:
            held = b
        end = b.end if b.end.epoch == start.epoch else replace(b.end, epoch=start.epoch)
        txns += 1
        events += b.events
        size += b.bytes
        xa_open = b.xa_open
        if not xa_open:
            safe = (end, txns, events, size)
        capped = _exceeded(caps, txns, events, size, strictly=False)
        if capped and not xa_open:
            break  # full: do not pull (scan) another transaction
    if xa_open and held is not None:
        end, txns, events, size = safe
        capped = None
        info = {**(info or {}), INFO_XA_OPEN: {"prepared_at": f"{held.start_file}:{held.start_offset}",
                                               "open": xa_open}}
    return WindowPlan(
        pipeline=pipeline,
        seq=seq,
        start=start,
        end=end,
        kind=kind,
        transactions=txns,
        events=events,
        bytes=size,
        planned_at=time.time() if now is None else now,
        tables=tables,
        info={**(info or {}), **({"capped": capped} if capped else {})},
    )


def _exceeded(caps: WindowCaps, txns: int, events: int, size: int, *, strictly: bool) -> str | None:
    """The first cap that `txns`/`events`/`size` go over (`strictly`) or reach, else None."""
    for name, value in (("max_transactions", txns), ("max_events", events), ("max_bytes", size)):
        limit = getattr(caps, name)
        if value > limit or (not strictly and value >= limit):
            return name
    return None


# Why `more_work` says what it says (the "reason" of its answer).
MORE_DISABLED = "disabled"
MORE_NOT_ACKED = "not_acked"
MORE_EMPTY = "empty_window"
MORE_BACKFILL = "backfill"
MORE_SNAPSHOT = "snapshot"
MORE_CAPPED = "capped"
MORE_CAUGHT_UP = "caught_up"


def more_work(
    plan: WindowPlan | None,
    *,
    acked: bool,
    enabled: bool = True,
    backfill_active: bool = False,
    snapshot_active: bool = False,
) -> dict[str, Any]:
    """After window `plan` was acked: is more work waiting right now, and why? ({"more", "reason", "detail"})

    More is waiting while a backfill or a snapshot is still in progress, or when the window was cut
    short by a cap before the source's end seen when it was planned (`info["capped"]`,
    `info["source_end"]`). Never after a window that is not acked (a failed run does not continue)
    and never after an empty window: an empty window made no progress, so continuing could only
    loop (an active snapshot gives an empty binlog turn to its next chunk when it can, so an empty
    window means no chunk could be planned either).
    """
    if not enabled:
        return _answer(False, MORE_DISABLED, "continue_while_behind is false: the schedule continues")
    if plan is None or not acked:
        what = "no such window" if plan is None else f"window {plan.seq} is not acked"
        return _answer(False, MORE_NOT_ACKED, f"{what}: only an acked window continues")
    seq = plan.seq
    if plan.is_empty:
        return _answer(False, MORE_EMPTY, f"window {seq} was empty: nothing more to land now")
    if backfill_active:
        return _answer(True, MORE_BACKFILL, f"a backfill is still in progress after window {seq}")
    if snapshot_active:
        return _answer(True, MORE_SNAPSHOT, f"a snapshot is still in progress after window {seq}")
    if plan.kind == KIND_SNAPSHOT:
        return _answer(False, MORE_CAUGHT_UP, f"the snapshot finished with window {seq}")
    cap = plan.info.get("capped")
    if cap and _before(plan.end, plan.info.get("source_end")):
        seen = plan.info.get("source_end")
        seen = seen if isinstance(seen, dict) else {}
        return _answer(
            True,
            MORE_CAPPED,
            f"window {seq} stopped at caps.{cap} at {plan.end.file}:{plan.end.offset}, before the source's end "
            f"{seen.get('file', '?')}:{seen.get('offset', '?')} seen when it was planned",
        )
    return _answer(False, MORE_CAUGHT_UP, f"window {seq} reached the source's end seen when it was planned")


def _answer(more: bool, reason: str, detail: str) -> dict[str, Any]:
    return {"more": more, "reason": reason, "detail": detail}


def _before(end: BinlogPosition, source_end: Any) -> bool:
    """`end` is before the recorded source end; True when none was recorded (trust the cap)."""
    if not isinstance(source_end, dict) or "file" not in source_end or "offset" not in source_end:
        return True
    try:
        seen = (binlog_file_index(str(source_end["file"])), int(source_end["offset"]))
    except (ConfigError, TypeError, ValueError):
        return True
    return (binlog_file_index(end.file), end.offset) < seen
