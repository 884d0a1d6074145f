"""The lake registry's rules: which windows each lake table holds, and what a purge or rewind may do.

The rules and why: docs/lake-registry.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from cdc_core.model.errors import ConfigError
from cdc_core.model.logfmt import iso_seconds
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.snapshot_state import ChunkSpec, chunks_of
from cdc_core.model.sources import command_target, split_unit
from cdc_core.model.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, WindowPlan

LAKE_FORMAT = 1  # fields added since (first_kind, rebuild) are optional: older records read as before


@dataclass(frozen=True)
class Rebuild:
    """The snapshot round reloading a table: the Delta table its chunk 1 landed in, and whether a later
    chunk landed elsewhere (then the round cannot vouch for the table)."""

    round: int
    delta_id: str | None  # None: chunk 1 was not seen (the round started before this was recorded)
    seq: int  # the window that recorded it (chunk 1, or the chunk that found the round broken)
    broken: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "delta_id": self.delta_id, "seq": self.seq, "broken": self.broken}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Rebuild:
        return cls(
            round=int(d["round"]),
            delta_id=None if d.get("delta_id") is None else str(d["delta_id"]),
            seq=int(d["seq"]),
            broken=bool(d.get("broken", False)),
        )


@dataclass(frozen=True)
class LandedTable:
    """One table the pipeline has landed windows into."""

    schema: str
    table: str
    delta_id: str  # Delta metaData.id of the table the windows landed in
    first_seq: int  # the first window that landed in it
    first_position: BinlogPosition  # where that window started: a rebuilding backfill starts at or before it
    damaged_at: int | None = None  # window that found it deleted or re-created; None = healthy
    first_kind: str = ""  # kind of the first window (stream/backfill/snapshot); "" = recorded before it was kept
    rebuild: Rebuild | None = None  # the snapshot round under way for this table, if any

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "table": self.table,
            "delta_id": self.delta_id,
            "first_seq": self.first_seq,
            "first_position": self.first_position.to_dict(),
            "damaged_at": self.damaged_at,
            "first_kind": self.first_kind,
            "rebuild": self.rebuild.to_dict() if self.rebuild is not None else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LandedTable:
        return cls(
            schema=str(d["schema"]),
            table=str(d["table"]),
            delta_id=str(d["delta_id"]),
            first_seq=int(d["first_seq"]),
            first_position=BinlogPosition.from_dict(d["first_position"]),
            damaged_at=None if d.get("damaged_at") is None else int(d["damaged_at"]),
            first_kind=str(d.get("first_kind") or ""),
            rebuild=Rebuild.from_dict(d["rebuild"]) if d.get("rebuild") else None,
        )


@dataclass(frozen=True)
class LakeRegistry:
    tables: dict[str, LandedTable] = field(default_factory=dict)  # "schema.table" -> entry

    def to_dict(self) -> dict[str, Any]:
        return {"format": LAKE_FORMAT, "tables": {k: v.to_dict() for k, v in sorted(self.tables.items())}}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LakeRegistry:
        if not d:
            return cls()
        if d.get("format") != LAKE_FORMAT:
            raise ConfigError(
                f"unsupported lake registry format {d.get('format')!r} (this version reads {LAKE_FORMAT}); "
                "a newer release wrote it: upgrade this one"
            )
        return cls({str(k): LandedTable.from_dict(v) for k, v in (d.get("tables") or {}).items()})




def after_ack(
    registry: LakeRegistry,
    plan: WindowPlan,
    landed: dict[str, tuple[str, str, str | None]],
    *,
    completes_backfill: bool = False,
    backfill_tables: tuple[str, ...] = (),
) -> tuple[LakeRegistry, list[str]]:
    """The registry once `plan` is acked, given the window's tables as {name: (schema, table, Delta id now)}
    (for a snapshot chunk, its table is included even when the chunk staged no rows); and the tables
    this window found re-created, or whose snapshot round it found broken (to be logged)."""
    tables = dict(registry.tables)
    flagged: list[str] = []
    specs = {s.table: s for s in chunks_of(plan)} if plan.kind == KIND_SNAPSHOT else {}
    for name, (schema, table, now) in sorted(landed.items()):
        entry = tables.get(name)
        spec = specs.get(name)
        if spec is not None:
            chunked, flag = _after_chunk(entry, (schema, table, now), plan, spec)
            if chunked is not None:
                tables[name] = chunked
            if flag:
                flagged.append(name)
            continue
        if now is None:
            continue  # the ack refuses a window whose tables do not hold it; nothing to record
        if entry is None:
            tables[name] = LandedTable(schema, table, now, plan.seq, plan.start, first_kind=plan.kind)
        elif entry.delta_id != now:
            if plan.kind == KIND_BACKFILL:
                tables[name] = replace(entry, delta_id=now)  # being rebuilt (only a backfill's end clears damage)
            else:
                tables[name] = replace(entry, delta_id=now, damaged_at=entry.damaged_at or plan.seq)
                flagged.append(name)
    if completes_backfill:
        for name, entry in tables.items():
            if entry.damaged_at is not None and (not backfill_tables or name in backfill_tables):
                tables[name] = replace(entry, damaged_at=None)
    return LakeRegistry(tables), flagged


def _after_chunk(
    entry: LandedTable | None, landed: tuple[str, str, str | None], plan: WindowPlan, spec: ChunkSpec
) -> tuple[LandedTable | None, bool]:
    """Snapshot chunk `spec` acked with its table's Delta id now (`landed`): (the entry, flag it?).

    Chunk 1 starts the round's rebuild record in the table it landed in; every later chunk must land in
    that same table, else the round is broken (it cannot vouch for the rows of its earlier chunks). The
    last chunk of an unbroken round clears the damage and adopts the id. A chunk landing in a table
    that is not the registered one marks it damaged, as a stream window would.
    """
    schema, table, now = landed
    round_, chunk, last = spec.round, spec.chunk, spec.last
    if entry is None:
        if now is None:
            return None, False  # nothing landed (the source table is gone) and nothing was registered
        entry = LandedTable(schema, table, now, plan.seq, plan.start, first_kind=KIND_SNAPSHOT)
    rb = entry.rebuild
    if chunk == 1:
        rb = Rebuild(round_, now, plan.seq)
    elif rb is not None and rb.round > round_:
        pass  # a stale chunk of an older round (re-requested while it was pending): the newer round's record stays
    elif rb is None or rb.round != round_ or rb.broken or rb.delta_id is None or rb.delta_id != now:
        was = rb.delta_id if rb is not None and rb.round == round_ else None
        rb = Rebuild(round_, was, rb.seq if rb is not None and rb.broken and rb.round == round_ else plan.seq,
                     broken=True)
    flag = rb is not None and rb.broken and entry.rebuild != rb
    damaged_at = entry.damaged_at
    if now != entry.delta_id and damaged_at is None:
        damaged_at, flag = plan.seq, True
    if last and rb is not None and rb.round == round_ and not rb.broken and now is not None and rb.delta_id == now:
        return replace(entry, delta_id=now, damaged_at=None, rebuild=None), flag  # rebuilt: every chunk is here
    return replace(entry, damaged_at=damaged_at, rebuild=rb), flag


def _rebuilding(entry: LandedTable, now: str | None, snapshot_round: int | None) -> bool:
    """Is a snapshot round (the table's current one, `snapshot_round`; None = none active) rebuilding the
    table into the Delta table that is there now, or about to start (its chunk 1 is not acked yet)?"""
    if snapshot_round is None:
        return False
    rb = entry.rebuild
    if rb is None or rb.round < snapshot_round:
        return True  # requested, chunk 1 not landed yet: whatever table is there, chunk 1 starts the round in it
    return rb.round == snapshot_round and not rb.broken and rb.delta_id is not None and rb.delta_id == now


def problems(
    registry: LakeRegistry, delta_ids: dict[str, str | None], next_seq: int, snapshots: dict[str, int] | None = None
) -> dict[str, str]:
    """What is wrong with the registered tables given their Delta ids now: name -> reason. Tables found
    deleted or replaced are to be marked damaged (`mark_damaged`) so that only a repair clears them.

    `snapshots` maps each table with a snapshot not done to its round: a table that round is rebuilding
    (`_rebuilding`) is not a problem for the stream, so that chunks and stream windows can alternate.
    """
    out: dict[str, str] = {}
    snapshots = snapshots or {}
    for name, entry in sorted(registry.tables.items()):
        now = delta_ids.get(name)
        if _rebuilding(entry, now, snapshots.get(name)):
            continue
        rb = entry.rebuild
        if entry.damaged_at is not None and rb is not None and rb.broken:
            out[name] = (f"was found deleted or re-created at window {entry.damaged_at}, and snapshot round "
                         f"{rb.round} cannot rebuild it: its chunks landed in different Delta tables (the table "
                         f"was deleted or re-created again during the round, found at window {rb.seq})")
        elif entry.damaged_at is not None:
            out[name] = f"was found deleted or re-created at window {entry.damaged_at} and not rebuilt since"
        elif now is None:
            out[name] = (f"has no Delta table any more (it held windows {entry.first_seq}..{next_seq - 1}, "
                         f"Delta table id {entry.delta_id}): it was deleted")
        elif now != entry.delta_id:
            out[name] = (f"is a different Delta table (id {now}) from the one that holds windows "
                         f"{entry.first_seq}..{next_seq - 1} (id {entry.delta_id}): it was deleted and re-created")
        if name in out and name in snapshots and rb is not None and rb.round == snapshots[name] and not rb.broken:
            out[name] += (f"; the snapshot round {rb.round} under way cannot repair it: its chunk 1 landed in "
                          f"Delta table {rb.delta_id}, the table now is {now}")
    return out


def mark_damaged(registry: LakeRegistry, names: list[str], seq: int) -> LakeRegistry:
    tables = dict(registry.tables)
    for name in names:
        if name in tables and tables[name].damaged_at is None:
            tables[name] = replace(tables[name], damaged_at=seq)
    return LakeRegistry(tables)


def repair_hint(registry: LakeRegistry, pipeline: str, names: list[str]) -> str:
    """The repairs for `names`: a snapshot (always possible: it reloads from the source), and a backfill
    from before the first window that landed them, for tables not first loaded by a snapshot."""
    tables = " ".join(f"--table {n}" for n in sorted(names))
    hint = (f"Repair: reload from the source with a snapshot, `cdc snapshot {command_target(pipeline)} {tables}` (or "
            f"trigger the cdc_{split_unit(pipeline)[0]}_snapshot DAG with these tables); it needs no old binlog, "
            "stream windows keep running while it loads, and the table is healthy again once its last chunk is acked "
            "(rows in the Delta table that are not in the source stay: a snapshot is an upsert)")
    entries = {n: registry.tables[n] for n in names if n in registry.tables}
    by_snapshot = sorted(n for n, e in entries.items() if e.first_kind == KIND_SNAPSHOT)
    others = sorted(n for n in names if n not in by_snapshot)
    if by_snapshot:
        hint += (f". A binlog backfill cannot rebuild {', '.join(by_snapshot)}: first loaded by a snapshot, its "
                 "rows never changed since are not in the binlog")
    if others:
        first = min((entries[n].first_position for n in others if n in entries), default=None,
                    key=lambda p: p.sort_key())
        when = iso_seconds(first.commit_ts) if first is not None else None
        start = f"{when} or earlier" if when else "a time before this pipeline's first window"
        hint += (f". Or, while the source's binlog still reaches back before the first window "
                 f"({first.label() if first else '?'}), rebuild with a backfill from before it: `cdc backfill "
                 f"{command_target(pipeline)} --from <UTC time: {start}> {' '.join(f'--table {n}' for n in others)}` "
                 "(or the backfill DAG); stream windows resume once that backfill has finished")
    return hint


def check_backfill_start(registry: LakeRegistry, pipeline: str, start: BinlogPosition,
                         tables: tuple[str, ...]) -> None:
    """ConfigError when a backfill covering a damaged table would start after that table's first window."""
    late = [
        (name, e) for name, e in sorted(registry.tables.items())
        if e.damaged_at is not None and (not tables or name in tables)
        and e.first_position.server.same_server(start.server) and e.first_position.epoch == start.epoch
        and start > e.first_position
    ]
    if late:
        detail = ", ".join(f"{n} (first window {e.first_seq} starts at {e.first_position.label()}"
                           + (f", committed {iso_seconds(e.first_position.commit_ts)}"
                               if e.first_position.commit_ts else "")
                           + ")" for n, e in late)
        raise ConfigError(
            f"pipeline {pipeline!r}: this backfill starts at {start.label()}, after the first window of the damaged "
            f"table(s) {detail}: the rebuilt table would still miss rows. Start the backfill earlier (--from)"
        )
