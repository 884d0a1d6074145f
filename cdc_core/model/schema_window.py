"""A window's schema changes across its lake tables: which lake table each applies to, and where rows land.

Most changes act on the table they name. Three kinds involve two tables, and are resolved here, in binlog order,
before anything is applied (docs/schema-changes.md):

- **RENAME TABLE a TO b** (both captured): the lake table `b` takes `a`'s rows and schema record (`moved_in`),
  then `a` is emptied like a dropped table (`moved_out`). `a`'s rows staged before the rename land in the lake
  table that ends up holding them (`b`, or wherever later renames take it); a table created as `a` afterwards
  starts clean. A rename to a name the pipeline does not capture is a drop; a rename from one it does not capture
  makes a table appear whose rows were never seen (`appeared`: re-read from the source).
- **Online schema changes** (gh-ost, pt-online-schema-change): the tool's ghost table never lands. Its DDL is
  recorded with the real table (`ghost`: kept in the lake table's record across windows, since a migration may
  take days), and applied to it at the swap (`RENAME TABLE t TO _t_del, _t_gho TO t`: `swap`). Its trash
  tables (`_t_del`, `_t_old`, gh-ost's `_t_ghc`) are ignored.
- **DROP DATABASE** is expanded by the merge into a drop of each of its lake tables.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cdc_core.model.schema_changes import (
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DROP_DATABASE,
    DROP_TABLE,
    RENAME_TABLE,
    SchemaChange,
)
from cdc_core.model.schema_evolution import (
    S_COPY,
    LakeColumn,
    OpPlan,
    PlanContext,
    SchemaState,
    Structure,
    marked,
    plan_one,
    with_reread,
)
from cdc_core.model.schema_policy import OSC_GHOST, OSC_TRASH, SchemaPolicy

ROLE_OWN = "own"  # the change acts on this lake table
ROLE_MOVED_IN = "moved_in"  # the table takes another lake table's rows and record (a rename's target)
ROLE_MOVED_OUT = "moved_out"  # the table's object was renamed away: emptied like a drop
ROLE_APPEARED = "appeared"  # renamed in from a table the pipeline never captured: its rows must be re-read
ROLE_GHOST = "ghost"  # a change of this table's online schema-change ghost: recorded, not applied
ROLE_SWAP = "swap"  # the ghost becomes this table: its recorded changes apply now

Table = tuple[str, str]
# Steps of resolved changes are spaced this far apart, so a swap's recorded changes fit between two of them.
SWAP_ROOM = 1000


@dataclass(frozen=True)
class LakeChange:
    lake: Table  # the lake table (as its source table's schema and name) the change applies to
    change: SchemaChange  # `step` renumbered so that (version, step) orders every lake table's changes
    role: str = ROLE_OWN
    source: Table | None = None  # moved_in: the lake table whose rows and record it takes
    ghost: str = ""  # ghost / swap: the ghost table's name


@dataclass(frozen=True)
class Placement:
    """Where a staged table's rows with version in [since, until) land."""

    lake: Table
    since: int | None = None
    until: int | None = None
    # The table the rows were written to was dropped later in the window (DROP TABLE, CREATE under its name, a
    # rename out of capture): its lake table is cleared or replaced (DROP TABLE a, RENAME TABLE b TO a), so the
    # rows land nowhere in the state (its history and change log still take them: LakeTarget.output_members).
    gone: bool = False


@dataclass(frozen=True)
class WindowChanges:
    changes: tuple[LakeChange, ...] = ()  # in binlog order, across lake tables
    placements: dict[Table, tuple[Placement, ...]] = field(default_factory=dict)

    def for_lake(self, lake: Table) -> tuple[LakeChange, ...]:
        return tuple(c for c in self.changes if c.lake == lake)

    @property
    def lake_tables(self) -> set[Table]:
        return {c.lake for c in self.changes}


