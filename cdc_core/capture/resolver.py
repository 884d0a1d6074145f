"""Where a pipeline starts reading: canal's start-position chain as one pure decision over facts.

`resolve_start(saved, spec, facts, scan)` applies, in order (and returns the rule that applied):

1. `cursor` -- a saved cursor on the same server resumes exactly there, after checking that its file
   is still on the server, its offset inside the file, and (with GTIDs) that the server executed
   everything the cursor saw and purged nothing the cursor still needs.
2. `failover_gtid` / `failover_timestamp` -- a saved cursor from another server never reuses its
   file+offset: with GTIDs the same GTID state is located in the new server's binlogs; without them a
   timestamp search at the cursor's commit time minus a fallback interval (re-reading a little is
   harmless, skipping is not). The resulting position starts a new epoch.
3. `start_<kind>` -- no cursor: the configured `StartSpec` ('gtid', 'file', 'file_timestamp',
   'timestamp', 'current').
4. Timestamp search: binary search over the binlogs by their first commit time, then the first
   transaction whose commit time is >= the timestamp; reading starts at that transaction's beginning.
5. A configured file position inside a transaction moves back to the transaction's start.
6. A malformed GTID set is a ConfigError.

The few binlog reads it needs go through the `BinlogScan` protocol (`binlog.BinlogScanner` in the
product, an in-memory fake in unit tests); everything else comes from `source.SourceFacts`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from cdc_core.capture.source import SourceFacts, mariadb_gtid_state
from cdc_core.model.errors import ConfigError, PositionPurged, SourceError
from cdc_core.model.logfmt import iso_seconds
from cdc_core.model.positions import (
    BinlogFile,
    BinlogPosition,
    GtidSet,
    StartSpec,
    binlog_file_index,
    parse_gtid_set,
)
from cdc_core.model.sources import command_target
from cdc_core.model.windows import TxnBoundary


class BinlogScan(Protocol):
    """The binlog reads start resolution needs (implemented by `binlog.BinlogScanner`)."""

    def first_event_time(self, file: str) -> float | None: ...

    def file_transactions(self, file: str) -> Iterator[TxnBoundary]: ...

    def file_start_gtid(self, file: str) -> str | None: ...




@dataclass(frozen=True)
class Resolution:
    position: BinlogPosition
    rule: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position.to_dict(), "rule": self.rule, "detail": self.detail}


# ------------------------------------------------------------------------------------------ helpers




def _who(pipeline: str | None) -> str:
    return f"pipeline {pipeline!r}: " if pipeline else ""


def _ways_out(pipeline: str | None) -> str:
    name = command_target(pipeline) if pipeline else "<pipeline>"
    return (
        f"Ways out: backfill from a timestamp inside the available binlogs (cdc backfill {name} --from ...), "
        "or re-snapshot the tables and start from the current position"
    )


def _parse(text: str, flavor: str, what: str, pipeline: str | None) -> GtidSet:
    try:
        if flavor == "mariadb":
            return mariadb_gtid_state(text)  # a binlog state may name several servers per domain
        return parse_gtid_set(text, flavor)
    except ConfigError as e:
        raise ConfigError(f"{_who(pipeline)}{what} {text!r} is not a valid {flavor} GTID set: {e}") from None


def _end_position(facts: SourceFacts, epoch: int, commit_ts: float | None = None) -> BinlogPosition:
    if facts.end is None:
        raise SourceError(f"the source at {facts.address} has binary logging off; enable log_bin (see check_cdc_ready)")
    gtid = facts.end.gtid if facts.end.gtid is not None else facts.gtid_executed
    return BinlogPosition(facts.end.file, facts.end.offset, facts.identity, gtid, commit_ts, epoch)


def _with(position: BinlogPosition, facts: SourceFacts, epoch: int) -> BinlogPosition:
    """A scanned position re-stamped with the source's identity and the resolution's epoch."""
    return replace(position, server=facts.identity, epoch=epoch)


def _missing_file_error(name: str, facts: SourceFacts, what: str, pipeline: str | None) -> SourceError:
    oldest, newest = facts.oldest, facts.newest
    if oldest is None or newest is None:
        return SourceError(f"{_who(pipeline)}the source at {facts.address} lists no binlog files (is log_bin on?)")
    idx = binlog_file_index(name)
    if idx < oldest.index:
        return PositionPurged(
            f"{_who(pipeline)}{what} is gone: binlog {name} was purged; the oldest binlog on {facts.address} is "
            f"{oldest.name}. {_ways_out(pipeline)}"
        )
    return SourceError(
        f"{_who(pipeline)}{what} names binlog {name}, which the source at {facts.address} does not have (its binlogs "
        f"are {oldest.name} .. {newest.name}): the server was reset (RESET MASTER) or is not the one the position "
        "came from. Configure a start that exists (e.g. a timestamp) or point the source connection at the right server"
    )


# ---------------------------------------------------------------------------------------- searches


def _scan_from(scan: BinlogScan, files: tuple[BinlogFile, ...]) -> Iterator[TxnBoundary]:
    for f in files:
        yield from scan.file_transactions(f.name)


def _first_time_key(scan: BinlogScan, files: tuple[BinlogFile, ...]) -> Any:
    """first_event_time per file index, memoised; an empty file takes the next non-empty file's time."""
    cache: dict[int, float | None] = {}

    def own(i: int) -> float | None:
        if i not in cache:
            cache[i] = scan.first_event_time(files[i].name)
        return cache[i]

    def key(i: int) -> float:
        for j in range(i, len(files)):
            t = own(j)
            if t is not None:
                return t
        return math.inf

    return key


