"""Staged windows past their retention: what the after-ack pass and the maintenance run delete from staging.

A staged window (with its merge reports and interrupted-staging leftovers) goes only when ZooKeeper proves it
acked and the ack older than `staging_retention_hours` (the rules: `cdc_core.model.retention`); the after-ack
pass keeps itself cheap with a note of when its next window is due (`clean_staging`). Part of housekeeping
(`cdc_core.run.housekeeping`, docs/housekeeping.md), which runs it.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import time
from typing import Any, NamedTuple

from cdc_core.coordination import STATE_ACKED, LeaseGrant, PipelineCoordinator
from cdc_core.lake import staging, staging_store
from cdc_core.lake.object_store import AMBIENT, Storage
from cdc_core.model import layout, retention
from cdc_core.model.layout import REPORTS_DIR
from cdc_core.model.logfmt import kv

log = logging.getLogger("cdc.housekeeping")


def log_event(event: str, pipeline: str, grant: LeaseGrant | None, **fields: Any) -> None:
    """A housekeeping log line: the event, the pipeline, the fencing token of the run that did it, what it freed."""
    token = f"{grant.token:#x}" if grant else "-"
    log.info("%s %s", event, kv(pipeline=pipeline, token=token, **fields))


# ------------------------------------------------------------------------------------ staged windows


class StagingEntry(NamedTuple):  # a tuple: made for every staged window by every ack's pass (a dataclass cost 3 us)
    path: str  # the filesystem's path (no protocol), for fs calls
    name: str
    kind: retention.StagingKind
    seq: int | None
    mtime: float | None = None  # maintenance reports only (list_staging)


def _mtime(info: dict[str, Any]) -> float | None:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        v = info.get(key)
        if v is None:
            continue
        if hasattr(v, "timestamp"):
            return float(v.timestamp())
        try:
            return float(v)
        except (TypeError, ValueError):
            continue
    return None


def list_staging(staging_root: str, pipeline: str, *, storage: Storage = AMBIENT) -> tuple[Any, list[StagingEntry]]:
    """Everything under `<staging_root>/<pipeline>/` and its `reports/`, classified (the fs, the entries). Names
    only: the after-ack pass lists staging on every ack, and a stat per entry made that the ack's largest cost
    once an hour of windows was staged (the long run); only maintenance reports, which age by time, are stat'ed."""
    fs, root = storage.fs(staging_root)
    base = f"{root.rstrip('/')}/{layout.unit_dir(pipeline)}"
    entries: list[StagingEntry] = []
    for directory in (base, f"{base}/{REPORTS_DIR}"):
        try:
            listing = staging_store.list_names(fs, directory)
        except FileNotFoundError:
            continue
        for listed in listing:
            path = listed.rstrip("/")
            name = path.rpartition("/")[2]
            if directory == base and name == REPORTS_DIR:
                continue
            kind, seq = retention.classify_staging_entry(name)
            if directory == base and kind in ("report", "maintenance_report"):
                kind, seq = "other", None  # reports only count inside reports/
            if directory != base and kind not in ("report", "maintenance_report"):
                kind, seq = "other", None
            mtime = _stat_mtime(fs, path) if kind == "maintenance_report" else None
            entries.append(StagingEntry(path, name, kind, seq, mtime))
    return fs, entries


def _stat_mtime(fs: Any, path: str) -> float | None:
    try:
        return _mtime(fs.info(path))
    except FileNotFoundError:
        return None


def _size(fs: Any, path: str) -> tuple[int, int]:
    """(files, bytes) under `path` (a file or a directory)."""
    try:
        if fs.isdir(path):
            sizes = fs.du(path, total=False)
            return len(sizes), int(sum(sizes.values()))
        return 1, int(fs.size(path) or 0)
    except FileNotFoundError:
        return 0, 0


_NOTHING_CLEANED: dict[str, Any] = {
    "windows_deleted": 0, "reports_deleted": 0, "leftovers_deleted": 0, "files_deleted": 0, "bytes_freed": 0,
    "windows_kept": 0, "first_kept": None, "unknown_entries": 0,
}


