"""The every-type table of the staging tests: one column per mapped MySQL type, rows at the edges of each
type (reader values and the staged values expected), and the window plan and changes that stage them.
Used by tests/unit/test_staging.py and tests/integration/test_staged_types_spark.py."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from cdc_core.model.changes import RowChange, SourceColumn, TableSchema
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.window_plan import WindowPlan

SERVER = ServerIdentity("mariadb", 1)
UTC = dt.UTC
D = decimal.Decimal


def make_plan(seq: int = 1, pipeline: str = "demo", end: int = 9000, events: int = 0, nbytes: int = 0) -> WindowPlan:
    return WindowPlan(
        pipeline,
        seq,
        BinlogPosition("mysql-bin.000001", 4, SERVER),
        BinlogPosition("mysql-bin.000001", end, SERVER),
        transactions=1,
        events=events,
        bytes=nbytes,
    )


def col(name: str, mysql_type: str, nullable: bool = True, **attrs: Any) -> SourceColumn:
    return SourceColumn(name, mysql_type, nullable, tuple(attrs.items()))


# ------------------------------------------------------------------------------- every type, exactly

U8 = {"charset": "utf8mb4"}
BIN = {"charset": "binary"}
ALL_TYPES = TableSchema(
    "shop",
    "all_types",
    (
        col("id", "int", False),
        col("ti", "tinyint"),
        col("tiu", "tinyint unsigned"),
        col("si", "smallint"),
        col("siu", "smallint unsigned"),
        col("mi", "mediumint"),
        col("miu", "mediumint unsigned"),
        col("i", "int"),
        col("iu", "int unsigned"),
        col("bi", "bigint"),
        col("biu", "bigint unsigned"),
        col("d10", "decimal(10,2)"),
        col("d38", "decimal(38,10)"),
        col("d38s", "decimal(38,30)"),
        col("d65", "decimal(65,30)"),
        col("f", "float"),
        col("db", "double"),
        col("dt", "date"),
        col("dtm", "datetime"),
        col("dtm6", "datetime(6)"),
        col("ts", "timestamp"),
        col("ts6", "timestamp(6)"),
        col("tm", "time"),
        col("tm6", "time(6)"),
        col("yr", "year"),
        col("ch", "char(10)", **U8),
        col("vc", "varchar(255)", **U8),
        col("tx", "text", **U8),
        col("ltx", "longtext", **U8),
        col("bn", "binary(4)", **BIN),
        col("vb", "varbinary(20)", **BIN),
        col("bl", "blob", **BIN),
        col("js", "json"),
        col("en", "enum('a','b','ü')", labels=("a", "b", "ü")),
        col("st", "set('x','y','z')", labels=("x", "y", "z")),
        col("stn", "set('x','y')", False, labels=("x", "y")),
        col("b1", "bit(1)"),
        col("b5", "bit(5)"),
        col("b64", "bit(64)"),
    ),
    ("id",),
)

D65_MAX = D("99999999999999999999999999999999999.999999999999999999999999999999")
EMOJI = "héllo 🎉 wörld 𝄞 中文"
ALL_BYTES = bytes(range(256))

# (reader values, expected staged values) per row; reader values are what python-mysql-replication gives.
ROWS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {
            "id": 1,
            "ti": -128,
            "tiu": 255,
            "si": -32768,
            "siu": 65535,
            "mi": -8388608,
            "miu": 16777215,
            "i": -2147483648,
            "iu": 4294967295,
            "bi": -(2**63),
            "biu": 18446744073709551615,
            "d10": D("-99999999.99"),
            "d38": D("9999999999999999999999999999.9999999999"),
            "d38s": D("-99999999.999999999999999999999999999999"),
            "d65": D65_MAX,
            "f": 3.4028234663852886e38,
            "db": 1.7976931348623157e308,
            "dt": dt.date(1000, 1, 1),
            "dtm": dt.datetime(9999, 12, 31, 23, 59, 59),
            "dtm6": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            "ts": dt.datetime(2038, 1, 19, 3, 14, 7),
            "ts6": dt.datetime(1970, 1, 1, 0, 0, 1, 1),
            "tm": -dt.timedelta(hours=838, minutes=59, seconds=59),
            "tm6": dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
            "yr": 2155,
            "ch": "ab",
            "vc": EMOJI,
            "tx": EMOJI * 10,
            "ltx": "x" * 70000,
            "bn": b"\xff\x00\xff",
            "vb": b"\x00\xff\x00",
            "bl": ALL_BYTES,
            "js": '{"a": [1, 2.5, "é"], "b": null}',
            "en": "ü",
            "st": {"z", "x"},
            "stn": {"y"},
            "b1": "1",
            "b5": "10101",
            "b64": "1" * 64,
        },
        {
            "biu": D(18446744073709551615),
            "d65": str(D65_MAX),
            "ts": dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC),
            "ts6": dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC),
            "tm": -3_020_399_000_000,
            "tm6": 3_020_399_999_999,
            "bn": b"\xff\x00\xff\x00",
            "st": "x,z",
            "stn": "y",
            "b1": 1,
            "b5": 21,
            "b64": D(2**64 - 1),
        },
    ),
    (
        {
            "id": 2,
            "ti": 127,
            "tiu": 0,
            "si": 32767,
            "siu": 0,
            "mi": 8388607,
            "miu": 0,
            "i": 2147483647,
            "iu": 0,
            "bi": 2**63 - 1,
            "biu": 0,
            "d10": D("0.01"),
            "d38": D("-9999999999999999999999999999.9999999999"),
            "d38s": D("0.000000000000000000000000000001"),
            "d65": D("-" + str(D65_MAX)),
            "f": -1.401298464324817e-45,
            "db": -2.2250738585072014e-308,
            "dt": dt.date(9999, 12, 31),
            "dtm": dt.datetime(1000, 1, 1),
            "dtm6": dt.datetime(1000, 1, 1, 0, 0, 0, 1),
            "ts": dt.datetime(1970, 1, 1, 0, 0, 1),
            "ts6": dt.datetime(2038, 1, 19, 3, 14, 7, 999999),
            "tm": -dt.timedelta(microseconds=500_000),
            "tm6": -dt.timedelta(hours=1, microseconds=999_999),  # the library's -01:00:00.000001
            "yr": 1901,
            "ch": "",
            "vc": "",
            "tx": "",
            "ltx": "",
            "bn": b"\x00\x00\x00\x01",
            "vb": b"",
            "bl": b"",
            "js": "[]",
            "en": "",
            "st": {"x", "y", "z"},
            "stn": set(),  # the empty set (both readers tell it from NULL)
            "b1": "0",
            "b5": "00000",
            "b64": "0" * 64,
        },
        {
            "biu": D(0),
            "d65": "-" + str(D65_MAX),
            "ts": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
            "ts6": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC),
            "tm": -500_000,
            "tm6": -3_600_000_001,
            "st": "x,y,z",
            "stn": "",
            "b1": 0,
            "b5": 0,
            "b64": D(0),
        },
    ),
    (
        # Zero dates (as the reader decodes them), YEAR 0000, and NULL in every nullable column.
        {
            **{c.name: None for c in ALL_TYPES.columns},
            "id": 3,
            "dt": None,
            "dtm": None,
            "ts": dt.datetime(1970, 1, 1),
            "ts6": dt.datetime(1970, 1, 1),
            "yr": 1900,
            "stn": set(),
        },
        {"ts": None, "ts6": None, "yr": 0, "stn": ""},
    ),
]


def expected_row(reader: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in reader.items()}
    out.update(overrides)
    # Exact decimals come back at the column's scale: compare as numbers.
    return out


def changes_for(rows: list[dict[str, Any]], table: TableSchema = ALL_TYPES, ops: str = "I") -> list[RowChange]:
    return [RowChange(ops[i % len(ops)], table, r, 1000 + i, i + 1, 1_700_000_000.0 + i) for i, r in enumerate(rows)]