def resolve(  # noqa: PLR0912 (one branch per kind of change and role)
    changes: Sequence[SchemaChange],
    staged: Iterable[Table],
    policy: SchemaPolicy,
    schema_tables: Mapping[str, Sequence[Table]] | None = None,
) -> WindowChanges:
    """Resolve the window's changes (in binlog order) onto lake tables. `staged`: the window's captured tables
    (the manifest's, DDL-only ones included); `schema_tables`: the lake tables of a dropped database."""
    captured = set(staged)
    ordered = sorted(changes, key=lambda c: (c.version, c.ordinal, c.step))
    out: list[LakeChange] = []
    segments = _Segments()

    def osc(name: Table) -> tuple[str, Table] | None:
        role = policy.osc_role(name[1])
        if role is None:
            return None
        real = (name[0], role[1])
        return (role[0], real) if real in captured else None

    step = 0
    last_version = None
    for c in ordered:
        if c.version != last_version:
            step, last_version = 0, c.version

        def emit(lake: Table, role: str = ROLE_OWN, src: SchemaChange = c, source: Table | None = None,
                 ghost: str = "") -> None:
            nonlocal step
            out.append(LakeChange(lake, replace(src, step=step * SWAP_ROOM), role, source, ghost))
            step += 1

        if c.kind == DROP_DATABASE:
            for lake in (schema_tables or {}).get(c.schema, ()):
                emit(lake, src=replace(c, kind=DROP_TABLE, schema=lake[0], table=lake[1]))
                segments.end(lake, c.version)
            continue
        me: Table = (c.schema, c.table)
        mine = osc(me)
        if c.kind == RENAME_TABLE:
            to: Table = (c.to_schema or c.schema, c.to_table or "")
            theirs = osc(to)
            if mine is not None and mine[0] == OSC_GHOST and to == mine[1]:
                emit(to, ROLE_SWAP, ghost=c.table)  # the ghost becomes the real table
            elif mine is not None or (theirs is not None and theirs[0] == OSC_TRASH and theirs[1] == me):
                pass  # the real table goes to trash (its lake table stays: the ghost swaps in), or a tool's own
            elif me in captured and to in captured:
                emit(to, ROLE_MOVED_IN, source=me)
                emit(me, ROLE_MOVED_OUT)
                segments.move(me, to, c.version)
            elif me in captured:
                emit(me, ROLE_MOVED_OUT)
                segments.end(me, c.version)
            elif to in captured:
                emit(to, ROLE_APPEARED)
                segments.end(to, c.version)
            continue
        if mine is not None:
            if mine[0] == OSC_GHOST:
                emit(mine[1], ROLE_GHOST, ghost=c.table)
            continue  # a trash table's DDL (gh-ost drops it after the swap)
        if me in captured:
            emit(me)
            if c.kind in (CREATE_TABLE, CREATE_TABLE_LIKE, DROP_TABLE):
                segments.end(me, c.version)  # what follows under this name is another table
    return WindowChanges(tuple(out), segments.placements(captured))


class _Segments:
    """Which table (object) each name held over the window's versions, following renames: rows written under a
    name while it held an object land in the lake table named after where that object ends the window."""

    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.held: dict[Table, tuple[int, int | None]] = {}  # name -> (object, since)
        self.closed: list[tuple[Table, int, int | None, int]] = []  # (name, object, since, until)
        self.moved = False

    def _holding(self, name: Table) -> tuple[int, int | None]:
        if name not in self.held:
            self.held[name] = (next(self.ids), None)
        return self.held[name]

    def end(self, name: Table, version: int) -> None:
        obj, since = self._holding(name)
        self.closed.append((name, obj, since, version))
        self.held[name] = (next(self.ids), version)  # a table that may be created under it later

    def move(self, name: Table, to: Table, version: int) -> None:
        obj, since = self._holding(name)
        self.closed.append((name, obj, since, version))
        self._holding(to)
        self.end(to, version)
        self.held[to] = (obj, version)
        self.held[name] = (next(self.ids), version)
        self.moved = True

    def placements(self, captured: set[Table]) -> dict[Table, tuple[Placement, ...]]:
        if not self.moved:
            return {}
        final = {obj: name for name, (obj, _) in self.held.items()}
        out: dict[Table, list[Placement]] = {}
        spans = [*self.closed, *((n, o, s, None) for n, (o, s) in self.held.items())]
        for name, obj, since, until in spans:
            if name in captured and (since is None or until is None or since < until):
                out.setdefault(name, []).append(Placement(final.get(obj, name), since, until, obj not in final))
        return {k: tuple(sorted(v, key=lambda p: -1 if p.since is None else p.since)) for k, v in out.items()}


# ------------------------------------------------------------------------------------------- planning

MovedFrom = Callable[[Table], "tuple[Sequence[LakeColumn], SchemaState] | None"]
CreatedColumns = Callable[[SchemaChange], "Sequence[LakeColumn] | None"]


