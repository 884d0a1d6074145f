"""The columnar decoder against python-mysql-replication, on the real MariaDB: identical staged values.

One window holds every mapped type with edge values (extremes, NULL in every column, zero dates,
negative fractional TIME, empty SETs, BINARY padding, non-UTF-8 text, every fsp, every length-prefix
size), updates with and without a key change, deletes, two tables interleaved in transactions, and a
DDL in the middle. It is staged four ways — the library's row-by-row decoding (`read_changes`), the
vector kernels, the per-value functions only, and a worker process — and the four staged windows
must be the same, byte for byte (the manifests carry every file's sha256).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture.binlog import BinlogScanner, read_change_batches, read_changes
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter, connect, describe_tables
from cdc_core.lake import staging
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowCaps, WindowPlan
from cdc_core.model.windows import plan_window
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration

D = decimal.Decimal

EDGE = """
CREATE TABLE edge (
  id INT NOT NULL, k2 VARCHAR(8) NOT NULL, PRIMARY KEY (id, k2),
  ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
  i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED NOT NULL DEFAULT 0,
  d1 DECIMAL(1,0), d5 DECIMAL(5,5), d10 DECIMAL(10,2), d18 DECIMAL(18,9), d19 DECIMAL(19,4), d38 DECIMAL(38,10),
  d65 DECIMAL(65,30), du DECIMAL(12,3) UNSIGNED,
  f FLOAT, db DOUBLE,
  dt DATE, dtm DATETIME, dtm1 DATETIME(1), dtm3 DATETIME(3), dtm6 DATETIME(6),
  ts TIMESTAMP NULL, ts2 TIMESTAMP(2) NULL, ts6 TIMESTAMP(6) NULL,
  tm TIME, tm1 TIME(1), tm3 TIME(3), tm6 TIME(6), yr YEAR,
  ch CHAR(10), ch100 CHAR(100), vc VARCHAR(255), vc300 VARCHAR(300), tt TINYTEXT, tx TEXT, mt MEDIUMTEXT,
  ltx LONGTEXT, lat VARCHAR(20) CHARACTER SET latin1,
  bn BINARY(4), vb VARBINARY(20), tb TINYBLOB, bl BLOB, mb MEDIUMBLOB, lb LONGBLOB,
  js JSON, en ENUM('a','b','ü'), enn ENUM('x','y') NOT NULL DEFAULT 'x', st SET('x','y','z'),
  stn SET('x','y') NOT NULL DEFAULT '',
  b1 BIT(1), b5 BIT(5), b9 BIT(9), b64 BIT(64)
) CHARACTER SET utf8mb4
"""

EMOJI = "héllo 🎉 wörld 𝄞 中文"
D65 = "99999999999999999999999999999999999.999999999999999999999999999999"

ROWS: list[dict[str, Any]] = [
    {
        "id": 1, "k2": "a", "ti": -128, "tiu": 255, "si": -32768, "siu": 65535, "mi": -8388608, "miu": 16777215,
        "i": -2147483648, "iu": 4294967295, "bi": -(2**63), "biu": 18446744073709551615,
        "d1": D("-9"), "d5": D("-0.99999"), "d10": D("-99999999.99"), "d18": D("-999999999.999999999"),
        "d19": D("-999999999999999.9999"), "d38": D("9999999999999999999999999999.9999999999"), "d65": D(D65),
        "du": D("999999999.999"), "f": 3.40282e38, "db": 1.7976931348623157e308,
        "dt": "1000-01-01", "dtm": "9999-12-31 23:59:59", "dtm1": "2024-02-29 12:00:00.9",
        "dtm3": "1000-01-01 00:00:00.001", "dtm6": "9999-12-31 23:59:59.999999",
        "ts": "2038-01-19 03:14:07", "ts2": "1970-01-01 00:00:01.01", "ts6": "2038-01-19 03:14:07.999999",
        "tm": "-838:59:59", "tm1": "-00:00:00.1", "tm3": "-12:34:56.789", "tm6": "838:59:59.999999", "yr": 2155,
        "ch": "ab", "ch100": "ü" * 100, "vc": EMOJI, "vc300": "x" * 300, "tt": "t" * 255, "tx": EMOJI * 10,
        "mt": "m" * 70000, "ltx": "x" * 70000, "lat": "café",
        "bn": b"\xff\x00\xff", "vb": b"\x00\xff\x00", "tb": bytes(range(255)), "bl": bytes(range(256)),
        "mb": b"\x00" * 70000, "lb": b"\x01" * 70000,
        "js": '{"a": [1, 2.5, "é"], "b": null}', "en": "ü", "enn": "y", "st": "z,x", "stn": "y",
        "b1": 1, "b5": 21, "b9": 511, "b64": 2**64 - 1,
    },
    {
        "id": 2, "k2": "b", "ti": 127, "tiu": 0, "si": 32767, "siu": 0, "mi": 8388607, "miu": 0,
        "i": 2147483647, "iu": 0, "bi": 2**63 - 1, "biu": 0,
        "d1": D("0"), "d5": D("0.00001"), "d10": D("0.01"), "d18": D("0.000000001"), "d19": D("0"),
        "d38": D("-0.0000000001"), "d65": D("-" + D65), "du": D("0"), "f": -0.0, "db": -2.2250738585072014e-308,
        "dt": "9999-12-31", "dtm": "1000-01-01 00:00:00", "dtm1": "1999-12-31 23:59:59.1",
        "dtm3": "2000-01-01 00:00:00.999", "dtm6": "1000-01-01 00:00:00.000001",
        "ts": "1970-01-01 00:00:01", "ts2": "2001-09-09 01:46:40.99", "ts6": "1970-01-01 00:00:01.000001",
        "tm": "00:00:00", "tm1": "-00:00:01.9", "tm3": "-00:00:00.001", "tm6": "-01:00:00.000001", "yr": 1901,
        "ch": "", "ch100": "", "vc": "", "vc300": "", "tt": "", "tx": "", "mt": "", "ltx": "", "lat": "",
        "bn": b"\x00\x00\x00\x01", "vb": b"", "tb": b"", "bl": b"", "mb": b"", "lb": b"",
        "js": "[]", "en": "", "enn": "x", "st": "x,y,z", "stn": "", "b1": 0, "b5": 0, "b9": 256, "b64": 0,
    },
    {"id": 3, "k2": "c", "dt": "0000-00-00", "dtm": "0000-00-00 00:00:00", "dtm6": "0000-00-00 00:00:00.000000",
     "ts": "0000-00-00 00:00:00", "ts6": "0000-00-00 00:00:00", "yr": 0, "st": "", "en": "", "tm": "838:59:59"},
    {"id": 4, "k2": "d"},  # NULL everywhere it can be
]


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def db(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, invalid ENUM values
        cur.execute("SET SESSION time_zone = '+00:00'")
    yield conn
    conn.close()



def window(params: SourceParams, before: SourceFacts, after: SourceFacts) -> WindowPlan:
    assert before.end is not None and after.end is not None
    start = BinlogPosition(before.end.file, before.end.offset, before.identity, before.gtid_executed)
    scanner = BinlogScanner(params, after.identity)
    stop = (after.end.file, after.end.offset)
    with closing(scanner.scan_transactions(start.file, start.offset, start.gtid, start.epoch, stop=stop)) as it:
        found = list(it)
    return plan_window("fast-it", 1, start, found, WindowCaps())


def schemas_from(params: SourceParams) -> Any:
    def lookup(schema: str, table: str) -> Any:
        conn = connect(params)
        try:
            return describe_tables(conn, TableFilter((f"{schema}.{table}",)), "fast-it").get(f"{schema}.{table}")
        finally:
            conn.close()

    return lookup


def insert(conn: Any, table: str, row: dict[str, Any]) -> None:
    cols = ", ".join(f"`{c}`" for c in row)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join(['%s'] * len(row))})", list(row.values()))


def test_columnar_decoder_stages_exactly_what_the_library_decodes(
    params: SourceParams, db: Any, source_db: str, tmp_path: Path
) -> None:
    with db.cursor() as cur:
        cur.execute(EDGE)
        cur.execute("CREATE TABLE other (id BIGINT PRIMARY KEY, v VARCHAR(10), n INT)")
        # Over 250 columns: a rows event's column count takes three bytes (it used to read as a partial image).
        cur.execute(f"CREATE TABLE wide (id INT PRIMARY KEY, {', '.join(f'c{i} INT' for i in range(300))}, "
                    "s VARCHAR(10))")
    before = facts_now(params)
    with db.cursor() as cur:
        values = ", ".join(str(i) for i in range(300))
        cur.execute(f"INSERT INTO wide VALUES (1, {values}, 'a'), (2, {values}, NULL)")
        cur.execute("UPDATE wide SET c299 = NULL, s = 'b' WHERE id = 1")
        cur.execute("DELETE FROM wide WHERE id = 2")
    for row in ROWS:
        insert(db, "edge", row)
    with db.cursor() as cur:
        cur.execute("INSERT INTO edge (id, k2, en) VALUES (5, 'e', 7)")  # invalid ENUM index: stored as ''
        cur.execute("BEGIN")  # two tables interleaved in one transaction, many rows per event
        cur.execute("INSERT INTO other SELECT seq, CONCAT('v', seq), IF(seq % 3, seq, NULL) FROM seq_1_to_3000")
        cur.execute("UPDATE edge SET vc = 'changed 🙂', tm6 = '-00:00:01.25', b5 = 7, d38 = NULL WHERE id = 1")
        cur.execute("UPDATE other SET n = n + 1 WHERE id <= 1500")
        cur.execute("COMMIT")
        cur.execute("UPDATE edge SET id = 10 WHERE id = 2")  # key change: delete + insert
        cur.execute("UPDATE edge SET k2 = 'B' WHERE id = 10")  # key change in the second key column
        cur.execute("UPDATE edge SET tm = '-838:59:59' WHERE id = 3")
        cur.execute("DELETE FROM edge WHERE id = 4")
        cur.execute("ALTER TABLE other ADD COLUMN extra DATE, DROP COLUMN n")
        cur.execute("INSERT INTO other (id, v, extra) VALUES (5000, 'after', '2024-02-29')")
        cur.execute("DELETE FROM other WHERE id > 2000")
    after = facts_now(params)

    plan = window(params, before, after)
    tables = TableFilter((f"{source_db}.*",))

    def stage(name: str, items: Any) -> Any:
        return staging.stage_window(plan, items, str(tmp_path / name))

    reference = stage("library", read_changes(params, after.identity, plan, tables, schemas_from(params)))
    fast = stage(
        "vector",
        read_change_batches(params, after.identity, plan, tables, schemas_from(params), workers=0, native=True),
    )
    python_walk = stage(  # the fallback when the compiled walk is not built (or CDC_NATIVE_DECODER=0)
        "python_walk",
        read_change_batches(params, after.identity, plan, tables, schemas_from(params), workers=0, native=False),
    )
    per_value = stage(
        "per_value",
        read_change_batches(params, after.identity, plan, tables, schemas_from(params), workers=0, vectorize=False),
    )
    worker = stage(
        "worker",
        read_change_batches(params, after.identity, plan, tables, schemas_from(params), workers=1, slice_bytes=4096),
    )

    edge = reference.table(f"{source_db}.edge")
    assert (edge.inserts, edge.updates, edge.deletes) == (7, 2, 3)
    other = reference.table(f"{source_db}.other")
    assert len(other.files) == 2 and (other.inserts, other.updates, other.deletes) == (3001, 1000, 1001)
    assert len(reference.ddl) == 1
    wide = reference.table(f"{source_db}.wide")
    assert (wide.inserts, wide.updates, wide.deletes) == (2, 1, 1)
    for name, got in (("vector", fast), ("python-walk", python_walk), ("per-value", per_value), ("worker", worker)):
        for t in reference.tables:
            want = staging.read_table_changes(str(tmp_path / "library"), reference, t.name)
            have = staging.read_table_changes(str(tmp_path / name.replace("-", "_")), got, t.name)
            for col in want.column_names:
                assert have[col].equals(want[col]), f"{name}: {t.name}.{col} differs"
        assert got.to_json() == reference.to_json(), f"{name}: the staged window is not byte-identical"

    # Tables with a change log also stage each update's before image (op B): every path the same bytes, the
    # changes' own files unchanged, each image the row as it was, with its update's version, ordinal and txn.
    every = lambda schema, table: True  # noqa: E731
    with_before = {
        "library": stage("library_b", read_changes(params, after.identity, plan, tables, schemas_from(params),
                                                   before_images=every)),
        "vector": stage("vector_b", read_change_batches(params, after.identity, plan, tables, schemas_from(params),
                                                        workers=0, native=True, before_images=every)),
        "python_walk": stage("python_walk_b", read_change_batches(
            params, after.identity, plan, tables, schemas_from(params), workers=0, native=False, before_images=every)),
        "per_value": stage("per_value_b", read_change_batches(
            params, after.identity, plan, tables, schemas_from(params), workers=0, vectorize=False,
            before_images=every)),
        "worker": stage("worker_b", read_change_batches(
            params, after.identity, plan, tables, schemas_from(params), workers=1, slice_bytes=4096,
            before_images=every)),
    }
    want_b = with_before["library"]
    for name, got in with_before.items():
        assert got.to_json() == want_b.to_json(), f"{name}: the before images are not byte-identical"
    for t in reference.tables:
        assert [f.sha256 for f in want_b.table(t.name).files] == [f.sha256 for f in t.files], t.name
    assert (want_b.table(f"{source_db}.other").inserts, want_b.table(f"{source_db}.other").updates) == (3001, 1000)
    root_b = str(tmp_path / "library_b")
    for t, updates in ((f"{source_db}.other", 1000), (f"{source_db}.edge", 2)):
        changes = staging.read_table_changes(root_b, want_b, t).to_pylist()
        befores = staging.read_table_changes(root_b, want_b, t, before_images=True).to_pylist()
        assert len(befores) == updates and {b["_cdc_op"] for b in befores} == {"B"}
        ours = {(c["_cdc_version"], c["_cdc_ordinal"]): c for c in changes if c["_cdc_op"] == "U"}
        assert len(ours) == updates
        for b in befores:
            u = ours[(b["_cdc_version"], b["_cdc_ordinal"])]
            assert (b["id"], b["_cdc_commit_ts"], b["_cdc_txn"]) == (u["id"], u["_cdc_commit_ts"], u["_cdc_txn"])
            if t.endswith("other"):
                assert (b["n"], u["n"]) == (b["id"], b["id"] + 1)
    edge_b = {b["id"]: b for b in staging.read_table_changes(root_b, want_b, f"{source_db}.edge",
                                                               before_images=True).to_pylist()}
    edge_u = {c["id"]: c for c in staging.read_table_changes(root_b, want_b, f"{source_db}.edge").to_pylist()
              if c["_cdc_op"] == "U"}
    assert sorted(edge_b) == [1, 3]
    assert edge_b[1]["vc"] != edge_u[1]["vc"] == "changed 🙂" and edge_b[3]["tm"] != edge_u[3]["tm"]
