"""XA (two-phase) transactions in the binlog (pure; no I/O).

A two-phase XA transaction is written to the binlog when it is *prepared*, not when it commits: MariaDB (10.5+)
and MySQL (5.7.7+) log `XA START -> rows ... -> XA END -> XA_prepare event` as one event group, and the outcome
later as a group of its own, `XA COMMIT <xid>` or `XA ROLLBACK <xid>`, possibly after other transactions
(a prepared transaction holds its row locks, so none of those touch its rows). `XA COMMIT ... ONE PHASE` is an
ordinary transaction.

So the prepared group's rows are changes only once its `XA COMMIT` is read: the readers hold them back until
then (and drop them at `XA ROLLBACK`), and a window never ends while a transaction it saw prepared is still
open (`cdc_core.model.windows.plan_window`), else the lake would hold rows the source may yet roll back.

An xid is named here as the binlog prints it, `X'<gtrid hex>',X'<bqual hex>',<formatID>`, whichever way the
statement spelled it (`'abc'`, `X'616263'`, `0x616263`; bqual and formatID optional).
"""

from __future__ import annotations

import logging
import re
from typing import Generic, TypeVar

log = logging.getLogger("cdc.binlog")
T = TypeVar("T")

XA_COMMIT, XA_ROLLBACK = "commit", "rollback"

_OUTCOME = re.compile(r"^\s*XA\s+(COMMIT|ROLLBACK)\s+(.*?)\s*;?\s*$", re.IGNORECASE | re.DOTALL)
_ONE_PHASE = re.compile(r"\s+ONE\s+PHASE$", re.IGNORECASE)
_PART = re.compile(r"\s*(?:[Xx]'([0-9A-Fa-f]*)'|0[xX]([0-9A-Fa-f]+)|'((?:[^'\\]|\\.|'')*)'|(\d+))\s*(?:,|$)")


def xid_name(format_id: int, gtrid: bytes, bqual: bytes) -> str:
    """The xid as the binlog prints it (the form `xa_outcome` returns)."""
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{format_id}"


def xa_outcome(query: str) -> tuple[str, str] | None:
    """(XA_COMMIT | XA_ROLLBACK, xid name) for the outcome of a prepared XA transaction, else None (an ordinary
    statement, or `XA COMMIT ... ONE PHASE`, which commits a transaction that was never prepared)."""
    m = _OUTCOME.match(query)
    if m is None:
        return None
    verb, rest = m.group(1).upper(), m.group(2)
    if _ONE_PHASE.search(rest):
        return None
    parts: list[bytes | int] = []
    pos = 0
    while pos < len(rest):
        p = _PART.match(rest, pos)
        if p is None or p.end() == pos:
            return None  # not an xid this module understands: leave the statement alone
        hex_a, hex_b, text, number = p.groups()
        if number is not None:
            parts.append(int(number))
        elif text is not None:
            parts.append(_unquote(text).encode("utf-8"))
        else:
            try:
                parts.append(bytes.fromhex(hex_a if hex_a is not None else hex_b))
            except ValueError:
                return None
        pos = p.end()
    if not parts or not isinstance(parts[0], bytes) or len(parts) > 3:
        return None
    bqual = parts[1] if len(parts) > 1 else b""
    format_id = parts[2] if len(parts) > 2 else 1
    if not isinstance(bqual, bytes) or not isinstance(format_id, int):
        return None
    return (XA_COMMIT if verb == "COMMIT" else XA_ROLLBACK), xid_name(format_id, parts[0], bqual)


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)|''", lambda m: m.group(1) if m.group(1) is not None else "'", text)


class PreparedHold(Generic[T]):
    """A reader's hold of the changes of XA transactions prepared in its window, until their outcome.

    `prepare` keeps a prepared group's changes (with the change version of where the group began, its changes'
    transaction id); `outcome` gives them back for an `XA COMMIT` (None for a rollback, or for the outcome of a
    transaction prepared before the window's start, whose rows an earlier window read). `left_open` gives what
    is still held at the window's end, which only a window planned before XA transactions were held back can
    have: it lands them there, as that window landed them when it was planned.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.held: dict[str, tuple[T, int]] = {}

    def prepare(self, xid: str, changes: T, txn: int) -> None:
        self.held[xid] = (changes, txn)

    def outcome(self, outcome: tuple[str, str]) -> tuple[T, int] | None:
        verb, xid = outcome
        held = self.held.pop(xid, None)
        if held is None and verb == XA_COMMIT:
            # Windows never end while one is open, so its rows were read with an earlier window, unless the
            # pipeline started (or a backfill began) between its XA PREPARE and its XA COMMIT.
            log.warning("%s: XA COMMIT of %s, prepared before this window's start: its rows are not read here. If "
                        "the pipeline's start or a backfill's fell between its XA PREPARE and XA COMMIT, snapshot "
                        "the tables it changed again", self.where, xid)
        if held is None:
            return None
        return held if verb == XA_COMMIT else None

    def left_open(self) -> list[tuple[T, int]]:
        if self.held:
            log.warning("%s: XA transactions prepared and still open at the window's end (%s): a window planned "
                        "before XA transactions were held back; their rows land with it", self.where,
                        ", ".join(self.held))
        out = list(self.held.values())
        self.held.clear()
        return out
