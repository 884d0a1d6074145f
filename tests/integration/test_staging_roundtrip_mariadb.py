"""Every mapped type end to end: MariaDB -> binlog reader -> staging -> Parquet, compared with SELECT.

Edge values go into a real table, the window holding them is read with `binlog.read_changes` and staged
with `staging.stage_window`, and the staged values must equal what `SELECT` returns (converted only as
docs/type-map.md documents: TIME as microseconds, BIT as a number, zero dates as NULL, ...).
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture.binlog import BinlogScanner, read_changes
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter, connect, describe_tables
from cdc_core.lake import staging
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowCaps, WindowPlan
from cdc_core.model.windows import plan_window
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration

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


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def db(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # allow zero dates
        cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMP values in UTC both ways
    yield conn
    conn.close()



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


# -------------------------------------------------------------------------------------------- tests


def test_every_type_stages_exactly_what_select_returns(
    params: SourceParams, db: Any, source_db: str, staging_dir: Path
) -> None:
    with db.cursor() as cur:
        cur.execute(DDL)
    before = facts_now(params)
    for row in ROWS:
        insert(db, row)
    inserted = select_rows(db)
    with db.cursor() as cur:
        cur.execute("UPDATE all_types SET vc = 'changed 🙂', tm6 = '-00:00:01.25', b5 = 7 WHERE id = 1")
        cur.execute("DELETE FROM all_types WHERE id = 2")
    final = select_rows(db)
    after = facts_now(params)

    plan = window(params, before, after)
    items = read_changes(params, after.identity, plan, TableFilter((f"{source_db}.*",)), schemas_from(params))
    root = str(staging_dir)
    manifest = staging.stage_window(plan, items, root)
    assert staging.read_manifest(root, plan.pipeline, plan.seq) == manifest
    staging.verify_window(root, manifest)

    t = manifest.table(f"{source_db}.all_types")
    assert (t.inserts, t.updates, t.deletes) == (3, 1, 1)
    assert [c.name for c in t.columns] == COLUMNS
    by_name = {c.name: c for c in t.columns}
    assert by_name["biu"].delta_type == "DECIMAL(20,0)"
    assert by_name["js"].mysql_type == "json"
    assert by_name["d65"].delta_type == "STRING"
    assert by_name["tm6"].delta_type == "BIGINT"

    staged = staging.read_table_changes(root, manifest, t.name).to_pylist()
    assert [(r["_cdc_op"], r["id"]) for r in staged] == [("I", 1), ("I", 2), ("I", 3), ("U", 1), ("D", 2)]
    for r in staged[:3]:
        assert_same(r, inserted[r["id"]], f"insert of id {r['id']}")
    assert_same(staged[3], final[1], "update of id 1")
    assert_same(staged[4], inserted[2], "delete of id 2 (before image)")
    # Some of the values asserted above, spelled out.
    assert staged[0]["biu"] == D(18446744073709551615)
    assert staged[0]["bn"] == b"\xff\x00\xff\x00"  # the binlog drops trailing 0x00 of BINARY(4)
    assert staged[0]["st"] == "x,z" and staged[2]["stn"] == ""
    assert staged[1]["tm6"] == -3_600_000_001 and staged[3]["tm6"] == -1_250_000  # negative fractional TIME
    assert staged[2]["yr"] == 0 and staged[2]["dt"] is None and staged[2]["ts"] is None


def test_ddl_mid_window_stages_two_files_from_the_real_binlog(
    params: SourceParams, db: Any, source_db: str, staging_dir: Path
) -> None:
    with db.cursor() as cur:
        cur.execute("CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(20), age TINYINT UNSIGNED)")
    before = facts_now(params)
    with db.cursor() as cur:
        cur.execute("INSERT INTO people VALUES (1, 'ann', 200)")
        cur.execute("ALTER TABLE people DROP COLUMN age, ADD COLUMN born DATE")
        cur.execute("INSERT INTO people VALUES (2, 'bob', '2001-02-03')")
    after = facts_now(params)
    plan = window(params, before, after)
    items = read_changes(params, after.identity, plan, TableFilter((f"{source_db}.*",)), schemas_from(params))
    manifest = staging.stage_window(plan, items, str(staging_dir))
    t = manifest.table(f"{source_db}.people")
    assert [f.columns for f in t.files] == [("id", "name", "age"), ("id", "name", "born")]
    assert [c.name for c in t.columns] == ["id", "name", "age", "born"]
    assert any("ALTER TABLE people" in e.query for e in manifest.ddl)
    got = staging.read_table_changes(str(staging_dir), manifest, t.name).to_pylist()
    assert [(r["id"], r["age"], r["born"]) for r in got] == [(1, 200, None), (2, None, dt.date(2001, 2, 3))]
