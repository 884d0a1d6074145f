"""ENUM and SET labels as information_schema writes them in COLUMN_TYPE, and back (`quote_labels` / `parse_labels`).

The server renders each label with its append_unescaped(): in single quotes, with `'` doubled and exactly five
characters escaped by a backslash: NUL as `\\0`, newline as `\\n`, carriage return as `\\r`, and `\\` as `\\\\`
(a tab, Ctrl-Z or any other character is written as it is; checked against MariaDB by
tests/integration/test_enum_labels_mariadb.py). The binlog reader renders the labels of a table map the same
way, so its `enum(...)` type equals the one `describe_tables` reads, and the DDL parser does for the labels a
statement gives. `parse_labels` is the exact inverse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_ESCAPES = {"\0": "\\0", "\n": "\\n", "\r": "\\r", "\\": "\\\\", "'": "''"}
_UNESCAPES = {"0": "\0", "n": "\n", "r": "\r"}
_LABEL = re.compile(r"'((?:[^'\\]|''|\\.)*)'", re.S)
_ESCAPED = re.compile(r"''|\\(.)", re.S)


def quote_label(label: str) -> str:
    """One label as information_schema writes it: `it's` -> `'it''s'`, a newline as `\\n`."""
    return "'" + "".join(_ESCAPES.get(ch, ch) for ch in label) + "'"


def quote_labels(labels: Iterable[str]) -> str:
    """The labels as COLUMN_TYPE writes them between the parentheses: `'a','it''s'`."""
    return ",".join(quote_label(label) for label in labels)


def parse_labels(args: str) -> tuple[str, ...]:
    """The labels from the text between the parentheses: `'a','it''s','x\\ny'` -> ('a', "it's", 'x<newline>y').

    The inverse of `quote_labels`. A backslash before any other character (which the server never writes)
    stands for that character."""
    return tuple(_ESCAPED.sub(_unescape, m.group(1)) for m in _LABEL.finditer(args))


def _unescape(m: re.Match[str]) -> str:
    escaped = m.group(1)
    if escaped is None:
        return "'"  # a doubled quote
    return _UNESCAPES.get(escaped, escaped)
