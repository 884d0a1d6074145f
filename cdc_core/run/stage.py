"""The stage step: a window's row changes read from the source and written durably (Parquet + manifest).

Staging works from the plan stored in ZooKeeper, never re-plans, and re-stages a missing or corrupt staged
copy byte for byte (so a zombie and its successor stage the same thing). The staged manifest is what the
merge and the ack read (`manifest`); a staged copy is checked against its plan and its files before use.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cdc_core.capture.binlog import read_change_batches, read_changes
from cdc_core.coordination import LeaseGrant, WindowRecord
from cdc_core.lake import staging
from cdc_core.model import faults, layout, transforms
from cdc_core.model.errors import StagingError, StateConflict
from cdc_core.model.logfmt import kv
from cdc_core.model.manifest import Manifest
from cdc_core.model.window_plan import KIND_SNAPSHOT, WindowPlan
from cdc_core.run import snapshot_steps
from cdc_core.run.context import PipelineContext

log = logging.getLogger("cdc.pipeline")


@dataclass(frozen=True)
class StagedWindow:
    """What the stage step staged (or found staged) for window `seq`."""

    seq: int
    tables: tuple[str, ...]
    changes: int
    window_dir: str
    empty: bool

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "tables": list(self.tables), "changes": self.changes,
                "window_dir": self.window_dir, "empty": self.empty}


def window(p: PipelineContext, seq: int) -> WindowRecord:
    """Window `seq`'s record; a window that was never planned is a StateConflict."""
    record = p.coordinator.get_window(seq)
    if record is None:
        raise StateConflict(
            f"pipeline {p.name!r}: window {seq} is not planned in ZooKeeper; re-run from the plan step"
        )
    return record


def stage(p: PipelineContext, grant: LeaseGrant, seq: int) -> StagedWindow:
    """Stage the stored plan (or verify an existing staged copy). Never re-plans."""
    grant = p.renew(grant)
    plan = window(p, seq).plan
    manifest = staged_manifest(p, plan)
    if manifest is None and plan.kind == KIND_SNAPSHOT:
        manifest = snapshot_steps.stage_chunk(p, grant, plan)
    elif manifest is None:
        t0 = time.time()
        table_filter, full_row_key = p.plan_capture(plan)
        schemas = p.schema_lookup(full_row_key)
        read = read_change_batches if p.config.decoder == "columnar" else read_changes
        changes: Iterator[Any] = read(
            p.source, plan.start.server, plan, table_filter, schemas, zero_dates=p.config.zero_dates,
            schema_policy=p.config.schema_changes.policy(), before_images=p.plan_before_images(plan),
        )
        faults.point("mid_stage_before")
        if faults.armed("mid_stage"):
            changes = faults.midway(changes, plan.events, "mid_stage")
        manifest = staging.stage_window(
            plan, changes, p.staging_root, progress=_progress(p, grant, plan), storage=p.storage,
            transforms=plan_transforms(p, plan),
        )
        before = {"before_images": manifest.before_images} if manifest.before_images else {}
        p.log_event(
            "window.staged", grant, seq=seq, tables=len(manifest.tables), changes=manifest.changes, **before,
            secs=f"{time.time() - t0:.2f}",
        )
    else:
        p.log_event("window.already_staged", grant, seq=seq, tables=len(manifest.tables), changes=manifest.changes)
    faults.point("after_stage")
    return StagedWindow(
        seq=seq,
        tables=tuple(t.name for t in manifest.tables),
        changes=manifest.changes,
        window_dir=layout.window_dir(p.staging_root, p.name, seq),
        empty=not manifest.tables,
    )


def plan_transforms(p: PipelineContext, plan: WindowPlan) -> transforms.Transforms:
    """The transform rules a stored plan was planned with (cdc_core/model/transforms.py)."""
    return transforms.planned(p.config.transform, plan, lambda: p.capture_settings(plan.tables), p.name,
                              p.transform_key)


def _progress(p: PipelineContext, grant: LeaseGrant, plan: WindowPlan) -> Callable[..., None]:
    last = [time.time()]

    def progress(rows: int, **extra: Any) -> None:
        now = time.time()
        if now - last[0] >= 10:
            last[0] = now
            p.log_event("window.staging", grant, seq=plan.seq, rows=rows, **extra)
            p.renew(grant)  # a long staging keeps the lease alive (and notices a lost one)

    return progress


def staged_manifest(p: PipelineContext, plan: WindowPlan) -> Manifest | None:
    """The window's staged manifest when a valid staged copy of exactly this plan exists, else None (stage it
    again). A staged copy of another plan is a StagingError: a planned window is immutable."""
    manifest = recorded_manifest(p, plan)
    if manifest is None:
        return None
    try:
        staging.verify_window(p.staging_root, manifest, storage=p.storage)
    except StagingError as e:
        log.warning("%s", kv(event="window.restage", pipeline=p.name, seq=plan.seq, reason=str(e)))
        return None
    return manifest


def recorded_manifest(p: PipelineContext, plan: WindowPlan) -> Manifest | None:
    """The staged manifest of exactly this plan (None: not staged), without hashing the staged files: what
    the steps after the merge read (the ack and recovery decide by what Delta holds, not by the files; on
    an object store, hashing would download the whole window again). A manifest of another plan is a
    StagingError."""
    manifest = staging.read_manifest(p.staging_root, p.name, plan.seq, storage=p.storage)
    if manifest is None:
        return None
    if manifest.plan.to_dict() != plan.to_dict():
        raise StagingError(
            f"pipeline {p.name!r}: staged window {plan.seq} does not match its stored plan; "
            f"delete {layout.window_dir(p.staging_root, p.name, plan.seq)} and re-run the stage step"
        )
    return manifest


def manifest(p: PipelineContext, seq: int) -> Manifest:
    """Window `seq`'s staged manifest; a window not (validly) staged is a StagingError."""
    found = staged_manifest(p, window(p, seq).plan)
    if found is None:
        raise StagingError(
            f"pipeline {p.name!r}: window {seq} is not staged; run the stage step (it re-stages the stored plan)"
        )
    return found
