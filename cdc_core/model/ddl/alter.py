"""ALTER TABLE: the statement cut into its actions, and each action read into typed changes.

Column actions (ADD, MODIFY, CHANGE, ALTER, DROP, RENAME COLUMN) are read here with columns.py; the rest go to
sqlglot (`_from_alter_tree`) and, where its grammar ends, to the tokens (`_alter_clause_tokens`: partition
operations, CONVERT TO CHARACTER SET, tablespaces, ENABLE / DISABLE KEYS, table options sqlglot does not
know). A rename of the table applies after every other action, as in MySQL, and an ALTER whose column actions
would mean something else when applied one after another is refused (`_check_sequential`).
"""

from __future__ import annotations

from sqlglot import exp

from cdc_core.model.ddl.column_types import charset_name
from cdc_core.model.ddl.columns import read_column, read_default
from cdc_core.model.ddl.conversions import with_value_rereads
from cdc_core.model.ddl.frame import (
    NAME,
    PUNCT,
    STR,
    WORD,
    NotUnderstood,
    Stmt,
    parse_tree,
    parsed,
    quote_name,
    single_action,
    table_of,
)
from cdc_core.model.ddl.tables import key_names, key_tokens
from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CONVERT_CHARSET,
    DROP_COLUMN,
    DROP_DEFAULT,
    DROP_PARTITION,
    EXCHANGE_PARTITION,
    MODIFY_COLUMN,
    PRIMARY_KEY,
    RENAME_COLUMN,
    RENAME_TABLE,
    REPLACE_ROWS,
    SET_DEFAULT,
    TRUNCATE_PARTITION,
    ColumnSpec,
    ParsedStatement,
    SchemaChange,
)


def parse_alter(st: Stmt) -> ParsedStatement:
    i = 1
    ignore = False
    while st.at(i, "ONLINE|OFFLINE|IGNORE"):
        ignore = ignore or st.at(i, "IGNORE")
        i += 1
    if st.at(i, "DATABASE|SCHEMA"):
        i += 1
        if st.is_name(i) and not st.at(i, "DEFAULT|CHARACTER|CHARSET|CHAR|COLLATE|COMMENT|ENCRYPTION|READ|UPGRADE"):
            st.schemas.append(st.toks[i].text)
        elif st.default_schema:
            st.schemas.append(st.default_schema)
        return parsed(st, [])
    if not st.at(i, "TABLE"):
        return ParsedStatement()  # views, events, routines, users, sequences, servers, tablespaces, ...
    i += 1
    if st.at(i, "IF", "EXISTS"):
        i += 2
    target, i = st.qualified(i)
    st.table(target)
    i = st.skip_wait(i)
    changes: list[SchemaChange] = []
    renames: list[SchemaChange] = []  # MySQL renames the table after every other action, wherever written
    for lo, hi in _alter_clauses(st, i):
        for c in _alter_clause(st, lo, hi, target):
            (renames if c.kind == RENAME_TABLE else changes).append(c)
    if len(renames) > 1:
        raise NotUnderstood("ALTER TABLE renames the table more than once")
    _check_sequential(changes)
    return parsed(st, with_value_rereads(changes, target, strict=st.strict, ignore=ignore) + renames)


_PARTITION_LISTS = "TRUNCATE|DROP|ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR|DISCARD|IMPORT|REORGANIZE"


