"""ENUM/SET labels as information_schema writes them (cdc_core.model.labels), and the readers built on them:
`source.parse_labels` / `source.quote_labels` (describe_tables, the binlog reader's types), `types.parse_labels`
(the type map, the SET fast path) and the DDL parser's ENUM/SET types.

The cases are what MariaDB 10.11 shows in COLUMN_TYPE for a label `a<ch>b` (checked against the server by
tests/integration/test_enum_labels_mariadb.py): NUL, newline and carriage return are escaped with a backslash,
as are backslashes; quotes are doubled; everything else, tab and Ctrl-Z included, is as is.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_core.capture import source
from cdc_core.model import labels, types
from cdc_core.model.ddl import parse_statement

pytestmark = pytest.mark.unit

# label -> how the server writes it between the parentheses
SERVER_RENDERING = [
    ("a", "'a'"),
    ("", "''"),
    ("it's", "'it''s'"),
    ("back\\slash", "'back\\\\slash'"),
    ("a\0b", "'a\\0b'"),
    ("a\nb", "'a\\nb'"),
    ("a\rb", "'a\\rb'"),
    ("a\tb", "'a\tb'"),
    ("a\x1ab", "'a\x1ab'"),
    ("a\bb", "'a\bb'"),
    ('q"x', "'q\"x'"),
    ("x\\%y", "'x\\\\%y'"),
    ("\\0", "'\\\\0'"),  # a backslash and a zero, not NUL
    ("\\n", "'\\\\n'"),
    ("\\'", "'\\\\'''"),
    ("a,b", "'a,b'"),
    ("c)d", "'c)d'"),
    ("日本", "'日本'"),
]


@pytest.mark.parametrize(("label", "rendered"), SERVER_RENDERING)
def test_one_label_is_written_as_the_server_writes_it(label: str, rendered: str) -> None:
    assert labels.quote_label(label) == rendered
    assert labels.parse_labels(rendered) == (label,)


def test_the_labels_of_a_column_type_round_trip_through_every_reader() -> None:
    names = tuple(label for label, _ in SERVER_RENDERING)
    inner = ",".join(rendered for _, rendered in SERVER_RENDERING)
    assert labels.quote_labels(names) == inner
    assert source.quote_labels(names) == inner
    assert source.parse_labels(f"enum({inner})") == names
    assert source.parse_labels(f"set({inner})") == names
    assert types.parse_labels(inner) == names
    assert source.column_attrs(f"enum({inner})", "utf8mb4") == (("charset", "utf8mb4"), ("labels", names))


def test_the_ddl_parser_writes_enum_labels_as_the_server_does() -> None:
    parsed = parse_statement("CREATE TABLE t (e ENUM('a\\nb', 'n\\0n', 'c\\rr', 't\\tx', 'it''s', 'x\\\\y'))", "s")
    assert parsed.error is None
    (column,) = parsed.changes[0].columns
    assert column.mysql_type == "enum('a\\nb','n\\0n','c\\rr','t\tx','it''s','x\\\\y')"
    assert source.parse_labels(column.mysql_type) == ("a\nb", "n\0n", "c\rr", "t\tx", "it's", "x\\y")


@given(st.lists(st.text(max_size=8), min_size=1, max_size=6))
def test_parse_undoes_quote(names: list[str]) -> None:
    assert labels.parse_labels(labels.quote_labels(names)) == tuple(names)
    assert source.parse_labels(f"enum({source.quote_labels(names)})") == tuple(names)


@given(st.lists(st.text(alphabet=st.sampled_from("a'\\\0\n\r\t,()0nr"), max_size=8), min_size=1, max_size=6))
def test_quote_undoes_parse_on_what_the_server_writes(names: list[str]) -> None:
    rendered = ",".join("'" + "".join(_server(ch) for ch in name) + "'" for name in names)
    assert labels.quote_labels(labels.parse_labels(rendered)) == rendered


def _server(ch: str) -> str:
    """MariaDB's append_unescaped() for one character, written out again on its own."""
    if ch == "'":
        return "''"
    return {"\0": "\\0", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}.get(ch, ch)
