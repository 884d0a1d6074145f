"""The lake side of schema changes as pure rules (docs/schema-changes.md): what each change plans on a lake
table in each mode, how older images are translated, the values added columns give older rows, how a window's
changes resolve across tables (renames, online schema changes), and which statements a reader stages or refuses."""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_core.capture.ddl_events import UnsupportedDdl, typed_statement
from cdc_core.model.errors import SchemaConflict, UnsupportedType
from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DROP_COLUMN,
    DROP_TABLE,
    MODIFY_COLUMN,
    RENAME_COLUMN,
    RENAME_TABLE,
    TRUNCATE_PARTITION,
    TRUNCATE_TABLE,
    ColumnSpec,
    DefaultSpec,
    SchemaChange,
)
from cdc_core.model.schema_evolution import (
    D_COPY,
    D_DELETE,
    D_FILL,
    D_TOMBSTONE,
    H_ADD,
    H_DROP,
    H_RENAME,
    S_ADD_COLUMNS,
    S_RESET,
    S_REWRITE,
    ColumnOp,
    LakeColumn,
    PlanContext,
    SchemaState,
    Structure,
    plan_table,
    structure_done,
    translate_columns,
    translation_pieces,
)
from cdc_core.model.schema_policy import SchemaPolicy
from cdc_core.model.schema_values import Literal, Reread, default_value, exact_cast
from cdc_core.model.schema_window import (
    ROLE_GHOST,
    ROLE_MOVED_IN,
    ROLE_MOVED_OUT,
    ROLE_OWN,
    ROLE_SWAP,
    Placement,
    plan_change,
    resolve,
)

pytestmark = pytest.mark.unit

COLS = [LakeColumn("id", "INT"), LakeColumn("v", "STRING"), LakeColumn("n", "INT")]


def ch(kind: str, version: int = 100, table: str = "t", **kw: Any) -> SchemaChange:
    return SchemaChange(kind=kind, schema="s", table=table, version=version, **kw)


def col(name: str, mysql_type: str, nullable: bool = True, default: DefaultSpec | None = None,
        **kw: Any) -> ColumnSpec:
    return ColumnSpec(name, mysql_type, nullable=nullable, default=default or DefaultSpec(), **kw)


def ctx(mode: str = "follow", delete_mode: str = "hard", routed: bool = False) -> PlanContext:
    return PlanContext(table="s.t", app_id="p", delete_mode=delete_mode, mode=mode, zero_dates="null",
                       routed=routed)


def test_truncate_empties_older_rows_and_moves_the_floor() -> None:
    plan = plan_table(ctx(), COLS, SchemaState(), [ch(TRUNCATE_TABLE, 100)])
    (op,) = plan.ops
    assert op.structure is None and [(r.kind, r.version) for r in op.rows] == [(D_DELETE, 100)]
    assert plan.state.floor == 100 and plan.state.version == 100
    soft = plan_table(ctx(delete_mode="soft"), COLS, SchemaState(), [ch(TRUNCATE_TABLE, 100)])
    assert soft.ops[0].rows[0].kind == D_TOMBSTONE
    # A routed lake table's state is one source table's (its app id): the floor drops that table's older changes,
    # the window's own before the statement among them (the group soak, seed 201, found them landing).
    for kind in (TRUNCATE_TABLE, DROP_TABLE):
        routed = plan_table(ctx(routed=True), COLS, SchemaState(), [ch(kind, 100)])
        assert routed.state.floor == 100 and [(r.kind, r.version) for r in routed.ops[0].rows] == [(D_DELETE, 100)]


def test_changes_at_or_before_the_recorded_one_are_skipped() -> None:
    state = SchemaState(version=100, step=1)
    changes = [ch(TRUNCATE_TABLE, 100, step=0), ch(DROP_COLUMN, 100, step=1, name="n"),
               ch(DROP_COLUMN, 100, step=2, name="v")]
    plan = plan_table(ctx(), COLS, state, changes)
    assert [op.change.step for op in plan.ops] == [2]


