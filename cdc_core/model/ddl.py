"""The DDL parser: one statement of the binlog (a query event) -> typed schema changes (`parse_statement`).

A statement becomes a `ParsedStatement` (cdc_core.model.schema_changes): one `SchemaChange` per action, in
the statement's order, plus every table and schema the statement names. Table DDL whose meaning cannot be
fully read is reported (`ParsedStatement.error`), never half-applied or skipped; statements that change no
table (GRANT, views, routines, DML logged as statements, BEGIN ...) give nothing. Pure: no I/O.

Why sqlglot and not regular expressions: a DDL statement is a small program in a grammar with nesting
(parentheses in defaults, generated columns, CHECKs, partition lists), quoting (backticked names that contain
spaces, dots or backticks; strings that contain commas, parentheses or `--`), comments, and optional words
everywhere (`ADD [COLUMN] [IF NOT EXISTS]`). Regular expressions over the text either reject what the server
accepted or, worse, misread it silently (a comma inside a DEFAULT string splitting an ALTER in two). sqlglot
is a maintained SQL parser with a MySQL dialect: its tokenizer implements MySQL's quoting and escapes, and
its parser gives a real AST for ALTER TABLE actions, column definitions (NULL / NOT NULL, DEFAULT, AUTO_INCREMENT,
PRIMARY KEY, `AS (expr) STORED`, FIRST / AFTER), defaults and expressions, DROP TABLE and TRUNCATE.

How the work is split. (1) `executable_sql` applies the servers' comment rules: versioned comments
`/*!50100 ...*/` and MariaDB's `/*M!100100 ...*/` are part of the statement when the server runs them; other
comments are dropped; quotes are respected. (2) sqlglot's MySQL tokenizer gives the tokens, from which the
statement's frame is read: which statement it is, its target names, and where each ALTER action or CREATE
TABLE item begins and ends (a top-level comma). (3) sqlglot's parser parses each action and item on its own,
and its AST is translated node by node; a node the translation does not know makes the statement not
understood. Parsing the parts separately keeps one clause sqlglot's grammar lacks (a MariaDB table option,
`PARTITION BY ... VALUES LESS THAN MAXVALUE`, `START TRANSACTION`) from hiding the rest, and lets the error
name the exact clause. The forms sqlglot's MySQL grammar does not parse are handled on its tokens:
`RENAME TABLE a TO b, c TO d`, `ALTER ONLINE|IGNORE TABLE`, `WAIT n | NOWAIT`, `ADD COLUMN (a INT, b INT)`,
`MODIFY|CHANGE COLUMN IF EXISTS`, `TRUNCATE|DROP|EXCHANGE PARTITION` and the other partition operations,
`CONVERT TO CHARACTER SET`, `IMPORT|DISCARD TABLESPACE`, `ENABLE|DISABLE KEYS`, index and CHECK forms with
`IF [NOT] EXISTS` or `IGNORED`, primary keys with prefix lengths or `USING` before the columns, and table
options sqlglot does not know.

Column types are read from the tokens by MySQL's type grammar, not from sqlglot's `DataType`: that type is
dialect-neutral and loses what the type map needs (sqlglot reads MySQL's INT8 as TINYINT, LONG as BIGINT,
REAL as FLOAT, and has no INET4, INET6, MIDDLEINT, LONG VARCHAR or FLOAT UNSIGNED). The type becomes the
vocabulary `cdc_core.capture.source.normalise_column_type` gives for the COLUMN_TYPE the server then shows
(checked against MariaDB by tests/integration/test_ddl_parser_mariadb.py), and sqlglot parses the column's
attributes with the type written as INT.

Server state the statement does not carry, and so the parser cannot see: the database's default character
set (a TEXT(M) whose size class depends on it is refused); an existing table's default charset in ALTER TABLE
... ADD (only CHARSET=binary would change a type); sql_mode (statements that rely on ANSI_QUOTES or
NO_BACKSLASH_ESCAPES are read with the default quoting, which usually leaves them not understood; under
REAL_AS_FLOAT a REAL column is still typed `double`); explicit_defaults_for_timestamp=OFF (an unqualified
TIMESTAMP column then reads as nullable).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import sqlglot.errors
from sqlglot import Token, TokenType, exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.parsers.mysql import MySQLParser

from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CONVERT_CHARSET,
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DEFAULT_EXPRESSION,
    DEFAULT_LITERAL,
    DEFAULT_NULL,
    DROP_COLUMN,
    DROP_DATABASE,
    DROP_DEFAULT,
    DROP_PARTITION,
    DROP_TABLE,
    EXCHANGE_PARTITION,
    MODIFY_COLUMN,
    PRIMARY_KEY,
    RENAME_COLUMN,
    RENAME_TABLE,
    REPLACE_ROWS,
    SET_DEFAULT,
    TRUNCATE_PARTITION,
    TRUNCATE_TABLE,
    ColumnSpec,
    DefaultSpec,
    ParsedStatement,
    SchemaChange,
)

__all__ = ["executable_sql", "parse_statement"]

_DIALECT = MySQL()


class _NotUnderstood(Exception):
    """A part of a table DDL statement the parser cannot read exactly (becomes ParsedStatement.error)."""


class _StrictParser(MySQLParser):
    """sqlglot's MySQL parser, except that where its grammar ends it raises instead of logging a warning and
    returning the rest as an opaque `Command` (an unknown clause must never pass as understood)."""

    def _parse_as_command(self, start: Token) -> exp.Command:
        raise sqlglot.errors.ParseError(f"unsupported syntax at {start.text!r}")


def _sqlglot(sql: str) -> exp.Expr | None:
    """sqlglot's AST of one statement, or None where sqlglot's MySQL grammar gives up."""
    try:
        trees = _StrictParser(dialect=_DIALECT).parse(_DIALECT.tokenize(sql), sql)
    except Exception:  # ParseError, TokenError, and whatever else a third-party parser may raise on odd input
        return None
    if len(trees) != 1 or trees[0] is None or trees[0].find(exp.Command) is not None:
        return None
    tree: exp.Expr = trees[0]
    return tree


# ------------------------------------------------------------------------------------------- comments

def executable_sql(query: str, server_version: int | None = None) -> str:
    """The statement as the server executes it: comments removed, versioned comments applied.

    `/*!NNNNN ...*/` (5 or 6 digits) and MariaDB's `/*M!NNNNNN ...*/` contribute their content when the
    server runs them (`_executes`: NNNNN <= server_version, with the servers' own exceptions; all of them
    when server_version is None); `/*! ...*/` without a version always does; `/* ...*/`, `-- ...` and
    `# ...` do not. Quoted strings and names are copied untouched. Trailing semicolons and whitespace are
    removed."""
    text, _ = _scan(query, server_version)
    return text


def _scan(query: str, server_version: int | None) -> tuple[str, int | None]:
    """(executable text, offset in it where an unterminated quoted string or name starts, else None)."""
    out: list[str] = []
    size = 0  # characters in `out`
    i, n = 0, len(query)
    in_versioned = False  # inside an executed /*! ... */: its `*/` ends it
    while i < n:
        c = query[i]
        if c in "'\"`":
            j = _quoted_end(query, i)
            if j < 0:
                out.append(query[i:])
                return _finish(out), size
            out.append(query[i:j])
            size += j - i
            i = j
            continue
        if c == "/" and query.startswith("/*", i):
            nested = False
            if not in_versioned and (query.startswith("/*!", i) or query.startswith("/*M!", i)):
                mariadb_syntax = query[i + 2] == "M"
                k = i + (4 if mariadb_syntax else 3)
                digits = 0
                while k + digits < n and digits < 6 and query[k + digits] in "0123456789":
                    digits += 1
                version = int(query[k : k + digits]) if digits >= 5 else None
                if version is not None:
                    k += digits
                if _executes(version, mariadb_syntax, server_version):
                    in_versioned = True
                    out.append(" ")
                    size += 1
                    i = k
                    continue
                nested = True  # a skipped versioned comment may hold one ordinary comment
            i = _comment_end(query, i + 2, nested)
            out.append(" ")
            size += 1
            continue
        if c == "*" and in_versioned and query.startswith("*/", i):
            in_versioned = False
            out.append(" ")
            size += 1
            i += 2
            continue
        if c == "#" or (c == "-" and query.startswith("--", i) and (i + 2 == n or query[i + 2] <= " ")):
            end = query.find("\n", i)
            i = n if end < 0 else end + 1
            out.append(" ")
            size += 1
            continue
        if c == "-" and query.startswith("--", i):
            out.append("- -")  # `a--1` is a - (-1) in MySQL; keep any later reader from seeing a comment
            size += 3
            i += 2
            continue
        out.append(c)
        size += 1
        i += 1
    return _finish(out), None


def _executes(version: int | None, mariadb_syntax: bool, server_version: int | None) -> bool:
    """Whether a versioned comment is executed, by the servers' lexers: MySQL runs `/*!NNNNN` up to its
    version and ignores `/*M!`; MariaDB (versions from 100000 on) runs `/*M!NNNNNN` up to its version, and
    `/*!NNNNN` too except MySQL 5.7+ versions (50700..99999), whose syntax it may not have."""
    if server_version is None:
        return True
    mariadb = server_version >= 100000
    if mariadb_syntax and not mariadb:
        return False
    if version is None:
        return True
    if mariadb and not mariadb_syntax and 50700 <= version <= 99999:
        return False
    return version <= server_version


def _comment_end(query: str, i: int, nested: bool) -> int:
    """The index after the `*/` that closes a comment whose text starts at i (the end when there is none)."""
    n = len(query)
    while i < n:
        end = query.find("*/", i)
        if end < 0:
            return n
        inner = query.find("/*", i, end) if nested else -1
        if inner < 0:
            return end + 2
        nested = False
        i = query.find("*/", inner + 2)
        if i < 0:
            return n
        i += 2
    return n


def _finish(out: list[str]) -> str:
    text = "".join(out).strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def _quoted_end(query: str, i: int) -> int:
    """The index after the quoted string or name starting at query[i], or -1 when it is not terminated."""
    quote = query[i]
    j, n = i + 1, len(query)
    while j < n:
        ch = query[j]
        if ch == "\\" and quote != "`":
            j += 2
            continue
        if ch == quote:
            if j + 1 < n and query[j + 1] == quote:
                j += 2
                continue
            return j + 1
        j += 1
    return -1


def _first_word(query: str, server_version: int | None) -> str:
    """The statement's first word, upper-case (cheap: statements that cannot be DDL stop here)."""
    text, _ = _scan(query[:4096], server_version)
    word = []
    for ch in text:
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word or not ch.isspace():
            break
    first = "".join(word).upper()
    if first or len(query) <= 4096:
        return first
    text, _ = _scan(query, server_version)  # a leading comment longer than the cheap window
    return text.split(maxsplit=1)[0].upper() if text.split() else ""


