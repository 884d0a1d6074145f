"""Transactions in the binlog: where each starts and ends, and the checks both readers make of a window.

How transactions look in the binlog (what `TxnAssembler` recognises):
MariaDB DML is `GTID -> (Annotate_rows) -> Table_map -> rows ... -> Xid` (the GTID event implies BEGIN;
non-transactional engines end with a `COMMIT` query instead of Xid); MariaDB DDL is a standalone
`GTID -> Query`. MySQL adds a `BEGIN` query after its (possibly anonymous) GTID event; a DDL is a GTID
followed by a non-BEGIN query. Rolled-back InnoDB transactions are never written. A position therefore
always sits between transactions: a transaction starts at its GTID (or BEGIN) event and ends after its
Xid/COMMIT (or DDL query) event, and that end offset is the next window's start.

A reader replays a planned window only from the server it was planned on (`verify_identity`) and only when
the binlog still holds exactly the planned transactions (`check_window_read`).
"""

from __future__ import annotations

import logging
from typing import Any

from cdc_core.capture.binlog.stream import StreamEvent
from cdc_core.capture.binlog.xa import xa_outcome
from cdc_core.capture.source import SourceParams, connect, mariadb_gtid_state
from cdc_core.model.errors import SourceError, UnsupportedType
from cdc_core.model.positions import BinlogPosition, GtidSet, MysqlGtidSet, ServerIdentity
from cdc_core.model.window_plan import WindowPlan
from cdc_core.model.windows import TxnBoundary

log = logging.getLogger("cdc.binlog")


def parse_state(text: str | None, flavor: str) -> GtidSet | None:
    if text is None:
        return None
    if flavor == "mariadb":
        return mariadb_gtid_state(text)
    return MysqlGtidSet.parse(text)


class TxnAssembler:
    """Turns a stream of `StreamEvent` into `TxnBoundary`s (pure; no I/O).

    `feed` returns the boundary completed by this event, if any. The GTID state is tracked from
    `start_gtid`; when that is unknown, the Gtid_list / Previous_gtids event at the head of the next
    file supplies it.
    """

    def __init__(
        self,
        identity: ServerIdentity,
        epoch: int,
        start_gtid: str | None,
        prev_commit_ts: float | None = None,
        *,
        track_gtid: bool = True,
        boundaries: bool = True,
    ) -> None:
        self.identity = identity
        # Readers only need where each transaction ends and when it committed: without `boundaries`,
        # `feed` returns the closing event itself (its file, end and timestamp) instead of a TxnBoundary.
        self.boundaries = boundaries
        self.flavor = identity.flavor
        self.epoch = epoch
        # Readers only count transactions: without GTID tracking, boundaries carry no GTID state.
        self.track_gtid = track_gtid
        self.state: GtidSet | None = parse_state(start_gtid, self.flavor) if track_gtid else None
        self.prev_commit_ts = prev_commit_ts
        # Where the transaction `feed` last closed began (its GTID or BEGIN event): its changes' `_cdc_txn`.
        self.closed_file, self.closed_start = "", 0
        # XA transactions prepared since the start and not yet committed or rolled back (their xids; see `xa`). Of
        # the group `feed` last closed: the xid it prepared, or the outcome it logged.
        self.xa_open: set[str] = set()
        self.closed_prepare: str | None = None
        self.closed_outcome: tuple[str, str] | None = None
        self._reset()

    def _reset(self) -> None:
        self.in_txn = False
        self.begun = False
        self.t_file = ""
        self.t_start = 0
        self.t_gtid: str | None = None
        self.t_events = 0
        self.t_ddl = False

    def _open(self, ev: StreamEvent, gtid: str | None, begun: bool, ddl: bool = False) -> None:
        if self.in_txn:
            log.warning("binlog transaction at %s:%s never committed; dropped", self.t_file, self.t_start)
        self.in_txn = True
        self.begun = begun
        self.t_file, self.t_start, self.t_gtid, self.t_events = ev.file, ev.start, gtid, 0
        self.t_ddl = ddl

    def _close(self, ev: StreamEvent, is_ddl: bool, prepared: str | None = None,
               outcome: tuple[str, str] | None = None) -> Any:
        self.closed_file, self.closed_start = self.t_file, self.t_start
        self.closed_prepare, self.closed_outcome = prepared, outcome
        if prepared is not None:
            self.xa_open.add(prepared)
        elif outcome is not None:
            self.xa_open.discard(outcome[1])
        if not self.boundaries:
            self._reset()
            return ev
        start_state = self.state
        if self.state is not None and self.t_gtid is not None:
            self.state = self.state.add(self.t_gtid)
        end = BinlogPosition(
            file=ev.file,
            offset=ev.end,
            server=self.identity,
            gtid=None if self.state is None else str(self.state),
            commit_ts=float(ev.timestamp),
            epoch=self.epoch,
        )
        b = TxnBoundary(
            start_file=self.t_file,
            start_offset=self.t_start,
            end=end,
            gtid=self.t_gtid,
            events=self.t_events,
            bytes=ev.end - self.t_start if ev.file == self.t_file else ev.end,
            is_ddl=is_ddl or self.t_ddl,
            start_gtid=None if start_state is None else str(start_state),
            prev_commit_ts=self.prev_commit_ts,
            xa_open=len(self.xa_open),
        )
        self.prev_commit_ts = end.commit_ts
        self._reset()
        return b

    def feed(self, ev: StreamEvent) -> Any:
        """The TxnBoundary this event completes (with `boundaries=False`: the event), else None."""
        k = ev.kind
        if k == "gtid":
            # MariaDB's GTID event opens the transaction (no BEGIN follows) unless it is standalone (DDL).
            self._open(ev, ev.gtid, begun=self.flavor == "mariadb" and not ev.standalone, ddl=ev.ddl)
            self.t_events = 1
            return None
        if k == "gtid_list":
            if self.track_gtid and not self.in_txn and ev.gtid is not None:
                header = parse_state(ev.gtid, self.flavor)
                if self.state is None and header is not None and (self.flavor == "mariadb" or header):
                    self.state = header
            return None
        if k in ("rotate", "header"):
            return None
        if k == "begin":
            if not self.in_txn:
                self._open(ev, None, begun=True)
            self.begun = True
            self.t_events += 1
            return None
        if k in {"commit", "xa_prepare"}:
            if not self.in_txn:
                return None
            self.t_events += 1
            return self._close(ev, is_ddl=False, prepared=ev.query if k == "xa_prepare" else None)
        if k == "query":
            if self.in_txn and self.begun:
                self.t_events += 1
                return None
            if not self.in_txn:  # a statement without GTID or BEGIN (old servers): its own transaction
                self._open(ev, None, begun=False)
            self.t_events += 1
            if ev.query[:3].upper() == "XA ":  # not DDL; maybe the outcome of a prepared XA transaction
                return self._close(ev, is_ddl=False, outcome=xa_outcome(ev.query))
            return self._close(ev, is_ddl=True)
        # table maps, rows, annotate/intvar/rand/user-var events, checkpoints
        if self.in_txn:
            self.t_events += 1
        return None


