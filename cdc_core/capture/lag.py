"""How far the lake is behind the source: from a binlog position to the source's current end (`lag`), for
`cdc status`, the monitor page and the plan step's metrics."""

from __future__ import annotations

import time
from typing import Any

from cdc_core.capture.source import SourceFacts, mariadb_gtid_state
from cdc_core.model.errors import CdcError
from cdc_core.model.positions import BinlogPosition, parse_gtid_set


def lag(position: BinlogPosition | None, facts: SourceFacts) -> dict[str, Any]:
    """How far the lake is behind the source: changes not yet landed, in binlog bytes and in seconds.

    `binlog_bytes`: the binlog between the cursor and the source's current end (summed over the files
    between). `bytes` / `seconds`: the same, and the time since the cursor's last landed commit, but 0
    when what lies between holds no transaction: on a GTID source whose end state the cursor's GTID
    state already contains, the bytes are only events without row changes (a rotation's or a restart's
    headers, checkpoints); the next run moves the cursor over them (cdc_core.model.windows). Without GTIDs
    such bytes count until that run.
    """
    if position is None:
        return {"bytes": None, "seconds": None, "binlog_bytes": None}
    behind = 0
    for f in facts.binlogs:
        if f.index < position.sort_key()[1]:
            continue
        if f.name == position.file:
            behind += max(0, f.size - position.offset)
        else:
            behind += f.size
    pending = behind if behind == 0 or not _no_transaction_after(position, facts) else 0
    seconds = None
    if position.commit_ts is not None:
        seconds = 0.0 if pending == 0 else max(0.0, time.time() - position.commit_ts)
    return {"bytes": pending, "seconds": seconds, "binlog_bytes": behind}


def _no_transaction_after(position: BinlogPosition, facts: SourceFacts) -> bool:
    """The cursor's GTID state holds every transaction the source has logged (same server, GTIDs on)."""
    end = facts.end.gtid if facts.end is not None else None
    if position.gtid is None or end is None or not position.server.same_server(facts.identity):
        return False
    try:
        if facts.flavor == "mariadb":
            return bool(mariadb_gtid_state(position.gtid).contains(mariadb_gtid_state(end)))
        return bool(parse_gtid_set(position.gtid, facts.flavor).contains(parse_gtid_set(end, facts.flavor)))  # type: ignore[arg-type]
    except (CdcError, ValueError):
        return False
