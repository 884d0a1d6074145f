"""Row changes logged as statements: `INSERT`, `REPLACE`, `UPDATE`, `DELETE` or `LOAD DATA` in a query event.

With `binlog_format=ROW` the server writes the rows a statement changed, and a query event holds DDL only. A
session that sets `binlog_format` to STATEMENT or MIXED (it needs a privilege) gets its DML written as the
statement's text instead, and so do servers that empty a MEMORY table after a restart with a logged `DELETE`
(MariaDB 10.11 logs a `TRUNCATE TABLE`, which lands as one). The rows these change are in no row event, so a
reader that skipped them would leave the lake silently different. They are reported like table DDL that
cannot be applied exactly (`ParsedStatement.error`), with the tables they write (for a multi-table UPDATE or
DELETE: every table they name outside subqueries, a superset).
"""

from __future__ import annotations

from cdc_core.model.ddl.frame import NotUnderstood, Stmt
from cdc_core.model.schema_changes import ParsedStatement

DML_WORDS = ("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD")

ROWS_AS_STATEMENT = (
    "a row change logged as a statement, not as row images: the session that ran it had binlog_format STATEMENT "
    "or MIXED (or the server emptied a MEMORY table at its start with a DELETE), so the rows it changed are not in "
    "the binlog. "
    "Every session writing captured tables must log rows (binlog_format=ROW; SET SESSION binlog_format needs a "
    "privilege applications seldom need)"
)

_MODIFIERS = "LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE|QUICK"
_REF_BEFORE = {",", "FROM", "JOIN", "USING", "UPDATE", "DELETE", "STRAIGHT_JOIN"}
_KEYWORDS = {"FROM", "USING", "JOIN", "INNER", "LEFT", "RIGHT", "CROSS", "NATURAL", "OUTER", "STRAIGHT_JOIN",
             "LATERAL", "ONLY", "SET", "WHERE", "ORDER", "LIMIT", "RETURNING", "AS", "ON"}
_REFS_END = {"UPDATE": "SET", "DELETE": "WHERE|ORDER|LIMIT|RETURNING"}


def parse_logged_dml(st: Stmt) -> ParsedStatement:
    """The tables a DML statement writes, with ROWS_AS_STATEMENT as the error; nothing when none is named."""
    w = st.word(0)
    if w in ("INSERT", "REPLACE"):
        i = 1
        while st.at(i, _MODIFIERS):
            i += 1
        if st.at(i, "INTO"):
            i += 1
        target, _ = st.qualified(i)
        st.table(target)
    elif w == "LOAD":  # LOAD DATA | XML ... INTO TABLE t
        at = next((j for j in range(st.n) if st.at(j, "INTO", "TABLE")), None)
        if at is None:
            raise NotUnderstood("LOAD without INTO TABLE")
        target, _ = st.qualified(at + 2)
        st.table(target)
    else:
        _table_references(st, _REFS_END[w])
    if not st.tables:
        raise NotUnderstood("no table named")
    return ParsedStatement(tables=tuple(st.tables), error=ROWS_AS_STATEMENT)


def _table_references(st: Stmt, end: str) -> None:
    """The tables of an UPDATE's or DELETE's table references, up to `end` (outside parentheses)."""
    depth, prev = 0, st.word(0)
    i = 1
    while i < st.n:
        if st.punct(i, "("):
            depth += 1
        elif st.punct(i, ")"):
            depth -= 1
        elif depth == 0:
            if st.at(i, end):
                return
            if st.at(i, _MODIFIERS):
                i += 1
                continue
            if prev in _REF_BEFORE and st.is_name(i) and st.word(i) not in _KEYWORDS and not st.punct(i + 1, "("):
                target, i = st.qualified(i)
                if st.punct(i, ".") and st.punct(i + 1, "*"):  # DELETE t.* FROM ...
                    i += 2
                st.table(target)
                prev = ""
                continue
        tok = st.toks[i]
        prev = tok.text if st.punct(i, ",") else st.word(i)
        i += 1
