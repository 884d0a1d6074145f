"""What a window's schema changes do to one lake table: the plan every writer carries out (docs/schema-changes.md).

A DDL statement changes a source table without row events: TRUNCATE empties it, `ADD COLUMN ... DEFAULT 7`
fills every existing row, a rename keeps the values under a new name. This module turns the typed changes
(`cdc_core.model.schema_changes`) of one lake table, in binlog order, into:

- **Lake steps** per change (`OpPlan`): a structure step (add columns; rewrite the table to rename, drop or
  retype columns; reset a re-created table), a data step on the rows older than the change (delete or
  tombstone them for a truncate, fill a default), then a mark (table properties: the last change applied,
  the history below, the floor). A change is applied once: skipped when the table's recorded schema version
  is at or past it; after a crash between its commits, its structure step is recognised as done by the
  table's columns (`structure_done`), and its data step is idempotent (it touches rows older than the change,
  to the value the change gives them).
- **The history** (`ColumnOp`s, kept in the table's properties): every column change applied, so a change
  older than some of them (later in the same window, or replayed by a backfill) is translated forward before
  it is merged: renamed, dropped, cast, filled (`translate_columns`). `floor`: changes older than the last
  truncate (or re-creation) are dead and never merged.

Then the window's MERGE lands the translated changes with the usual clauses (`cdc_core.model.merge_semantics`)
as the window's one txn commit. `follow` (the default) makes the lake follow the source; `lenient` never drops
or renames in the lake (a rename adds the new column with the values, a drop leaves the column, NULL from then
on); `refuse` stops the window at any change (decided when staging, before anything is merged).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_core.model.ddl.conversions import ValueCheck, value_check
from cdc_core.model.errors import SchemaConflict
from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CONVERT_CHARSET,
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DROP_COLUMN,
    DROP_DEFAULT,
    DROP_PARTITION,
    DROP_TABLE,
    EXCHANGE_PARTITION,
    MODIFY_COLUMN,
    PRIMARY_KEY,
    RENAME_COLUMN,
    REPLACE_ROWS,
    SET_DEFAULT,
    TRUNCATE_PARTITION,
    TRUNCATE_TABLE,
    SchemaChange,
)
from cdc_core.model.schema_policy import MODE_FOLLOW, MODE_LENIENT
from cdc_core.model.schema_values import (
    Literal,
    Reread,
    default_value,
    delta_type_of,
    exact_cast,
    normalise_delta_type,
)

# Table properties, one set per idempotent-write identity (app id): a routed lake table may hold the rows
# of several sources, each with its own binlog and its own DDL.
_PROP = "cdc.schema."


def prop_version(app_id: str) -> str:
    return f"{_PROP}{app_id}.version"


def prop_history(app_id: str) -> str:
    return f"{_PROP}{app_id}.history"


def prop_floor(app_id: str) -> str:
    return f"{_PROP}{app_id}.floor"


def prop_dropped(app_id: str) -> str:
    return f"{_PROP}{app_id}.dropped"


def prop_pending(app_id: str) -> str:
    return f"{_PROP}{app_id}.pending"


def prop_reread(app_id: str) -> str:
    return f"{_PROP}{app_id}.reread"


# History op kinds. H_COPY: a lenient rename keeps the old column and copies its values into the new one.
H_ADD, H_DROP, H_RENAME, H_CAST, H_COPY = "add", "drop", "rename", "cast", "copy"

# Kinds whose rows the lake cannot compute from the statement: the table must be re-read from the source.
REREAD_KINDS = frozenset({TRUNCATE_PARTITION, DROP_PARTITION, EXCHANGE_PARTITION, REPLACE_ROWS, CONVERT_CHARSET})
# Of those, the ones that delete rows at the source: lake rows the re-read does not find again go.
SWEEP_KINDS = frozenset({TRUNCATE_PARTITION, DROP_PARTITION, EXCHANGE_PARTITION, REPLACE_ROWS})
# Kinds with no effect on the lake's rows or columns (future inserts only, or keys the MERGE takes per window).
NO_LAKE_EFFECT = frozenset({SET_DEFAULT, DROP_DEFAULT, PRIMARY_KEY})


# ---------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class ColumnOp:
    """One applied change to a lake table's columns, as the history keeps it (in the table's properties)."""

    version: int
    kind: str  # H_ADD, H_DROP, H_RENAME, H_CAST
    column: str
    new_name: str = ""  # H_RENAME
    delta_type: str = ""  # H_ADD, H_CAST
    fill: Literal | None = None  # H_ADD: the value older rows take (None: NULL)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"v": self.version, "k": self.kind, "c": self.column}
        if self.new_name:
            d["n"] = self.new_name
        if self.delta_type:
            d["t"] = self.delta_type
        if self.fill is not None and self.fill.value is not None:
            d["f"] = self.fill.to_json()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ColumnOp:
        t = str(d.get("t", ""))
        return cls(
            int(d["v"]), str(d["k"]), str(d["c"]), str(d.get("n", "")), t,
            Literal.from_json(d["f"], t) if "f" in d else None,
        )


def history_to_json(history: Sequence[ColumnOp]) -> str:
    return json.dumps([op.to_dict() for op in history], separators=(",", ":"), sort_keys=True)


def history_from_json(text: str | None) -> tuple[ColumnOp, ...]:
    if not text:
        return ()
    return tuple(ColumnOp.from_dict(d) for d in json.loads(text))


Pending = tuple[tuple[str, tuple[SchemaChange, ...]], ...]  # ghost table name -> its changes so far


@dataclass(frozen=True)
class SchemaState:
    """What a lake table records about the schema changes applied to it (for one app id)."""

    version: int = 0  # the last change applied (its change version); 0: none
    step: int = 0  # and its step within the statement (one statement may change several things)
    history: tuple[ColumnOp, ...] = ()
    floor: int = 0  # changes older than this never apply (a truncate or re-creation since)
    dropped: int = 0  # the source table was dropped at this version (0: it was not, or was re-created since)
    # Online schema changes in progress: a ghost table's name -> its changes so far (applied at the swap).
    pending: Pending = ()
    # The last change whose rows must be re-read from the source (0: none), and whether rows the re-read does
    # not find again must go (the ack asks for the re-read: cdc_core.model.snapshot_state.TableRequest).
    reread: int = 0
    sweep: bool = False

    def pending_of(self, ghost: str) -> tuple[SchemaChange, ...]:
        return next((c for g, c in self.pending if g == ghost), ())

    def with_pending(self, ghost: str, changes: tuple[SchemaChange, ...] | None) -> Pending:
        rest = tuple((g, c) for g, c in self.pending if g != ghost)
        return rest if changes is None else (*rest, (ghost, changes))

    @classmethod
    def from_properties(cls, props: dict[str, str], app_id: str) -> SchemaState:
        def num(key: str) -> int:
            try:
                return int(props.get(key) or 0)
            except ValueError:
                return 0

        version, _, step = (props.get(prop_version(app_id)) or "0").partition(":")
        try:
            applied = (int(version), int(step or 0))
        except ValueError:
            applied = (0, 0)
        pending_text = props.get(prop_pending(app_id))
        pending = tuple(
            (str(g), tuple(SchemaChange.from_dict(c) for c in cs))
            for g, cs in (json.loads(pending_text) if pending_text else [])
        )
        reread, _, sweep = (props.get(prop_reread(app_id)) or "0").partition(":")
        return cls(
            applied[0], applied[1], history_from_json(props.get(prop_history(app_id))),
            num(prop_floor(app_id)), num(prop_dropped(app_id)), pending,
            int(reread) if reread.isdigit() else 0, sweep == "sweep",
        )

    def applied(self, change: SchemaChange) -> bool:
        """Whether the change is at or before the last one applied (a replay, or a backfill's older window)."""
        return (change.version, change.step) <= (self.version, self.step)

    def properties(self, app_id: str) -> dict[str, str]:
        return {
            prop_version(app_id): f"{self.version}:{self.step}",
            prop_history(app_id): history_to_json(self.history),
            prop_floor(app_id): str(self.floor),
            prop_dropped(app_id): str(self.dropped),
            prop_reread(app_id): f"{self.reread}:sweep" if self.sweep else str(self.reread),
            prop_pending(app_id): json.dumps(
                [[g, [c.to_dict() for c in cs]] for g, cs in self.pending], separators=(",", ":"), sort_keys=True
            ),
        }


# ------------------------------------------------------------------------------------------- steps

S_ADD_COLUMNS = "add_columns"  # columns: (name, delta type) added as NULL (metadata only)
S_REWRITE = "rewrite"  # renames / drops / casts: the table rewritten with its new columns
S_RESET = "reset"  # a re-created table: its columns become `columns` (lake metadata columns kept)
S_COPY = "copy"  # a renamed table's target: its rows become `source`'s (another lake table's), columns too

D_DELETE = "delete"  # rows older than the change are deleted (hard mode)
D_TOMBSTONE = "tombstone"  # rows older than the change become tombstones (soft mode)
D_FILL = "fill"  # rows older than the change take `fill` in `column`
D_COPY = "copy"  # rows older than the change take `source_column`'s value in `column` (lenient rename)


@dataclass(frozen=True)
class Structure:
    kind: str
    columns: tuple[tuple[str, str], ...] = ()  # S_ADD_COLUMNS: added; S_RESET: the table's source columns
    renames: tuple[tuple[str, str], ...] = ()  # S_REWRITE: applied first
    drops: tuple[str, ...] = ()  # S_REWRITE: then these go
    casts: tuple[tuple[str, str], ...] = ()  # S_REWRITE: (column after renames, new delta type)
    adds: tuple[tuple[str, str], ...] = ()  # S_REWRITE: then these come (NULL), e.g. a dropped name retyped
    source: tuple[str, str] | None = None  # S_COPY: the lake table (source schema, table) copied


@dataclass(frozen=True)
class RowStep:
    """A change to rows older than the schema change (`_cdc_version` < version), within `lineage` (column,
    value) when the lake table holds several sources' rows."""

    kind: str
    version: int
    column: str = ""
    fill: Literal | None = None
    source_column: str = ""
    commit_ts: float = 0.0  # D_TOMBSTONE: when the rows were deleted at the source


@dataclass(frozen=True)
class OpPlan:
    """The lake side of one schema change: its steps in order, then the mark (`state` after it)."""

    change: SchemaChange
    structure: Structure | None
    rows: tuple[RowStep, ...]
    state: SchemaState  # the table's record once the change is applied
    note: str = ""  # what the lake does differently from the source (lenient), logged

    @property
    def version(self) -> int:
        return self.change.version


@dataclass(frozen=True)
class LakeColumn:
    name: str
    delta_type: str  # Spark SQL DDL, e.g. "INT", "DECIMAL(10,2)"


def _find(columns: Sequence[LakeColumn], name: str) -> LakeColumn | None:
    low = name.lower()
    return next((c for c in columns if c.name.lower() == low), None)


def structure_done(structure: Structure, columns: Sequence[LakeColumn]) -> bool:  # noqa: PLR0911
    """Whether the lake table's source columns (not the product's own) already show `structure` applied (a crash
    after its commit, before the mark)."""
    if structure.kind == S_ADD_COLUMNS:
        return all(_find(columns, n) is not None for n, _ in structure.columns)
    if structure.kind == S_REWRITE:
        for old, new in structure.renames:
            if _find(columns, old) is not None and old.lower() != new.lower():
                return False
            if _find(columns, new) is None:
                return False
        added = {n.lower() for n, _ in structure.adds}
        if any(_find(columns, d) is not None for d in structure.drops if d.lower() not in added):
            return False
        for name, typ in (*structure.casts, *structure.adds):
            c = _find(columns, name)
            if c is None or normalise_delta_type(c.delta_type) != normalise_delta_type(typ):
                return False
        return True
    if structure.kind == S_COPY:
        return False  # only the mark tells (the copy is repeated after a crash before it: same rows)
    if structure.kind == S_RESET:
        want = {n.lower(): normalise_delta_type(t) for n, t in structure.columns}
        have = {c.name.lower(): normalise_delta_type(c.delta_type) for c in columns}
        return have == want  # every column: a column the old table had and the new one has not must go
    raise ValueError(structure.kind)


# ---------------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlanContext:
    table: str  # the lake table's name (messages)
    app_id: str
    delete_mode: str
    mode: str = MODE_FOLLOW
    zero_dates: str = "refuse"
    lineage: tuple[tuple[str, str], ...] = ()  # the rows a change applies to in a routed table
    routed: bool = False  # the lake table holds several source tables' rows
    # Whether the lake table holds a value of a column that a conversion changes (cdc_core.model.ddl.conversions);
    # None: the plan cannot look, and a redefinition that may have converted values re-reads the table.
    lake_holds: Callable[[LakeColumn, ValueCheck], bool] | None = None


@dataclass(frozen=True)
class TablePlan:
    ops: tuple[OpPlan, ...]  # the changes still to apply, in order
    state: SchemaState  # the record once every change is applied
    reread: tuple[tuple[SchemaChange, str], ...] = ()  # changes whose rows must be re-read from the source

    @property
    def translation(self) -> tuple[ColumnOp, ...]:
        return self.state.history


def plan_table(
    ctx: PlanContext,
    columns: Sequence[LakeColumn],
    state: SchemaState,
    changes: Sequence[SchemaChange],
    like_columns: Callable[[SchemaChange], Sequence[LakeColumn] | None] = lambda _c: None,
) -> TablePlan:
    """The lake steps of `changes` (one lake table's, in binlog order) on a table with `columns` (its source
    columns, without the lake's metadata columns; empty when it does not exist yet) and record `state`.
    Changes at or before `state.version` were applied before (a replay, a backfill): skipped."""
    ops: list[OpPlan] = []
    reread: list[tuple[SchemaChange, str]] = []
    cols = list(columns)
    for change in sorted(changes, key=lambda c: (c.version, c.ordinal, c.step)):
        if state.applied(change):
            continue
        op, cols, why = plan_one(ctx, cols, state, change, like_columns)
        if why is not None:
            reread.append((change, why))
            op = with_reread(op, change) if op is not None else None
        if op is not None:
            ops.append(op)
            state = op.state
    return TablePlan(tuple(ops), state, tuple(reread))


def with_reread(op: OpPlan, change: SchemaChange) -> OpPlan:
    """The op whose mark also records that the table must be re-read (and swept) from the source."""
    from dataclasses import replace as _replace

    sweep = change.kind in SWEEP_KINDS or op.state.sweep
    return _replace(op, state=_replace(op.state, reread=change.version, sweep=sweep))


def marked(state: SchemaState, change: SchemaChange, *ops: ColumnOp, floor: int | None = None,
            dropped: int | None = None, reset: bool = False) -> SchemaState:
    history = () if reset else state.history
    return SchemaState(
        version=change.version,
        step=change.step,
        history=(*history, *ops),
        floor=state.floor if floor is None else max(state.floor, floor),
        dropped=state.dropped if dropped is None else dropped,
        pending=state.pending,
        reread=state.reread,
        sweep=state.sweep,
    )


def _conflict(ctx: PlanContext, change: SchemaChange, what: str) -> SchemaConflict:
    return SchemaConflict(
        f"lake table {ctx.table}: {what} (statement: {change.query or change.describe()!r}). Set schema_changes to "
        "lenient for this table to keep the lake's column, or rebuild the table (drop it, then re-snapshot: "
        f"cdc snapshot <pipeline> --table {change.table_name})"
    )


def plan_one(  # noqa: PLR0911, PLR0912, PLR0915 (one branch per kind of change)
    ctx: PlanContext,
    cols: list[LakeColumn],
    state: SchemaState,
    change: SchemaChange,
    like_columns: Callable[[SchemaChange], Sequence[LakeColumn] | None],
) -> tuple[OpPlan | None, list[LakeColumn], str | None]:
    kind = change.kind
    v = change.version
    why: str | None
    lenient = ctx.mode == MODE_LENIENT or ctx.routed
    if kind in NO_LAKE_EFFECT:
        return OpPlan(change, None, (), marked(state, change)), cols, None
    if kind in REREAD_KINDS:
        return (OpPlan(change, None, (), marked(state, change)), cols,
                f"{change.describe()}: {change.reason or 'its rows changed without row events'}")
    # The floor is the state's, and a routed lake table keeps one state per source table (its app id names the
    # source table): it drops that table's older changes only, among them the window's own before the statement.
    if kind == TRUNCATE_TABLE:
        rows = empty_rows(ctx, change)
        return OpPlan(change, None, rows, marked(state, change, floor=v)), cols, None
    if kind == DROP_TABLE:
        if ctx.routed:  # one source table of a routed lake table: its rows go, the table stays
            return OpPlan(change, None, empty_rows(ctx, change), marked(state, change, floor=v)), cols, None
        if ctx.mode == MODE_LENIENT:
            return (OpPlan(change, None, (), marked(state, change, dropped=v),
                           note="the lake keeps the dropped table's rows (lenient)"), cols, None)
        rows = empty_rows(ctx, change)
        return OpPlan(change, None, rows, marked(state, change, floor=v, dropped=v)), cols, None
    if kind in (CREATE_TABLE, CREATE_TABLE_LIKE):
        specs: Sequence[LakeColumn] | None
        if kind == CREATE_TABLE and not change.as_select:
            specs = [LakeColumn(c.name, delta_type_of(c, ctx.table)) for c in change.columns]
        else:  # LIKE another table, AS SELECT: the caller knows (that table's lake columns, the first rows')
            specs = like_columns(change)
        if change.if_not_exists and cols and not state.dropped:
            return OpPlan(change, None, (), marked(state, change)), cols, None  # a no-op at the source too
        fresh = not cols
        new_cols = list(specs) if specs is not None else cols
        structure = None
        if specs is not None and (fresh or not _same_columns(cols, specs)):
            structure = Structure(S_RESET, columns=tuple((c.name, c.delta_type) for c in specs))
        rows = () if fresh else empty_rows(ctx, change)
        new_state = marked(state, change, floor=v, dropped=0, reset=True)
        return OpPlan(change, structure, rows, new_state), new_cols, None
    if kind == ADD_COLUMN:
        assert change.column is not None
        spec = change.column
        existing = _find(cols, spec.name)
        delta = delta_type_of(spec, ctx.table)
        value = default_value(spec, ctx.table, ctx.zero_dates)
        why = None
        if isinstance(value, Reread):
            why, value = value.reason, Literal(None, delta)
        if existing is not None and change.if_not_exists and not lenient:
            # The lake's columns are the source's (no column kept past its drop): the column is there, and
            # the statement was a no-op at the source too (whatever type it names).
            return OpPlan(change, None, (), marked(state, change)), cols, None
        if existing is not None:
            # A column the lake kept (lenient drop, or a routed table's other source): retype if needed.
            if normalise_delta_type(existing.delta_type) != normalise_delta_type(delta):
                if not exact_cast(existing.delta_type, delta):
                    raise _conflict(ctx, change, f"column {spec.name!r} is {existing.delta_type} in the lake and comes "
                                                 f"back as {delta}")
                structure = Structure(S_REWRITE, casts=((existing.name, delta),))
                cols = [LakeColumn(c.name, delta) if c is existing else c for c in cols]
            else:
                structure = None
        else:
            structure = Structure(S_ADD_COLUMNS, columns=((spec.name, delta),))
            cols = [*cols, LakeColumn(spec.name, delta)]
        rows = (RowStep(D_FILL, v, spec.name, fill=value),) if value.value is not None else ()
        op = ColumnOp(v, H_ADD, spec.name, delta_type=delta, fill=value)
        return OpPlan(change, structure, rows, marked(state, change, op)), cols, why
    if kind == DROP_COLUMN:
        assert change.name is not None
        existing = _find(cols, change.name)
        if existing is None:
            # Already gone: an earlier attempt at this window dropped it and was killed or fenced before the mark
            # (or the lake never had it). The drop is recorded all the same: the window's images from before it
            # still carry the column, and untranslated they would bring it back (the MERGE adds new columns).
            gone = () if lenient else (ColumnOp(v, H_DROP, change.name),)
            return OpPlan(change, None, (), marked(state, change, *gone)), cols, None
        op = ColumnOp(v, H_DROP, existing.name)
        if lenient:  # older images keep their value too: no history op
            note = f"the lake keeps column {existing.name!r} (NULL in rows written from now on)"
            return OpPlan(change, None, (), marked(state, change), note=note), cols, None
        cols = [c for c in cols if c is not existing]
        return OpPlan(change, Structure(S_REWRITE, drops=(existing.name,)), (), marked(state, change, op)), cols, None
    if kind == RENAME_COLUMN or (kind == MODIFY_COLUMN and change.column is not None
                                 and change.name is not None and change.column.name.lower() != change.name.lower()):
        old, new = change.name, change.new_name if kind == RENAME_COLUMN else change.column.name  # type: ignore[union-attr]
        assert old is not None and new is not None
        existing = _find(cols, old)
        if existing is None and change.if_exists and cols and _find(cols, new) is None:
            return OpPlan(change, None, (), marked(state, change)), cols, None  # IF EXISTS: a no-op at the source
        if existing is None:
            if _find(cols, new) is not None:
                # The lake table already has the new name: it was created after the rename (from later rows).
                new_type = delta_type_of(change.column, ctx.table) if kind == MODIFY_COLUMN else ""  # type: ignore[arg-type]
                ops = [ColumnOp(v, H_RENAME, old, new_name=new)]
                if new_type:
                    ops.append(ColumnOp(v, H_CAST, new, delta_type=new_type))
                return OpPlan(change, None, (), marked(state, change, *ops)), cols, None
            raise _conflict(ctx, change, f"column {old!r} is not in the lake table, so it cannot be renamed to {new!r}")
        new_type = delta_type_of(change.column, ctx.table) if kind == MODIFY_COLUMN else existing.delta_type  # type: ignore[arg-type]
        if not exact_cast(existing.delta_type, new_type):
            return _incompatible(ctx, cols, state, change, existing, new_type, rename_to=new)
        why = _converted(ctx, existing, change) if kind == MODIFY_COLUMN else None
        ops = [ColumnOp(v, H_RENAME, existing.name, new_name=new)]
        if normalise_delta_type(new_type) != normalise_delta_type(existing.delta_type):
            ops.append(ColumnOp(v, H_CAST, new, delta_type=new_type))
        if lenient:
            taken = _find(cols, new)
            structure = None if taken is not None else Structure(S_ADD_COLUMNS, columns=((new, new_type),))
            rows = (RowStep(D_COPY, v, new, source_column=existing.name),)
            cols = cols if taken is not None else [*cols, LakeColumn(new, new_type)]
            note = f"the lake keeps column {existing.name!r} and copies its values into {new!r}"
            # Older images keep `old` too (lenient), and take its value in the new column.
            lenient_ops = (ColumnOp(v, H_COPY, existing.name, new_name=new, delta_type=new_type),)
            return (OpPlan(change, structure, rows, marked(state, change, *lenient_ops), note=note),
                    cols, why)
        retyped = normalise_delta_type(new_type) != normalise_delta_type(existing.delta_type)
        casts = ((new, new_type),) if retyped else ()
        structure = Structure(S_REWRITE, renames=((existing.name, new),), casts=casts)
        cols = [LakeColumn(new, new_type) if c is existing else c for c in cols]
        return OpPlan(change, structure, (), marked(state, change, *ops)), cols, why
    if kind == MODIFY_COLUMN:
        assert change.column is not None and change.name is not None
        existing = _find(cols, change.name)
        new_type = delta_type_of(change.column, ctx.table)
        if existing is None and change.if_exists and cols:
            return OpPlan(change, None, (), marked(state, change)), cols, None  # IF EXISTS: a no-op at the source
        if existing is None:  # the lake table does not have it (yet): older images are cast when they land
            op = ColumnOp(v, H_CAST, change.name, delta_type=new_type)
            return OpPlan(change, None, (), marked(state, change, op)), cols, None
        if normalise_delta_type(existing.delta_type) == normalise_delta_type(new_type):
            # The same lake type (varchar(10) -> (20), datetime(6) -> datetime): values may still have changed.
            return OpPlan(change, None, (), marked(state, change)), cols, _converted(ctx, existing, change)
        if exact_cast(existing.delta_type, new_type):
            why = _converted(ctx, existing, change)
            op = ColumnOp(v, H_CAST, existing.name, delta_type=new_type)
            cols = [LakeColumn(existing.name, new_type) if c is existing else c for c in cols]
            return (OpPlan(change, Structure(S_REWRITE, casts=((existing.name, new_type),)), (),
                           marked(state, change, op)), cols, why)
        return _incompatible(ctx, cols, state, change, existing, new_type)
    raise ValueError(f"no lake plan for {kind}")


def _converted(ctx: PlanContext, existing: LakeColumn, change: SchemaChange) -> str | None:
    """Why the table must be re-read after a redefinition of `existing` whose lake type stays or widens: the server
    converted stored values the lake holds (cdc_core.model.ddl.conversions.value_check), or None."""
    check = value_check(change.column) if change.column is not None else None
    if check is None or (ctx.lake_holds is not None and not ctx.lake_holds(existing, check)):
        return None
    return f"column {existing.name!r} was redefined as {change.column.mysql_type}: {check.reason}"  # type: ignore[union-attr]


def _incompatible(  # noqa: PLR0917
    ctx: PlanContext, cols: list[LakeColumn], state: SchemaState, change: SchemaChange, existing: LakeColumn,
    new_type: str, rename_to: str | None = None,
) -> tuple[OpPlan | None, list[LakeColumn], str | None]:
    """A type change the lake cannot compute from the values it holds (VARCHAR -> INT: the server converted)."""
    if ctx.mode == MODE_LENIENT and exact_cast(new_type, existing.delta_type):
        note = (f"the lake keeps column {existing.name!r} as {existing.delta_type} (the source's is now {new_type}; "
                "its values are written in the lake's type)")
        return OpPlan(change, None, (), marked(state, change), note=note), cols, None
    if ctx.mode == MODE_LENIENT:
        raise _conflict(ctx, change, f"column {existing.name!r} changes from {existing.delta_type} to {new_type}; the "
                                     "lake's type cannot hold the new values, so even lenient cannot keep it")
    # follow: the column takes the new type, empty; its values come from re-reading the table.
    v = change.version
    name = rename_to or existing.name
    ops = (ColumnOp(v, H_DROP, existing.name), ColumnOp(v, H_ADD, name, delta_type=new_type, fill=None))
    structure = Structure(S_REWRITE, drops=(existing.name,), adds=((name, new_type),))
    cols = [*(c for c in cols if c is not existing), LakeColumn(name, new_type)]
    why = f"column {existing.name!r} changes from {existing.delta_type} to {new_type}: the server converted its values"
    return OpPlan(change, structure, (), marked(state, change, *ops)), cols, why


def _same_columns(a: Sequence[LakeColumn], b: Sequence[LakeColumn]) -> bool:
    return [c.name.lower() for c in a] == [c.name.lower() for c in b] and all(
        normalise_delta_type(x.delta_type) == normalise_delta_type(y.delta_type) for x, y in zip(a, b, strict=True)
    )


def empty_rows(ctx: PlanContext, change: SchemaChange) -> tuple[RowStep, ...]:
    from cdc_core.model.merge_semantics import DELETE_HARD

    kind = D_DELETE if ctx.delete_mode == DELETE_HARD else D_TOMBSTONE
    return (RowStep(kind, change.version, commit_ts=change.commit_ts),)


# ------------------------------------------------------------------------------------ translation


@dataclass(frozen=True)
class Translation:
    """What to do to a staged image of the given columns, written at a version older than some changes."""

    renames: tuple[tuple[str, str], ...] = ()  # applied in order
    drops: tuple[str, ...] = ()
    casts: tuple[tuple[str, str], ...] = ()
    fills: tuple[tuple[str, Literal | None], ...] = ()  # columns the image lacks: (name, value; None = NULL)
    copies: tuple[tuple[str, str, str], ...] = ()  # (new column, from image column, delta type): a lenient rename
    ops: int = 0  # how many history ops apply (0: nothing to do)
    # Each image column -> its name after every change (None: dropped): the renames and drops composed, so a
    # column renamed twice, or renamed then dropped, ends where the last change put it.
    outputs: tuple[tuple[str, str | None], ...] = ()

    def output_of(self, column: str) -> str | None:
        """The name the image's `column` has after the changes (None: dropped); itself when no change named it."""
        low = column.lower()
        return next((out for c, out in self.outputs if c.lower() == low), column)

    @property
    def empty(self) -> bool:
        return self.ops == 0


def translation_pieces(lo: int, hi: int, history: Sequence[ColumnOp]) -> list[tuple[int, int]]:
    """The version ranges a staged file with changes `lo`..`hi` is read in: one per stretch between changes of
    its table's `history` (inclusive bounds). A file's columns can be the same on both sides of a change (a
    column dropped and added again under its name), so rows on either side translate from their own version."""
    cuts = sorted({op.version for op in history if lo < op.version <= hi})
    return list(zip([lo, *cuts], [*(c - 1 for c in cuts), hi], strict=True))


def translate_columns(  # noqa: PLR0912 (a branch per kind of op)
    present: Sequence[str], newest_version: int, history: Sequence[ColumnOp]
) -> Translation:
    """How images with columns `present`, all written at or before `newest_version`, look after every later
    change of `history`: renamed, dropped, cast, and filled where the image predates an added column."""
    cols = {c.lower(): c for c in present}
    origin = {c.lower(): c for c in present}  # a current name -> the image column it holds
    renames: list[tuple[str, str]] = []
    drops: list[str] = []
    casts: dict[str, str] = {}
    fills: dict[str, Literal | None] = {}
    copies: dict[str, tuple[str, str, str]] = {}
    applied = 0
    for op in history:
        if op.version <= newest_version:
            continue
        applied += 1
        low = op.column.lower()
        if op.kind == H_RENAME:
            if low in cols and op.new_name.lower() not in cols:
                renames.append((cols.pop(low), op.new_name))
                cols[op.new_name.lower()] = op.new_name
                if low in origin:
                    origin[op.new_name.lower()] = origin.pop(low)
                if low in casts:
                    casts[op.new_name.lower()] = casts.pop(low)
        elif op.kind == H_DROP:
            if low in cols:
                drops.append(cols.pop(low))
                casts.pop(low, None)
            origin.pop(low, None)
            fills.pop(low, None)
        elif op.kind == H_CAST:
            if low in cols:
                casts[low] = op.delta_type
        elif op.kind == H_ADD:
            if low not in cols:
                fills[low] = op.fill
                cols[low] = op.column
        elif op.kind == H_COPY:
            new_low = op.new_name.lower()
            if low in cols and new_low not in cols and low in origin:
                copies[new_low] = (op.new_name, origin[low], op.delta_type)
                cols[new_low] = op.new_name
        else:
            raise ValueError(op.kind)
    final = {image.lower(): cols[now] for now, image in origin.items()}
    outputs = tuple((c, final.get(c.lower())) for c in present)
    return Translation(
        tuple(renames), tuple(drops), tuple((cols.get(k, k), t) for k, t in casts.items()),
        tuple((cols[k], v) for k, v in fills.items()), tuple(copies.values()), applied, outputs,
    )
