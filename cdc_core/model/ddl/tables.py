"""The table-level statements: CREATE TABLE, DROP TABLE / DATABASE, RENAME TABLE and TRUNCATE.

CREATE TABLE covers LIKE, `... SELECT`, the column list (each column read by columns.py), the primary key (by
sqlglot, or from the tokens where its parts have prefix lengths or USING) and the table options that decide
column types (the default character set). CREATE / DROP INDEX and CREATE TRIGGER only name their table, except
that dropping the index `PRIMARY` drops the primary key.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from cdc_core.model.ddl.column_types import TableDefaults, charset_name, collation_charset
from cdc_core.model.ddl.columns import VERSIONED, read_column
from cdc_core.model.ddl.frame import NAME, STR, WORD, NotUnderstood, Stmt, parse_tree, parsed, table_of
from cdc_core.model.schema_changes import (
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DROP_DATABASE,
    DROP_TABLE,
    PRIMARY_KEY,
    RENAME_TABLE,
    TRUNCATE_TABLE,
    ColumnSpec,
    ParsedStatement,
    SchemaChange,
)

# ------------------------------------------------------------------------------ TRUNCATE, DROP, RENAME

def parse_truncate(st: Stmt) -> ParsedStatement:
    # TRUNCATE [TABLE] name [WAIT n | NOWAIT]
    i = 2 if st.at(1, "TABLE") else 1
    target, j = st.qualified(i)
    st.table(target)
    st.end(st.skip_wait(j), "TRUNCATE")
    # sqlglot reads the name again (it has no WAIT / NOWAIT, nor some unquoted names): both readings must agree.
    tree = parse_tree(st.text(0, j))
    if isinstance(tree, exp.TruncateTable) and [table_of(t, st.default_schema) for t in tree.expressions] != [target]:
        raise NotUnderstood("TRUNCATE: sqlglot and the tokens disagree on the table")
    return parsed(st, [SchemaChange(TRUNCATE_TABLE, *target)])


def parse_drop(st: Stmt) -> ParsedStatement:
    i = 1
    if st.at(i, "DATABASE|SCHEMA"):
        i += 1
        if st.at(i, "IF", "EXISTS"):
            i += 2
        schema, j = st.name(i, "a database name")
        st.schemas.append(schema)
        st.end(j, "DROP DATABASE")
        return parsed(st, [SchemaChange(DROP_DATABASE, schema, "")])
    temporary = st.at(i, "TEMPORARY")
    if temporary:
        i += 1
    if st.at(i, "TABLE|TABLES"):
        if temporary:
            return ParsedStatement()  # temporary tables never land
        return _drop_table(st, i + 1)
    if st.at(i, "INDEX") or st.at(i, "ONLINE|OFFLINE", "INDEX"):
        return _drop_index(st, i + (2 if st.at(i, "ONLINE|OFFLINE") else 1))
    return ParsedStatement()  # views, triggers, routines, users, sequences, ...


def _drop_table(st: Stmt, i: int) -> ParsedStatement:
    # DROP TABLE [IF EXISTS] a [, b ...] [WAIT n | NOWAIT] [RESTRICT | CASCADE]
    if st.at(i, "IF", "EXISTS"):
        i += 2
    targets = []
    while True:
        target, i = st.qualified(i)
        st.table(target)
        targets.append(target)
        if not st.punct(i, ","):
            break
        i += 1
    names_end = i
    i = st.skip_wait(i)
    if st.at(i, "RESTRICT|CASCADE"):
        i += 1
    st.end(i, "DROP TABLE")
    # sqlglot reads the names again (it has no WAIT / NOWAIT, nor some unquoted names): both must agree.
    tree = parse_tree(st.text(0, names_end))
    if (
        isinstance(tree, exp.Drop) and str(tree.args.get("kind")).upper() == "TABLE"
        and [table_of(t, st.default_schema) for t in tree.args.get("tables") or []] != targets
    ):
        raise NotUnderstood("DROP TABLE: sqlglot and the tokens disagree on the tables")
    return parsed(st, [SchemaChange(DROP_TABLE, *t) for t in targets])


def _drop_index(st: Stmt, i: int) -> ParsedStatement:
    # DROP INDEX [IF EXISTS] name ON table ...: `PRIMARY` is the primary key
    if st.at(i, "IF", "EXISTS"):
        i += 2
    index, i = st.name(i, "an index name")
    if not st.at(i, "ON"):
        return ParsedStatement()
    target, _ = st.qualified(i + 1)
    st.table(target)
    if index.upper() == "PRIMARY":
        return parsed(st, [SchemaChange(PRIMARY_KEY, *target, key=())])
    return parsed(st, [])


def parse_rename_table(st: Stmt) -> ParsedStatement:
    # RENAME TABLE[S] [IF EXISTS] a [WAIT n | NOWAIT] TO b [, c TO d ...], applied left to right. An
    # unqualified name is in the current database (MySQL: "RENAME TABLE db1.a TO b" moves it there).
    i = 2
    if st.at(i, "IF", "EXISTS"):
        i += 2
    changes = []
    while True:
        source, i = st.qualified(i)
        st.table(source)
        i = st.skip_wait(i)
        if not st.at(i, "TO"):
            raise NotUnderstood(f"RENAME TABLE: expected TO at {st.snippet(i)}")
        target, i = st.qualified(i + 1)
        st.table(target)
        changes.append(SchemaChange(RENAME_TABLE, *source, to_schema=target[0], to_table=target[1]))
        if not st.punct(i, ","):
            break
        i += 1
    st.end(i, "RENAME TABLE")
    return parsed(st, changes)


# --------------------------------------------------------------------------------------------- CREATE

def parse_create(st: Stmt) -> ParsedStatement:
    i = 1
    replace_ = st.at(i, "OR", "REPLACE")
    if replace_:
        i += 2
    if st.at(i, "TEMPORARY"):
        return ParsedStatement()  # CREATE TEMPORARY TABLE: temporary tables never land
    if st.at(i, "TABLE"):
        return _create_table(st, i + 1, replace_)
    if st.at(i, "DATABASE|SCHEMA"):
        i += 1
        if st.at(i, "IF", "NOT", "EXISTS"):
            i += 3
        schema, _ = st.name(i, "a database name")
        st.schemas.append(schema)
        # CREATE OR REPLACE DATABASE drops the database first (MariaDB).
        return parsed(st, [SchemaChange(DROP_DATABASE, schema, "")] if replace_ else [])
    i = _skip_definer(st, i)
    if st.at(i, "TRIGGER"):
        return _create_trigger(st, i + 1)
    return _create_index(st, i)  # or nothing: views, routines, events, users, sequences, servers, ...


def _skip_definer(st: Stmt, i: int) -> int:
    """Past `DEFINER = user`, `ALGORITHM = x` and `SQL SECURITY x` (views, triggers, routines, events)."""
    while True:
        if st.at(i, "DEFINER"):
            i += 2 if st.punct(i + 1, "=") else 1
            if st.at(i, "CURRENT_USER"):
                i += 3 if st.punct(i + 1, "(") and st.punct(i + 2, ")") else 1
            else:
                i += 1  # the user name, then its host
                if st.punct(i, "@"):
                    i += 2
        elif st.at(i, "ALGORITHM"):
            i += 3 if st.punct(i + 1, "=") else 2
        elif st.at(i, "SQL", "SECURITY"):
            i += 3
        else:
            return i


def _create_index(st: Stmt, i: int) -> ParsedStatement:
    # CREATE [ONLINE|OFFLINE] [UNIQUE|FULLTEXT|SPATIAL|VECTOR] INDEX [IF NOT EXISTS] name [USING x] ON table (...)
    while st.at(i, "ONLINE|OFFLINE|UNIQUE|FULLTEXT|SPATIAL|VECTOR"):
        i += 1
    if not st.at(i, "INDEX"):
        return ParsedStatement()
    for j in range(i + 1, st.n):
        if st.at(j, "ON"):
            target, _ = st.qualified(j + 1)
            st.table(target)
            break
    return parsed(st, [])


def _create_trigger(st: Stmt, i: int) -> ParsedStatement:
    # CREATE [DEFINER=...] TRIGGER [IF NOT EXISTS] name {BEFORE|AFTER} {INSERT|UPDATE|DELETE} ON table ...
    for j in range(i, min(i + 12, st.n)):
        if st.at(j, "ON"):
            target, _ = st.qualified(j + 1)
            st.table(target)
            break
    return parsed(st, [])


def _create_table(st: Stmt, i: int, replace_: bool) -> ParsedStatement:
    # CREATE [OR REPLACE] TABLE [IF NOT EXISTS] name { LIKE s | (LIKE s) | [(items)] [options] [[AS] query] }
    if_not_exists = st.at(i, "IF", "NOT", "EXISTS")
    if if_not_exists:
        i += 3
    target, i = st.qualified(i)
    st.table(target)
    like_at = i + 1 if st.at(i, "LIKE") else i + 2 if st.punct(i, "(") and st.at(i + 1, "LIKE") else None
    if like_at is not None:
        source, j = st.qualified(like_at)
        st.table(source)
        if st.punct(i, "("):
            if not st.punct(j, ")"):
                raise NotUnderstood(f"CREATE TABLE ... (LIKE ...): unexpected {st.snippet(j)}")
            j += 1
        st.end(j, "CREATE TABLE ... LIKE")
        change = SchemaChange(
            CREATE_TABLE_LIKE, *target, to_schema=source[0], to_table=source[1], replace=replace_,
            if_not_exists=if_not_exists,
        )
        return parsed(st, [change])
    body: tuple[int, int] | None = None
    if st.punct(i, "(") and not _query_starts(st, i):
        close = st.close(i)
        body, i = (i + 1, close), close + 1
    as_select, defaults = _table_options(st, i)
    if body is None and not as_select:
        raise NotUnderstood(f"CREATE TABLE: expected a column list, LIKE or a query at {st.snippet(i)}")
    columns: list[ColumnSpec] = []
    keys: list[list[str]] = []  # each PRIMARY KEY the statement declares (the server allows one)
    periods = _periods(st, st.split(*body) if body else [])
    for lo, hi in st.split(*body) if body else []:
        if lo == hi:
            raise NotUnderstood("CREATE TABLE: an empty item in the column list")
        if _is_column_item(st, lo):
            column, inline_key = read_column(st, lo, hi, "create", defaults=defaults)
            columns.append(column)
            if inline_key:
                keys.append([column.name])
        elif _is_index_item(st, lo):
            table_key = _table_key(st, lo, hi, periods)
            if table_key is not None:
                keys.append(table_key)
        else:
            raise NotUnderstood(f"CREATE TABLE: cannot read the item {st.snippet(lo, hi)}")
    if len(keys) > 1:
        raise NotUnderstood("CREATE TABLE: more than one primary key")
    key = keys[0] if keys else []
    in_key = {k.casefold() for k in key}
    columns = [replace(c, nullable=False) if c.name.casefold() in in_key else c for c in columns]
    change = SchemaChange(
        CREATE_TABLE, *target, columns=tuple(columns), key=tuple(key), as_select=as_select, replace=replace_,
        if_not_exists=if_not_exists,
    )
    return parsed(st, [change])


def _query_starts(st: Stmt, i: int) -> bool:
    """Whether a query (CREATE TABLE ... SELECT) starts at i."""
    if st.punct(i, "("):
        return _query_starts(st, i + 1)
    return st.at(i, "SELECT|VALUES|TABLE") or (st.at(i, "WITH") and not st.at(i + 1, "SYSTEM"))


def _table_options(st: Stmt, i: int) -> tuple[bool, TableDefaults]:
    """Scan a CREATE TABLE's options: (whether a query follows, the table's default charset)."""
    defaults = TableDefaults()
    collation = None
    while i < st.n:
        if st.punct(i, "("):
            if _query_starts(st, i):
                return True, defaults
            i = st.close(i) + 1
            continue
        if _query_starts(st, i) or st.at(i, "AS|IGNORE|REPLACE"):
            return True, defaults
        if st.at(i, "WITH", "SYSTEM", "VERSIONING"):
            raise NotUnderstood(VERSIONED)
        if st.at(i, "CHARACTER|CHAR", "SET") or st.at(i, "CHARSET"):
            j = i + (2 if st.at(i, "CHARACTER|CHAR") else 1)
            j += 1 if st.punct(j, "=") else 0
            if st.is_name(j) or (j < st.n and st.toks[j].kind == STR):
                defaults.charset = charset_name(st.toks[j].text)
            i = j + 1
            continue
        if st.at(i, "COLLATE"):
            j = i + 1 + (1 if st.punct(i + 1, "=") else 0)
            if st.is_name(j) or (j < st.n and st.toks[j].kind == STR):
                collation = st.toks[j].text
            i = j + 1
            continue
        i += 1
    if defaults.charset is None and collation is not None:
        defaults.charset = collation_charset(collation)
    return False, defaults

_ITEM_KEYWORDS = {"PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT", "CHECK"}


def _is_index_item(st: Stmt, lo: int) -> bool:
    """Whether a CREATE TABLE item is a key, index, constraint or period (not a column)."""
    return (
        st.word(lo) in _ITEM_KEYWORDS or st.at(lo, "PERIOD", "FOR") or st.at(lo, "VECTOR", "INDEX|KEY")
    )


def _is_column_item(st: Stmt, lo: int) -> bool:
    return lo < st.n and st.toks[lo].kind in (NAME, WORD) and not _is_index_item(st, lo)


def _periods(st: Stmt, items: list[tuple[int, int]]) -> dict[str, tuple[str, str]]:
    """The application-time periods a CREATE TABLE defines (`PERIOD FOR p (start, end)`), by name (casefolded)."""
    found = {}
    for lo, hi in items:
        if st.at(lo, "PERIOD", "FOR") and st.punct(lo + 3, "(") and st.close(lo + 3) == hi - 1:
            bounds = [st.name(a, "a period's column")[0] for a, _ in st.split(lo + 4, hi - 1)]
            if len(bounds) == 2 and st.is_name(lo + 2):
                found[st.toks[lo + 2].text.casefold()] = (bounds[0], bounds[1])
    return found


def _table_key(st: Stmt, lo: int, hi: int, periods: dict[str, tuple[str, str]]) -> list[str] | None:
    """The primary key columns of a CREATE TABLE item (None for other indexes and constraints)."""
    i = lo
    if st.at(i, "CONSTRAINT"):
        i += 1
        if not st.at(i, "PRIMARY|UNIQUE|FOREIGN|CHECK"):
            i += 1  # the constraint's name
    if not st.at(i, "PRIMARY", "KEY"):
        return None  # indexes, unique / foreign keys, checks, periods: no effect on columns or the key
    if any(st.at(j, "WITHOUT", "OVERLAPS") for j in range(i, hi)):
        return key_tokens(st, i + 2, hi, periods)
    tree = parse_tree(f"CREATE TABLE _x ({st.text(i, hi)})")
    if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema):
        items = tree.this.expressions
        if len(items) == 1 and isinstance(items[0], exp.PrimaryKey):
            names = key_names(items[0])
            if names is not None:
                return names
    return key_tokens(st, i + 2, hi)


def key_names(pk: exp.PrimaryKey) -> list[str] | None:
    """The key's columns, None when a part is more than a plain column (a prefix length, DESC: tokens then)."""
    if not all(isinstance(part, exp.Identifier | exp.Column) for part in pk.expressions):
        return None
    return [part.name for part in pk.expressions]


def key_tokens(st: Stmt, i: int, hi: int, periods: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """Key columns from the tokens: the first parenthesised list after the key's optional name and USING
    (key parts may carry a prefix length `a(10)` or ASC / DESC; `p WITHOUT OVERLAPS` stands for the end and start
    columns of a period of `periods`, in the server's index order)."""
    while i < hi and not st.punct(i, "("):
        i += 1
    if i >= hi:
        raise NotUnderstood(f"a primary key without columns: {st.snippet(i, hi)}")
    names = []
    for lo, end in st.split(i + 1, st.close(i)):
        name, j = st.name(lo, "a key column")
        if st.punct(j, "("):
            j = st.close(j) + 1
        if st.at(j, "ASC|DESC"):
            j += 1
        if st.at(j, "WITHOUT", "OVERLAPS") and j + 2 == end and name.casefold() in (periods or {}):
            start, stop = (periods or {})[name.casefold()]
            names += [stop, start]
            continue
        if j != end:
            raise NotUnderstood(f"primary key part {st.snippet(lo, end)} is not a column")
        names.append(name)
    return names
