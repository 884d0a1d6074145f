"""Cheap scans of the binlog's transaction boundaries (rows are skipped without decoding).

The planner cuts windows from them (`scan_transactions`, `scan_to_end`) and the start resolver searches
them (`file_transactions`, `first_event_time`, `file_start_gtid`, `transaction_start_at_or_before`).
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import closing

from cdc_core.capture.binlog.stream import ROWS_SKIP, StreamEvent, pos_key, random_replica_server_id, stream_events
from cdc_core.capture.binlog.transactions import TxnAssembler, parse_state
from cdc_core.capture.source import SourceParams
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.windows import QuietTail, TxnBoundary


class BinlogScanner:
    """Cheap scans of transaction boundaries (rows are skipped without decoding)."""

    def __init__(
        self, params: SourceParams, identity: ServerIdentity, server_id_for_replica: int | None = None
    ) -> None:
        self.params = params
        self.identity = identity
        self.server_id = server_id_for_replica or random_replica_server_id()

    def _events(self, file: str, offset: int) -> Generator[StreamEvent, None, None]:
        return stream_events(self.params, file, offset, server_id=self.server_id, rows=ROWS_SKIP)

    def scan_transactions(
        self,
        start_file: str,
        start_offset: int,
        start_gtid: str | None,
        epoch: int,
        *,
        stop: tuple[str, int] | None = None,
        start_commit_ts: float | None = None,
    ) -> Generator[TxnBoundary, None, None]:
        """Complete transactions from a boundary up to the current end of the binlog (or `stop`), across files.

        A transaction is yielded only when its commit event ends at or before `stop`. Stop consuming
        whenever you like: the stream is closed with the generator.
        """
        with closing(self.scan_to_end(start_file, start_offset, start_gtid, epoch, stop=stop,
                                      start_commit_ts=start_commit_ts, tail=False)) as scan:
            for b in scan:
                if isinstance(b, TxnBoundary):
                    yield b

    def scan_to_end(
        self,
        start_file: str,
        start_offset: int,
        start_gtid: str | None,
        epoch: int,
        *,
        stop: tuple[str, int] | None = None,
        start_commit_ts: float | None = None,
        tail: bool = True,
    ) -> Generator[TxnBoundary | QuietTail, None, None]:
        """`scan_transactions`, and with `tail` a scan that reaches the end of the binlog (or `stop`)
        finishes with a `QuietTail` when events without row changes follow the last transaction (or
        the start) and no transaction is open after them (what stream and backfill windows plan over:
        a backfill's last window then ends exactly at its `until`, a position that may follow such
        events)."""
        asm = TxnAssembler(self.identity, epoch, start_gtid, start_commit_ts)
        stop_key = pos_key(*stop) if stop is not None else None
        start_key = pos_key(start_file, start_offset)
        last_end = start_key  # end of the last transaction yielded (or the start)
        idle: tuple[str, int] | None = None  # end of the last event seen outside any transaction
        with closing(self._events(start_file, start_offset)) as events:
            for ev in events:
                if ev.end == 0:
                    continue  # artificial rotate / header
                if pos_key(ev.file, ev.start) < start_key:
                    continue
                if stop_key is not None and pos_key(ev.file, ev.start) >= stop_key:
                    break
                b = asm.feed(ev)
                if b is not None:
                    last_end = pos_key(b.end.file, b.end.offset)
                    idle = None
                    yield b
                elif not asm.in_txn and (stop_key is None or pos_key(ev.file, ev.end) <= stop_key):
                    idle = (ev.file, ev.end)
        if tail and idle is not None and pos_key(*idle) > last_end:
            state = None if asm.state is None else str(asm.state)
            yield QuietTail(BinlogPosition(idle[0], idle[1], self.identity, state, asm.prev_commit_ts, epoch))

    def file_transactions(self, file: str) -> Generator[TxnBoundary, None, None]:
        """Every complete transaction that starts in `file`, read from the file's start (epoch 0).

        GTID states come from the file's Gtid_list / Previous_gtids header.
        """
        asm = TxnAssembler(self.identity, 0, None)
        with closing(self._events(file, 4)) as events:
            for ev in events:
                if ev.file != file:
                    return  # rotated into the next file
                if ev.end == 0:
                    continue
                b = asm.feed(ev)
                if b is not None:
                    yield b
                if ev.kind == "rotate":
                    return

    def file_start_gtid(self, file: str) -> str | None:
        """The GTID state at the start of `file` (its Gtid_list / Previous_gtids event), None without GTIDs."""
        with closing(self._events(file, 4)) as events:
            for ev in events:
                if ev.end == 0:
                    continue
                if ev.kind == "gtid_list":
                    state = parse_state(ev.gtid, self.identity.flavor)
                    if self.identity.flavor == "mariadb" or state:
                        return str(state)
                    return None
                if ev.kind in ("gtid", "begin", "query", "commit", "rotate") or ev.file != file:
                    break
        return None

    def first_event_time(self, file: str) -> float | None:
        """Commit time of the first transaction in `file` (None when it holds none)."""
        with closing(self.file_transactions(file)) as txns:
            for b in txns:
                return b.commit_ts
        return None

    def transaction_start_at_or_before(self, file: str, offset: int) -> tuple[str, int]:
        """The last transaction boundary at or before (file, offset): a transaction's start when the
        offset falls inside it, else the end of the transaction before it (or the file's start, 4)."""
        best = 4
        with closing(self.file_transactions(file)) as txns:
            for b in txns:
                if b.start_offset > offset:
                    break
                best = b.start_offset
                if b.end.offset <= offset:
                    best = b.end.offset
        return file, best