def test_add_column_fills_older_rows_with_the_constant_or_implicit_default() -> None:
    add = ch(ADD_COLUMN, column=col("d", "int", nullable=False, default=DefaultSpec("literal", "7")))
    plan = plan_table(ctx(), COLS, SchemaState(), [add])
    (op,) = plan.ops
    assert op.structure == Structure(S_ADD_COLUMNS, columns=(("d", "INT"),))
    assert op.rows[0].kind == D_FILL and op.rows[0].fill == Literal(7, "INT")
    assert plan.state.history == (ColumnOp(100, H_ADD, "d", delta_type="INT", fill=Literal(7, "INT")),)
    nullable = plan_table(ctx(), COLS, SchemaState(), [ch(ADD_COLUMN, column=col("e", "varchar(10)"))])
    assert nullable.ops[0].rows == ()
    generated = plan_table(ctx(), COLS, SchemaState(), [ch(ADD_COLUMN, column=col("g", "int", generated="id+1"))])
    assert generated.reread and generated.state.reread == 100


def test_if_exists_and_if_not_exists_statements_that_were_no_ops_at_the_source_change_nothing() -> None:
    """`ADD COLUMN IF NOT EXISTS v INT` where v is a string, `CHANGE|MODIFY|RENAME COLUMN IF EXISTS` of a column
    the table lacks: the server warns and changes nothing, so neither does the lake. (Probed: the first stopped the
    merge, "v is STRING in the lake and comes back as INT"; CHANGE IF EXISTS stopped it, "nope is not in the lake".)
    Without IF [NOT] EXISTS the same statements still conflict; under lenient, a kept column is no proof that the
    source has it, so ADD IF NOT EXISTS is applied."""
    no_ops = [
        ch(ADD_COLUMN, column=col("v", "int", default=DefaultSpec("literal", "7")), if_not_exists=True),
        ch(MODIFY_COLUMN, name="nope", column=col("nope", "bigint"), if_exists=True),
        ch(MODIFY_COLUMN, name="nope", column=col("n2", "bigint"), if_exists=True),
        ch(RENAME_COLUMN, name="nope", new_name="n3", if_exists=True),
    ]
    plan = plan_table(ctx(), COLS, SchemaState(), [dataclasses.replace(c, step=k) for k, c in enumerate(no_ops)])
    assert [(op.structure, op.rows) for op in plan.ops] == [(None, ())] * 4
    assert plan.state.history == () and not plan.reread
    with pytest.raises(SchemaConflict, match="comes back as INT"):
        plan_table(ctx(), COLS, SchemaState(), [dataclasses.replace(no_ops[0], if_not_exists=False)])
    with pytest.raises(SchemaConflict, match="not in the lake table"):
        plan_table(ctx(), COLS, SchemaState(), [dataclasses.replace(no_ops[3], if_exists=False)])
    again = ch(ADD_COLUMN, column=col("n", "int", default=DefaultSpec("literal", "7")), if_not_exists=True)
    assert plan_table(ctx(), COLS, SchemaState(), [again]).ops[0].rows == ()
    assert plan_table(ctx(mode="lenient"), COLS, SchemaState(), [again]).ops[0].rows[0].kind == D_FILL


