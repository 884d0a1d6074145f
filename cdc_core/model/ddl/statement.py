"""The parser's entry point (`parse_statement`): which statement this is, and what its failure means.

The statement's executable text (comments.py) is cut into tokens (frame.py) and handed on by its first word to
the table statements (tables.py) or to ALTER TABLE (alter.py). Table DDL that cannot be read exactly becomes
`ParsedStatement.error`, with every table and schema it names; any other statement that fails gives nothing.
The package docstring explains the approach.
"""

from __future__ import annotations

import contextlib

import sqlglot.errors

from cdc_core.model.ddl.alter import parse_alter
from cdc_core.model.ddl.comments import first_word, scan
from cdc_core.model.ddl.dml import DML_WORDS, parse_logged_dml
from cdc_core.model.ddl.frame import NotUnderstood, Stmt, tokenize
from cdc_core.model.ddl.tables import parse_create, parse_drop, parse_rename_table, parse_truncate
from cdc_core.model.schema_changes import ParsedStatement

_DML_HEAD = 8192
_TABLE_DDL = ("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE", "IMPORT")


def parse_statement(
    query: str, default_schema: str, *, server_version: int | None = None, strict: bool = True
) -> ParsedStatement:
    """What one statement of the binlog does to tables (the package docstring).

    `default_schema`: the query event's current database ("" when none), for unqualified names.
    `server_version`: the source's version as a number (101106 for MariaDB 10.11.6, 80400 for MySQL 8.4),
    which decides the versioned comments; None executes all of them. `strict`: the statement ran under a strict
    sql_mode (conversions.py: without one, a column redefinition re-reads the table). Never raises."""
    try:
        word = first_word(query, server_version)
        if word in DML_WORDS:
            return _parse_dml(query, default_schema, server_version)
        if word not in _TABLE_DDL:
            return ParsedStatement()
        return _parse(query, default_schema, server_version, strict)
    except Exception as e:  # a bug here must not stop a reader: the statement is reported as not understood
        return ParsedStatement(error=f"the DDL parser failed on this statement ({type(e).__name__}: {e})")


def _parse(query: str, default_schema: str, server_version: int | None, strict: bool) -> ParsedStatement:
    sql, unterminated = scan(query, server_version)
    problem = None
    if unterminated is not None:
        problem = "an unterminated quoted string or name"
        sql = sql[:unterminated]
    try:
        toks = tokenize(sql)
    except sqlglot.errors.SqlglotError as e:
        toks, problem = [], problem or f"cannot split it into tokens ({e})"
    st = Stmt(sql, toks, default_schema, strict=strict)
    table_ddl = _is_table_ddl(st)
    try:
        if problem is not None:
            if table_ddl:
                _frame_only(st)
            raise NotUnderstood(problem)
        result = _dispatch(st)
        if table_ddl and any(st.punct(j, ";") for j in range(st.n)):
            raise NotUnderstood("it holds more than one statement")
        return result
    except NotUnderstood as e:
        if not table_ddl:
            return ParsedStatement()
        return ParsedStatement(tables=tuple(st.tables), schemas=tuple(st.schemas), error=str(e))


def _parse_dml(query: str, default_schema: str, server_version: int | None) -> ParsedStatement:
    """A row change logged as a statement (dml.py): the tables it writes, with the error that says why. Only its
    head is read (the tables come before the values; a logged INSERT can be megabytes)."""
    sql, unterminated = scan(query[:_DML_HEAD], server_version)
    if unterminated is not None:
        sql = sql[:unterminated]
    try:
        return parse_logged_dml(Stmt(sql, tokenize(sql), default_schema))
    except (sqlglot.errors.SqlglotError, NotUnderstood):
        return ParsedStatement()


def _is_table_ddl(st: Stmt) -> bool:
    """ALTER / CREATE / DROP / RENAME / TRUNCATE / IMPORT of a table, or DROP DATABASE: statements whose failure
    to parse must be reported."""
    w = st.word(0)
    i = 1
    if w == "TRUNCATE":
        return True
    if w == "IMPORT":
        return st.at(1, "TABLE")
    if w == "ALTER":
        while st.at(i, "ONLINE|OFFLINE|IGNORE"):
            i += 1
        return st.at(i, "TABLE")
    if w == "CREATE":
        if st.at(i, "OR", "REPLACE"):
            i += 2
        return st.at(i, "TABLE") or st.at(i, "TEMPORARY", "TABLE")
    if w == "DROP":
        return st.at(i, "TABLE|TABLES") or st.at(i, "TEMPORARY") or st.at(i, "DATABASE|SCHEMA")
    if w == "RENAME":
        return st.at(i, "TABLE|TABLES")
    return False


def _frame_only(st: Stmt) -> None:
    """Read the target names of a table statement whose text is cut short (for ParsedStatement.tables)."""
    with contextlib.suppress(NotUnderstood):
        _dispatch(st)


def _dispatch(st: Stmt) -> ParsedStatement:
    w = st.word(0)
    if w == "TRUNCATE":
        return parse_truncate(st)
    if w == "RENAME":
        return parse_rename_table(st) if st.at(1, "TABLE|TABLES") else ParsedStatement()
    if w == "DROP":
        return parse_drop(st)
    if w == "ALTER":
        return parse_alter(st)
    if w == "CREATE":
        return parse_create(st)
    if w == "IMPORT" and st.at(1, "TABLE"):
        raise NotUnderstood("IMPORT TABLE (MySQL) creates tables with their rows from files, without row events")
    return ParsedStatement()
