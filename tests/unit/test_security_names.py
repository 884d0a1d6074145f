"""Hostile names, as properties: path components never escape a root and never collide; table ids and
patterns name exactly one table; SQL identifiers stay one identifier; GRANT patterns escape wildcards;
source columns that would clash with the lake's metadata columns are refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from cdc_core.capture.source import TableFilter, _grant_covers, grant_schema_pattern
from cdc_core.lake import staging
from cdc_core.model.changes import RowChange, SourceColumn, TableSchema
from cdc_core.model.errors import ConfigError, SchemaConflict
from cdc_core.model.naming import (
    MAX_COMPONENT,
    decode_path_component,
    parse_table_pattern,
    path_component,
    quote_mysql,
    quote_spark,
    table_id,
)
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import WindowPlan

pytestmark = pytest.mark.unit

HOSTILE = ["", ".", "..", "...", "a/b", "a\\b", "/", "-rf", "--", "~", "~2E", "%2E", "%", "a.b", "sp ace", " ",
           "`", "``", "it's", 'say "hi"', "日本語", "😀", "select", "order", "table", "a[1]*?", "\x00", "\n", "CON",
           "x" * 64, "日" * 64, "-" * 300]
names = st.text(max_size=80)  # any unicode (no lone surrogates): MariaDB allows far less, the encoding must not care
SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9_~][A-Za-z0-9_~\-]*$")


# ------------------------------------------------------------------------------------ path components


@settings(max_examples=250)
@given(names)
@example("")
@example("..")
@example("~")
def test_path_component_is_one_safe_segment(name: str) -> None:
    c = path_component(name)
    assert c and c not in (".", "..") and "/" not in c and "\\" not in c and "." not in c
    assert "%" not in c, "delta-rs percent-decodes table paths"
    assert SAFE_COMPONENT.match(c), c  # no leading dash, nothing a shell, glob or URL parser rewrites
    assert len(c) <= MAX_COMPONENT
    assert path_component(name) == c  # stable
    assert Path("/root", c).parent == Path("/root") and Path("/root", c).name == c


@settings(max_examples=250)
@given(names, names)
def test_path_component_is_injective(a: str, b: str) -> None:
    assume(a != b)
    assert path_component(a) != path_component(b)


@given(names)
def test_path_component_decodes_back(name: str) -> None:
    c = path_component(name)
    assert decode_path_component(c) == (name if "~~" not in c else None)


def test_hostile_examples_are_distinct_and_plain_names_stay_readable() -> None:
    comps = [path_component(n) for n in HOSTILE]
    assert len(set(comps)) == len(HOSTILE)
    assert path_component(".") == "~2E" != path_component("~2E") == "~7E2E"
    assert path_component("-rf") == "~2Drf" and path_component("") == "~"
    for plain in ("orders", "order_items", "Orders2", "_x", "a-b"):
        assert path_component(plain) == plain
    long_a, long_b = "日" * 64, "日" * 63 + "本"  # same cut prefix, different hash
    assert path_component(long_a) != path_component(long_b) and "~~" in path_component(long_a)


@given(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_\-]{0,40}", fullmatch=True))
def test_plain_names_are_unchanged(name: str) -> None:
    assert path_component(name) == name


# ---------------------------------------------------------------------------------- table ids, patterns


@settings(max_examples=300)
@given(names.filter(bool), names.filter(bool), names.filter(bool))
def test_table_id_parses_back_to_a_pattern_matching_exactly_that_table(schema: str, table: str, other: str) -> None:
    s, t = parse_table_pattern(table_id(schema, table))
    assert s.is_literal and t.is_literal
    assert (s.text, t.text) == (schema, table)
    assert s.matches(schema) and t.matches(table)
    if other != schema:
        assert not s.matches(other)
    assert TableFilter((table_id(schema, table),)).matches(schema, table)


@given(names.filter(bool), names.filter(bool), names.filter(bool), names.filter(bool))
def test_table_id_is_injective(s1: str, t1: str, s2: str, t2: str) -> None:
    assume((s1, t1) != (s2, t2))
    assert table_id(s1, t1) != table_id(s2, t2)


def test_table_ids_stay_plain_for_plain_names_and_quote_the_rest() -> None:
    assert table_id("shop", "orders") == "shop.orders"
    assert table_id("a.b", "c") == "`a.b`.c" != table_id("a", "b.c") == "a.`b.c`"
    assert table_id("s", "a[1]*?") == "s.`a[1]*?`"
    assert table_id("we`ird", "t") == "`we``ird`.t"


def test_schema_and_table_are_matched_separately() -> None:
    f = TableFilter(("shop.*",))
    assert f.matches("shop", "orders")
    assert not f.matches("shop.x", "orders")  # `shop.*` as one fnmatch over 'shop.x.orders' matched this
    assert TableFilter(("`shop.x`.*",)).matches("shop.x", "orders")
    assert not TableFilter(("`a*`.t",)).matches("abc", "t")  # quoted: literal, not a glob
    assert TableFilter(("a*.t",)).matches("abc", "t")
    assert TableFilter(("`a*`.t",)).literal_includes() == (("a*", "t"),)
    assert TableFilter(("`x y`.*", "z.*")).literal_schemas() == ("x y", "z")
    with pytest.raises(ConfigError, match=r"not of the form schema\.table"):
        TableFilter(("a.b.c",)).matches("a", "b")


@pytest.mark.parametrize("bad", ["orders", "a.b.c", "", ".", "a.", ".b", "`a.b", "a.`b", "a b.c", "``.t", "`a`x.t"])
def test_malformed_patterns_say_how_to_write_them(bad: str) -> None:
    with pytest.raises(ValueError, match=r"not of the form schema\.table .*backticks"):
        parse_table_pattern(bad)


# ------------------------------------------------------------------------------------------ SQL quoting

_ONE_IDENT = re.compile(r"^`(?:[^`]|``)*`$", re.S)


@given(names)
def test_quoted_identifiers_are_exactly_one_identifier(name: str) -> None:
    for quoted in (quote_mysql(name), quote_spark(name)):
        assert _ONE_IDENT.match(quoted)
        assert quoted[1:-1].replace("``", "`") == name


@settings(max_examples=300)
@given(names.filter(bool), names.filter(bool))
@example("t_1", "tx1")
@example("a%", "abc")
@example("a\\b", "a\\\\b")
def test_grant_patterns_escape_like_wildcards(schema: str, other: str) -> None:
    stored = grant_schema_pattern(schema)[1:-1].replace("``", "`")  # what the server keeps for `...`.*
    assert _grant_covers(stored, schema)
    if other != schema:
        assert not _grant_covers(stored, other)


def test_an_unescaped_grant_is_still_read_as_mariadb_reads_it() -> None:
    assert _grant_covers("t_1", "t_1") and _grant_covers("t_1", "tx1")
    assert _grant_covers("t\\_1", "t_1") and not _grant_covers("t\\_1", "tx1")
    assert _grant_covers("%", "anything")


# ----------------------------------------------------------------------------------- reserved columns


@pytest.mark.parametrize(
    "column", ["_cdc_op", "_CDC_VERSION", "_cdc_window_seq", "_cdc_deleted", "__cdc_rn", "__CDC_x"]
)
def test_source_columns_named_like_metadata_columns_are_refused(tmp_path: Path, column: str) -> None:
    server = ServerIdentity("mariadb", 1)
    plan = WindowPlan("p", 1, BinlogPosition("mysql-bin.000001", 4, server),
                      BinlogPosition("mysql-bin.000001", 900, server), transactions=1)
    table = TableSchema("db", "t", (SourceColumn("id", "int", False), SourceColumn(column, "int", True)), ("id",))
    with pytest.raises(SchemaConflict, match=rf"table db\.t has column\(s\) \['{re.escape(column)}'\].*Rename"):
        staging.stage_window(plan, iter([RowChange("I", table, {"id": 1, column: 2}, 1, 1, 1.0)]), str(tmp_path))
    assert staging.read_manifest(str(tmp_path), "p", 1) is None  # nothing half-staged


def test_columns_that_merely_start_with_cdc_are_fine(tmp_path: Path) -> None:
    server = ServerIdentity("mariadb", 1)
    plan = WindowPlan("p", 1, BinlogPosition("mysql-bin.000001", 4, server),
                      BinlogPosition("mysql-bin.000001", 900, server), transactions=1)
    table = TableSchema("db", "t", (SourceColumn("id", "int", False), SourceColumn("_cdc_note", "int", True)), ("id",))
    m = staging.stage_window(plan, iter([RowChange("I", table, {"id": 1, "_cdc_note": 2}, 1, 1, 1.0)]), str(tmp_path))
    assert m.tables[0].name == "db.t"
