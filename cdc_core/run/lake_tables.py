"""The pipeline's lake table registry in the run: checked before a stream window, updated before an ack.

Every Delta table the pipeline landed windows into is recorded with its Delta table id
(cdc_core.model.lake_registry). A table deleted or re-created behind the pipeline's back stops the stream
with a LakeError naming it and the repairs, before anything is planned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cdc_core.coordination import LeaseGrant
from cdc_core.lake import delta_state
from cdc_core.lake.delta_state import TableFacts
from cdc_core.model import lake_registry, snapshot_state
from cdc_core.model.errors import LakeError
from cdc_core.model.manifest import Manifest
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, WindowPlan
from cdc_core.run.context import PipelineContext


class LakeReads:
    """Each Delta table's id, version and the pipeline's last txn version, read once per ack: whether the
    window landed, the registry's ids and the checkpoints table's versions all come from the same read (one
    open per table, a few requests on an object store, `delta_state.per_table` at a time)."""

    def __init__(self, p: PipelineContext) -> None:
        self.p = p
        self._read: dict[str, TableFacts | None] = {}

    def facts(self, uris: Sequence[str]) -> list[TableFacts | None]:
        todo = [u for u in dict.fromkeys(uris) if u not in self._read]
        p = self.p
        found = delta_state.per_table(lambda uri: delta_state.table_facts(uri, p.name, storage=p.storage), todo,
                                      p.lake_root)
        self._read.update(zip(todo, found, strict=True))
        return [self._read[u] for u in uris]

    def one(self, uri: str) -> TableFacts | None:
        return self.facts([uri])[0]


def check_lake(p: PipelineContext, grant: LeaseGrant, next_seq: int) -> None:
    """Before a new stream window: every Delta table the pipeline landed windows into is still there,
    and is the same table (cdc_core.model.lake_registry). A deleted or re-created one stops the run with a
    LakeError naming it and the repairs (snapshot, backfill); nothing is planned. A table a snapshot
    round is rebuilding does not stop the stream (chunks and stream windows alternate)."""
    reg = lake_registry.LakeRegistry.from_dict(p.coordinator.read_lake())
    if not reg.tables:
        return
    names = list(reg.tables)
    uris = [p.table_uri(reg.tables[n].schema, reg.tables[n].table) for n in names]
    # Every registered table, each window: on an object store READ_THREADS reads at a time.
    found = delta_state.per_table(lambda uri: delta_state.table_id(uri, storage=p.storage), uris, p.lake_root)
    ids = dict(zip(names, found, strict=True))
    rounds = {t.table: t.round for t in p.coordinator.read_snapshot().tables if not t.done}
    bad = lake_registry.problems(reg, ids, next_seq, rounds)
    if not bad:
        return
    names = sorted(bad)
    reg = lake_registry.LakeRegistry.from_dict(p.coordinator.update_lake(
        grant, lambda cur: lake_registry.mark_damaged(
            lake_registry.LakeRegistry.from_dict(cur), names, next_seq).to_dict(),
    ))
    for n in names:
        p.log_event("lake.table_damaged", grant, table=n, reason=repr(bad[n]))
    raise LakeError(
        f"pipeline {p.name!r}: "
        + "; ".join(f"Delta table {n} ({p.table_uri(reg.tables[n].schema, reg.tables[n].table)}) {bad[n]}"
                    for n in names)
        + ". Nothing was planned or changed. " + lake_registry.repair_hint(reg, p.name, names)
    )


def record_lake(
    p: PipelineContext, grant: LeaseGrant, plan: WindowPlan, manifest: Manifest, reads: LakeReads | None = None
) -> None:
    """Register the window's tables (with their Delta ids) before it is acked. `reads`: the ack's."""
    reads = reads or LakeReads(p)
    cursor = p.coordinator.read_cursor()
    bf = cursor.backfill
    completes = plan.kind == KIND_BACKFILL and bf is not None and plan.end >= bf.until
    found = reads.facts([p.table_uri(t.schema, t.table) for t in manifest.tables])
    landed = {t.name: (t.schema, t.table, f.table_id if f else None)
              for t, f in zip(manifest.tables, found, strict=True)}
    if plan.kind == KIND_SNAPSHOT:
        # A chunk that staged no rows still tells whether its round's table is still there.
        names = [s.table for s in snapshot_state.chunks_of(plan) if s.table not in landed]
        known = lake_registry.LakeRegistry.from_dict(p.coordinator.read_lake()).tables if names else {}
        for name in names:
            entry = known.get(name)
            if entry is not None:
                now = reads.one(p.table_uri(entry.schema, entry.table))
                landed[name] = (entry.schema, entry.table, now.table_id if now else None)
    if not landed and not completes:
        return
    recreated: list[str] = []

    def change(current: dict[str, Any] | None) -> dict[str, Any]:
        new, found = lake_registry.after_ack(
            lake_registry.LakeRegistry.from_dict(current), plan, landed,
            completes_backfill=completes, backfill_tables=tuple(bf.tables) if bf is not None else (),
        )
        recreated[:] = found
        return new.to_dict()

    reg = lake_registry.LakeRegistry.from_dict(p.coordinator.update_lake(grant, change))
    for n in recreated:  # the next stream window refuses to plan until a repair rebuilt it
        rb = reg.tables[n].rebuild if n in reg.tables else None
        if rb is not None and rb.broken:
            p.log_event("lake.snapshot_round_broken", grant, seq=plan.seq, table=n, round=rb.round,
                        round_delta_id=rb.delta_id, reason="a chunk landed in another Delta table than chunk 1")
        else:
            p.log_event("lake.table_recreated", grant, seq=plan.seq, table=n)