def find_by_timestamp(
    ts: float,
    facts: SourceFacts,
    scan: BinlogScan,
    epoch: int,
    *,
    pipeline: str | None = None,
    from_file: str | None = None,
    what: str = "start time",
) -> tuple[BinlogPosition, str]:
    """Start of the first transaction whose commit time is >= ts (the current end when there is none)."""
    files = facts.binlogs
    if not files:
        raise SourceError(f"{_who(pipeline)}the source at {facts.address} lists no binlog files (is log_bin on?)")
    if from_file is not None:
        i0 = next((i for i, f in enumerate(files) if f.name == from_file), None)
        if i0 is None:
            raise _missing_file_error(from_file, facts, f"start file {from_file}", pipeline)
        candidates = files[i0:]
    else:
        key = _first_time_key(scan, files)
        first = key(0)
        if ts < first != math.inf and files[0].index != 1:
            raise PositionPurged(
                f"{_who(pipeline)}{what} {iso_seconds(ts)} is before the oldest binlog on {facts.address}: "
                f"{files[0].name}, first commit at {iso_seconds(first)}; the changes before that are gone. "
                f"Start at or after {iso_seconds(first)}, or re-snapshot the tables and start from the current position"
            )
        # Largest i whose first commit is < ts: later files start at or after ts, so the answer is in file i
        # or later (commit times are taken as non-decreasing across files).
        lo, hi = 0, len(files) - 1
        chosen = 0
        while lo <= hi:
            mid = (lo + hi) // 2
            if key(mid) < ts:
                chosen = mid
                lo = mid + 1
            else:
                hi = mid - 1
        candidates = files[chosen:]
    last: TxnBoundary | None = None
    for b in _scan_from(scan, candidates):
        if b.commit_ts is not None and b.commit_ts >= ts:
            return _with(b.start_position(), facts, epoch), (
                f"first transaction committed at or after {iso_seconds(ts)}: {b.start_file}:{b.start_offset} "
                f"(committed {iso_seconds(b.commit_ts)})"
            )
        last = b
    if last is not None:
        reason = f"no transaction committed at or after {iso_seconds(ts)}: the end of the binlog"
        return _with(last.end, facts, epoch), reason
    return _end_position(facts, epoch), f"no transaction committed at or after {iso_seconds(ts)}: the current end"