# --------------------------------------------------------------------------------------------- tokens

_WORD, _NAME, _STR, _HEX, _BIT, _NUM, _PUNCT = "word", "name", "str", "hex", "bit", "num", "punct"
_STRING_TYPES = {
    TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING, TokenType.BYTE_STRING,
    TokenType.UNICODE_STRING, TokenType.HEREDOC_STRING,
}


@dataclass(frozen=True)
class _Tok:
    kind: str  # _WORD (unquoted word or keyword), _NAME (quoted name), _STR, _HEX, _BIT, _NUM, _PUNCT
    text: str  # words as written; names and strings unquoted and unescaped
    start: int  # offsets in the executable text: text[start:end] is the token as written
    end: int

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == _WORD else ""


def _word_like(s: str) -> bool:
    return bool(s) and all(ch.isalnum() or ch in "_$" or ord(ch) > 127 for ch in s)


def _tokens(sql: str) -> list[_Tok]:
    raw = _DIALECT.tokenize(sql)
    if raw and raw[0].token_type in MySQL.Tokenizer.COMMANDS:
        # sqlglot's tokenizer returns the rest of a statement that starts with RENAME, REPLACE, ... as one
        # string: tokenize that rest on its own.
        head, cut = raw[0], raw[0].end + 1
        rest = [_shift(t, cut) for t in _DIALECT.tokenize(sql[cut:])]
        raw = [head, *rest]
    out: list[_Tok] = []
    for t in raw:
        start, end = t.start, t.end + 1
        if t.token_type in _STRING_TYPES:
            out.append(_Tok(_STR, t.text, start, end))
        elif t.token_type == TokenType.HEX_STRING:
            out.append(_Tok(_HEX, t.text, start, end))
        elif t.token_type == TokenType.BIT_STRING:
            out.append(_Tok(_BIT, t.text, start, end))
        elif t.token_type == TokenType.IDENTIFIER:
            out.append(_Tok(_NAME, t.text, start, end))
        elif t.token_type == TokenType.NUMBER:
            out.append(_Tok(_NUM, t.text, start, end))
        elif " " in t.text.strip() or "\t" in t.text or "\n" in t.text:
            # sqlglot joins some keyword pairs into one token (`CHARACTER VARYING`, `PRIMARY KEY`, `ORDER BY`):
            # the frame is read word by word.
            pos = start
            for word in sql[start:end].split():
                at = sql.index(word, pos)
                out.append(_Tok(_WORD if _word_like(word) else _PUNCT, word, at, at + len(word)))
                pos = at + len(word)
        else:
            text = sql[start:end]
            out.append(_Tok(_WORD if _word_like(text) else _PUNCT, text, start, end))
    return out