@pytest.mark.parametrize(("mysql_type", "default", "nullable", "expected"), [
    ("int", DefaultSpec("literal", "-3"), False, -3),
    ("bigint unsigned", None, False, Decimal(0)),
    ("decimal(6,2)", DefaultSpec("literal", "1.5", True), False, Decimal("1.50")),
    ("double", DefaultSpec("literal", "2.25"), True, 2.25),
    ("varchar(10)", None, False, ""),
    ("varchar(10)", DefaultSpec("literal", "it's", True), True, "it's"),
    ("enum('b','a')", None, False, "b"),
    ("set('x','y')", DefaultSpec("literal", "y,x", True), True, "x,y"),
    ("date", DefaultSpec("literal", "2024-02-29", True), True, dt.date(2024, 2, 29)),
    ("datetime(3)", DefaultSpec("literal", "2024-02-29 01:02:03.5", True), True,
     dt.datetime(2024, 2, 29, 1, 2, 3, 500000)),
    ("time", DefaultSpec("literal", "-01:00:00", True), True, -3_600_000_000),
    ("year", DefaultSpec("literal", "2024"), True, 2024),
    ("bit(3)", DefaultSpec("literal", "5"), True, 5),
    ("varbinary(4)", DefaultSpec("literal", "ab", True), True, b"ab"),
    ("int", DefaultSpec("null"), True, None),
    ("date", None, False, None),  # the zero date: NULL under zero_dates: null
])
def test_default_values_are_what_staging_would_land(mysql_type: str, default: DefaultSpec | None, nullable: bool,
                                                     expected: Any) -> None:
    got = default_value(col("c", mysql_type, nullable, default), "s.t", "null")
    assert isinstance(got, Literal) and got.value == expected, got


def test_defaults_only_the_source_knows_are_re_read_and_zero_dates_follow_the_setting() -> None:
    assert isinstance(default_value(col("c", "timestamp", False, DefaultSpec("expression", "CURRENT_TIMESTAMP")),
                                    "s.t", "null"), Reread)
    assert isinstance(default_value(col("c", "int", auto_increment=True), "s.t", "null"), Reread)
    assert isinstance(default_value(col("c", "timestamp", True, DefaultSpec("literal", "2024-01-01", True)),
                                    "s.t", "null"), Reread)  # a literal in the session's time zone
    with pytest.raises(UnsupportedType, match="zero_dates: null"):
        default_value(col("c", "datetime", False), "s.t", "refuse")


@pytest.mark.parametrize("mode", ["follow", "lenient"])
def test_rename_and_drop_per_mode(mode: str) -> None:
    plan = plan_table(ctx(mode), COLS, SchemaState(), [
        ch(RENAME_COLUMN, 100, name="v", new_name="label"), ch(DROP_COLUMN, 200, name="n"),
    ])
    rename, drop = plan.ops
    if mode == "follow":
        assert rename.structure == Structure(S_REWRITE, renames=(("v", "label"),))
        assert drop.structure == Structure(S_REWRITE, drops=("n",))
        assert [op.kind for op in plan.state.history] == [H_RENAME, H_DROP]
    else:
        assert rename.structure == Structure(S_ADD_COLUMNS, columns=(("label", "STRING"),))
        assert rename.rows[0].kind == D_COPY and rename.rows[0].source_column == "v"
        assert drop.structure is None and rename.note and drop.note
        assert [op.kind for op in plan.state.history] == ["copy"]


def test_type_changes_widen_rewrite_or_re_read() -> None:
    widen = plan_table(ctx(), COLS, SchemaState(), [ch(MODIFY_COLUMN, name="n", column=col("n", "bigint"))])
    assert widen.ops[0].structure == Structure(S_REWRITE, casts=(("n", "BIGINT"),)) and not widen.reread
    same = plan_table(ctx(), COLS, SchemaState(), [ch(MODIFY_COLUMN, name="v", column=col("v", "varchar(99)"))])
    assert same.ops[0].structure is None
    follow = plan_table(ctx(), COLS, SchemaState(), [ch(MODIFY_COLUMN, name="v", column=col("v", "int"))])
    assert follow.ops[0].structure == Structure(S_REWRITE, drops=("v",), adds=(("v", "INT"),)) and follow.reread
    lenient = plan_table(ctx("lenient"), COLS, SchemaState(), [ch(MODIFY_COLUMN, name="v", column=col("v", "int"))])
    assert lenient.ops[0].structure is None and lenient.ops[0].note  # INT values fit the lake's STRING
    with pytest.raises(SchemaConflict, match="even lenient"):
        plan_table(ctx("lenient"), COLS, SchemaState(), [ch(MODIFY_COLUMN, name="n", column=col("n", "date"))])


