"""The statement's frame: its tokens, the `Stmt` reader over them, and sqlglot's strict parse of one part.

sqlglot's MySQL tokenizer gives the tokens (MySQL's quoting and escapes), which are kept with their offsets
in the executable text: `Stmt` reads the frame from them (which statement it is, its target names, where an
action or item begins and ends), and `parse_tree` gives sqlglot's AST of one such part, rewritten on its
own, or None where sqlglot's grammar ends. A part neither reads exactly raises `NotUnderstood`, which
`parse_statement` reports as the statement's error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sqlglot.errors
from sqlglot import Token, TokenType, exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.parsers.mysql import MySQLParser

from cdc_core.model.schema_changes import ParsedStatement, SchemaChange

DIALECT = MySQL()


class NotUnderstood(Exception):
    """A part of a table DDL statement the parser cannot read exactly (becomes ParsedStatement.error)."""


# --------------------------------------------------------------------------------------------- tokens

WORD, NAME, STR, HEX, BIT, NUM, PUNCT = "word", "name", "str", "hex", "bit", "num", "punct"
_STRING_TYPES = {
    TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.RAW_STRING, TokenType.BYTE_STRING,
    TokenType.UNICODE_STRING, TokenType.HEREDOC_STRING,
}


@dataclass(frozen=True)
class Tok:
    kind: str  # WORD (unquoted word or keyword), NAME (quoted name), STR, HEX, BIT, NUM, PUNCT
    text: str  # words as written; names and strings unquoted and unescaped
    start: int  # offsets in the executable text: text[start:end] is the token as written
    end: int

    @property
    def up(self) -> str:
        return self.text.upper() if self.kind == WORD else ""


def _word_like(s: str) -> bool:
    return bool(s) and all(ch.isalnum() or ch in "_$" or ord(ch) > 127 for ch in s)


def tokenize(sql: str) -> list[Tok]:
    """The executable text's tokens, with their offsets in it."""
    raw = DIALECT.tokenize(sql)
    if raw and raw[0].token_type in MySQL.Tokenizer.COMMANDS:
        # sqlglot's tokenizer returns the rest of a statement that starts with RENAME, REPLACE, ... as one
        # string: tokenize that rest on its own.
        head, cut = raw[0], raw[0].end + 1
        rest = [_shift(t, cut) for t in DIALECT.tokenize(sql[cut:])]
        raw = [head, *rest]
    out: list[Tok] = []
    for t in raw:
        start, end = t.start, t.end + 1
        if t.token_type in _STRING_TYPES:
            out.append(Tok(STR, t.text, start, end))
        elif t.token_type == TokenType.HEX_STRING:
            out.append(Tok(HEX, t.text, start, end))
        elif t.token_type == TokenType.BIT_STRING:
            out.append(Tok(BIT, t.text, start, end))
        elif t.token_type == TokenType.IDENTIFIER:
            out.append(Tok(NAME, t.text, start, end))
        elif t.token_type == TokenType.NUMBER:
            out.append(Tok(NUM, t.text, start, end))
        elif " " in t.text.strip() or "\t" in t.text or "\n" in t.text:
            # sqlglot joins some keyword pairs into one token (`CHARACTER VARYING`, `PRIMARY KEY`, `ORDER BY`):
            # the frame is read word by word.
            pos = start
            for word in sql[start:end].split():
                at = sql.index(word, pos)
                out.append(Tok(WORD if _word_like(word) else PUNCT, word, at, at + len(word)))
                pos = at + len(word)
        else:
            text = sql[start:end]
            out.append(Tok(WORD if _word_like(text) else PUNCT, text, start, end))
    return out


def _shift(t: Token, by: int) -> Token:
    return Token(t.token_type, t.text, t.line, t.col, t.start + by, t.end + by, t.comments)


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class Stmt:
    """The tokens of one statement, with the helpers that read its frame."""

    def __init__(self, sql: str, toks: list[Tok], default_schema: str, *, strict: bool = True) -> None:
        self.sql = sql
        self.strict = strict  # the statement ran under a strict sql_mode (conversions.py)
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
        return 0 <= i < self.n and self.toks[i].kind == PUNCT and self.toks[i].text == p

    def is_name(self, i: int) -> bool:
        return 0 <= i < self.n and self.toks[i].kind in (NAME, WORD)

    def name(self, i: int, what: str = "a name") -> tuple[str, int]:
        if not self.is_name(i):
            raise NotUnderstood(f"expected {what} at {self.snippet(i)}")
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
        raise NotUnderstood("unbalanced parentheses")

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
        if self.at(i, "WAIT") and i + 1 < self.n and self.toks[i + 1].kind == NUM:
            return i + 2
        return i + 1 if self.at(i, "NOWAIT") else i

    def end(self, i: int, what: str) -> None:
        if i < self.n:
            raise NotUnderstood(f"{what}: unexpected {self.snippet(i)}")

    def table(self, t: tuple[str, str]) -> None:
        if t not in self.tables:
            self.tables.append(t)


def parsed(st: Stmt, changes: list[SchemaChange]) -> ParsedStatement:
    """What a statement read to its end does: its changes numbered in order, and every table and schema it
    names."""
    return ParsedStatement(
        changes=tuple(replace(c, step=k) for k, c in enumerate(changes)),
        tables=tuple(st.tables),
        schemas=tuple(st.schemas),
    )


# -------------------------------------------------------------------------------------------- sqlglot

class _StrictParser(MySQLParser):
    """sqlglot's MySQL parser, except that where its grammar ends it raises instead of logging a warning and
    returning the rest as an opaque `Command` (an unknown clause must never pass as understood)."""

    def _parse_as_command(self, start: Token) -> exp.Command:
        raise sqlglot.errors.ParseError(f"unsupported syntax at {start.text!r}")


def parse_tree(sql: str) -> exp.Expr | None:
    """sqlglot's AST of one statement, or None where sqlglot's MySQL grammar gives up."""
    try:
        trees = _StrictParser(dialect=DIALECT).parse(DIALECT.tokenize(sql), sql)
    except Exception:  # ParseError, TokenError, and whatever else a third-party parser may raise on odd input
        return None
    if len(trees) != 1 or trees[0] is None or trees[0].find(exp.Command) is not None:
        return None
    tree: exp.Expr = trees[0]
    return tree


def single_action(tree: exp.Expr | None) -> exp.Expr | None:
    """The one action of an `ALTER TABLE _x <action>` tree; None when the tree is anything else."""
    if not isinstance(tree, exp.Alter) or tree.args.get("options"):
        return None
    actions = tree.args.get("actions") or []
    return actions[0] if len(actions) == 1 else None


def table_of(node: exp.Expr, default_schema: str) -> tuple[str, str]:
    """sqlglot's table name -> (schema, table), in the current database when unqualified."""
    if not isinstance(node, exp.Table) or node.args.get("catalog") is not None:
        raise NotUnderstood(f"expected a table name, found {node.sql(dialect='mysql')!r}")
    return (node.db or default_schema, node.name)
