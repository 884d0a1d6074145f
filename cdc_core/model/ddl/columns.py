"""Column definitions -> `ColumnSpec` (name, type, nullability, default, generated, position), and DEFAULT values.

The type is read from the tokens (column_types.py); sqlglot parses the rest with the type written as INT, after
`_render_attrs` has rewritten what its grammar lacks (MariaDB's PERSISTENT, COMPRESSED, SERIAL DEFAULT VALUE,
attributes without effect on the spec). Its nodes are then translated one by one, and an attribute the
translation does not know makes the statement not understood.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from cdc_core.model.ddl.column_types import (
    NUMERIC_BASES,
    TEXT_BASES,
    ColumnType,
    TableDefaults,
    charset_name,
    final_type,
    read_type,
)
from cdc_core.model.ddl.frame import NUM, WORD, NotUnderstood, Stmt, parse_tree, quote_name, single_action
from cdc_core.model.schema_changes import DEFAULT_EXPRESSION, DEFAULT_LITERAL, DEFAULT_NULL, ColumnSpec, DefaultSpec

# The error for a versioned column here and for CREATE TABLE ... WITH SYSTEM VERSIONING (tables.py).
VERSIONED = (
    "system-versioned tables are not supported: their rows carry hidden row_start / row_end columns and a "
    "DELETE keeps the row as history"
)


@dataclass
class _Attrs:
    """What the tokens say about a column's attributes that sqlglot's grammar has no rule for."""

    sql: str = ""
    serial_default_value: bool = False
    compressed: bool = False
    after: list[str] = field(default_factory=list)


def _render_attrs(st: Stmt, i: int, hi: int) -> _Attrs:
    """toks[i:hi] (a column's attributes and position) as SQL for sqlglot: MariaDB's PERSISTENT written as
    STORED, attributes without effect on the ColumnSpec that sqlglot does not know left out, names after AFTER
    quoted."""
    out = _Attrs()
    pieces: list[str] = []
    depth = 0
    j = i
    after = -1  # the token after the last one written as it is (its spacing is kept: `now()`, `t.a`, `.5`)
    while j < hi:
        tok = st.toks[j]
        skip = 0
        if st.punct(j, "("):
            depth += 1
        elif st.punct(j, ")"):
            depth -= 1
        elif depth == 0 and tok.kind == WORD:
            w = tok.up
            if w in ("VISIBLE", "INVISIBLE"):
                skip = 1
            elif (
                st.at(j, "COLUMN_FORMAT", "FIXED|DYNAMIC|DEFAULT|COMPRESSED") or st.at(j, "STORAGE", "DISK|MEMORY")
                or (w == "SRID" and j + 1 < hi and st.toks[j + 1].kind == NUM)
            ):
                skip = 2
            elif w == "WITHOUT" and st.at(j + 1, "SYSTEM", "VERSIONING"):
                skip = 3
            elif w == "WITH" and st.at(j + 1, "SYSTEM", "VERSIONING"):
                raise NotUnderstood(VERSIONED)  # a versioned column makes the table system-versioned
            elif w in ("REF_SYSTEM_ID", "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE"):
                skip = 3 if st.punct(j + 1, "=") else 2
            elif w == "COMPRESSED":
                out.compressed = True
                skip = 3 if st.punct(j + 1, "=") else 1
            elif st.at(j, "SERIAL", "DEFAULT", "VALUE"):
                out.serial_default_value = True
                skip = 3
            elif w == "PERSISTENT" and j > i and st.punct(j - 1, ")"):
                pieces.append(" STORED")
                skip = 1
            elif w == "AFTER" and st.is_name(j + 1):
                pieces.append(" AFTER " + quote_name(st.toks[j + 1].text))
                out.after.append(st.toks[j + 1].text)
                skip = 2
        if skip:
            j += skip
            continue
        gap = st.sql[st.toks[j - 1].end : tok.start] if j == after else " "
        pieces.append(gap + st.sql[tok.start : tok.end])
        after = j + 1
        j += 1
    out.sql = "".join(pieces)
    return out


def read_column(
    st: Stmt, lo: int, hi: int, verb: str, *, old: str | None = None, defaults: TableDefaults | None = None
) -> tuple[ColumnSpec, bool]:
    """A column definition toks[lo:hi] (name, type, attributes, and FIRST / AFTER in an ALTER) ->
    (its ColumnSpec, whether it is declared PRIMARY KEY)."""
    name, j = st.name(lo, "a column name")
    t, j = read_type(st, j, hi)
    attrs = _render_attrs(st, j, hi)
    definition = f"{quote_name(name)} INT {attrs.sql}"
    sql = {
        "create": f"CREATE TABLE _x ({definition})",
        "add": f"ALTER TABLE _x ADD COLUMN {definition}",
        "modify": f"ALTER TABLE _x MODIFY COLUMN {definition}",
        "change": f"ALTER TABLE _x CHANGE COLUMN {quote_name(old or '')} {definition}",
    }[verb]
    tree = parse_tree(sql)
    cd: exp.Expr | None = None
    if verb == "create":
        if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema) and len(tree.this.expressions) == 1:
            cd = tree.this.expressions[0]
    else:
        action = single_action(tree)
        if verb == "add":
            cd = action
        elif isinstance(action, exp.ModifyColumn):
            renamed = action.args.get("rename_from")
            if (renamed is None) == (verb == "modify") and (renamed is None or renamed.name == old):
                cd = action.this
    if not isinstance(cd, exp.ColumnDef) or cd.name != name or cd.args.get("exists"):
        raise NotUnderstood(f"cannot read the column definition {st.snippet(lo, hi)}")
    kind = cd.args.get("kind")
    if not isinstance(kind, exp.DataType) or kind.expressions or kind.this != exp.DataType.Type.INT:
        raise NotUnderstood(f"cannot read the column definition {st.snippet(lo, hi)}")
    t.compressed = attrs.compressed
    return _column_spec(cd, t, defaults or TableDefaults(), attrs, st.snippet(lo, hi))


def _column_spec(
    cd: exp.ColumnDef, t: ColumnType, defaults: TableDefaults, attrs: _Attrs, where: str
) -> tuple[ColumnSpec, bool]:
    # SERIAL (and SERIAL DEFAULT VALUE) is NOT NULL AUTO_INCREMENT UNIQUE.
    not_null = auto_increment = t.serial or attrs.serial_default_value
    primary = False
    default_node: exp.Expr | None = None
    generated = None
    charset = collation = None
    for constraint in cd.args.get("constraints") or []:
        kind = constraint.args.get("kind") if isinstance(constraint, exp.ColumnConstraint) else None
        if isinstance(kind, exp.NotNullColumnConstraint):
            not_null = not kind.args.get("allow_null")
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            primary = True
        elif isinstance(kind, exp.AutoIncrementColumnConstraint):
            auto_increment = True
        elif isinstance(kind, exp.DefaultColumnConstraint):
            default_node = kind.this
        elif isinstance(kind, exp.ComputedColumnConstraint):
            expression = kind.this
            if isinstance(expression, exp.Paren):
                expression = expression.this
            generated = expression.sql(dialect="mysql")
        elif isinstance(kind, exp.CharacterSetColumnConstraint):
            charset = charset_name(kind.this.name)
        elif isinstance(kind, exp.CollateColumnConstraint):
            collation = kind.this.name
        elif not isinstance(
            kind, exp.UniqueColumnConstraint | exp.CommentColumnConstraint | exp.CheckColumnConstraint
            | exp.Reference | exp.OnUpdateColumnConstraint | exp.InvisibleColumnConstraint
        ):
            raise NotUnderstood(f"unknown column attribute {constraint.sql(dialect='mysql')!r} in {where}")
    if (charset or collation) and t.base not in TEXT_BASES | {"json"}:
        raise NotUnderstood(f"a character set on a non-text column in {where}")
    mysql_type, spec_charset = final_type(t, charset, collation, defaults)
    if t.base == "json":
        spec_charset = None
    if auto_increment:
        not_null = True  # the server makes an AUTO_INCREMENT column NOT NULL
    numeric = mysql_type.split("(", 1)[0].split(" ", 1)[0] in NUMERIC_BASES
    position = cd.args.get("position")
    pos: tuple[str, str | None] | None = None
    if isinstance(position, exp.ColumnPosition):
        where_to = str(position.args.get("position")).upper()
        if where_to == "FIRST" and position.this is None:
            pos = ("first", None)
        elif where_to == "AFTER" and isinstance(position.this, exp.Column | exp.Identifier):
            pos = ("after", position.this.name)
        else:
            raise NotUnderstood(f"cannot read the column position in {where}")
    elif position is not None:
        raise NotUnderstood(f"cannot read the column position in {where}")
    spec = ColumnSpec(
        name=cd.name,
        mysql_type=mysql_type,
        charset=spec_charset,
        nullable=not (not_null or primary),
        default=read_default(default_node, numeric) if default_node is not None else DefaultSpec(),
        generated=generated,
        auto_increment=auto_increment,
        position=pos,
    )
    return spec, primary


def read_default(node: exp.Expr, numeric: bool | None) -> DefaultSpec:
    """A DEFAULT value. `numeric`: whether the column is numeric (None: unknown), which decides what a hex or
    bit literal is (a number, or bytes: those are left to the server as an expression)."""
    if isinstance(node, exp.Null):
        return DefaultSpec(DEFAULT_NULL)
    if isinstance(node, exp.Boolean):
        return DefaultSpec(DEFAULT_LITERAL, "1" if node.this else "0")
    if isinstance(node, exp.Literal):
        return DefaultSpec(DEFAULT_LITERAL, str(node.this), bool(node.is_string))
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return DefaultSpec(DEFAULT_LITERAL, "-" + str(node.this.this))
    if isinstance(node, exp.National):
        return DefaultSpec(DEFAULT_LITERAL, str(node.this), True)
    if isinstance(node, exp.Introducer) and isinstance(node.expression, exp.Literal) and node.expression.is_string:
        return DefaultSpec(DEFAULT_LITERAL, str(node.expression.this), True)
    if isinstance(node, exp.Concat) and all(isinstance(e, exp.Literal) and e.is_string for e in node.expressions):
        return DefaultSpec(DEFAULT_LITERAL, "".join(str(e.this) for e in node.expressions), True)  # 'a' 'b'
    if isinstance(node, exp.HexString | exp.BitString) and numeric:
        digits = str(node.this)  # x'' / b'' are the empty string: 0 as a number
        value = int(digits, 16 if isinstance(node, exp.HexString) else 2) if digits else 0
        return DefaultSpec(DEFAULT_LITERAL, str(value))
    return DefaultSpec(DEFAULT_EXPRESSION, node.sql(dialect="mysql"))