def test_drop_then_create_starts_clean() -> None:
    plan = plan_table(ctx(), COLS, SchemaState(history=(ColumnOp(5, H_DROP, "x"),)), [
        ch(DROP_TABLE, 100),
        ch(CREATE_TABLE, 200, columns=(col("id", "int", False), col("w", "int")), key=("id",)),
    ])
    drop, create = plan.ops
    assert drop.rows[0].kind == D_DELETE and drop.state.dropped == 100
    assert create.structure == Structure(S_RESET, columns=(("id", "INT"), ("w", "INT")))
    assert plan.state.floor == 200 and plan.state.dropped == 0 and plan.state.history == ()


def test_partition_changes_ask_for_a_re_read_with_a_sweep() -> None:
    plan = plan_table(ctx(), COLS, SchemaState(), [ch(TRUNCATE_PARTITION, partitions=("p0",))])
    assert plan.reread and plan.state.reread == 100 and plan.state.sweep


def test_the_schema_record_round_trips_through_table_properties() -> None:
    state = SchemaState(3, 2, (ColumnOp(1, H_ADD, "d", delta_type="DECIMAL(6,2)", fill=Literal(Decimal("1.50"),
                                                                                                 "DECIMAL(6,2)")),),
                        7, 0, (("_t_gho", (ch(ADD_COLUMN, column=col("x", "int")),)),), 9, True)
    assert SchemaState.from_properties(state.properties("p"), "p") == state
    assert SchemaState.from_properties({}, "p") == SchemaState()


def test_structure_steps_are_recognised_as_done_by_the_columns() -> None:
    assert structure_done(Structure(S_ADD_COLUMNS, columns=(("d", "INT"),)), [*COLS, LakeColumn("D", "int")])
    rename = Structure(S_REWRITE, renames=(("v", "label"),))
    assert not structure_done(rename, COLS)
    assert structure_done(rename, [COLS[0], LakeColumn("label", "string"), COLS[2]])
    assert structure_done(Structure(S_REWRITE, casts=(("n", "BIGINT"),)), [LakeColumn("n", "long")])
    # A table created again with fewer columns (DROP TABLE, CREATE TABLE): the old table's other columns must go.
    reset = Structure(S_RESET, columns=(("id", "INT"),))
    assert not structure_done(reset, [LakeColumn("id", "int"), LakeColumn("v", "int")])
    assert structure_done(reset, [LakeColumn("ID", "int")])


def test_older_images_are_translated_through_later_changes_only() -> None:
    history = (
        ColumnOp(100, H_RENAME, "v", new_name="label"),
        ColumnOp(200, H_ADD, "d", delta_type="INT", fill=Literal(7, "INT")),
        ColumnOp(300, H_DROP, "n"),
        ColumnOp(400, "cast", "d", delta_type="BIGINT"),
    )
    old = translate_columns(["id", "v", "n"], 50, history)
    assert old.renames == (("v", "label"),) and old.drops == ("n",)
    assert dict(old.fills) == {"d": Literal(7, "INT")}
    mid = translate_columns(["id", "label", "n", "d"], 250, history)
    assert mid.renames == () and mid.drops == ("n",) and mid.casts == (("d", "BIGINT"),) and mid.fills == ()
    assert translate_columns(["id", "label", "d"], 500, history).empty
    assert [old.output_of(c) for c in ("id", "v", "n")] == ["id", "label", None]


@given(st.integers(0, 40), st.integers(0, 40),
       st.lists(st.tuples(st.integers(0, 50), st.sampled_from(["a", "s"]), st.booleans()), max_size=6))