def find_gtid_position(
    target: GtidSet,
    facts: SourceFacts,
    scan: BinlogScan,
    epoch: int,
    *,
    pipeline: str | None = None,
    what: str = "GTID set",
) -> tuple[BinlogPosition, str]:
    """The first position whose GTID state contains `target` (right after the last of its transactions)."""
    flavor = facts.flavor
    files = facts.binlogs
    if not files:
        raise SourceError(f"{_who(pipeline)}the source at {facts.address} lists no binlog files (is log_bin on?)")
    chosen: int | None = None
    for i in range(len(files) - 1, -1, -1):  # newest first: the file whose start state is within the target
        head = scan.file_start_gtid(files[i].name)
        head_set = _parse(head, flavor, "binlog header", pipeline) if head is not None else None
        if head_set is not None and target.contains(head_set):  # type: ignore[arg-type]
            chosen = i
            break
    if chosen is None:
        raise PositionPurged(
            f"{_who(pipeline)}{what} {target} is older than the oldest binlog on {facts.address} "
            f"({files[0].name}): transactions after it are gone. {_ways_out(pipeline)}"
        )
    last: TxnBoundary | None = None
    for b in _scan_from(scan, files[chosen:]):
        before = _parse(b.start_gtid, flavor, "binlog state", pipeline) if b.start_gtid is not None else None
        if before is not None and before.contains(target):  # type: ignore[arg-type]
            detail = f"{what} {target} reached before {b.start_file}:{b.start_offset}"
            return _with(b.start_position(), facts, epoch), detail
        last = b
    if last is not None and last.end.gtid is not None:
        after = _parse(last.end.gtid, flavor, "binlog state", pipeline)
        if after.contains(target):  # type: ignore[arg-type]
            return _with(last.end, facts, epoch), f"{what} {target} reached at {last.end.file}:{last.end.offset}"
    executed = _parse(facts.gtid_executed or "", flavor, "gtid_executed", pipeline)
    if executed.contains(target):  # type: ignore[arg-type]
        return _end_position(facts, epoch), f"{what} {target} reached at the current end"
    raise SourceError(
        f"{_who(pipeline)}{what} {target} is not reached anywhere in the binlogs of {facts.address} "
        f"(executed: {facts.gtid_executed})"
    )


def _check_gtid_against_server(
    target: GtidSet, facts: SourceFacts, what: str, pipeline: str | None
) -> None:
    flavor = facts.flavor
    executed = _parse(facts.gtid_executed or "", flavor, "gtid_executed", pipeline)
    if not executed.contains(target):  # type: ignore[arg-type]
        missing = target.difference(executed)  # type: ignore[arg-type]
        raise SourceError(
            f"{_who(pipeline)}{what} {target} includes transactions the source at {facts.address} never executed "
            f"({missing}; the server has {executed}): it lags behind or is not a replica of the server the "
            "position came from. Wait until it catches up, or point the source connection at the right server"
        )
    if facts.gtid_purged:
        purged = _parse(facts.gtid_purged, flavor, "gtid_purged", pipeline)
        if not target.contains(purged):  # type: ignore[arg-type]
            raise PositionPurged(
                f"{_who(pipeline)}{what} {target} is gone from the source at {facts.address}: transactions after it "
                f"were purged (gtid_purged {purged}; oldest binlog {facts.oldest.name if facts.oldest else '-'}). "
                f"{_ways_out(pipeline)}"
            )


# ------------------------------------------------------------------------------------------ resolve


def resolve_start(
    saved: BinlogPosition | None,
    spec: StartSpec | None,
    facts: SourceFacts,
    scan: BinlogScan,
    *,
    fallback_seconds: float = 60.0,
    now: float | None = None,
    pipeline: str | None = None,
) -> Resolution:
    """Apply the start-position chain (module docstring) and say which rule decided."""
    now = time.time() if now is None else now
    if saved is not None:
        if saved.server.same_server(facts.identity):
            return _resume_same_server(saved, facts, pipeline)
        return _failover(saved, facts, scan, fallback_seconds, pipeline)
    return _configured(spec or StartSpec(), facts, scan, now, pipeline)


def _resume_same_server(saved: BinlogPosition, facts: SourceFacts, pipeline: str | None) -> Resolution:
    what = f"cursor {saved.file}:{saved.offset}"
    f = facts.binlog(saved.file)
    if f is None:
        raise _missing_file_error(saved.file, facts, what, pipeline)
    if saved.offset > f.size:
        raise SourceError(
            f"{_who(pipeline)}{what} is beyond the end of {saved.file} ({f.size} bytes) on {facts.address}: the "
            "binlog was truncated or the server reset. Investigate, then backfill from a timestamp or re-snapshot"
        )
    if saved.gtid is not None and facts.gtid_executed is not None and saved.server.flavor == facts.flavor:
        target = _parse(saved.gtid, facts.flavor, "cursor GTID set", pipeline)
        _check_gtid_against_server(target, facts, f"{what}: GTID set", pipeline)
    return Resolution(saved, "cursor", f"resume at the saved cursor {saved.label()} on {facts.identity}")