def _shift(t: Token, by: int) -> Token:
    return Token(t.token_type, t.text, t.line, t.col, t.start + by, t.end + by, t.comments)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class _Stmt:
    """The tokens of one statement, with the helpers that read its frame."""

    def __init__(self, sql: str, toks: list[_Tok], default_schema: str) -> None:
        self.sql = sql
        self.toks = toks
        self.n = len(toks)
        self.default_schema = default_schema
        self.tables: list[tuple[str, str]] = []
        self.schemas: list[str] = []

    def word(self, i: int) -> str:
        return self.toks[i].up if 0 <= i < self.n else ""

    def at(self, i: int, *words: str) -> bool:
        """Whether the words at i are `words` (an entry "A|B" accepts either)."""
        return all(self.word(i + k) in w.split("|") for k, w in enumerate(words))

    def punct(self, i: int, p: str) -> bool:
        return 0 <= i < self.n and self.toks[i].kind == _PUNCT and self.toks[i].text == p

    def is_name(self, i: int) -> bool:
        return 0 <= i < self.n and self.toks[i].kind in (_NAME, _WORD)

    def name(self, i: int, what: str = "a name") -> tuple[str, int]:
        if not self.is_name(i):
            raise _NotUnderstood(f"expected {what} at {self.snippet(i)}")
        return self.toks[i].text, i + 1

    def qualified(self, i: int, what: str = "a table name") -> tuple[tuple[str, str], int]:
        """`db.t` -> (db, t); `t` -> (default schema, t)."""
        first, j = self.name(i, what)
        if self.punct(j, ".") and self.is_name(j + 1):
            return (first, self.toks[j + 1].text), j + 2
        return (self.default_schema, first), j

    def close(self, i: int) -> int:
        """The index of the `)` matching the `(` at i."""
        depth = 0
        for j in range(i, self.n):
            if self.punct(j, "("):
                depth += 1
            elif self.punct(j, ")"):
                depth -= 1
                if depth == 0:
                    return j
        raise _NotUnderstood("unbalanced parentheses")

    def split(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """toks[lo:hi] cut at its top-level commas, as (start, end) index ranges."""
        parts, depth, start = [], 0, lo
        for j in range(lo, hi):
            if self.punct(j, "("):
                depth += 1
            elif self.punct(j, ")"):
                depth -= 1
            elif depth == 0 and self.punct(j, ","):
                parts.append((start, j))
                start = j + 1
        parts.append((start, hi))
        return parts

    def text(self, lo: int, hi: int) -> str:
        """The source text of toks[lo:hi]."""
        if lo >= hi:
            return ""
        return self.sql[self.toks[lo].start : self.toks[hi - 1].end]

    def snippet(self, i: int, hi: int | None = None) -> str:
        if i >= self.n:
            return "the end of the statement"
        text = self.text(i, min(hi if hi is not None else self.n, self.n))
        return repr(text if len(text) <= 120 else text[:117] + "...")

    def skip_wait(self, i: int) -> int:
        """MariaDB's `WAIT n` / `NOWAIT` after a table name."""
        if self.at(i, "WAIT") and i + 1 < self.n and self.toks[i + 1].kind == _NUM:
            return i + 2
        return i + 1 if self.at(i, "NOWAIT") else i

    def end(self, i: int, what: str) -> None:
        if i < self.n:
            raise _NotUnderstood(f"{what}: unexpected {self.snippet(i)}")

    def table(self, t: tuple[str, str]) -> None:
        if t not in self.tables:
            self.tables.append(t)


# -------------------------------------------------------------------------------------------- entry

_TABLE_DDL = ("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE", "IMPORT")


def parse_statement(query: str, default_schema: str, *, server_version: int | None = None) -> ParsedStatement:
    """What one statement of the binlog does to tables (module docstring).

    `default_schema`: the query event's current database ("" when none), for unqualified names.
    `server_version`: the source's version as a number (101106 for MariaDB 10.11.6, 80400 for MySQL 8.4),
    which decides the versioned comments; None executes all of them. Never raises."""
    try:
        if _first_word(query, server_version) not in _TABLE_DDL:
            return ParsedStatement()
        return _parse(query, default_schema, server_version)
    except Exception as e:  # a bug here must not stop a reader: the statement is reported as not understood
        return ParsedStatement(error=f"the DDL parser failed on this statement ({type(e).__name__}: {e})")


def _parse(query: str, default_schema: str, server_version: int | None) -> ParsedStatement:
    sql, unterminated = _scan(query, server_version)
    problem = None
    if unterminated is not None:
        problem = "an unterminated quoted string or name"
        sql = sql[:unterminated]
    try:
        toks = _tokens(sql)
    except sqlglot.errors.SqlglotError as e:
        toks, problem = [], problem or f"cannot split it into tokens ({e})"
    st = _Stmt(sql, toks, default_schema)
    table_ddl = _is_table_ddl(st)
    try:
        if problem is not None:
            if table_ddl:
                _frame_only(st)
            raise _NotUnderstood(problem)
        result = _dispatch(st)
        if table_ddl and any(st.punct(j, ";") for j in range(st.n)):
            raise _NotUnderstood("it holds more than one statement")
        return result
    except _NotUnderstood as e:
        if not table_ddl:
            return ParsedStatement()
        return ParsedStatement(tables=tuple(st.tables), schemas=tuple(st.schemas), error=str(e))


def _is_table_ddl(st: _Stmt) -> bool:
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


def _frame_only(st: _Stmt) -> None:
    """Read the target names of a table statement whose text is cut short (for ParsedStatement.tables)."""
    with contextlib.suppress(_NotUnderstood):
        _dispatch(st)


def _dispatch(st: _Stmt) -> ParsedStatement:
    w = st.word(0)
    if w == "TRUNCATE":
        return _truncate(st)
    if w == "RENAME":
        return _rename_table(st) if st.at(1, "TABLE|TABLES") else ParsedStatement()
    if w == "DROP":
        return _drop(st)
    if w == "ALTER":
        return _alter(st)
    if w == "CREATE":
        return _create(st)
    if w == "IMPORT" and st.at(1, "TABLE"):
        raise _NotUnderstood("IMPORT TABLE (MySQL) creates tables with their rows from files, without row events")
    return ParsedStatement()


def _result(st: _Stmt, changes: list[SchemaChange]) -> ParsedStatement:
    return ParsedStatement(
        changes=tuple(replace(c, step=k) for k, c in enumerate(changes)),
        tables=tuple(st.tables),
        schemas=tuple(st.schemas),
    )


# ------------------------------------------------------------------------------ TRUNCATE, DROP, RENAME

def _truncate(st: _Stmt) -> ParsedStatement:
    # TRUNCATE [TABLE] name [WAIT n | NOWAIT]
    i = 2 if st.at(1, "TABLE") else 1
    target, j = st.qualified(i)
    st.table(target)
    st.end(st.skip_wait(j), "TRUNCATE")
    # sqlglot reads the name again (it has no WAIT / NOWAIT, nor some unquoted names): both readings must agree.
    tree = _sqlglot(st.text(0, j))
    if isinstance(tree, exp.TruncateTable) and [_table_of(t, st.default_schema) for t in tree.expressions] != [target]:
        raise _NotUnderstood("TRUNCATE: sqlglot and the tokens disagree on the table")
    return _result(st, [SchemaChange(TRUNCATE_TABLE, *target)])


def _table_of(node: exp.Expr, default_schema: str) -> tuple[str, str]:
    if not isinstance(node, exp.Table) or node.args.get("catalog") is not None:
        raise _NotUnderstood(f"expected a table name, found {node.sql(dialect='mysql')!r}")
    return (node.db or default_schema, node.name)


def _drop(st: _Stmt) -> ParsedStatement:
    i = 1
    if st.at(i, "DATABASE|SCHEMA"):
        i += 1
        if st.at(i, "IF", "EXISTS"):
            i += 2
        schema, j = st.name(i, "a database name")
        st.schemas.append(schema)
        st.end(j, "DROP DATABASE")
        return _result(st, [SchemaChange(DROP_DATABASE, schema, "")])
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


def _drop_table(st: _Stmt, i: int) -> ParsedStatement:
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
    tree = _sqlglot(st.text(0, names_end))
    if (
        isinstance(tree, exp.Drop) and str(tree.args.get("kind")).upper() == "TABLE"
        and [_table_of(t, st.default_schema) for t in tree.args.get("tables") or []] != targets
    ):
        raise _NotUnderstood("DROP TABLE: sqlglot and the tokens disagree on the tables")
    return _result(st, [SchemaChange(DROP_TABLE, *t) for t in targets])


def _drop_index(st: _Stmt, i: int) -> ParsedStatement:
    # DROP INDEX [IF EXISTS] name ON table ...: `PRIMARY` is the primary key
    if st.at(i, "IF", "EXISTS"):
        i += 2
    index, i = st.name(i, "an index name")
    if not st.at(i, "ON"):
        return ParsedStatement()
    target, _ = st.qualified(i + 1)
    st.table(target)
    if index.upper() == "PRIMARY":
        return _result(st, [SchemaChange(PRIMARY_KEY, *target, key=())])
    return _result(st, [])


def _rename_table(st: _Stmt) -> ParsedStatement:
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
            raise _NotUnderstood(f"RENAME TABLE: expected TO at {st.snippet(i)}")
        target, i = st.qualified(i + 1)
        st.table(target)
        changes.append(SchemaChange(RENAME_TABLE, *source, to_schema=target[0], to_table=target[1]))
        if not st.punct(i, ","):
            break
        i += 1
    st.end(i, "RENAME TABLE")
    return _result(st, changes)


# --------------------------------------------------------------------------------------------- CREATE

def _create(st: _Stmt) -> ParsedStatement:
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
        return _result(st, [SchemaChange(DROP_DATABASE, schema, "")] if replace_ else [])
    i = _skip_definer(st, i)
    if st.at(i, "TRIGGER"):
        return _create_trigger(st, i + 1)
    return _create_index(st, i)  # or nothing: views, routines, events, users, sequences, servers, ...


def _skip_definer(st: _Stmt, i: int) -> int:
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


def _create_index(st: _Stmt, i: int) -> ParsedStatement:
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
    return _result(st, [])


def _create_trigger(st: _Stmt, i: int) -> ParsedStatement:
    # CREATE [DEFINER=...] TRIGGER [IF NOT EXISTS] name {BEFORE|AFTER} {INSERT|UPDATE|DELETE} ON table ...
    for j in range(i, min(i + 12, st.n)):
        if st.at(j, "ON"):
            target, _ = st.qualified(j + 1)
            st.table(target)
            break
    return _result(st, [])


@dataclass
class _TableDefaults:
    """A CREATE TABLE's own default character set, for the column types it decides."""

    charset: str | None = None


def _create_table(st: _Stmt, i: int, replace_: bool) -> ParsedStatement:
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
                raise _NotUnderstood(f"CREATE TABLE ... (LIKE ...): unexpected {st.snippet(j)}")
            j += 1
        st.end(j, "CREATE TABLE ... LIKE")
        change = SchemaChange(
            CREATE_TABLE_LIKE, *target, to_schema=source[0], to_table=source[1], replace=replace_,
            if_not_exists=if_not_exists,
        )
        return _result(st, [change])
    body: tuple[int, int] | None = None
    if st.punct(i, "(") and not _query_starts(st, i):
        close = st.close(i)
        body, i = (i + 1, close), close + 1
    as_select, defaults = _table_options(st, i)
    if body is None and not as_select:
        raise _NotUnderstood(f"CREATE TABLE: expected a column list, LIKE or a query at {st.snippet(i)}")
    columns: list[ColumnSpec] = []
    keys: list[list[str]] = []  # each PRIMARY KEY the statement declares (the server allows one)
    for lo, hi in st.split(*body) if body else []:
        if lo == hi:
            raise _NotUnderstood("CREATE TABLE: an empty item in the column list")
        if _is_column_item(st, lo):
            column, inline_key = _column(st, lo, hi, "create", defaults=defaults)
            columns.append(column)
            if inline_key:
                keys.append([column.name])
        elif _is_index_item(st, lo):
            table_key = _table_key(st, lo, hi)
            if table_key is not None:
                keys.append(table_key)
        else:
            raise _NotUnderstood(f"CREATE TABLE: cannot read the item {st.snippet(lo, hi)}")
    if len(keys) > 1:
        raise _NotUnderstood("CREATE TABLE: more than one primary key")
    key = keys[0] if keys else []
    in_key = {k.casefold() for k in key}
    columns = [replace(c, nullable=False) if c.name.casefold() in in_key else c for c in columns]
    change = SchemaChange(
        CREATE_TABLE, *target, columns=tuple(columns), key=tuple(key), as_select=as_select, replace=replace_,
        if_not_exists=if_not_exists,
    )
    return _result(st, [change])


def _query_starts(st: _Stmt, i: int) -> bool:
    """Whether a query (CREATE TABLE ... SELECT) starts at i."""
    if st.punct(i, "("):
        return _query_starts(st, i + 1)
    return st.at(i, "SELECT|VALUES|TABLE") or (st.at(i, "WITH") and not st.at(i + 1, "SYSTEM"))


def _table_options(st: _Stmt, i: int) -> tuple[bool, _TableDefaults]:
    """Scan a CREATE TABLE's options: (whether a query follows, the table's default charset)."""
    defaults = _TableDefaults()
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
            raise _NotUnderstood(_VERSIONED)
        if st.at(i, "CHARACTER|CHAR", "SET") or st.at(i, "CHARSET"):
            j = i + (2 if st.at(i, "CHARACTER|CHAR") else 1)
            j += 1 if st.punct(j, "=") else 0
            if st.is_name(j) or (j < st.n and st.toks[j].kind == _STR):
                defaults.charset = _charset_name(st.toks[j].text)
            i = j + 1
            continue
        if st.at(i, "COLLATE"):
            j = i + 1 + (1 if st.punct(i + 1, "=") else 0)
            if st.is_name(j) or (j < st.n and st.toks[j].kind == _STR):
                collation = st.toks[j].text
            i = j + 1
            continue
        i += 1
    if defaults.charset is None and collation is not None:
        defaults.charset = _collation_charset(collation)
    return False, defaults


_VERSIONED = (
    "system-versioned tables are not supported: their rows carry hidden row_start / row_end columns and a "
    "DELETE keeps the row as history"
)
_ITEM_KEYWORDS = {"PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT", "CHECK"}


def _is_index_item(st: _Stmt, lo: int) -> bool:
    """Whether a CREATE TABLE item is a key, index, constraint or period (not a column)."""
    return (
        st.word(lo) in _ITEM_KEYWORDS or st.at(lo, "PERIOD", "FOR") or st.at(lo, "VECTOR", "INDEX|KEY")
    )


def _is_column_item(st: _Stmt, lo: int) -> bool:
    return lo < st.n and st.toks[lo].kind in (_NAME, _WORD) and not _is_index_item(st, lo)


def _table_key(st: _Stmt, lo: int, hi: int) -> list[str] | None:
    """The primary key columns of a CREATE TABLE item (None for other indexes and constraints)."""
    i = lo
    if st.at(i, "CONSTRAINT"):
        i += 1
        if not st.at(i, "PRIMARY|UNIQUE|FOREIGN|CHECK"):
            i += 1  # the constraint's name
    if not st.at(i, "PRIMARY", "KEY"):
        return None  # indexes, unique / foreign keys, checks, periods: no effect on columns or the key
    tree = _sqlglot(f"CREATE TABLE _x ({st.text(i, hi)})")
    if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema):
        items = tree.this.expressions
        if len(items) == 1 and isinstance(items[0], exp.PrimaryKey):
            names = _key_names(items[0])
            if names is not None:
                return names
    return _key_tokens(st, i + 2, hi)