def test_a_file_is_read_in_pieces_that_each_translate_alike_for_every_row(
    lo: int, span: int, ops: list[tuple[int, str, bool]]
) -> None:
    """The pieces cover the file's versions once, in order, and every row of a piece translates as its newest
    row does: a file that straddles DROP s / ADD s (its columns the same on both sides) is not read as one."""
    history = tuple(ColumnOp(v, H_DROP, c) if drop else ColumnOp(v, H_ADD, c, delta_type="STRING", fill=None)
                    for v, c, drop in sorted(ops))
    hi = lo + span
    pieces = translation_pieces(lo, hi, history)
    assert [v for a, b in pieces for v in range(a, b + 1)] == list(range(lo, hi + 1))
    for a, b in pieces:
        newest = translate_columns(["id", "s"], b, history)
        assert all(translate_columns(["id", "s"], v, history) == newest for v in range(a, b + 1))
    assert len(pieces) == 1 + len({v for v, _, _ in ops if lo < v <= hi})


def test_a_column_renamed_twice_or_renamed_then_dropped_ends_where_the_last_change_put_it() -> None:
    """Rows staged before RENAME a TO b then DROP b lose a; before a TO b then b TO c, a's values are c's."""
    dropped = translate_columns(["id", "a", "keep"], 50, (ColumnOp(100, H_RENAME, "a", new_name="b"),
                                                          ColumnOp(200, H_DROP, "b")))
    assert [dropped.output_of(c) for c in ("id", "a", "keep")] == ["id", None, "keep"]
    twice = translate_columns(["id", "a"], 50, (ColumnOp(100, H_RENAME, "a", new_name="b"),
                                                ColumnOp(200, H_RENAME, "b", new_name="c")))
    assert [twice.output_of(c) for c in ("id", "a")] == ["id", "c"]
    swapped = translate_columns(["x", "y"], 50, (ColumnOp(100, H_RENAME, "x", new_name="t"),
                                                 ColumnOp(110, H_RENAME, "y", new_name="x"),
                                                 ColumnOp(120, H_RENAME, "t", new_name="y")))
    assert [swapped.output_of(c) for c in ("x", "y")] == ["y", "x"]


@pytest.mark.parametrize(("frm", "to", "exact"), [
    ("INT", "BIGINT", True), ("BIGINT", "INT", False), ("INT", "STRING", True), ("STRING", "INT", False),
    ("DECIMAL(10,2)", "DECIMAL(12,2)", True), ("DECIMAL(10,2)", "DECIMAL(10,3)", False), ("FLOAT", "DOUBLE", True),
    ("DATE", "TIMESTAMP_NTZ", True), ("BIGINT", "DOUBLE", False), ("INT", "DECIMAL(10,0)", True),
    ("SMALLINT", "DECIMAL(4,0)", False),
])
def test_exact_casts(frm: str, to: str, exact: bool) -> None:
    assert exact_cast(frm, to) is exact


# ------------------------------------------------------------------------------------- window


def test_a_rename_moves_rows_and_record_and_a_new_table_under_the_old_name_is_another() -> None:
    changes = [ch(RENAME_TABLE, 100, to_schema="s", to_table="u"),
               ch(CREATE_TABLE, 200, columns=(col("id", "int", False),), key=("id",))]
    w = resolve(changes, [("s", "t"), ("s", "u")], SchemaPolicy())
    assert [(c.lake, c.role) for c in w.changes] == [(("s", "u"), ROLE_MOVED_IN), (("s", "t"), ROLE_MOVED_OUT),
                                                    (("s", "t"), ROLE_OWN)]
    assert w.placements[("s", "t")] == (Placement(("s", "u"), None, 100), Placement(("s", "t"), 100, 200, gone=True),
                                        Placement(("s", "t"), 200, None))  # gone: ended by the CREATE
    assert w.placements[("s", "u")][-1] == Placement(("s", "u"), 100, None)
    assert all(p.lake == ("s", "u") for p in w.placements[("s", "u")])