def _failover(
    saved: BinlogPosition, facts: SourceFacts, scan: BinlogScan, fallback_seconds: float, pipeline: str | None
) -> Resolution:
    epoch = saved.epoch + 1
    origin = f"cursor {saved.label()} from {saved.server}"
    if saved.gtid is not None and facts.gtid_executed is not None and saved.server.flavor == facts.flavor:
        target = _parse(saved.gtid, facts.flavor, "cursor GTID set", pipeline)
        _check_gtid_against_server(target, facts, f"{origin}: GTID set", pipeline)
        pos, detail = find_gtid_position(target, facts, scan, epoch, pipeline=pipeline, what="cursor GTID set")
        if pos.commit_ts is None and saved.commit_ts is not None:
            pos = replace(pos, commit_ts=saved.commit_ts)
        return Resolution(pos, "failover_gtid", f"{origin} continued on {facts.identity} by GTID: {detail}")
    if saved.commit_ts is None:
        raise SourceError(
            f"{_who(pipeline)}the source at {facts.address} is {facts.identity}, not the server of the {origin}, and "
            "the cursor has neither a GTID set nor a commit time to find its place there. Backfill from a timestamp "
            "or re-snapshot the tables"
        )
    ts = saved.commit_ts - fallback_seconds
    pos, detail = find_by_timestamp(
        ts, facts, scan, epoch, pipeline=pipeline, what="cursor commit time minus fallback"
    )
    return Resolution(
        pos,
        "failover_timestamp",
        f"{origin} continued on {facts.identity} by time: {iso_seconds(saved.commit_ts)} minus {fallback_seconds:g}s; "
        + detail,
    )


def _configured(spec: StartSpec, facts: SourceFacts, scan: BinlogScan, now: float, pipeline: str | None) -> Resolution:
    if spec.kind == "current":
        pos = _end_position(facts, 0)
        return Resolution(pos, "start_current", f"the server's current end {pos.label()}")
    if spec.kind == "gtid":
        if facts.gtid_executed is None:
            raise ConfigError(
                f"{_who(pipeline)}start.gtid is set but the source at {facts.address} has no GTIDs "
                "(gtid_mode is OFF); start from a file position or a timestamp instead"
            )
        assert spec.gtid is not None
        target = _parse(spec.gtid, facts.flavor, "start.gtid", pipeline)
        _check_gtid_against_server(target, facts, "start.gtid", pipeline)
        pos, detail = find_gtid_position(target, facts, scan, 0, pipeline=pipeline, what="start.gtid")
        return Resolution(pos, "start_gtid", detail)
    if spec.kind in ("timestamp", "file_timestamp"):
        assert spec.at is not None
        if spec.at > now:
            raise ConfigError(
                f"{_who(pipeline)}start.at {iso_seconds(spec.at)} is in the future (now {iso_seconds(now)}); "
                "use a past time, or "
                "kind 'current' to start from the server's current end"
            )
        pos, detail = find_by_timestamp(
            spec.at, facts, scan, 0, pipeline=pipeline, from_file=spec.file if spec.kind == "file_timestamp" else None
        )
        return Resolution(pos, f"start_{spec.kind}", detail)
    # kind == "file"
    assert spec.file is not None
    offset = spec.offset if spec.offset is not None else 4
    what = f"start position {spec.file}:{offset}"
    f = facts.binlog(spec.file)
    if f is None:
        raise _missing_file_error(spec.file, facts, what, pipeline)
    if offset > f.size:
        raise ConfigError(
            f"{_who(pipeline)}{what} is beyond the end of {spec.file} ({f.size} bytes) on {facts.address}"
        )
    pos = _align(spec.file, offset, facts, scan)
    if pos.offset == offset:
        return Resolution(pos, "start_file", f"the configured position {pos.label()}")
    return Resolution(
        pos, "start_file", f"{what} is inside a transaction or event; moved back to the boundary {pos.label()}"
    )


def _align(file: str, offset: int, facts: SourceFacts, scan: BinlogScan) -> BinlogPosition:
    """The last transaction boundary at or before (file, offset), with its GTID state and commit time."""
    pos = BinlogPosition(file, 4, facts.identity, scan.file_start_gtid(file), None, 0)
    for b in scan.file_transactions(file):
        if b.start_offset > offset:
            break
        pos = _with(b.start_position(), facts, 0)
        if b.end.offset <= offset:
            pos = _with(b.end, facts, 0)
    return pos
