"""Which Delta tables a pipeline has landed windows into, so that a deleted or replaced table is noticed.

The merge job creates a Delta table on first sight. So when a table's lakehouse directory is deleted
(by hand, by a retention job gone wrong) the next window that touches it silently creates a new,
nearly empty table, and the ack check (txn version >= seq) passes: the fault suite saw 18 of 55 rows
vanish that way with every run reporting success. This registry closes that hole. It is one
ZooKeeper node per pipeline (`<pipeline>/lake`, written by `PipelineCoordinator.update_lake`), kept
as a plain value here, with the rules as pure functions:

- **Recording** (`after_ack`, at every ack, before the ack's multi-op): each table of the window is
  registered with its Delta table id (Delta's `metaData.id`, fixed when the table is created) and the
  first window that landed it. A *stream* window that landed in a table whose id changed marks the
  table damaged (it was deleted and re-created under the pipeline's feet: it now lacks every earlier
  window). A *backfill* window may change the id: a backfill is how a table is rebuilt.
- **Checking** (`problems`, before a new stream window is planned): every registered table must exist
  with its registered id and must not be damaged; otherwise the run stops with a `LakeError` that names
  the table and the repair (`cdc backfill <pipeline> --from <ts>`), and nothing is planned, so the
  repair can start at once.
- **Repair** (`check_backfill_start`, `after_ack`): a backfill covering a damaged table must start at or
  before the first window that landed it (else the rebuilt table would still miss rows); the damage is
  cleared when that backfill's last window is acked.

Known limit: a table is only noticed once it has been acked at least once with this registry in
place; pipelines started before it are registered from their next window on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cdc_core.errors import ConfigError
from cdc_core.positions import BinlogPosition
from cdc_core.window_plan import KIND_BACKFILL, KIND_SNAPSHOT, WindowPlan

LAKE_FORMAT = 1


@dataclass(frozen=True)
class LandedTable:
    """One table the pipeline has landed windows into."""

    schema: str
    table: str
    delta_id: str  # Delta metaData.id of the table the windows landed in
    first_seq: int  # the first window that landed in it
    first_position: BinlogPosition  # where that window started: a rebuilding backfill starts at or before it
    damaged_at: int | None = None  # window that found it deleted or re-created; None = healthy

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "table": self.table,
            "delta_id": self.delta_id,
            "first_seq": self.first_seq,
            "first_position": self.first_position.to_dict(),
            "damaged_at": self.damaged_at,
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


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def after_ack(
    registry: LakeRegistry,
    plan: WindowPlan,
    landed: dict[str, tuple[str, str, str | None]],
    *,
    completes_backfill: bool = False,
    backfill_tables: tuple[str, ...] = (),
) -> tuple[LakeRegistry, list[str]]:
    """The registry once `plan` is acked, given the window's tables as {name: (schema, table, Delta id now)};
    and the tables this window found re-created (a stream window landed in a table that is not the
    registered one)."""
    tables = dict(registry.tables)
    recreated: list[str] = []
    for name, (schema, table, now) in sorted(landed.items()):
        if now is None:
            continue  # the ack refuses a window whose tables do not hold it; nothing to record
        entry = tables.get(name)
        if entry is None:
            tables[name] = LandedTable(schema, table, now, plan.seq, plan.start)
        elif entry.delta_id != now:
            if plan.kind in (KIND_BACKFILL, KIND_SNAPSHOT):
                tables[name] = replace(entry, delta_id=now)  # being rebuilt (only a backfill clears damage)
            else:
                tables[name] = replace(entry, delta_id=now, damaged_at=entry.damaged_at or plan.seq)
                recreated.append(name)
    if completes_backfill:
        for name, entry in tables.items():
            if entry.damaged_at is not None and (not backfill_tables or name in backfill_tables):
                tables[name] = replace(entry, damaged_at=None)
    return LakeRegistry(tables), recreated


def problems(registry: LakeRegistry, delta_ids: dict[str, str | None], next_seq: int) -> dict[str, str]:
    """What is wrong with the registered tables given their Delta ids now: name -> reason. Tables found
    deleted or replaced are to be marked damaged (`mark_damaged`) so that only a backfill clears them."""
    out: dict[str, str] = {}
    for name, entry in sorted(registry.tables.items()):
        now = delta_ids.get(name)
        if entry.damaged_at is not None:
            out[name] = f"was found deleted or re-created at window {entry.damaged_at} and not rebuilt since"
        elif now is None:
            out[name] = (f"has no Delta table any more (it held windows {entry.first_seq}..{next_seq - 1}, "
                         f"Delta table id {entry.delta_id}): it was deleted")
        elif now != entry.delta_id:
            out[name] = (f"is a different Delta table (id {now}) from the one that holds windows "
                         f"{entry.first_seq}..{next_seq - 1} (id {entry.delta_id}): it was deleted and re-created")
    return out


def mark_damaged(registry: LakeRegistry, names: list[str], seq: int) -> LakeRegistry:
    tables = dict(registry.tables)
    for name in names:
        if name in tables and tables[name].damaged_at is None:
            tables[name] = replace(tables[name], damaged_at=seq)
    return LakeRegistry(tables)


def repair_hint(registry: LakeRegistry, pipeline: str, names: list[str]) -> str:
    """The backfill that rebuilds `names`: from before the first window that landed any of them."""
    entries = [registry.tables[n] for n in names if n in registry.tables]
    first = min((e.first_position for e in entries), default=None, key=lambda p: p.sort_key())
    when = _iso(first.commit_ts) if first is not None else None
    start = f"{when} or earlier" if when else "a time before this pipeline's first window"
    tables = " ".join(f"--table {n}" for n in sorted(names))
    return (f"rebuild with a backfill from before its first window ({first.label() if first else '?'}): "
            f"`cdc backfill {pipeline} --from <UTC time: {start}> {tables}` (or the backfill DAG); "
            "stream windows resume once that backfill has finished")


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
                           + (f", committed {_iso(e.first_position.commit_ts)}" if e.first_position.commit_ts else "")
                           + ")" for n, e in late)
        raise ConfigError(
            f"pipeline {pipeline!r}: this backfill starts at {start.label()}, after the first window of the damaged "
            f"table(s) {detail}: the rebuilt table would still miss rows. Start the backfill earlier (--from)"
        )