# ------------------------------------------------------------------------------- a window's checks


def verify_identity(params: SourceParams, identity: ServerIdentity) -> None:
    """Refuse to read a window on another server than the one it was planned on (offsets do not carry over)."""
    conn = connect(params)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@server_id, VERSION()")
            row = cur.fetchone()
            server_id, version = int(row[0]), str(row[1])
            uuid = None
            if "mariadb" not in version.lower():
                cur.execute("SELECT @@server_uuid")
                uuid = str(cur.fetchone()[0])
    finally:
        conn.close()
    found = ServerIdentity("mariadb" if "mariadb" in version.lower() else "mysql", server_id, uuid)
    if not found.same_server(identity):
        raise SourceError(
            f"the window was planned on {identity} but the source at {params.address} is now {found}: binlog file "
            "names and offsets do not carry over to another server. Let the next run re-plan from the cursor "
            "(failover handling), or point the source connection back at the original server"
        )


def check_window_read(
    plan: WindowPlan, params: SourceParams, *, reached_end: bool, last_label: str, transactions: int
) -> None:
    """After a window's read: it ended exactly at the plan's end, through as many transactions as planned."""
    if not reached_end:
        raise SourceError(
            f"pipeline {plan.pipeline!r}: window {plan.label()} could not be read to its end from "
            f"{params.address}: read {last_label} ({transactions} complete transactions). The binlog no longer holds "
            "the planned window (files purged, server reset or replaced); see the source, then re-plan"
        )
    if plan.transactions and transactions != plan.transactions:
        raise SourceError(
            f"pipeline {plan.pipeline!r}: window {plan.label()} holds {transactions} transactions on "
            f"{params.address} but {plan.transactions} when it was planned: the binlog changed under the plan "
            "(server reset or replaced). Do not merge this window; investigate the source"
        )


def with_pipeline(pipeline: str, e: Exception) -> UnsupportedType:
    """A decoder's refusal (a zero date under `zero_dates: refuse`), naming the pipeline."""
    return UnsupportedType(f"pipeline {pipeline!r}: {e}")