def _alter_clauses(st: Stmt, i: int) -> list[tuple[int, int]]:
    """The ALTER TABLE actions from i on, as token ranges: cut at top-level commas, except inside
    `ORDER BY a, b` and partition name lists (`DROP PARTITION p0, p1`), and before a trailing
    `PARTITION BY ...` / `REMOVE PARTITIONING` that follows the last action without a comma."""
    clauses = []
    while i < st.n:
        lo = i
        if st.at(i, "ORDER", "BY") or st.at(i, _PARTITION_LISTS, "PARTITION"):
            i += 2
            if st.at(i, "IF", "EXISTS"):
                i += 2
            i += 1  # the first column or partition name (or ALL)
            while st.at(i, "ASC|DESC"):
                i += 1
            while st.punct(i, ",") and st.is_name(i + 1) and (
                i + 2 >= st.n or st.punct(i + 2, ",") or st.at(i + 2, "ASC|DESC|INTO|TABLESPACE")
            ):
                i += 2
                if st.at(i, "ASC|DESC"):
                    i += 1
        depth = 0
        while i < st.n:
            if st.punct(i, "("):
                depth += 1
            elif st.punct(i, ")"):
                depth -= 1
            elif depth == 0 and (
                st.punct(i, ",") or (i > lo and (st.at(i, "PARTITION", "BY") or st.at(i, "REMOVE", "PARTITIONING")))
            ):
                break
            i += 1
        if i == lo:
            raise NotUnderstood(f"ALTER TABLE: an empty action at {st.snippet(i)}")
        clauses.append((lo, i))
        if st.punct(i, ","):
            i += 1
            if i >= st.n:
                raise NotUnderstood("ALTER TABLE: a comma after the last action")
    return clauses


_NOT_A_COLUMN = {
    "INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION",
}


def _names_column(st: Stmt, i: int) -> bool:
    """Whether ADD / DROP is followed by a column (not an index, constraint, partition, period, versioning)."""
    if not st.is_name(i) or st.toks[i].kind == NAME:
        return st.is_name(i)
    return not (
        st.word(i) in _NOT_A_COLUMN or st.at(i, "PERIOD", "FOR|IF") or st.at(i, "SYSTEM", "VERSIONING")
        or st.at(i, "VECTOR", "INDEX|KEY")
    )


