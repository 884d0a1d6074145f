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
from cdc_core.model import faults, lake_registry, layout
from cdc_core.model.manifest import Manifest
from cdc_core.model.output_modes import OUTPUT_STATE
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
    where = {n: (e.schema, e.table) for n, e in reg.tables.items()}
    for t in manifest.tables:  # a table named only by DDL that the lake does not have: not in the cut
        if t.files or t.name in where or lake.one(p.table_uri(t.schema, t.table)) is not None:
            where[t.name] = (t.schema, t.table)
    if not where:  # only DDL of tables the lake does not have yet: no version to record
        return
    entries = recorded_tables(p, where)
    uris = {label: uri for label, (_, _, uri) in entries.items()}
    now = time.time()
    after = coordination.cursor_after_ack(p.name, p.coordinator.read_cursor(), plan, now)
    position = after.position  # the stream cursor after this window (a backfill or a chunk keeps it)
    covered = position.commit_ts if position else None

    def build() -> Any:
        versions = lake_versions.current_versions(p.name, plan.seq, uris, read=lake.facts)
        changed = result.get("tables") or {}
        rows = []
        for label, (name, output, uri) in sorted(entries.items()):
            if output != OUTPUT_STATE and versions[label] is None:
                continue  # configured, not landed yet: it joins the cuts with the first window that lands it
            info = changed.get(name) or {}
            counts = info if output == OUTPUT_STATE else info.get(output) or {}
            rows.append(lake_versions.TableAtWindow(
                name, uri, versions[label], name in changed,
                inserted=counts.get("inserted"), updated=counts.get("updated"), deleted=counts.get("deleted"),
                changes=info.get("changes"), output=output,
            ))
        return lake_versions.checkpoint_rows(
            p.name, plan.seq, plan.kind, rows, cursor=position.label() if position else None,
            commit_ts=covered, acked_at=now,
        )

    p.coordinator.verify(grant)  # fenced like every other write: a run that lost its lease stops here
    wrote = lake_versions.write_window(p.lake_root, p.name, plan.seq, build, storage=p.storage, snapshot=snapshot)
    p.log_event("window.checkpointed", grant, seq=plan.seq, tables=len(where), outputs=len(uris) - len(where),
                written=wrote)
    faults.point("after_checkpoint")


def recorded_tables(p: PipelineContext, where: dict[str, tuple[str, str]]) -> dict[str, tuple[str, str, str]]:
    """{label: (table name, output, Delta table URI)} of what a cut records: each table's state, and its history
    and change log when its lake table keeps them (`table_options[...].outputs`, docs/output-modes.md).
    `where`: table name -> (schema, table) as the source names it."""
    out: dict[str, tuple[str, str, str]] = {}
    for name, (schema, table) in where.items():
        lake = p.lineage(schema, table)
        for output in p.config.outputs_of(lake.lake_name).names():
            label = name if output == OUTPUT_STATE else f"{name} ({output})"
            out[label] = (name, output, layout.output_uri(p.lake_root, output, lake.lake_schema, lake.lake_table))
    return out
