"""The every-type MariaDB table of the staging round trip: its DDL, its columns, edge-value rows, and the plain
helpers that insert and select them, plan the binlog window holding them and compare staged values with what
SELECT returns. Used by tests/integration/test_staging_roundtrip_mariadb.py and test_snapshot_mariadb.py."""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from contextlib import closing
from typing import Any

from cdc_core.capture.binlog import BinlogScanner
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter, connect, describe_tables
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowCaps, WindowPlan
from cdc_core.model.windows import plan_window

D = decimal.Decimal
UTC = dt.UTC

DDL = """
CREATE TABLE all_types (
  id INT NOT NULL PRIMARY KEY,
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED,
  d10 DECIMAL(10,2), d38 DECIMAL(38,10), d65 DECIMAL(65,30),
  f FLOAT, db DOUBLE,
  dt DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL,
  tm TIME, tm6 TIME(6), yr YEAR,
  ch CHAR(10), vc VARCHAR(255), tx TEXT, ltx LONGTEXT,
  bn BINARY(4), vb VARBINARY(20), bl BLOB,
  js JSON, en ENUM('a','b','ü'), st SET('x','y','z'), stn SET('x','y') NOT NULL DEFAULT '',
  b1 BIT(1), b5 BIT(5), b64 BIT(64)
) CHARACTER SET utf8mb4
"""

COLUMNS = [
    "id",
    "ti",
    "tiu",
    "si",
    "siu",
    "mi",
    "miu",
    "i",
    "iu",
    "bi",
    "biu",
    "d10",
    "d38",
    "d65",
    "f",
    "db",
    "dt",
    "dtm",
    "dtm6",
    "ts",
    "ts6",
    "tm",
    "tm6",
    "yr",
    "ch",
    "vc",
    "tx",
    "ltx",
    "bn",
    "vb",
    "bl",
    "js",
    "en",
    "st",
    "stn",
    "b1",
    "b5",
    "b64",
]

D65 = "99999999999999999999999999999999999.999999999999999999999999999999"
EMOJI = "héllo 🎉 wörld 𝄞 中文"

ROWS: list[dict[str, Any]] = [
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
        "d65": D(D65),
        "f": 3.40282e38,
        "db": 1.7976931348623157e308,
        "dt": "1000-01-01",
        "dtm": "9999-12-31 23:59:59",
        "dtm6": "9999-12-31 23:59:59.999999",
        "ts": "2038-01-19 03:14:07",
        "ts6": "1970-01-01 00:00:01.000001",
        "tm": "-838:59:59",
        "tm6": "838:59:59.999999",
        "yr": 2155,
        "ch": "ab  ",
        "vc": EMOJI,
        "tx": EMOJI * 10,
        "ltx": "x" * 70000,
        "bn": b"\xff\x00\xff",
        "vb": b"\x00\xff\x00",
        "bl": bytes(range(256)),
        "js": '{"a": [1, 2.5, "é"], "b": null}',
        "en": "ü",
        "st": "z,x",
        "stn": "y",
        "b1": 1,
        "b5": 21,
        "b64": 2**64 - 1,
    },
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
        "d65": D("-" + D65),
        "f": -1.5,
        "db": -2.2250738585072014e-308,
        "dt": "9999-12-31",
        "dtm": "1000-01-01 00:00:00",
        "dtm6": "1000-01-01 00:00:00.000001",
        "ts": "1970-01-01 00:00:01",
        "ts6": "2038-01-19 03:14:07.999999",
        "tm": "-00:00:00.5",
        "tm6": "-01:00:00.000001",
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
        "st": "x,y,z",
        "stn": "",
        "b1": 0,
        "b5": 0,
        "b64": 0,
    },
    {
        # Zero dates, YEAR 0000, the empty SET of a NOT NULL column, NULL everywhere else.
        **{c: None for c in COLUMNS},
        "id": 3,
        "dt": "0000-00-00",
        "dtm": "0000-00-00 00:00:00",
        "dtm6": "0000-00-00 00:00:00.000000",
        "ts": "0000-00-00 00:00:00",
        "ts6": "0000-00-00 00:00:00",
        "yr": 0,
        "stn": "",
    },
]


# ------------------------------------------------------------------------------------------ helpers


def start_of(facts: SourceFacts) -> BinlogPosition:
    assert facts.end is not None
    return BinlogPosition(facts.end.file, facts.end.offset, facts.identity, facts.gtid_executed)


def window(params: SourceParams, before: SourceFacts, after: SourceFacts, seq: int = 1) -> WindowPlan:
    start, stop = start_of(before), start_of(after)
    scanner = BinlogScanner(params, after.identity)
    with closing(
        scanner.scan_transactions(start.file, start.offset, start.gtid, start.epoch, stop=(stop.file, stop.offset))
    ) as it:
        found = list(it)
    return plan_window("staging-it", seq, start, found, WindowCaps())


def schemas_from(params: SourceParams) -> Any:
    def lookup(schema: str, table: str) -> Any:
        conn = connect(params)
        try:
            return describe_tables(conn, TableFilter((f"{schema}.{table}",)), "staging-it").get(f"{schema}.{table}")
        finally:
            conn.close()

    return lookup


def select_rows(conn: Any, table: str = "all_types") -> dict[int, dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}` ORDER BY id")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def insert(conn: Any, row: dict[str, Any]) -> None:
    cols = ", ".join(f"`{c}`" for c in row)
    marks = ", ".join(["%s"] * len(row))
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO all_types ({cols}) VALUES ({marks})", list(row.values()))


def as_staged(name: str, v: Any) -> Any:
    """What SELECT returned (pymysql's conversion of the text protocol) -> the documented staged value."""
    if v is None:
        return None
    if name in ("dt", "dtm", "dtm6", "ts", "ts6") and isinstance(v, str):
        return None  # pymysql hands zero dates back as text; they land as NULL
    if name in ("ts", "ts6"):
        return v.replace(tzinfo=UTC)
    if name in ("tm", "tm6"):
        return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if name in ("b1", "b5", "b64"):
        n = int.from_bytes(v, "big")
        return D(n) if name == "b64" else n
    if name == "biu":
        return D(v)
    if name == "d65":
        return format(v, "f")
    return v


def assert_same(staged: dict[str, Any], selected: dict[str, Any], what: str) -> None:
    for name in COLUMNS:
        got, raw = staged[name], selected[name]
        if name == "f" and raw is not None:
            # SELECT prints FLOAT with 6 significant digits; compare as the 4-byte floats they are.
            assert struct.pack("<f", got) == struct.pack("<f", raw), f"{what} {name}: {got!r} vs {raw!r}"
            continue
        want = as_staged(name, raw)
        assert got == want, f"{what} column {name}: staged {got!r}, SELECT gives {want!r} (raw {raw!r})"
        assert want is None or type(got) is type(want), f"{what} column {name}: {type(got)} vs {type(want)}"
