"""The lake's checkpoints table in the run: each acked window recorded with every table's Delta version.

Written before the cursor moves (cdc_core.lake.lake_versions), so `cdc versions` can name a consistent cut
of the lake as of any acked window.
"""

from __future__ import annotations

import time
from typing import Any

from cdc_core import coordination
from cdc_core.coordination import LeaseGrant
from cdc_core.lake import lake_versions
from cdc_core.model import faults, lake_registry
from cdc_core.model.manifest import Manifest
from cdc_core.model.window_plan import WindowPlan
from cdc_core.run.context import PipelineContext
from cdc_core.run.lake_tables import LakeReads


def record_checkpoint(
    p: PipelineContext, grant: LeaseGrant, plan: WindowPlan, manifest: Manifest, result: dict[str, Any],
    *, reads: LakeReads | None = None,
) -> None:
    """Record the window in the lake's checkpoints table (cdc_core.lake.lake_versions) before the cursor
    moves: every table of the pipeline at its Delta version as of this window, in one idempotent
    commit. Fenced: the lease is checked first, and a stale run finds the window recorded (or a
    table already past it) and writes nothing. Empty windows record nothing. `result`: what the ack
    records for the window (cdc_core.run.ack.window_result); `reads`: the ack's reads of the window's tables."""
    if not manifest.tables:
        return
    lake = reads or LakeReads(p)
    snapshot = lake_versions.checkpoints_snapshot(p.lake_root, p.name, storage=p.storage)  # the ack's one open
    if snapshot.holds(plan.seq):
        return
    reg = lake_registry.LakeRegistry.from_dict(p.coordinator.read_lake())
    uris = {n: p.table_uri(e.schema, e.table) for n, e in reg.tables.items()}
    for t in manifest.tables:  # a table named only by DDL that the lake does not have: not in the cut
        uri = p.table_uri(t.schema, t.table)
        if t.files or t.name in uris or lake.one(uri) is not None:
            uris[t.name] = uri
    if not uris:  # only DDL of tables the lake does not have yet: no version to record
        return
    now = time.time()
    after = coordination.cursor_after_ack(p.name, p.coordinator.read_cursor(), plan, now)
    position = after.position  # the stream cursor after this window (a backfill or a chunk keeps it)
    covered = position.commit_ts if position else None

    def build() -> Any:
        versions = lake_versions.current_versions(p.name, plan.seq, uris, read=lake.facts)
        changed = result.get("tables") or {}
        rows = []
        for name, uri in sorted(uris.items()):
            info = changed.get(name) or {}
            rows.append(lake_versions.TableAtWindow(
                name, uri, versions[name], name in changed,
                inserted=info.get("inserted"), updated=info.get("updated"), deleted=info.get("deleted"),
                changes=info.get("changes"),
            ))
        return lake_versions.checkpoint_rows(
            p.name, plan.seq, plan.kind, rows, cursor=position.label() if position else None,
            commit_ts=covered, acked_at=now,
        )

    p.coordinator.verify(grant)  # fenced like every other write: a run that lost its lease stops here
    wrote = lake_versions.write_window(p.lake_root, p.name, plan.seq, build, storage=p.storage, snapshot=snapshot)
    p.log_event("window.checkpointed", grant, seq=plan.seq, tables=len(uris), written=wrote)
    faults.point("after_checkpoint")