def test_online_schema_changes_apply_at_the_swap_and_never_land_their_tables() -> None:
    ghost = {"to_schema": "s", "to_table": "t"}
    changes = [
        ch(CREATE_TABLE_LIKE, 100, table="_t_gho", **ghost),
        ch(ADD_COLUMN, 110, table="_t_gho", column=col("x", "int", False, DefaultSpec("literal", "5"))),
        ch(RENAME_TABLE, 200, to_schema="s", to_table="_t_del"),
        ch(RENAME_TABLE, 200, step=1, table="_t_gho", **ghost),
        ch(DROP_TABLE, 300, table="_t_del"),
    ]
    w = resolve(changes, [("s", "t")], SchemaPolicy())
    assert [(c.lake, c.role) for c in w.changes] == [(("s", "t"), ROLE_GHOST)] * 2 + [(("s", "t"), ROLE_SWAP)]
    assert w.placements == {}
    state = SchemaState()
    cols = list(COLS)
    for lc in w.changes:
        ops, cols, _ = plan_change(ctx(), cols, state, lc, lambda _t: None)
        state = ops[-1].state if ops else state
    assert [c.name for c in cols] == ["id", "v", "n", "x"] and state.pending == ()
    assert state.history[-1].fill == Literal(5, "INT")


def test_a_rename_target_takes_the_source_record() -> None:
    lc = resolve([ch(RENAME_TABLE, 100, to_schema="s", to_table="u")], [("s", "t"), ("s", "u")],
                 SchemaPolicy()).changes[0]
    src_state = SchemaState(50, 0, (ColumnOp(50, H_ADD, "d", delta_type="INT"),), floor=40)
    ops, cols, _ = plan_change(ctx(), [], SchemaState(), lc, lambda _t: (COLS, src_state))
    (op,) = ops
    assert op.structure is not None and op.structure.source == ("s", "t") and cols == COLS
    assert op.state.history == src_state.history and op.state.floor == 40 and op.state.version == 100


@given(st.text(min_size=1, max_size=12))
def test_osc_names_map_back_to_their_table(name: str) -> None:
    policy = SchemaPolicy()
    assert policy.osc_role(f"_{name}_gho") == ("ghost", name)
    assert policy.osc_role(f"_{name}_old") == ("trash", name)


def test_per_table_modes_first_match_wins() -> None:
    policy = SchemaPolicy("follow", (("s.audit*", "lenient"), ("s.*", "refuse")))
    assert policy.mode_for("s.audit_log") == "lenient"
    assert policy.mode_for("s.t") == "refuse"
    assert policy.mode_for("x.t") == "follow"
    assert SchemaPolicy.from_dict(policy.to_dict()) == policy


# ------------------------------------------------------------------------------------- reader


def typed(query: str, policy: SchemaPolicy | None = None, captured: tuple[str, ...] = ("t", "u")) -> Any:
    return typed_statement(
        query, "s", version=7, commit_ts=1.0, position="mysql-bin.000001:42",
        captured=lambda schema, table: schema == "s" and table in captured,
        schema_captured=lambda schema: schema == "s", policy=policy or SchemaPolicy(), pipeline="p",
    )


def test_the_reader_stages_typed_changes_of_captured_tables_only() -> None:
    stmt = typed("ALTER TABLE t ADD COLUMN d INT NOT NULL DEFAULT 7")
    assert [c.kind for c in stmt.changes] == [ADD_COLUMN] and stmt.tables == (("s", "t"),)
    assert typed("ALTER TABLE other ADD COLUMN d INT") is None
    assert typed("GRANT SELECT ON s.* TO x") is None
    ghost = typed("ALTER TABLE _t_gho ADD COLUMN x INT")
    assert ghost.tables == (("s", "t"),)  # the ghost's change is the real table's business
    rename = typed("RENAME TABLE t TO u")
    assert rename.tables == (("s", "t"), ("s", "u"))
    # LIKE reads its table and changes nothing of it. (Probed: listed, a t the lake never had was created with
    # no columns, and `cdc verify` found its columns missing.)
    like = typed("CREATE TABLE u LIKE t")
    assert like.tables == (("s", "u"),) and [c.kind for c in like.changes] == [CREATE_TABLE_LIKE]
    other = typed("CREATE TABLE other LIKE t")
    assert other is None or (other.tables == () and other.changes == ())


