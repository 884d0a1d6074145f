"""The type map: every row, the converters' edge cases, refusals, and docs/type-map.md in sync with the code."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_core.model import types
from cdc_core.model.changes import SourceColumn, TableSchema
from cdc_core.model.errors import SchemaConflict, UnsupportedType
from cdc_core.model.manifest import STAGED_META_COLUMNS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
UTF8 = (("charset", "utf8mb4"),)
BIN = (("charset", "binary"),)

# (mysql_type, attrs, arrow type, Delta type): written out independently of TYPE_RULES on purpose.
EXPECTED = [
    ("tinyint", (), pa.int8(), "TINYINT"),
    ("tinyint unsigned", (), pa.int16(), "SMALLINT"),
    ("smallint", (), pa.int16(), "SMALLINT"),
    ("smallint unsigned", (), pa.int32(), "INT"),
    ("mediumint", (), pa.int32(), "INT"),
    ("mediumint unsigned", (), pa.int32(), "INT"),
    ("int", (), pa.int32(), "INT"),
    ("int unsigned", (), pa.int64(), "BIGINT"),
    ("bigint", (), pa.int64(), "BIGINT"),
    ("bigint unsigned", (), pa.decimal128(20, 0), "DECIMAL(20,0)"),
    ("decimal(10,2)", (), pa.decimal128(10, 2), "DECIMAL(10,2)"),
    ("decimal(38,0)", (), pa.decimal128(38, 0), "DECIMAL(38,0)"),
    ("decimal(38,30)", (), pa.decimal128(38, 30), "DECIMAL(38,30)"),
    ("decimal(12,4) unsigned", (), pa.decimal128(12, 4), "DECIMAL(12,4)"),
    ("decimal(39,0)", (), pa.string(), "STRING"),
    ("decimal(65,30)", (), pa.string(), "STRING"),
    ("float", (), pa.float32(), "FLOAT"),
    ("double", (), pa.float64(), "DOUBLE"),
    ("date", (), pa.date32(), "DATE"),
    ("datetime", (), pa.timestamp("us"), "TIMESTAMP_NTZ"),
    ("datetime(6)", (), pa.timestamp("us"), "TIMESTAMP_NTZ"),
    ("timestamp", (), pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    ("timestamp(3)", (), pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    ("time", (), pa.int64(), "BIGINT"),
    ("time(6)", (), pa.int64(), "BIGINT"),
    ("year", (), pa.int16(), "SMALLINT"),
    ("char(10)", UTF8, pa.string(), "STRING"),
    ("varchar(255)", UTF8, pa.string(), "STRING"),
    ("tinytext", UTF8, pa.string(), "STRING"),
    ("text", UTF8, pa.string(), "STRING"),
    ("mediumtext", (("charset", "latin1"),), pa.string(), "STRING"),
    ("longtext", UTF8, pa.string(), "STRING"),
    ("binary(16)", BIN, pa.binary(), "BINARY"),
    ("varbinary(20)", BIN, pa.binary(), "BINARY"),
    ("tinyblob", BIN, pa.binary(), "BINARY"),
    ("blob", BIN, pa.binary(), "BINARY"),
    ("mediumblob", BIN, pa.binary(), "BINARY"),
    ("longblob", BIN, pa.binary(), "BINARY"),
    ("char(8)", BIN, pa.binary(), "BINARY"),  # a CHAR with the binary charset is a BINARY
    ("json", (), pa.string(), "STRING"),
    ("enum('a','b')", (("labels", ("a", "b")),), pa.string(), "STRING"),
    ("set('x','y')", (("labels", ("x", "y")),), pa.string(), "STRING"),
    ("bit(1)", (), pa.int64(), "BIGINT"),
    ("bit(5)", (), pa.int64(), "BIGINT"),
    ("bit(63)", (), pa.int64(), "BIGINT"),
    ("bit(64)", (), pa.decimal128(20, 0), "DECIMAL(20,0)"),
    # Spellings information_schema normalises, accepted all the same.
    ("int(11) unsigned zerofill", (), pa.int64(), "BIGINT"),
    ("tinyint(1)", (), pa.int8(), "TINYINT"),
    ("BIGINT UNSIGNED", (), pa.decimal128(20, 0), "DECIMAL(20,0)"),
    ("double precision", (), pa.float64(), "DOUBLE"),
    ("float(7,2)", (), pa.float32(), "FLOAT"),
    ("numeric(5,1)", (), pa.decimal128(5, 1), "DECIMAL(5,1)"),
    ("decimal", (), pa.decimal128(10, 0), "DECIMAL(10,0)"),
]


@pytest.mark.parametrize(("mysql_type", "attrs", "arrow", "delta"), EXPECTED)
def test_mapping_rows(mysql_type: str, attrs: tuple, arrow: pa.DataType, delta: str) -> None:
    col = SourceColumn("c", mysql_type, attrs=attrs)
    assert types.column_types(col) == (arrow, delta)
    staged = types.to_staged_column(col)
    assert (staged.name, staged.mysql_type, staged.arrow_type, staged.delta_type) == (
        "c",
        mysql_type,
        str(arrow),
        delta,
    )


@pytest.mark.parametrize("rule", types.TYPE_RULES, ids=lambda r: r.mysql)
def test_every_rule_is_reached_by_its_examples(rule: types.TypeRule) -> None:
    for ex in rule.examples:
        got, _ = types.resolve(SourceColumn("c", ex, attrs=rule.example_attrs))
        assert got is rule, f"{ex!r} resolved to {got.mysql!r}, documented under {rule.mysql!r}"


def test_every_expected_row_is_documented() -> None:
    documented = {id(r) for r in types.TYPE_RULES}
    for mysql_type, attrs, _, _ in EXPECTED:
        rule, _ = types.resolve(SourceColumn("c", mysql_type, attrs=attrs))
        assert id(rule) in documented


@pytest.mark.parametrize(
    "mysql_type", ["geometry", "point", "multipolygon", "uuid", "inet6", "inet4", "vector(3)", "frobnicate(2)"]
)
def test_unsupported_types_name_table_column_type_and_the_way_out(mysql_type: str) -> None:
    col = SourceColumn("geo`col", mysql_type)
    with pytest.raises(UnsupportedType) as e:
        types.column_types(col, table="shop.places")
    msg = str(e.value)
    assert "'shop.places'" in msg and "'geo`col'" in msg and repr(mysql_type) in msg
    assert "tables.exclude" in msg and "docs/type-map.md" in msg
    with pytest.raises(UnsupportedType):
        types.table_codec(TableSchema("shop", "places", (SourceColumn("id", "int"), col), ("id",)))


@pytest.mark.parametrize("mysql_type", ["decimal(66,2)", "decimal(10,11)", "bit(65)", "bit(0)"])
def test_impossible_parameters_are_refused(mysql_type: str) -> None:
    with pytest.raises(UnsupportedType):
        types.column_types(SourceColumn("c", mysql_type), table="s.t")


def conv(mysql_type: str, v: object, *, nullable: bool = True, attrs: tuple = ()) -> object:
    return types.value_converter(SourceColumn("c", mysql_type, nullable, attrs))(v)


def test_converters_undo_reader_quirks() -> None:
    # TIMESTAMP zero value: the reader hands out the epoch; it lands as NULL.
    assert conv("timestamp", dt.datetime(1970, 1, 1)) is None
    assert conv("timestamp(6)", dt.datetime(1970, 1, 1, 0, 0, 1)) == dt.datetime(1970, 1, 1, 0, 0, 1)
    # TIME: signed microseconds.
    assert conv("time(6)", -dt.timedelta(hours=838, minutes=59, seconds=59)) == -3_020_399_000_000
    assert conv("time(6)", dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)) == 3_020_399_999_999
    assert conv("time(1)", -dt.timedelta(microseconds=500_000)) == -500_000
    # Negative with a fraction: the library hands out -(S + (1 - f)) for -(S + f) (seen on MariaDB 10.11).
    assert conv("time(6)", -dt.timedelta(hours=1, microseconds=999_999)) == -3_600_000_001  # -01:00:00.000001
    assert conv("time(2)", -dt.timedelta(seconds=1, microseconds=750_000)) == -1_250_000  # -00:00:01.25
    assert conv("time(6)", -dt.timedelta(microseconds=999_999)) == -1  # -00:00:00.000001
    assert conv("time(6)", dt.timedelta(seconds=1, microseconds=250_000)) == 1_250_000  # positive: as is
    assert conv("time", dt.timedelta(0)) == 0
    # YEAR: the reader's 1900 is the zero year.
    assert conv("year", 1900) == 0
    assert conv("year", 1901) == 1901
    assert conv("year", 2155) == 2155
    # BIT: the reader's bit strings (and ints or bytes, should a reader give those).
    assert conv("bit(5)", "00101") == 5
    assert conv("bit(64)", "1" * 64) == 2**64 - 1
    assert conv("bit(8)", 7) == 7
    assert conv("bit(16)", b"\x01\x00") == 256
    # SET: definition order, like SELECT; empty set; already-joined text passes through.
    labels = (("labels", ("x", "y", "z,")),)
    assert conv("set('x','y','z,')", {"y", "x"}, attrs=labels) == "x,y"
    assert conv("set('x','y')", {"y"}) == "y"  # labels parsed from the type when attrs lack them
    assert conv("set('x','y')", set()) == ""
    assert conv("set('x','y')", "x,y") == "x,y"
    assert conv("set('x','y')", None, nullable=False) is None  # a reader None is NULL; an empty set is set()
    assert conv("set('x','y')", None, nullable=True) is None
    # ENUM: label as is, including the invalid-value ''.
    assert conv("enum('a','b')", "") == ""
    # DECIMAL wider than Spark's: exact text with exactly `scale` digits.
    assert conv("decimal(65,30)", decimal.Decimal("-12.5")) == "-12.500000000000000000000000000000"
    big = "99999999999999999999999999999999999.999999999999999999999999999999"
    assert conv("decimal(65,30)", decimal.Decimal(big)) == big
    assert conv("decimal(65,30)", decimal.Decimal("-" + big)) == "-" + big
    assert conv("decimal(40,0)", decimal.Decimal("-0")) == "0"
    # BINARY(n): the binlog drops trailing 0x00; staging pads back to n bytes.
    assert conv("binary(4)", b"\xff", attrs=BIN) == b"\xff\x00\x00\x00"
    assert conv("binary(4)", b"\x00\x01\x02\x03", attrs=BIN) == b"\x00\x01\x02\x03"
    assert conv("varbinary(4)", b"\xff", attrs=BIN) == b"\xff"
    # JSON: MariaDB text passes through; MySQL binary JSON (decoded, bytes keys) is re-serialised.
    assert conv("json", '{"a":1}') == '{"a":1}'
    assert conv("json", {b"a": [1, b"\xc3\xa9", None, True]}) == '{"a": [1, "é", null, true]}'
    # None stays None everywhere else.
    for t, _, _, _ in EXPECTED:
        if not t.startswith("set"):
            assert conv(t, None) is None


def test_zero_date_columns_are_staged_nullable_even_when_not_null() -> None:
    for t in ("date", "datetime(6)", "timestamp"):
        assert types.to_staged_column(SourceColumn("c", t, nullable=False)).nullable is True
    assert types.to_staged_column(SourceColumn("c", "int", nullable=False)).nullable is False
    assert types.to_staged_column(SourceColumn("c", "int", nullable=True)).nullable is True


def test_table_codec_schema_and_reserved_names() -> None:
    t = TableSchema("s", "t", (SourceColumn("id", "bigint unsigned", False), SourceColumn("v", "time")), ("id",))
    codec = types.table_codec(t)
    assert codec.arrow_schema.names == [*STAGED_META_COLUMNS, "id", "v"]
    assert codec.arrow_schema.field("_cdc_commit_ts").type == pa.timestamp("us", tz="UTC")
    assert [c.delta_type for c in codec.staged_columns()] == ["DECIMAL(20,0)", "BIGINT"]
    bad = TableSchema("s", "t", (SourceColumn("_cdc_op", "int"),), ("_cdc_op",))
    with pytest.raises(SchemaConflict, match=r"'s\.t'.*'_cdc_op'"):
        types.table_codec(bad)


def test_labels_parser_handles_quotes_and_commas() -> None:
    assert types.parse_labels("'a','it''s','x,y',''") == ("a", "it's", "x,y", "")


def test_docs_type_map_is_in_sync_with_the_code() -> None:
    doc = (ROOT / "docs" / "type-map.md").read_text(encoding="utf-8")
    block = types.generated_block(doc)
    assert block is not None, "docs/type-map.md lost its generated block"
    assert block == types.render_markdown(), "run: python -m cdc_core.model.types --write docs/type-map.md"
    # And the documented rows are the ones the code uses.
    for rule in types.TYPE_RULES:
        assert f"| {rule.mysql.replace('|', chr(92) + '|')} | `{rule.arrow}` | `{rule.delta}` |" in doc


def test_latin1_decodes_like_the_server_including_the_c1_controls() -> None:
    from cdc_core.model.types import MARIADB_LATIN1, python_codec

    assert python_codec("latin1") == python_codec("cp1252") == MARIADB_LATIN1
    assert bytes(range(0x80, 0xA0)).decode(MARIADB_LATIN1)[:3] == "\u20ac\x81\u201a"
    assert "\x81\x8d\x8f\x90\x9d".encode(MARIADB_LATIN1) == b"\x81\x8d\x8f\x90\x9d"
    assert python_codec("utf16") == "utf-16-be" and python_codec("UTF32") == "utf-32-be"
    assert python_codec("greek") is None


@pytest.mark.parametrize("charset", ["greek", "hebrew", "cp1256", "sjis", "big5", "armscii8"])
def test_text_in_an_inexact_charset_is_refused(charset: str) -> None:
    from cdc_core.model.errors import UnsupportedType

    col = SourceColumn("t", "varchar(10)", True, (("charset", charset),))
    with pytest.raises(UnsupportedType, match=f"character set {charset}"):
        types.column_codec(col, "db.t")


@pytest.mark.parametrize("charset", ["utf8mb4", "utf8mb3", "latin1", "utf16", "ucs2", "cp1251", "ascii"])
def test_text_in_an_exact_charset_is_staged(charset: str) -> None:
    col = SourceColumn("t", "varchar(10)", True, (("charset", charset),))
    assert types.column_codec(col, "db.t").arrow_type == pa.string()
