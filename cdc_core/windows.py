"""Window planning: cut the next window from a stream of transaction boundaries (pure, no I/O).

A window runs from a transaction boundary to the end of the last *complete* transaction that fits the
caps (events, bytes, transactions). The first transaction is always taken whole, even when it alone
exceeds a cap, so a huge transaction cannot stall the pipeline. The boundary iterator is consumed
lazily and abandoned as soon as the window is full, so planning never scans more of the binlog than
the window needs (plus at most one transaction, to learn that it does not fit).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from cdc_core.binlog import TxnBoundary
from cdc_core.errors import ConfigError
from cdc_core.positions import BinlogPosition, binlog_file_index
from cdc_core.window_plan import KIND_STREAM, WindowCaps, WindowPlan


def _check_caps(caps: WindowCaps) -> None:
    for name in ("max_events", "max_bytes", "max_transactions"):
        if getattr(caps, name) < 1:
            raise ConfigError(f"window cap {name} must be at least 1, got {getattr(caps, name)}")


def plan_window(
    pipeline: str,
    seq: int,
    start: BinlogPosition,
    boundaries: Iterable[TxnBoundary],
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
    (end == start).
    """
    _check_caps(caps)
    start_key = (binlog_file_index(start.file), start.offset)
    end = start
    txns = events = size = 0
    for b in boundaries:
        if (binlog_file_index(b.start_file), b.start_offset) < start_key:
            raise ConfigError(
                f"window {seq} of {pipeline!r}: transaction at {b.start_file}:{b.start_offset} starts before the "
                f"window start {start.label()} (the boundaries do not follow the start)"
            )
        if txns and (
            txns + 1 > caps.max_transactions
            or events + b.events > caps.max_events
            or size + b.bytes > caps.max_bytes
        ):
            break
        if not b.end.server.same_server(start.server):
            raise ConfigError(
                f"window {seq} of {pipeline!r}: transaction end {b.end.label()} is on {b.end.server}, "
                f"the window start on {start.server}"
            )
        end = b.end if b.end.epoch == start.epoch else replace(b.end, epoch=start.epoch)
        txns += 1
        events += b.events
        size += b.bytes
        if txns >= caps.max_transactions or events >= caps.max_events or size >= caps.max_bytes:
            break  # full: do not pull (scan) another transaction
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
        info=dict(info or {}),
    )