def test_the_reader_refuses_what_it_cannot_apply_and_skips_what_it_is_told() -> None:
    with pytest.raises(UnsupportedDdl, match=r"mysql-bin.000001:42.*schema_changes.skip"):
        typed("ALTER TABLE t ADD SYSTEM VERSIONING")
    with pytest.raises(UnsupportedDdl, match="mode refuse"):
        typed("TRUNCATE t", SchemaPolicy(tables=(("s.t", "refuse"),)))
    assert typed("TRUNCATE t", SchemaPolicy(tables=(("s.t", "refuse"),), skip=("mysql-bin.000001:42",))) is None
    assert typed("ALTER TABLE other ADD SYSTEM VERSIONING") is None  # not a captured table


def _structured(structure: Structure | None, cols: list[LakeColumn]) -> list[LakeColumn]:
    """The lake table's columns once `structure` committed (what a run killed before its mark leaves)."""
    if structure is None:
        return cols
    if structure.kind == S_ADD_COLUMNS:
        return [*cols, *(LakeColumn(n, t) for n, t in structure.columns)]
    assert structure.kind == S_REWRITE
    renames, casts = dict(structure.renames), dict(structure.casts)
    out = [LakeColumn(renames.get(c.name, c.name), c.delta_type) for c in cols if c.name not in structure.drops]
    out = [LakeColumn(c.name, casts.get(c.name, c.delta_type)) for c in out]
    return [*out, *(LakeColumn(n, t) for n, t in structure.adds)]


@pytest.mark.parametrize("mode", ["follow", "lenient"])
@pytest.mark.parametrize("change", [
    ch(ADD_COLUMN, 100, column=col("d", "int")),
    ch(ADD_COLUMN, 100, column=col("d", "int", False, DefaultSpec("literal", "7"))),
    ch(DROP_COLUMN, 100, name="n"),
    ch(RENAME_COLUMN, 100, name="v", new_name="label"),
    ch(MODIFY_COLUMN, 100, name="v", column=col("label", "varchar(20)")),
], ids=["add", "add-default", "drop", "rename", "rename-modify"])
def test_a_replay_after_the_structure_committed_records_what_the_first_attempt_would_have(
    change: SchemaChange, mode: str
) -> None:
    """A run killed (or fenced) between a change's structure commit and its mark leaves the table's columns
    changed and its record not: the replay must record the same history, or the window's images from before the
    change are not translated (soak seed 27: a dropped column came back with the window's older rows)."""
    first = plan_table(ctx(mode), COLS, SchemaState(), [change])
    (op,) = first.ops
    after = _structured(op.structure, list(COLS))
    replay = plan_table(ctx(mode), after, SchemaState(), [change])
    # The replay cannot tell whether the first attempt cast a renamed column (it sees the new type either way): it
    # records the cast, to the type the lake column has, which changes nothing for an image already of that type.
    types = {c.name: c.delta_type for c in after}
    extra = [h for h in replay.state.history if h not in first.state.history]
    assert all(h.kind == "cast" and types.get(h.column) == h.delta_type for h in extra), extra
    assert replay.state == dataclasses.replace(first.state, history=replay.state.history)
    assert [h for h in replay.state.history if h not in extra] == list(first.state.history)
    assert [r.structure for r in replay.ops] == [None]  # nothing left to do to the columns
    if change.kind == DROP_COLUMN and mode == "follow":
        assert [h.kind for h in replay.state.history] == [H_DROP]
        assert translate_columns(["id", "v", "n"], 50, replay.state.history).drops == ("n",)
