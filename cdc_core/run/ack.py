"""The ack step: the cursor moves past a window only once Delta itself holds the window in every table.

The ack reads each staged table's last idempotent-write version from Delta's log (txn version >= seq), so
the cursor can never get ahead of the lake whatever a task claimed; it registers the window's tables
(cdc_core.run.lake_tables) and records the window in the lake's checkpoints table (cdc_core.run.checkpoints)
before the fenced cursor move. `recover` is the same ack for a pending window found landed by the next run
(BookKeeper's recovery).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from cdc_core.coordination import LeaseGrant
from cdc_core.lake import delta_state, staging_store
from cdc_core.model import faults, layout
from cdc_core.model.errors import LakeError, StagingError
from cdc_core.model.logfmt import kv
from cdc_core.model.manifest import Manifest
from cdc_core.model.output_modes import OUTPUT_STATE, OUTPUTS
from cdc_core.model.schema_changes import RENAME_TABLE
from cdc_core.model.snapshot_state import TableRequest
from cdc_core.model.window_plan import KIND_SNAPSHOT
from cdc_core.run import checkpoints, housekeeping, lake_tables, snapshot_steps, stage
from cdc_core.run.context import PipelineContext

log = logging.getLogger("cdc.pipeline")


@dataclass(frozen=True)
class AckResult:
    """Window `seq` is acked: by this call (the cursor after it), or `already` before."""

    seq: int
    cursor: str | None = None
    already: bool = False

    def to_dict(self) -> dict[str, Any]:
        if self.already:
            return {"seq": self.seq, "acked": True, "already": True}
        return {"seq": self.seq, "acked": True, "cursor": self.cursor}


def landed(p: PipelineContext, manifest: Manifest, reads: lake_tables.LakeReads | None = None) -> dict[str, int | None]:
    """Each staged table's last idempotent-write version for this pipeline, read from Delta's log. A table
    the window names only in DDL and the lake never had holds nothing: it counts as landed. `reads`: the
    ack's, which the registry and the checkpoints table read from next."""
    reads = reads or lake_tables.LakeReads(p)
    tables = list(manifest.tables)  # routed tables may share a lake table: read once
    found = reads.facts([p.table_uri(t.schema, t.table) for t in tables])
    out: dict[str, int | None] = {}
    for t, f in zip(tables, found, strict=True):
        if f is None and not t.files and not t.columns:
            out[t.name] = manifest.plan.seq
        else:
            out[t.name] = f.txn if f is not None else None
    return out


def ack(p: PipelineContext, grant: LeaseGrant, seq: int) -> AckResult:
    """Move the cursor past window `seq` once Delta holds it in every table of the window (else LakeError:
    re-run the merge step), then clean staged windows and records past their retention (never raises)."""
    grant = p.renew(grant)
    record = stage.window(p, seq)
    if record.state == "acked":
        return AckResult(seq, already=True)
    manifest = stage.recorded_manifest(p, record.plan)  # Delta decides, not the files: no second download
    if manifest is None:
        raise StagingError(
            f"pipeline {p.name!r}: cannot ack window {seq}: it is not staged; run the stage and merge steps "
            "(the stage step re-stages the stored plan)"
        )
    reads = lake_tables.LakeReads(p)  # one read of each table for the checks and records below
    missing = {name: v for name, v in landed(p, manifest, reads).items() if v is None or v < seq}
    if missing:
        raise LakeError(
            f"pipeline {p.name!r}: cannot ack window {seq}: Delta does not hold it for "
            + ", ".join(f"{n} (last version {v})" for n, v in sorted(missing.items()))
            + "; re-run the merge step (it is idempotent)"
        )
    lake_tables.record_lake(p, grant, record.plan, manifest, reads)
    faults.point("before_ack")
    result = window_result(p, seq, manifest, token=grant.token)
    checkpoints.record_checkpoint(p, grant, record.plan, manifest, result, reads=reads)
    rereads = schema_rereads(p, manifest)
    renames = [(c.table_name, c.target_name, c.version) for c in manifest.schema_changes
               if c.kind == RENAME_TABLE and c.target_name is not None]
    cursor = p.coordinator.ack_window(grant, seq, result, rereads, renames)
    # Why, where the capture knew it (cdc_core.model.ddl.conversions); the merge report has every table's reason.
    reasons = {c.table_name: c.reason for c in manifest.schema_changes if c.reason}
    for r in rereads:
        why = {"reason": reasons[r.table]} if r.table in reasons else {}
        p.log_event("window.schema_reread", grant, seq=seq, table=r.table, change_version=r.sweep_below, **why)
    label = cursor.position.label() if cursor.position else None
    # The newest change the lake now holds: how long after its commit on the source it became visible.
    commit_ts = cursor.position.commit_ts if cursor.position else None
    age = {"commit_age_s": round(max(0.0, time.time() - commit_ts), 3)} if commit_ts is not None else {}
    p.log_event("window.acked", grant, seq=seq, cursor=label, **age)
    if record.plan.kind == KIND_SNAPSHOT:
        snapshot_steps.log_acked(p, grant, record.plan)
    faults.point("after_ack")
    housekeeping.cleanup_after_ack(p, grant)  # staged windows and window records past their retention
    return AckResult(seq, cursor=label)


