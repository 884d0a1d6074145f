"""ENUM/SET labels against the real MariaDB (cdc_core.model.labels).

The server writes a label in COLUMN_TYPE with its append_unescaped(): NUL, newline, carriage return and backslash
escaped, quotes doubled, the rest (tab, Ctrl-Z, commas) as they are. Every reader of labels must agree with it:
`parse_labels` / `quote_labels` round-trip the server's text byte for byte, `describe_tables` gives the labels
the statement created, the DDL parser types the column as information_schema shows it, and the binlog reader's
`enum(...)` / `set(...)` type (from the table map's labels) equals `describe_tables`' for the same column.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from cdc_core.capture.binlog import BinlogScanner, read_changes
from cdc_core.capture.source import (
    SourceFacts,
    SourceParams,
    TableFilter,
    connect,
    describe_tables,
    normalise_column_type,
    parse_labels,
    quote_labels,
)
from cdc_core.model import types
from cdc_core.model.changes import RowChange, TableSchema
from cdc_core.model.ddl import parse_statement
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowCaps
from cdc_core.model.windows import plan_window
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration

# The labels as the statement writes them (MySQL string literals: \' \\ \0 \n \r \t \Z are escapes), and
# the labels they are. A SET label cannot hold a comma.
ENUM_SQL = r"""ENUM('plain', 'it\'s', 'dq''x', 'back\\slash', 'nul\0x', 'new\nline', 'cr\rx', 'tab\tx', 'ctrl\Zz',
    '\\0', '\\n', 'a,b', 'é日')"""
ENUM_LABELS = (
    "plain", "it's", "dq'x", "back\\slash", "nul\0x", "new\nline", "cr\rx", "tab\tx", "ctrl\x1az", "\\0", "\\n",
    "a,b", "é日",
)
SET_SQL = r"""SET('new\nline', 'nul\0x', 'cr\rx', 'back\\slash', 'it''s', 'tab\tx')"""
SET_LABELS = ("new\nline", "nul\0x", "cr\rx", "back\\slash", "it's", "tab\tx")
CREATE = f"CREATE TABLE l (id INT PRIMARY KEY, e {ENUM_SQL}, s {SET_SQL} NOT NULL)"


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def root(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute(CREATE)
    yield conn
    conn.close()


def column_types(conn: Any, db: str) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND "
            "TABLE_NAME = 'l'",
            (db,),
        )
        return {str(name): str(column_type) for name, column_type in cur.fetchall()}


def test_labels_round_trip_through_column_type_exactly(root: Any, source_db: str) -> None:
    shown = column_types(root, source_db)
    for name, kind, labels in (("e", "enum", ENUM_LABELS), ("s", "set", SET_LABELS)):
        column_type = shown[name]
        assert "\n" not in column_type and "\r" not in column_type and "\0" not in column_type, column_type
        assert parse_labels(column_type) == labels
        assert f"{kind}({quote_labels(labels)})" == column_type
        assert types.parse_labels(column_type[len(kind) + 1 : -1]) == labels
    (created,) = parse_statement(CREATE, source_db, server_version=101106).changes
    parsed = {c.name: c.mysql_type for c in created.columns}
    assert parsed["e"] == normalise_column_type(shown["e"]) and parsed["s"] == normalise_column_type(shown["s"])


def test_binlog_reader_types_and_values_agree_with_describe_tables(
    params: SourceParams, root: Any, source_db: str
) -> None:
    conn = connect(params)
    try:
        described = describe_tables(conn, TableFilter((f"{source_db}.l",)), "t")[f"{source_db}.l"]
    finally:
        conn.close()
    by_name = {c.name: c for c in described.columns}
    assert dict(by_name["e"].attrs)["labels"] == ENUM_LABELS
    assert dict(by_name["s"].attrs)["labels"] == SET_LABELS

    before = facts_now(params)
    with root.cursor() as cur:
        cur.execute("INSERT INTO l VALUES (1, %s, %s), (2, %s, '')", ("new\nline", "cr\rx,nul\0x,new\nline", "nul\0x"))
        cur.execute("SELECT e, s FROM l ORDER BY id")
        selected = [tuple(r) for r in cur.fetchall()]
    after = facts_now(params)
    got = [c for c in read_window(params, before, after, source_db, described) if isinstance(c, RowChange)]
    assert len(got) == 2

    from_binlog = {c.name: c for c in got[0].table.columns}
    for name in ("e", "s"):
        b, d = from_binlog[name], by_name[name]
        assert (b.mysql_type, b.attrs) == (d.mysql_type, d.attrs), name
    # What lands (the type map's value for the described column) is what SELECT shows.
    landed = [tuple(types.value_converter(by_name[n])(c.values[n]) for n in ("e", "s")) for c in got]
    assert landed == selected == [("new\nline", "new\nline,nul\0x,cr\rx"), ("nul\0x", "")]


def read_window(
    params: SourceParams, before: SourceFacts, after: SourceFacts, db: str, described: TableSchema
) -> list[Any]:
    """Every change on this test's database between `before`'s end and `after`'s end."""
    assert before.end is not None and after.end is not None
    start = BinlogPosition(before.end.file, before.end.offset, before.identity, before.gtid_executed)
    scanner = BinlogScanner(params, after.identity)
    stop = (after.end.file, after.end.offset)
    with closing(scanner.scan_transactions(start.file, start.offset, start.gtid, start.epoch, stop=stop)) as it:
        plan = plan_window("t", 1, start, list(it), WindowCaps())
    return list(read_changes(params, after.identity, plan, TableFilter((f"{db}.*",)), lambda s, t: described))