def _read_due(store: staging_store.StagingStore, path: str, retention_seconds: float) -> float | None:
    """The noted due time; None (list now) when there is none, it cannot be read, or it was worked out for
    another retention (a config change shortening it must not wait out the old one). A note is only ever a
    shortcut, never a reason to keep or delete anything."""
    data = store.read_bytes(path)
    try:
        note = json.loads(data) if data else None
        if note is None or float(note["retention_seconds"]) != retention_seconds:
            return None
        return float(note["due_at"])
    except (ValueError, KeyError, TypeError):
        return None


def _delete_staged_window(fs: Any, staging_root: str, pipeline: str, seq: int, entries: list[StagingEntry], *,
                          storage: Storage, out: dict[str, Any]) -> tuple[int, int]:
    """One window's directory, reports and leftovers (the window first: its manifest stops it counting at
    once); counted into `out`. Returns (files, bytes)."""
    files = size = 0
    for e in sorted(entries, key=lambda e: e.kind != "window"):
        n, b = _size(fs, e.path)
        if e.kind == "window":
            # its leftovers are entries of this listing, removed next: no listing per window
            staging.delete_window(staging_root, pipeline, seq, storage=storage, sweep_leftovers=False)
            out["windows_deleted"] += 1
        else:
            with contextlib.suppress(FileNotFoundError):  # delete_window may have removed it already
                fs.rm(e.path, recursive=True)
            out["reports_deleted" if e.kind == "report" else "leftovers_deleted"] += 1
        files += n
        size += b
    out["files_deleted"] += files
    out["bytes_freed"] += size
    return files, size


class _AckFactsReader:
    """Reads what ZooKeeper says about windows, lazily and with a cache (ascending use is cheapest)."""

    def __init__(self, coordinator: PipelineCoordinator) -> None:
        self.coordinator = coordinator
        self.record_seqs = coordinator.window_record_seqs()
        self.marks = coordinator.pruned_marks()
        self._cache: dict[int, tuple[str | None, float | None]] = {}

    def _record(self, seq: int) -> tuple[str | None, float | None]:
        if seq not in self._cache:
            rec = self.coordinator.get_window(seq)  # CoordinationError on any doubt: the pass stops
            self._cache[seq] = (None, None) if rec is None else (rec.state, rec.acked_at)
        return self._cache[seq]

    def facts(self, seq: int) -> retention.AckFacts:
        state, acked_at = self._record(seq) if seq in self.record_seqs else (None, None)
        if state is not None:
            return retention.AckFacts(state=state, acked_at=acked_at)
        # The record is gone (pruned: only acked records are): bound the ack time by the pruned-record marks
        # (retention.marks_after_prune). Without one (records pruned before the marks existed), by the next
        # record's: a looser bound, and when records are pruned by count faster than the staging retention passes,
        # one that never ages enough (the long run found staging growing without bound that way).
        by_mark = retention.acked_by_mark(self.marks, seq)
        if by_mark is not None:
            return retention.AckFacts(state=None, acked_by=by_mark)
        i = bisect.bisect_right(self.record_seqs, seq)
        while i < len(self.record_seqs):
            later_state, later_acked = self._record(self.record_seqs[i])
            if later_state == STATE_ACKED and later_acked is not None:
                return retention.AckFacts(state=None, acked_by=later_acked)
            if later_state is not None:
                break  # the pending window: no bound from it
            i += 1
        return retention.AckFacts(state=None)