def recover(p: PipelineContext, grant: LeaseGrant) -> str | None:
    """Ack a pending window whose Delta commits all landed; never ack one that did not."""
    pending = p.coordinator.pending_window()
    if pending is None:
        return None
    manifest = stage.recorded_manifest(p, pending.plan)
    if manifest is None:
        return None  # not staged, so it cannot have been merged: replay it
    reads = lake_tables.LakeReads(p)
    if all(v is not None and v >= pending.plan.seq for v in landed(p, manifest, reads).values()):
        lake_tables.record_lake(p, grant, pending.plan, manifest, reads)
        result = {**window_result(p, pending.plan.seq, manifest), "recovered": True}
        checkpoints.record_checkpoint(p, grant, pending.plan, manifest, result, reads=reads)
        p.coordinator.ack_window(grant, pending.plan.seq, result)
        p.log_event("window.recovered_ack", grant, seq=pending.plan.seq)
        return f"acked landed window {pending.plan.seq}"
    return None


def schema_rereads(p: PipelineContext, manifest: Manifest) -> list[TableRequest]:
    """Tables whose rows a schema change of the window left to be re-read from the source (recorded by the
    merge in each lake table's schema record, cdc_core.model.schema_evolution): one snapshot request each,
    made with the ack (cdc_core.coordination.coordinator.ack_window skips those already requested)."""
    if not manifest.schema_changes:
        return []
    out: dict[str, int] = {}
    prefix = f"cdc.schema.{p.name}"
    for t in manifest.tables:
        found = delta_state.writer_txn_properties(p.table_uri(t.schema, t.table), p.name, storage=p.storage)
        if found is None:
            continue
        for key, value in found[2].items():
            # cdc.schema.<app id>.reread (a table of its own) or cdc.schema.<app id>.<source table>.reread
            if not (key.startswith(prefix) and key.endswith(".reread")):
                continue
            version = int(value.partition(":")[0] or 0) if value.partition(":")[0].isdigit() else 0
            middle = key[len(prefix):-len(".reread")]
            if middle and not middle.startswith("."):
                continue  # another app id that starts with this one's name
            source = middle[1:] if middle else t.name
            if version > out.get(source, 0):
                out[source] = version
    rows = p.config.snapshot.chunk_rows
    return [TableRequest(name, None, rows, sweep_below=v) for name, v in sorted(out.items())]


# What the window record keeps of each table's merge report entry ("seconds" since 2026-11-29: optional), and
# of its history's and change log's entries (under "history", "changelog", since 2026-11-30: optional).
RECORDED_TABLE_KEYS = ("delta_version", "status", "inserted", "updated", "deleted", "seconds")


def window_result(p: PipelineContext, seq: int, manifest: Manifest, *, token: int | None = None) -> dict[str, Any]:
    """What the ack records for the window (the window record's `result` in ZooKeeper, a persisted format):
    per table its changes, Delta version, merge counts and merge seconds (an optional key, since 2026-11-29:
    readers of older records find it missing), and the same of its history and change log, when its lake
    table keeps them (docs/output-modes.md)."""
    tables: dict[str, dict[str, Any]] = {t.name: {"changes": t.rows} for t in manifest.tables}
    result: dict[str, Any] = {"tables": tables, "changes": manifest.changes}
    merged = merge_report(p, seq, token)
    reported = (merged or {}).get("tables") or {}
    for t in manifest.tables:  # the report is per lake table (routes may land several tables in one)
        lake = p.lineage(t.schema, t.table)
        info = reported.get(lake.lake_name)
        info = info if isinstance(info, dict) else {}
        entry = tables[t.name]
        entry.update(_recorded(info))
        for output in p.config.outputs_of(lake.lake_name).names()[1:]:
            entry[output] = _recorded(info.get(output) or {})
    if merged:
        result["durations"] = {"merge": merged.get("seconds")}
    for name, entry in tables.items():
        t = manifest.table(name)
        lake = p.lineage(t.schema, t.table)
        # Landed by an earlier attempt (or no report): find the window's commit in Delta.
        for output in OUTPUTS:
            where = entry if output == OUTPUT_STATE else entry.get(output)
            if where is None:
                continue
            uri = layout.output_uri(p.lake_root, output, lake.lake_schema, lake.lake_table)
            if where.get("delta_version") is None:
                where["delta_version"] = delta_state.window_commit_version(uri, p.name, seq, storage=p.storage)
    return result


def _recorded(info: dict[str, Any]) -> dict[str, Any]:
    return {k: info[k] for k in RECORDED_TABLE_KEYS if k in info and not isinstance(info[k], dict)}


def merge_report(p: PipelineContext, seq: int, token: int | None = None) -> dict[str, Any] | None:
    """The newest merge job report for window `seq` (informational: Delta versions, timings), if any. `token`:
    the asking run's fencing token; its own report, when there, is the newest (tokens only grow, and a run
    with a newer one has fenced this one), read without listing the reports of every staged window."""
    try:
        fs, root = p.storage.fs(layout.reports_dir(p.staging_root, p.name))
        if token is not None:
            with contextlib.suppress(FileNotFoundError):  # else merged by an earlier run: listed below
                return _read_report(fs, f"{root}/{layout.merge_report_name(seq, token)}")
        # One report per fencing token (layout.merge_report_uri): the newest token is the run that last
        # merged the window (an earlier run, when this one found the window landed).
        try:
            listed = staging_store.list_names(fs, root)
        except FileNotFoundError:
            return None
        found = {f: layout.merge_report_key(f) for f in listed}
        tokens = {f: key[1] for f, key in found.items() if key is not None and key[0] == seq}
        if not tokens:
            return None
        return _read_report(fs, max(tokens, key=tokens.__getitem__))
    except (OSError, ValueError) as e:
        log.warning("%s", kv(event="merge.report_unreadable", pipeline=p.name, seq=seq, reason=str(e)))
        return None


def _read_report(fs: Any, path: str) -> dict[str, Any]:
    with fs.open(path, "r") as f:
        report: dict[str, Any] = json.load(f)
    return report