def plan_change(  # noqa: PLR0911, PLR0912 (one branch per role)
    ctx: PlanContext,
    columns: Sequence[LakeColumn],
    state: SchemaState,
    lc: LakeChange,
    moved_from: MovedFrom,
    *,
    created_columns: CreatedColumns = lambda _c: None,
) -> tuple[list[OpPlan], list[LakeColumn], list[tuple[SchemaChange, str]]]:
    """The lake steps of one resolved change on its lake table (columns and record as they are now):
    (op plans in order, the columns after them, changes whose rows must be re-read). `moved_from(table)`: a
    lake table's columns and record, for a rename's target (None: the lake never had that table).
    `created_columns(change)`: the columns of a table created LIKE another or AS SELECT (None: unknown)."""
    cols = list(columns)

    def _one(ctx: PlanContext, cols: list[LakeColumn], state: SchemaState, change: SchemaChange) -> _Planned:
        return _plan(ctx, cols, state, change, created_columns)

    c = lc.change
    if state.applied(c):
        return [], cols, []
    if lc.role == ROLE_OWN:
        return _one(ctx, cols, state, c)
    if lc.role == ROLE_MOVED_OUT:
        return _one(ctx, cols, state, replace(c, kind=DROP_TABLE, schema=lc.lake[0], table=lc.lake[1]))
    if lc.role == ROLE_APPEARED:
        created, cols, _ = _one(ctx, cols, state, replace(c, kind=CREATE_TABLE, schema=lc.lake[0], table=lc.lake[1],
                                                          as_select=True, columns=()))
        created = [with_reread(op, c) for op in created]
        return created, cols, [(c, f"{c.describe()}: the table comes from one the pipeline does not capture")]
    if lc.role == ROLE_MOVED_IN:
        assert lc.source is not None
        found = moved_from(lc.source)
        if found is None:  # the lake never held the source: the target starts empty
            return _one(ctx, cols, state, replace(c, kind=CREATE_TABLE, schema=lc.lake[0], table=lc.lake[1],
                                                  as_select=True, columns=()))
        src_cols, src_state = found
        structure = Structure(S_COPY, columns=tuple((x.name, x.delta_type) for x in src_cols), source=lc.source)
        new_state = replace(src_state, version=c.version, step=c.step, dropped=0, pending=state.pending)
        return [OpPlan(c, structure, (), new_state)], list(src_cols), []
    if lc.role == ROLE_GHOST:
        changes = state.pending_of(lc.ghost)
        if c.kind in (CREATE_TABLE, CREATE_TABLE_LIKE):
            recorded: tuple[SchemaChange, ...] | None = ()
        elif c.kind == DROP_TABLE:
            recorded = None  # the migration was abandoned
        else:
            recorded = (*changes, c)
        new_state = replace(marked(state, c), pending=state.with_pending(lc.ghost, recorded))
        return [OpPlan(c, None, (), new_state, note=f"recorded for the swap of {lc.ghost!r}")], cols, []
    assert lc.role == ROLE_SWAP, lc.role
    ops: list[OpPlan] = []
    rereads: list[tuple[SchemaChange, str]] = []
    current = state
    for i, recorded_change in enumerate(state.pending_of(lc.ghost)):
        # The ghost's change applies to the real table now, at the swap's position.
        at = replace(recorded_change, schema=lc.lake[0], table=lc.lake[1], version=c.version, step=c.step + i,
                     commit_ts=c.commit_ts)
        if at.kind in (CREATE_TABLE, CREATE_TABLE_LIKE, DROP_TABLE, RENAME_TABLE):
            continue
        more, cols, why = _one(ctx, cols, current, at)
        ops += more
        rereads += why
        if more:
            current = more[-1].state
    done = replace(marked(current, replace(c, step=c.step + max(0, len(state.pending_of(lc.ghost)) - 1))),
                   pending=current.with_pending(lc.ghost, None))
    ops.append(OpPlan(c, None, (), done, note=f"the swap of {lc.ghost!r}"))
    return ops, cols, rereads


_Planned = tuple[list[OpPlan], list[LakeColumn], list[tuple[SchemaChange, str]]]


def _plan(
    ctx: PlanContext, cols: list[LakeColumn], state: SchemaState, change: SchemaChange,
    created_columns: CreatedColumns,
) -> _Planned:
    op, cols, why = plan_one(ctx, cols, state, change, created_columns)
    if op is not None and why is not None:
        op = with_reread(op, change)
    return ([op] if op is not None else []), cols, ([(change, why)] if why is not None else [])