def _key_names(pk: exp.PrimaryKey) -> list[str] | None:
    """The key's columns, None when a part is more than a plain column (a prefix length, DESC: tokens then)."""
    if not all(isinstance(part, exp.Identifier | exp.Column) for part in pk.expressions):
        return None
    return [part.name for part in pk.expressions]


def _key_tokens(st: _Stmt, i: int, hi: int) -> list[str]:
    """Key columns from the tokens: the first parenthesised list after the key's optional name and USING
    (key parts may carry a prefix length `a(10)` or ASC / DESC)."""
    while i < hi and not st.punct(i, "("):
        i += 1
    if i >= hi:
        raise _NotUnderstood(f"a primary key without columns: {st.snippet(i, hi)}")
    names = []
    for lo, end in st.split(i + 1, st.close(i)):
        name, j = st.name(lo, "a key column")
        if st.punct(j, "("):
            j = st.close(j) + 1
        if st.at(j, "ASC|DESC"):
            j += 1
        if j != end:
            raise _NotUnderstood(f"primary key part {st.snippet(lo, end)} is not a column")
        names.append(name)
    return names


# ---------------------------------------------------------------------------------------------- ALTER

def _alter(st: _Stmt) -> ParsedStatement:
    i = 1
    while st.at(i, "ONLINE|OFFLINE|IGNORE"):
        i += 1
    if st.at(i, "DATABASE|SCHEMA"):
        i += 1
        if st.is_name(i) and not st.at(i, "DEFAULT|CHARACTER|CHARSET|CHAR|COLLATE|COMMENT|ENCRYPTION|READ|UPGRADE"):
            st.schemas.append(st.toks[i].text)
        elif st.default_schema:
            st.schemas.append(st.default_schema)
        return _result(st, [])
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
        raise _NotUnderstood("ALTER TABLE renames the table more than once")
    _check_sequential(changes)
    return _result(st, changes + renames)