def _alter_clause(st: Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    """One ALTER TABLE action (or a run of table options) -> its typed changes ([] for no-change actions)."""
    i = lo
    if st.at(i, "ADD"):
        i += 1
        explicit = st.at(i, "COLUMN")
        i += 1 if explicit else 0
        if_not_exists = st.at(i, "IF", "NOT", "EXISTS")
        i += 3 if if_not_exists else 0
        if st.punct(i, "("):
            close = st.close(i)
            if close != hi - 1:
                raise NotUnderstood(f"ALTER TABLE ADD (...): unexpected {st.snippet(close + 1, hi)}")
            return [
                SchemaChange(ADD_COLUMN, *target, column=read_column(st, a, b, "add")[0], if_not_exists=if_not_exists)
                for a, b in st.split(i + 1, close)
            ]
        if explicit or if_not_exists or (i < hi and _names_column(st, i)):
            column, _ = read_column(st, i, hi, "add")
            return [SchemaChange(ADD_COLUMN, *target, column=column, if_not_exists=if_not_exists)]
    elif st.at(i, "MODIFY"):
        i += 2 if st.at(i + 1, "COLUMN") else 1
        exists = st.at(i, "IF", "EXISTS")
        i += 2 if exists else 0
        column, _ = read_column(st, i, hi, "modify")
        return [SchemaChange(MODIFY_COLUMN, *target, name=column.name, column=column, if_exists=exists)]
    elif st.at(i, "CHANGE"):
        i += 2 if st.at(i + 1, "COLUMN") else 1
        exists = st.at(i, "IF", "EXISTS")
        i += 2 if exists else 0
        old, i = st.name(i, "a column name")
        column, _ = read_column(st, i, hi, "change", old=old)
        return [SchemaChange(MODIFY_COLUMN, *target, name=old, column=column, if_exists=exists)]
    elif st.at(i, "ALTER") and not st.at(i + 1, "INDEX|KEY|CHECK|CONSTRAINT"):
        return _alter_column(st, lo, hi, target)
    elif st.at(i, "DROP") and i + 1 < hi and _names_column(st, i + 1):
        return _drop_column(st, lo, hi, target)
    elif st.at(i, "RENAME", "COLUMN"):
        return _rename_column(st, lo, hi, target)
    tree = parse_tree(f"ALTER TABLE _x {st.text(lo, hi)}")
    if isinstance(tree, exp.Alter):
        changes = _from_alter_tree(tree, target, st.default_schema)
        if changes is not None:
            for c in changes:
                if c.to_table is not None:
                    st.table((c.to_schema or "", c.to_table))
            return changes
    return _alter_clause_tokens(st, lo, hi, target)


def _alter_column(st: Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    # ALTER [COLUMN] c {SET DEFAULT x | DROP DEFAULT | SET VISIBLE | SET INVISIBLE}
    i = lo + (2 if st.at(lo + 1, "COLUMN") else 1)
    name, i = st.name(i, "a column name")
    tree = parse_tree(f"ALTER TABLE _x ALTER COLUMN {quote_name(name)} {st.text(i, hi)}")
    action = single_action(tree)
    if not isinstance(action, exp.AlterColumn) or action.name != name:
        raise NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")
    args = {k for k, v in action.args.items() if v is not None and v is not False}
    if args == {"this", "default"}:
        default = read_default(action.args["default"], numeric=None)
        column = ColumnSpec(name=name, mysql_type="", default=default)
        return [SchemaChange(SET_DEFAULT, *target, name=name, column=column)]
    if args == {"this", "drop"}:
        return [SchemaChange(DROP_DEFAULT, *target, name=name)]
    if args == {"this", "visible"}:
        return []
    raise NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")


def _drop_column(st: Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    # DROP [COLUMN] [IF EXISTS] c [RESTRICT | CASCADE]
    i = lo + (2 if st.at(lo + 1, "COLUMN") else 1)
    exists = st.at(i, "IF", "EXISTS")
    i += 2 if exists else 0
    name, i = st.name(i, "a column name")
    tree = parse_tree(f"ALTER TABLE _x DROP COLUMN {'IF EXISTS ' if exists else ''}{quote_name(name)} {st.text(i, hi)}")
    action = single_action(tree)
    if not (isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() == "COLUMN"
            and [t.name for t in action.args.get("tables") or []] == [name]):
        raise NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")
    return [SchemaChange(DROP_COLUMN, *target, name=name, if_exists=exists)]


def _rename_column(st: Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    # RENAME COLUMN [IF EXISTS] a TO b
    i = lo + 2
    exists = st.at(i, "IF", "EXISTS")
    i += 2 if exists else 0
    old, i = st.name(i, "a column name")
    if not st.at(i, "TO"):
        raise NotUnderstood(f"ALTER TABLE RENAME COLUMN: expected TO at {st.snippet(i)}")
    new, i = st.name(i + 1, "a column name")
    if i != hi:
        raise NotUnderstood(f"ALTER TABLE RENAME COLUMN: unexpected {st.snippet(i, hi)}")
    if_exists = "IF EXISTS " if exists else ""
    tree = parse_tree(f"ALTER TABLE _x RENAME COLUMN {if_exists}{quote_name(old)} TO {quote_name(new)}")
    action = single_action(tree)
    if not (isinstance(action, exp.RenameColumn) and action.this.name == old and action.args["to"].name == new):
        raise NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")
    return [SchemaChange(RENAME_COLUMN, *target, name=old, new_name=new, if_exists=exists)]

# Table options sqlglot reads as a generic `Property` (name = value), and those only the tokens read.
_TABLE_OPTIONS = {
    "AUTOEXTEND_SIZE", "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM", "COMMENT", "COMPRESSION",
    "CONNECTION", "DELAY_KEY_WRITE", "ENCRYPTED", "ENCRYPTION", "ENCRYPTION_KEY_ID", "ENGINE", "ENGINE_ATTRIBUTE",
    "SECONDARY_ENGINE", "SECONDARY_ENGINE_ATTRIBUTE", "INSERT_METHOD", "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS",
    "PACK_KEYS", "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "PASSWORD", "ROW_FORMAT",
    "SEQUENCE", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE", "TRANSACTIONAL",
    "UNION", "IETF_QUOTES", "ALGORITHM", "LOCK", "CHARSET", "COLLATE", "TYPE",
}


def _from_alter_tree(tree: exp.Alter, target: tuple[str, str], default_schema: str) -> list[SchemaChange] | None:
    """sqlglot's reading of one ALTER TABLE action (or a run of options) -> changes; None when it holds a
    node this translation does not know (the tokens then get their turn)."""
    if str(tree.args.get("kind")).upper() != "TABLE" or tree.args.get("exists") or tree.args.get("only"):
        return None
    changes: list[SchemaChange] = []
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.DropPrimaryKey):
            changes.append(SchemaChange(PRIMARY_KEY, *target, key=()))
        elif isinstance(action, exp.Drop):
            kind = str(action.args.get("kind")).upper()
            if kind not in ("INDEX", "FOREIGN KEY", "CONSTRAINT", "CHECK"):
                return None
            dropped = [t.name.upper() for t in action.args.get("tables") or []]
            if kind in ("INDEX", "CONSTRAINT") and dropped == ["PRIMARY"]:
                changes.append(SchemaChange(PRIMARY_KEY, *target, key=()))  # DROP INDEX|CONSTRAINT `PRIMARY`
        elif isinstance(action, exp.AddConstraint):
            for item in action.expressions:
                inner = item.expressions if isinstance(item, exp.Constraint) else [item]
                if len(inner) != 1:
                    return None
                if isinstance(inner[0], exp.PrimaryKey):
                    names = key_names(inner[0])
                    if names is None:
                        return None
                    changes.append(SchemaChange(PRIMARY_KEY, *target, key=tuple(names)))
                elif not isinstance(
                    inner[0], exp.IndexColumnConstraint | exp.UniqueColumnConstraint | exp.ForeignKey
                    | exp.CheckColumnConstraint
                ):
                    return None
        elif isinstance(action, exp.AlterRename):
            to = table_of(action.this, default_schema)
            changes.append(SchemaChange(RENAME_TABLE, *target, to_schema=to[0], to_table=to[1]))
        elif not isinstance(action, exp.RenameIndex | exp.AlterIndex | exp.ForceProperty):
            return None
    for option in tree.args.get("options") or []:
        if isinstance(option, exp.Property) and type(option) is exp.Property:
            if option.name.upper() not in _TABLE_OPTIONS:
                return None
        elif not isinstance(
            option, exp.EngineProperty | exp.CharacterSetProperty | exp.CollateProperty | exp.SchemaCommentProperty
            | exp.AutoIncrementProperty | exp.RowFormatProperty | exp.AlgorithmProperty | exp.LockProperty
            | exp.Order
        ):
            return None
    return changes


def _alter_clause_tokens(st: Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    """The ALTER TABLE actions sqlglot's grammar does not parse, read from the tokens."""
    i = lo
    if st.at(i, "TRUNCATE|DROP", "PARTITION"):
        parts, j = _partition_names(st, i + 2, hi)
        if j != hi:
            raise NotUnderstood(f"PARTITION: unexpected {st.snippet(j, hi)}")
        kind = TRUNCATE_PARTITION if st.at(i, "TRUNCATE") else DROP_PARTITION
        return [SchemaChange(kind, *target, partitions=parts)]
    if st.at(i, "EXCHANGE", "PARTITION"):
        part, j = st.name(i + 2, "a partition name")
        if not st.at(j, "WITH", "TABLE"):
            raise NotUnderstood(f"EXCHANGE PARTITION: expected WITH TABLE at {st.snippet(j, hi)}")
        other, j = st.qualified(j + 2)
        if st.at(j, "WITH|WITHOUT", "VALIDATION"):
            j += 2
        if j != hi:
            raise NotUnderstood(f"EXCHANGE PARTITION: unexpected {st.snippet(j, hi)}")
        st.table(other)
        # Both tables' rows change without row events: the other table is re-read whole (it holds the partition's
        # rows now), the partitioned one per its partition.
        return [SchemaChange(EXCHANGE_PARTITION, *target, partitions=(part,), to_schema=other[0], to_table=other[1]),
                SchemaChange(REPLACE_ROWS, *other, reason=f"EXCHANGE PARTITION {part} of {target[0]}.{target[1]}")]
    if st.at(i, "CONVERT", "TO"):
        j = i + 2
        if st.at(j, "CHARACTER|CHAR", "SET"):
            j += 2
        elif st.at(j, "CHARSET"):
            j += 1
        else:
            raise NotUnderstood(f"CONVERT TO: expected CHARACTER SET at {st.snippet(j, hi)}")
        if not st.is_name(j) and not (j < hi and st.toks[j].kind == STR):
            raise NotUnderstood(f"CONVERT TO CHARACTER SET: expected a character set at {st.snippet(j, hi)}")
        charset = None if st.at(j, "DEFAULT") else charset_name(st.toks[j].text)  # DEFAULT: the database's
        j += 1
        if st.at(j, "COLLATE"):
            j += 2 + (1 if st.punct(j + 1, "=") else 0)
        if j != hi:
            raise NotUnderstood(f"CONVERT TO CHARACTER SET: unexpected {st.snippet(j, hi)}")
        return [SchemaChange(CONVERT_CHARSET, *target, charset=charset)]
    if st.at(i, "IMPORT", "TABLESPACE") or st.at(i, "IMPORT", "PARTITION"):
        return [SchemaChange(REPLACE_ROWS, *target)]  # rows arrive from a tablespace file, without row events
    if (
        st.at(i, "DISCARD", "TABLESPACE|PARTITION") or st.at(i, "ENABLE|DISABLE", "KEYS")
        or st.at(i, "ADD|COALESCE|REORGANIZE|ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR", "PARTITION")
        or st.at(i, "REMOVE|UPGRADE", "PARTITIONING") or st.at(i, "PARTITION", "BY")
        or st.at(i, "WITH|WITHOUT", "VALIDATION") or st.at(i, "FORCE|SECONDARY_LOAD|SECONDARY_UNLOAD")
        or st.at(i, "ALTER", "INDEX|KEY|CHECK|CONSTRAINT") or st.at(i, "RENAME", "INDEX|KEY")
    ):
        # Rows move between partitions or files, indexes and constraints change: no column or row changes.
        # (Partition *moves* are exact: REORGANIZE must cover the same values, and the rest rebuild in place.)
        return []
    if st.at(i, "CONVERT", "PARTITION|TABLE"):
        raise NotUnderstood("CONVERT PARTITION / CONVERT TABLE moves rows between tables without row events")
    if st.at(i, "DROP", "INDEX|KEY|CONSTRAINT"):
        # The primary key is the index (and, in MySQL 8, the constraint) named `PRIMARY`.
        j = i + 2 + (2 if st.at(i + 2, "IF", "EXISTS") else 0)
        index, j = st.name(j, "an index name")
        if j != hi:
            raise NotUnderstood(f"DROP INDEX: unexpected {st.snippet(j, hi)}")
        return [SchemaChange(PRIMARY_KEY, *target, key=())] if index.upper() == "PRIMARY" else []
    if st.at(i, "DROP", "FOREIGN", "KEY") or st.at(i, "DROP", "CHECK"):
        return []
    if st.at(i, "ADD|DROP", "PERIOD"):
        j = i + 2
        while st.at(j, "IF|NOT|EXISTS"):
            j += 1
        if st.at(j, "FOR") and not st.at(j + 1, "SYSTEM_TIME"):
            return []  # an application-time period: a constraint on two columns, no column or row changes
    if st.at(i, "ADD"):
        j = i + 1
        if st.at(j, "CONSTRAINT"):
            j += 1 if st.at(j + 1, "PRIMARY|UNIQUE|FOREIGN|CHECK") else 2
        if st.at(j, "PRIMARY", "KEY"):
            return [SchemaChange(PRIMARY_KEY, *target, key=tuple(key_tokens(st, j + 2, hi)))]
        if st.at(j, "INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|FOREIGN|CHECK") or st.at(j, "VECTOR", "INDEX|KEY"):
            return []
    if st.at(i, "RENAME"):
        j = i + 1 + (1 if st.at(i + 1, "TO|AS") else 0)
        to, j = st.qualified(j)
        if j != hi:
            raise NotUnderstood(f"RENAME: unexpected {st.snippet(j, hi)}")
        st.table(to)
        return [SchemaChange(RENAME_TABLE, *target, to_schema=to[0], to_table=to[1])]
    if _only_table_options(st, lo, hi):
        return []
    raise NotUnderstood(f"ALTER TABLE: unknown action {st.snippet(lo, hi)}")


def _partition_names(st: Stmt, i: int, hi: int) -> tuple[tuple[str, ...], int]:
    if st.at(i, "IF", "EXISTS"):
        i += 2
    if st.at(i, "ALL"):
        return ("ALL",), i + 1
    names = []
    while True:
        name, i = st.name(i, "a partition name")
        names.append(name)
        if not st.punct(i, ",") or i >= hi:
            return tuple(names), i
        i += 1


def _only_table_options(st: Stmt, lo: int, hi: int) -> bool:
    """Whether toks[lo:hi] is nothing but table options (`[DEFAULT] name [=] value ...`)."""
    i = lo
    while i < hi:
        if st.at(i, "DEFAULT"):
            i += 1
        if st.at(i, "CHARACTER|CHAR", "SET") or st.at(i, "DATA|INDEX", "DIRECTORY"):
            i += 2
        elif st.toks[i].kind == WORD and st.toks[i].up in _TABLE_OPTIONS:
            i += 1
        else:
            return False
        if st.punct(i, "="):
            i += 1
        if st.punct(i, "("):
            i = st.close(i) + 1
        elif i < hi and st.toks[i].kind != PUNCT:
            i += 1
        else:
            return False
        if st.at(i, "STORAGE", "DISK|MEMORY"):  # TABLESPACE ts STORAGE DISK
            i += 2
    return True


def _check_sequential(changes: list[SchemaChange]) -> None:
    """Refuse an ALTER whose column actions mean something else when applied one after another.

    MySQL resolves the column an action names (DROP, MODIFY, CHANGE, RENAME COLUMN, ALTER COLUMN) against the
    table as it was before the statement, while the changes are applied in order: `RENAME COLUMN a TO b,
    RENAME COLUMN b TO a` swaps two columns, but in order it would rename a to b and back."""
    touched: set[str] = set()  # names an earlier action added, renamed (either name) or dropped
    for c in changes:
        referred = c.name if c.kind in (DROP_COLUMN, RENAME_COLUMN, MODIFY_COLUMN, SET_DEFAULT, DROP_DEFAULT) else None
        if referred is not None and referred.casefold() in touched:
            raise NotUnderstood(
                f"ALTER TABLE acts on column {referred!r} after an earlier action of the same statement added, "
                "renamed or dropped that name; MySQL resolves every action against the table as it was (so such a "
                "statement can swap names), which applying the actions in order would not reproduce. Run the "
                "renames as separate statements"
            )
        names: tuple[str | None, ...] = ()
        if c.kind == ADD_COLUMN and c.column is not None:
            names = (c.column.name,)
        elif c.kind == DROP_COLUMN:
            names = (c.name,)
        elif c.kind == RENAME_COLUMN:
            names = (c.name, c.new_name)
        elif (
            c.kind == MODIFY_COLUMN and c.column is not None and c.name is not None
            and c.column.name.casefold() != c.name.casefold()
        ):
            names = (c.name, c.column.name)
        touched.update(n.casefold() for n in names if n is not None)