def clean_staging(
    coordinator: PipelineCoordinator,
    grant: LeaseGrant,
    staging_root: str,
    retention_seconds: float,
    *,
    now: float | None = None,
    stop_at_first_kept: bool = True,
    max_windows: int | None = None,
    storage: Storage = AMBIENT,
    due_slack_seconds: float | None = None,
) -> dict[str, Any]:
    """Delete staged windows (with their merge reports and leftovers) acked longer ago than the retention,
    and maintenance reports older than it. Returns what was freed; logs every deleted window.

    `max_windows` bounds one pass (the after-ack pass must not turn an ack into a long task after an
    upgrade or a long pause); the rest goes in the next passes.

    `due_slack_seconds` (the after-ack pass): the pass notes when it next has a window to delete
    (retention.staging_pass_due_at, with that much slack) beside the windows, and until then skips the listing.
    Without it every ack listed a retention's worth of staged windows (3 days of one-minute windows: 4,320
    directories, five LIST pages on an object store) to find that nothing new had aged."""
    pipeline = coordinator.unit  # a group pipeline's source: its own staging directory
    coordinator.verify(grant)  # a zombie stops here (what it would delete is acked anyway)
    now = time.time() if now is None else now
    store = staging_store.StagingStore(staging_root, storage)
    due_path = f"{store.root}/{layout.unit_dir(pipeline)}/{retention.STAGING_DUE_NAME}"
    if due_slack_seconds is not None:
        due = _read_due(store, due_path, retention_seconds)
        if due is not None and now < due:
            return {**_NOTHING_CLEANED, "not_due_until": due}
    cursor = coordinator.read_cursor()
    reader = _AckFactsReader(coordinator)
    fs, entries = list_staging(staging_root, pipeline, storage=storage)
    by_seq: dict[int, list[StagingEntry]] = {}
    for e in entries:
        if e.seq is not None:
            by_seq.setdefault(e.seq, []).append(e)
    out: dict[str, Any] = {**_NOTHING_CLEANED, "unknown_entries": sum(1 for e in entries if e.kind == "other")}
    stopped = backlog = False
    first_kept_acked: float | None = None
    for seq in sorted(by_seq):
        if max_windows is not None and out["windows_deleted"] >= max_windows:
            stopped = backlog = True
        if stopped:
            out["windows_kept"] += 1
            continue
        facts = reader.facts(seq)
        decision = retention.staged_window_decision(seq, cursor.seq, facts, now, retention_seconds)
        if not decision.delete:
            out["windows_kept"] += 1
            if out["first_kept"] is None:
                out["first_kept"] = {"seq": seq, "reason": decision.reason}
                first_kept_acked = retention.ack_time_bound(facts) if seq <= cursor.seq else None
            # Windows are acked in order: once one is too young (or not acked), later ones are too.
            stopped = stop_at_first_kept
            continue
        files, size = _delete_staged_window(fs, staging_root, pipeline, seq, by_seq[seq], storage=storage, out=out)
        log_event("staging.window_deleted", pipeline, grant, seq=seq, files=files, bytes=size, reason=decision.reason)
    for e in entries:
        if e.kind == "maintenance_report" and e.mtime is not None and now - e.mtime >= retention_seconds:
            n, b = _size(fs, e.path)
            fs.rm(e.path)
            out["reports_deleted"] += 1
            out["files_deleted"] += n
            out["bytes_freed"] += b
    if due_slack_seconds is not None:
        due = retention.staging_pass_due_at(now=now, first_kept_acked=first_kept_acked, backlog=backlog,
                                            retention_seconds=retention_seconds, slack_seconds=due_slack_seconds)
        note = {"due_at": due, "retention_seconds": retention_seconds, "written_at": now,
                "token": f"{grant.token:#x}"}
        coordinator.verify(grant)  # a run that lost the lease meanwhile leaves the note to the holder
        store.write_bytes(due_path, json.dumps(note).encode())
        out["next_due"] = due
    log_event(
        "staging.cleaned", pipeline, grant, cursor=cursor.seq, windows=out["windows_deleted"],
        reports=out["reports_deleted"], leftovers=out["leftovers_deleted"], files=out["files_deleted"],
        bytes=out["bytes_freed"], kept=out["windows_kept"],
        first_kept=(out["first_kept"] or {}).get("seq", "-"),
    )
    return out


__all__ = ["StagingEntry", "clean_staging", "list_staging", "log_event"]