_PARTITION_LISTS = "TRUNCATE|DROP|ANALYZE|CHECK|OPTIMIZE|REBUILD|REPAIR|DISCARD|IMPORT|REORGANIZE"


def _alter_clauses(st: _Stmt, i: int) -> list[tuple[int, int]]:
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
            raise _NotUnderstood(f"ALTER TABLE: an empty action at {st.snippet(i)}")
        clauses.append((lo, i))
        if st.punct(i, ","):
            i += 1
            if i >= st.n:
                raise _NotUnderstood("ALTER TABLE: a comma after the last action")
    return clauses


_NOT_A_COLUMN = {
    "INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "PRIMARY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION",
}


def _names_column(st: _Stmt, i: int) -> bool:
    """Whether ADD / DROP is followed by a column (not an index, constraint, partition, period, versioning)."""
    if not st.is_name(i) or st.toks[i].kind == _NAME:
        return st.is_name(i)
    return not (
        st.word(i) in _NOT_A_COLUMN or st.at(i, "PERIOD", "FOR") or st.at(i, "SYSTEM", "VERSIONING")
        or st.at(i, "VECTOR", "INDEX|KEY")
    )


def _alter_clause(st: _Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
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
                raise _NotUnderstood(f"ALTER TABLE ADD (...): unexpected {st.snippet(close + 1, hi)}")
            return [
                SchemaChange(ADD_COLUMN, *target, column=_column(st, a, b, "add")[0], if_not_exists=if_not_exists)
                for a, b in st.split(i + 1, close)
            ]
        if explicit or if_not_exists or (i < hi and _names_column(st, i)):
            column, _ = _column(st, i, hi, "add")
            return [SchemaChange(ADD_COLUMN, *target, column=column, if_not_exists=if_not_exists)]
    elif st.at(i, "MODIFY"):
        i += 2 if st.at(i + 1, "COLUMN") else 1
        i += 2 if st.at(i, "IF", "EXISTS") else 0
        column, _ = _column(st, i, hi, "modify")
        return [SchemaChange(MODIFY_COLUMN, *target, name=column.name, column=column)]
    elif st.at(i, "CHANGE"):
        i += 2 if st.at(i + 1, "COLUMN") else 1
        i += 2 if st.at(i, "IF", "EXISTS") else 0
        old, i = st.name(i, "a column name")
        column, _ = _column(st, i, hi, "change", old=old)
        return [SchemaChange(MODIFY_COLUMN, *target, name=old, column=column)]
    elif st.at(i, "ALTER") and not st.at(i + 1, "INDEX|KEY|CHECK|CONSTRAINT"):
        return _alter_column(st, lo, hi, target)
    elif st.at(i, "DROP") and i + 1 < hi and _names_column(st, i + 1):
        return _drop_column(st, lo, hi, target)
    elif st.at(i, "RENAME", "COLUMN"):
        return _rename_column(st, lo, hi, target)
    tree = _sqlglot(f"ALTER TABLE _x {st.text(lo, hi)}")
    if isinstance(tree, exp.Alter):
        changes = _from_alter_tree(tree, target, st.default_schema)
        if changes is not None:
            for c in changes:
                if c.to_table is not None:
                    st.table((c.to_schema or "", c.to_table))
            return changes
    return _alter_clause_tokens(st, lo, hi, target)


def _alter_column(st: _Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    # ALTER [COLUMN] c {SET DEFAULT x | DROP DEFAULT | SET VISIBLE | SET INVISIBLE}
    i = lo + (2 if st.at(lo + 1, "COLUMN") else 1)
    name, i = st.name(i, "a column name")
    tree = _sqlglot(f"ALTER TABLE _x ALTER COLUMN {_quote(name)} {st.text(i, hi)}")
    action = _single_action(tree)
    if not isinstance(action, exp.AlterColumn) or action.name != name:
        raise _NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")
    args = {k for k, v in action.args.items() if v is not None and v is not False}
    if args == {"this", "default"}:
        default = _default(action.args["default"], numeric=None)
        column = ColumnSpec(name=name, mysql_type="", default=default)
        return [SchemaChange(SET_DEFAULT, *target, name=name, column=column)]
    if args == {"this", "drop"}:
        return [SchemaChange(DROP_DEFAULT, *target, name=name)]
    if args == {"this", "visible"}:
        return []
    raise _NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")


def _drop_column(st: _Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    # DROP [COLUMN] [IF EXISTS] c [RESTRICT | CASCADE]
    i = lo + (2 if st.at(lo + 1, "COLUMN") else 1)
    exists = st.at(i, "IF", "EXISTS")
    i += 2 if exists else 0
    name, i = st.name(i, "a column name")
    tree = _sqlglot(f"ALTER TABLE _x DROP COLUMN {'IF EXISTS ' if exists else ''}{_quote(name)} {st.text(i, hi)}")
    action = _single_action(tree)
    if not (isinstance(action, exp.Drop) and str(action.args.get("kind")).upper() == "COLUMN"
            and [t.name for t in action.args.get("tables") or []] == [name]):
        raise _NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")
    return [SchemaChange(DROP_COLUMN, *target, name=name)]


def _rename_column(st: _Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    # RENAME COLUMN [IF EXISTS] a TO b
    i = lo + 2
    exists = st.at(i, "IF", "EXISTS")
    i += 2 if exists else 0
    old, i = st.name(i, "a column name")
    if not st.at(i, "TO"):
        raise _NotUnderstood(f"ALTER TABLE RENAME COLUMN: expected TO at {st.snippet(i)}")
    new, i = st.name(i + 1, "a column name")
    if i != hi:
        raise _NotUnderstood(f"ALTER TABLE RENAME COLUMN: unexpected {st.snippet(i, hi)}")
    tree = _sqlglot(f"ALTER TABLE _x RENAME COLUMN {'IF EXISTS ' if exists else ''}{_quote(old)} TO {_quote(new)}")
    action = _single_action(tree)
    if not (isinstance(action, exp.RenameColumn) and action.this.name == old and action.args["to"].name == new):
        raise _NotUnderstood(f"ALTER TABLE: cannot read {st.snippet(lo, hi)}")
    return [SchemaChange(RENAME_COLUMN, *target, name=old, new_name=new)]


def _single_action(tree: exp.Expr | None) -> exp.Expr | None:
    if not isinstance(tree, exp.Alter) or tree.args.get("options"):
        return None
    actions = tree.args.get("actions") or []
    return actions[0] if len(actions) == 1 else None


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
                    names = _key_names(inner[0])
                    if names is None:
                        return None
                    changes.append(SchemaChange(PRIMARY_KEY, *target, key=tuple(names)))
                elif not isinstance(
                    inner[0], exp.IndexColumnConstraint | exp.UniqueColumnConstraint | exp.ForeignKey
                    | exp.CheckColumnConstraint
                ):
                    return None
        elif isinstance(action, exp.AlterRename):
            to = _table_of(action.this, default_schema)
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


def _alter_clause_tokens(st: _Stmt, lo: int, hi: int, target: tuple[str, str]) -> list[SchemaChange]:
    """The ALTER TABLE actions sqlglot's grammar does not parse, read from the tokens."""
    i = lo
    if st.at(i, "TRUNCATE|DROP", "PARTITION"):
        parts, j = _partition_names(st, i + 2, hi)
        if j != hi:
            raise _NotUnderstood(f"PARTITION: unexpected {st.snippet(j, hi)}")
        kind = TRUNCATE_PARTITION if st.at(i, "TRUNCATE") else DROP_PARTITION
        return [SchemaChange(kind, *target, partitions=parts)]
    if st.at(i, "EXCHANGE", "PARTITION"):
        part, j = st.name(i + 2, "a partition name")
        if not st.at(j, "WITH", "TABLE"):
            raise _NotUnderstood(f"EXCHANGE PARTITION: expected WITH TABLE at {st.snippet(j, hi)}")
        other, j = st.qualified(j + 2)
        if st.at(j, "WITH|WITHOUT", "VALIDATION"):
            j += 2
        if j != hi:
            raise _NotUnderstood(f"EXCHANGE PARTITION: unexpected {st.snippet(j, hi)}")
        st.table(other)
        return [SchemaChange(EXCHANGE_PARTITION, *target, partitions=(part,), to_schema=other[0], to_table=other[1])]
    if st.at(i, "CONVERT", "TO"):
        j = i + 2
        if st.at(j, "CHARACTER|CHAR", "SET"):
            j += 2
        elif st.at(j, "CHARSET"):
            j += 1
        else:
            raise _NotUnderstood(f"CONVERT TO: expected CHARACTER SET at {st.snippet(j, hi)}")
        if not st.is_name(j) and not (j < hi and st.toks[j].kind == _STR):
            raise _NotUnderstood(f"CONVERT TO CHARACTER SET: expected a character set at {st.snippet(j, hi)}")
        charset = None if st.at(j, "DEFAULT") else _charset_name(st.toks[j].text)  # DEFAULT: the database's
        j += 1
        if st.at(j, "COLLATE"):
            j += 2 + (1 if st.punct(j + 1, "=") else 0)
        if j != hi:
            raise _NotUnderstood(f"CONVERT TO CHARACTER SET: unexpected {st.snippet(j, hi)}")
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
        raise _NotUnderstood("CONVERT PARTITION / CONVERT TABLE moves rows between tables without row events")
    if st.at(i, "DROP", "INDEX|KEY|CONSTRAINT"):
        # The primary key is the index (and, in MySQL 8, the constraint) named `PRIMARY`.
        j = i + 2 + (2 if st.at(i + 2, "IF", "EXISTS") else 0)
        index, j = st.name(j, "an index name")
        if j != hi:
            raise _NotUnderstood(f"DROP INDEX: unexpected {st.snippet(j, hi)}")
        return [SchemaChange(PRIMARY_KEY, *target, key=())] if index.upper() == "PRIMARY" else []
    if st.at(i, "DROP", "FOREIGN", "KEY") or st.at(i, "DROP", "CHECK"):
        return []
    if st.at(i, "ADD"):
        j = i + 1
        if st.at(j, "CONSTRAINT"):
            j += 1 if st.at(j + 1, "PRIMARY|UNIQUE|FOREIGN|CHECK") else 2
        if st.at(j, "PRIMARY", "KEY"):
            return [SchemaChange(PRIMARY_KEY, *target, key=tuple(_key_tokens(st, j + 2, hi)))]
        if st.at(j, "INDEX|KEY|UNIQUE|FULLTEXT|SPATIAL|FOREIGN|CHECK") or st.at(j, "VECTOR", "INDEX|KEY"):
            return []
    if st.at(i, "RENAME"):
        j = i + 1 + (1 if st.at(i + 1, "TO|AS") else 0)
        to, j = st.qualified(j)
        if j != hi:
            raise _NotUnderstood(f"RENAME: unexpected {st.snippet(j, hi)}")
        st.table(to)
        return [SchemaChange(RENAME_TABLE, *target, to_schema=to[0], to_table=to[1])]
    if _only_table_options(st, lo, hi):
        return []
    raise _NotUnderstood(f"ALTER TABLE: unknown action {st.snippet(lo, hi)}")


def _partition_names(st: _Stmt, i: int, hi: int) -> tuple[tuple[str, ...], int]:
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


def _only_table_options(st: _Stmt, lo: int, hi: int) -> bool:
    """Whether toks[lo:hi] is nothing but table options (`[DEFAULT] name [=] value ...`)."""
    i = lo
    while i < hi:
        if st.at(i, "DEFAULT"):
            i += 1
        if st.at(i, "CHARACTER|CHAR", "SET") or st.at(i, "DATA|INDEX", "DIRECTORY"):
            i += 2
        elif st.toks[i].kind == _WORD and st.toks[i].up in _TABLE_OPTIONS:
            i += 1
        else:
            return False
        if st.punct(i, "="):
            i += 1
        if st.punct(i, "("):
            i = st.close(i) + 1
        elif i < hi and st.toks[i].kind != _PUNCT:
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
            raise _NotUnderstood(
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


# -------------------------------------------------------------------------------------- column types

_INTS = {
    "TINYINT": "tinyint", "INT1": "tinyint", "SMALLINT": "smallint", "INT2": "smallint",
    "MEDIUMINT": "mediumint", "MIDDLEINT": "mediumint", "INT3": "mediumint", "INT": "int", "INTEGER": "int",
    "INT4": "int", "BIGINT": "bigint", "INT8": "bigint",
}
_NO_ARGS = {
    "DATE": "date", "TINYTEXT": "tinytext", "MEDIUMTEXT": "mediumtext", "LONGTEXT": "longtext",
    "TINYBLOB": "tinyblob", "MEDIUMBLOB": "mediumblob", "LONGBLOB": "longblob", "JSON": "json", "UUID": "uuid",
    "INET4": "inet4", "INET6": "inet6", "GEOMETRY": "geometry", "POINT": "point", "LINESTRING": "linestring",
    "POLYGON": "polygon", "MULTIPOINT": "multipoint", "MULTILINESTRING": "multilinestring",
    "MULTIPOLYGON": "multipolygon", "GEOMETRYCOLLECTION": "geometrycollection", "GEOMCOLLECTION": "geomcollection",
    "BOOL": "tinyint", "BOOLEAN": "tinyint", "SERIAL": "bigint",
}
_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "float", "double", "bit", "year"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_TEXT_TO_BINARY = {
    "char": "binary", "varchar": "varbinary", "tinytext": "tinyblob", "text": "blob", "mediumtext": "mediumblob",
    "longtext": "longblob",
}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
# Bytes per character of the multi-byte character sets (any other known set has one).
_MBMAXLEN = {
    "big5": 2, "ujis": 3, "sjis": 2, "euckr": 2, "gb2312": 2, "gbk": 2, "utf8mb3": 3, "ucs2": 2, "utf8mb4": 4,
    "utf16": 4, "utf16le": 4, "utf32": 4, "cp932": 2, "eucjpms": 3, "gb18030": 4,
}
_SINGLE_BYTE = {
    "dec8", "cp850", "hp8", "koi8r", "latin1", "latin2", "swe7", "ascii", "hebrew", "tis620", "koi8u", "greek",
    "cp1250", "latin5", "armscii8", "cp866", "keybcs2", "macce", "macroman", "cp852", "latin7", "cp1251",
    "cp1256", "cp1257", "binary", "geostd8",
}


def _charset_name(name: str) -> str:
    """A character set as information_schema names it (`utf8` is `utf8mb3`)."""
    lower = name.lower()
    return "utf8mb3" if lower == "utf8" else lower


def _collation_charset(collation: str) -> str | None:
    """The character set a collation belongs to (`utf8mb4_bin` -> utf8mb4), None when its name does not say."""
    prefix = _charset_name(collation.split("_", 1)[0])
    return prefix if prefix in _MBMAXLEN or prefix in _SINGLE_BYTE else None


@dataclass
class _Type:
    """A column type as the statement wrote it, before the attributes that may still change it."""

    base: str  # the information_schema base name
    args: str | None = None  # what goes between the parentheses in the final type
    unsigned: bool = False
    charset: str | None = None  # explicit (CHARACTER SET, CHARSET, NATIONAL, ASCII, UNICODE, BYTE)
    collation: str | None = None
    text_length: int | None = None  # TEXT(M) / BLOB(M): the size class is decided by M (and the charset)
    serial: bool = False
    compressed: bool = False


def _read_type(st: _Stmt, i: int, hi: int) -> tuple[_Type, int]:
    """MySQL's data_type grammar over toks[i:hi] -> (the type, the index after it and its type attributes)."""
    w = st.word(i)
    if i >= hi or not w:
        raise _NotUnderstood(f"expected a column type at {st.snippet(i, hi)}")
    j = i + 1
    national = False
    if w in ("NATIONAL", "NCHAR", "NVARCHAR"):
        national = True
        if w == "NATIONAL":
            w = st.word(j)
            j += 1
            if w not in ("CHAR", "CHARACTER", "VARCHAR", "VARCHARACTER"):
                raise _NotUnderstood(f"unknown column type at {st.snippet(i, hi)}")
        elif w == "NCHAR":
            w = "CHAR"
        else:
            w = "VARCHAR"
    if w in ("CHAR", "CHARACTER") and (st.at(j, "VARYING") or (national and st.at(j, "VARCHAR|VARCHARACTER"))):
        w, j = "VARCHAR", j + 1  # CHAR VARYING, NATIONAL CHAR VARYING, NCHAR VARCHAR
    elif w == "DOUBLE" and st.at(j, "PRECISION"):
        j += 1
    elif w == "LONG":
        if st.at(j, "VARBINARY"):
            w, j = "MEDIUMBLOB", j + 1
        else:
            w, j = "MEDIUMTEXT", j + (1 if st.at(j, "VARCHAR|VARCHARACTER") else 0)
    t = _type_base(w, st, i, hi)
    if national:
        t.charset = "utf8mb3"
    if w == "SERIAL":
        t.unsigned, t.serial = True, True
    args: list[_Tok] = []
    if st.punct(j, "("):
        close = st.close(j)
        if close >= hi:
            raise _NotUnderstood(f"unbalanced parentheses in the type at {st.snippet(i, hi)}")
        args = [st.toks[k] for k in range(j + 1, close) if not st.punct(k, ",")]
        commas = sum(1 for k in range(j + 1, close) if st.punct(k, ","))
        if commas != max(len(args) - 1, 0) or (close > j + 1 and not args):
            raise _NotUnderstood(f"cannot read the type's parameters at {st.snippet(i, hi)}")
        j = close + 1
    _type_args(t, w, args, st.snippet(i, hi))
    while j < hi:  # type attributes
        a = st.word(j)
        if a in ("UNSIGNED", "SIGNED", "ZEROFILL") and t.base in _NUMERIC:
            t.unsigned = t.unsigned or a != "SIGNED"  # ZEROFILL implies UNSIGNED
            j += 1
        elif a == "BINARY" and t.base in _TEXT:
            j += 1  # the charset's binary collation: still text
        elif a == "BYTE" and t.base in ("char", "varchar"):
            t.charset, j = "binary", j + 1
        elif a == "ASCII" and t.base in _TEXT:
            t.charset, j = "latin1", j + 1
        elif a == "UNICODE" and t.base in _TEXT:
            t.charset, j = "ucs2", j + 1
        elif (st.at(j, "CHARACTER|CHAR", "SET") or a == "CHARSET") and t.base in _TEXT | {"json"}:
            j += 1 if a == "CHARSET" else 2
            if not st.is_name(j) and not (j < hi and st.toks[j].kind == _STR):
                raise _NotUnderstood(f"expected a character set at {st.snippet(j, hi)}")
            t.charset, j = _charset_name(st.toks[j].text), j + 1
        elif a == "COLLATE" and t.base in _TEXT | {"json"}:
            if not st.is_name(j + 1) and not (j + 1 < hi and st.toks[j + 1].kind == _STR):
                raise _NotUnderstood(f"expected a collation at {st.snippet(j + 1, hi)}")
            t.collation, j = st.toks[j + 1].text, j + 2
        else:
            break
    return t, j


def _type_base(w: str, st: _Stmt, i: int, hi: int) -> _Type:
    if w in _INTS:
        return _Type(_INTS[w])
    if w in _NO_ARGS:
        return _Type(_NO_ARGS[w])
    simple = {
        "DECIMAL": "decimal", "DEC": "decimal", "NUMERIC": "decimal", "FIXED": "decimal", "FLOAT": "float",
        "FLOAT4": "float", "FLOAT8": "double", "DOUBLE": "double", "REAL": "double", "BIT": "bit", "TIME": "time",
        "DATETIME": "datetime", "TIMESTAMP": "timestamp", "YEAR": "year", "CHAR": "char", "CHARACTER": "char",
        "VARCHAR": "varchar", "VARCHARACTER": "varchar", "BINARY": "binary", "VARBINARY": "varbinary",
        "TEXT": "text", "BLOB": "blob", "ENUM": "enum", "SET": "set", "VECTOR": "vector", "MEDIUMTEXT": "mediumtext",
        "MEDIUMBLOB": "mediumblob",
    }
    if w in simple:
        return _Type(simple[w])
    raise _NotUnderstood(f"unknown column type at {st.snippet(i, hi)}")


def _ints(args: list[_Tok], where: str) -> list[int]:
    if not all(a.kind == _NUM and a.text.isdigit() for a in args):
        raise _NotUnderstood(f"cannot read the type's parameters at {where}")
    return [int(a.text) for a in args]


def _type_args(t: _Type, w: str, args: list[_Tok], where: str) -> None:
    """Fold the parenthesised parameters into the type (information_schema's spelling)."""
    b = t.base
    if b in ("enum", "set"):
        if not args or not all(a.kind == _STR for a in args):
            raise _NotUnderstood(f"cannot read the {b.upper()} labels at {where}")
        # The server drops trailing spaces from labels and writes them with append_unescaped().
        t.args = ",".join(_quote_label(a.text.rstrip(" ")) for a in args)
        return
    nums = _ints(args, where)
    if b in _INTS.values() or w in ("YEAR", "BOOL", "BOOLEAN", "SERIAL"):
        if len(nums) > 1 or (nums and w in ("BOOL", "BOOLEAN", "SERIAL")):
            raise _NotUnderstood(f"cannot read the type's parameters at {where}")
        return  # display widths are not part of the type
    if b == "decimal":
        if len(nums) > 2:
            raise _NotUnderstood(f"cannot read the type's parameters at {where}")
        precision = nums[0] if nums else 10
        scale = nums[1] if len(nums) > 1 else 0
        t.args = f"{precision},{scale}"
    elif b in ("float", "double"):
        if len(nums) > 2 or (len(nums) == 1 and b == "double"):
            raise _NotUnderstood(f"cannot read the type's parameters at {where}")
        if len(nums) == 1 and nums[0] > 24:
            t.base = "double"  # FLOAT(p), p > 24: a DOUBLE; FLOAT(M,D) / DOUBLE(M,D) lose (M,D) in the vocabulary
    elif b in ("bit", "char", "binary"):
        if len(nums) > 1:
            raise _NotUnderstood(f"cannot read the type's parameters at {where}")
        t.args = str(nums[0] if nums else 1)
    elif b in ("varchar", "varbinary", "vector"):
        if len(nums) != 1:
            raise _NotUnderstood(f"{b.upper()} needs a length at {where}")
        t.args = str(nums[0])
    elif b in ("time", "datetime", "timestamp"):
        if len(nums) > 1:
            raise _NotUnderstood(f"cannot read the type's parameters at {where}")
        t.args = str(nums[0]) if nums and nums[0] else None
    elif b in ("text", "blob"):
        if len(nums) > 1:
            raise _NotUnderstood(f"cannot read the type's parameters at {where}")
        t.text_length = nums[0] if nums else None
    elif nums or args:
        raise _NotUnderstood(f"{b.upper()} takes no parameters at {where}")


def _quote_label(label: str) -> str:
    """An ENUM / SET label as information_schema writes it (the server's append_unescaped())."""
    out = ["'"]
    for ch in label:
        out.append({"\0": "\\0", "\n": "\\n", "\r": "\\r", "\\": "\\\\", "'": "''"}.get(ch, ch))
    out.append("'")
    return "".join(out)


def _final_type(
    t: _Type, charset: str | None, collation: str | None, defaults: _TableDefaults
) -> tuple[str, str | None]:
    """(mysql_type, ColumnSpec.charset) once every attribute is known."""
    explicit = charset or t.charset or _collation_of(collation or t.collation)
    base = t.base
    if base in _TEXT and (explicit or defaults.charset) == "binary" and base in _TEXT_TO_BINARY:
        base = _TEXT_TO_BINARY[base]
    if t.text_length is not None:
        base = _sized_text(base, t.text_length, explicit or defaults.charset)
    if base in _BINARY:
        spec_charset: str | None = "binary"
    elif base in _TEXT:
        spec_charset = explicit
    else:
        spec_charset = None
    mysql_type = base if t.args is None else f"{base}({t.args})"
    if t.unsigned and base in _NUMERIC - {"bit", "year"}:
        mysql_type += " unsigned"
    if t.compressed:
        mysql_type += " /*m!100301 compressed*/"  # what information_schema shows for MariaDB's COMPRESSED
    return mysql_type, spec_charset


def _collation_of(collation: str | None) -> str | None:
    return None if collation is None else _collation_charset(collation)


def _sized_text(base: str, length: int, charset: str | None) -> str:
    """TEXT(M) / BLOB(M): the smallest type that holds M characters (bytes for BLOB)."""
    blob = base in _BINARY
    if blob or charset in _SINGLE_BYTE:
        widths = {1}
    elif charset in _MBMAXLEN:
        widths = {_MBMAXLEN[charset]}
    else:
        widths = {1, 2, 3, 4}  # the charset is the table's or the database's: not in the statement
    kinds = set()
    for width in widths:
        size = length * width
        kind = "tiny" if size <= 255 else "" if size <= 65535 else "medium" if size <= 16777215 else "long"
        kinds.add(kind + ("blob" if blob else "text"))
    if len(kinds) > 1:
        raise _NotUnderstood(
            f"TEXT({length}) is TINYTEXT, TEXT or MEDIUMTEXT depending on the column's character set, which this "
            "statement does not give"
        )
    return kinds.pop()


# ------------------------------------------------------------------------------------- column definitions

@dataclass
class _Attrs:
    """What the tokens say about a column's attributes that sqlglot's grammar has no rule for."""

    sql: str = ""
    serial_default_value: bool = False
    compressed: bool = False
    after: list[str] = field(default_factory=list)


def _render_attrs(st: _Stmt, i: int, hi: int) -> _Attrs:
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
        elif depth == 0 and tok.kind == _WORD:
            w = tok.up
            if w in ("VISIBLE", "INVISIBLE"):
                skip = 1
            elif (
                st.at(j, "COLUMN_FORMAT", "FIXED|DYNAMIC|DEFAULT|COMPRESSED") or st.at(j, "STORAGE", "DISK|MEMORY")
                or (w == "SRID" and j + 1 < hi and st.toks[j + 1].kind == _NUM)
            ):
                skip = 2
            elif w == "WITHOUT" and st.at(j + 1, "SYSTEM", "VERSIONING"):
                skip = 3
            elif w == "WITH" and st.at(j + 1, "SYSTEM", "VERSIONING"):
                raise _NotUnderstood(_VERSIONED)  # a versioned column makes the table system-versioned
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
                pieces.append(" AFTER " + _quote(st.toks[j + 1].text))
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


def _column(
    st: _Stmt, lo: int, hi: int, verb: str, *, old: str | None = None, defaults: _TableDefaults | None = None
) -> tuple[ColumnSpec, bool]:
    """A column definition toks[lo:hi] (name, type, attributes, and FIRST / AFTER in an ALTER) ->
    (its ColumnSpec, whether it is declared PRIMARY KEY)."""
    name, j = st.name(lo, "a column name")
    t, j = _read_type(st, j, hi)
    attrs = _render_attrs(st, j, hi)
    definition = f"{_quote(name)} INT {attrs.sql}"
    sql = {
        "create": f"CREATE TABLE _x ({definition})",
        "add": f"ALTER TABLE _x ADD COLUMN {definition}",
        "modify": f"ALTER TABLE _x MODIFY COLUMN {definition}",
        "change": f"ALTER TABLE _x CHANGE COLUMN {_quote(old or '')} {definition}",
    }[verb]
    tree = _sqlglot(sql)
    cd: exp.Expr | None = None
    if verb == "create":
        if isinstance(tree, exp.Create) and isinstance(tree.this, exp.Schema) and len(tree.this.expressions) == 1:
            cd = tree.this.expressions[0]
    else:
        action = _single_action(tree)
        if verb == "add":
            cd = action
        elif isinstance(action, exp.ModifyColumn):
            renamed = action.args.get("rename_from")
            if (renamed is None) == (verb == "modify") and (renamed is None or renamed.name == old):
                cd = action.this
    if not isinstance(cd, exp.ColumnDef) or cd.name != name or cd.args.get("exists"):
        raise _NotUnderstood(f"cannot read the column definition {st.snippet(lo, hi)}")
    kind = cd.args.get("kind")
    if not isinstance(kind, exp.DataType) or kind.expressions or kind.this != exp.DataType.Type.INT:
        raise _NotUnderstood(f"cannot read the column definition {st.snippet(lo, hi)}")
    t.compressed = attrs.compressed
    return _column_spec(cd, t, defaults or _TableDefaults(), attrs, st.snippet(lo, hi))


def _column_spec(
    cd: exp.ColumnDef, t: _Type, defaults: _TableDefaults, attrs: _Attrs, where: str
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
            charset = _charset_name(kind.this.name)
        elif isinstance(kind, exp.CollateColumnConstraint):
            collation = kind.this.name
        elif not isinstance(
            kind, exp.UniqueColumnConstraint | exp.CommentColumnConstraint | exp.CheckColumnConstraint
            | exp.Reference | exp.OnUpdateColumnConstraint | exp.InvisibleColumnConstraint
        ):
            raise _NotUnderstood(f"unknown column attribute {constraint.sql(dialect='mysql')!r} in {where}")
    if (charset or collation) and t.base not in _TEXT | {"json"}:
        raise _NotUnderstood(f"a character set on a non-text column in {where}")
    mysql_type, spec_charset = _final_type(t, charset, collation, defaults)
    if t.base == "json":
        spec_charset = None
    if auto_increment:
        not_null = True  # the server makes an AUTO_INCREMENT column NOT NULL
    numeric = mysql_type.split("(", 1)[0].split(" ", 1)[0] in _NUMERIC
    position = cd.args.get("position")
    pos: tuple[str, str | None] | None = None
    if isinstance(position, exp.ColumnPosition):
        where_to = str(position.args.get("position")).upper()
        if where_to == "FIRST" and position.this is None:
            pos = ("first", None)
        elif where_to == "AFTER" and isinstance(position.this, exp.Column | exp.Identifier):
            pos = ("after", position.this.name)
        else:
            raise _NotUnderstood(f"cannot read the column position in {where}")
    elif position is not None:
        raise _NotUnderstood(f"cannot read the column position in {where}")
    spec = ColumnSpec(
        name=cd.name,
        mysql_type=mysql_type,
        charset=spec_charset,
        nullable=not (not_null or primary),
        default=_default(default_node, numeric) if default_node is not None else DefaultSpec(),
        generated=generated,
        auto_increment=auto_increment,
        position=pos,
    )
    return spec, primary


def _default(node: exp.Expr, numeric: bool | None) -> DefaultSpec:
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
