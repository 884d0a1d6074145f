"""Every value lands the same on every path (issue 15 §1), property-based, against the real MariaDB.

Hypothesis writes random rows of every type family of docs/type-map.md into one table (NULLs, each
family's empty and extreme values, zero dates, TIME beyond ±24 h, BIT(64) all ones, DECIMAL(65,30)
extremes, CHAR/VARCHAR trailing spaces, BINARY zero padding, ENUM index 0, the empty SET, JSON
scalars and nesting, -0.0, latin1 text), inserts them and then updates every row to a second random
image, and demands:

- the binlog window staged by the library path (`read_changes`), the vector kernels (with the compiled
  row walk and with its generated-Python fallback), the pure-Python per-value functions and a worker
  process is byte-identical (manifests carry each file's sha256);
- the binlog's last image of every row equals the row the snapshot path (`snapshot.read_chunk`) stages;
- both equal what `SELECT` returns, converted only as docs/type-map.md documents.

A deterministic set of the edge rows then goes through the Spark merge job on both paths (binlog window
into one Delta table, snapshot chunk into another) and the two lakes must hold identical rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.capture import snapshot_reads
from cdc_core.capture.binlog import BinlogScanner, read_change_batches, read_changes
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter, connect, describe_tables
from cdc_core.lake import staging
from cdc_core.model import layout, snapshot_state
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowCaps, WindowPlan
from cdc_core.model.windows import plan_window
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration

D = decimal.Decimal
UTC = dt.UTC
CTX = decimal.Context(prec=100)

ENUM_LABELS = ("a", "", "b", "ü")
SET_LABELS = ("x", "y", "z")

# name -> DDL type. Every family of the type map; nullable unless it says NOT NULL.
COLUMNS: dict[str, str] = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT", "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED", "bi": "BIGINT",
    "biu": "BIGINT UNSIGNED",
    "d1": "DECIMAL(1,0)", "d5": "DECIMAL(5,5)", "d18": "DECIMAL(18,4)", "d30": "DECIMAL(30,10)",
    "d38": "DECIMAL(38,0)", "d65": "DECIMAL(65,30)", "d50": "DECIMAL(50,0) UNSIGNED",
    "f": "FLOAT", "db": "DOUBLE",
    "dt": "DATE", "dtm": "DATETIME", "dtm3": "DATETIME(3)", "dtm6": "DATETIME(6)",
    "ts": "TIMESTAMP NULL", "ts1": "TIMESTAMP(1) NULL", "ts6": "TIMESTAMP(6) NULL",
    "tm": "TIME", "tm2": "TIME(2)", "tm6": "TIME(6)", "yr": "YEAR",
    "ch": "CHAR(10)", "chn": "CHAR(4) NOT NULL DEFAULT ''", "vc": "VARCHAR(300)", "tt": "TINYTEXT",
    "tx": "TEXT", "lat": "VARCHAR(20) CHARACTER SET latin1", "u16": "VARCHAR(8) CHARACTER SET utf16",
    "u16le": "VARCHAR(8) CHARACTER SET utf16le", "u32": "TINYTEXT CHARACTER SET utf32",
    "ucs": "CHAR(6) CHARACTER SET ucs2", "l2": "VARCHAR(8) CHARACTER SET latin2",
    "c1251": "VARCHAR(8) CHARACTER SET cp1251", "u3": "VARCHAR(8) CHARACTER SET utf8mb3",
    "bn": "BINARY(6)", "vb": "VARBINARY(20)", "bl": "BLOB",
    "js": "JSON",
    "en": "ENUM(" + ",".join(f"'{x}'" for x in ENUM_LABELS) + ")",
    "st": "SET(" + ",".join(f"'{x}'" for x in SET_LABELS) + ")",
    "stn": "SET('x','y') NOT NULL DEFAULT ''",
    "b1": "BIT(1)", "b10": "BIT(10)", "b64": "BIT(64)",
}
DDL = (
    "CREATE TABLE vals (id INT NOT NULL PRIMARY KEY, "
    + ", ".join(f"`{c}` {t}" for c, t in COLUMNS.items())
    + ") CHARACTER SET utf8mb4"
)
NOT_NULL = {c for c, t in COLUMNS.items() if "NOT NULL" in t}


# ------------------------------------------------------------------------------------------ values


def _int(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(sorted({lo, hi, 0 if lo <= 0 else lo, hi - 1})), st.integers(lo, hi))


def _decimal(p: int, s: int, unsigned: bool = False) -> st.SearchStrategy[D]:
    bound = 10**p - 1
    lo = 0 if unsigned else -bound
    return _int(lo, bound).map(lambda u: D(u).scaleb(-s, context=CTX))


def _time_text(fsp: int) -> st.SearchStrategy[str]:
    top = (838 * 3600 + 59 * 60 + 59) * 10**6 + 999_999
    step = 10 ** (6 - fsp)

    def fmt(us: int) -> str:
        us -= us % step if us >= 0 else -((-us) % step)
        sign, a = ("-" if us < 0 else ""), abs(us)
        secs, frac = divmod(a, 10**6)
        return f"{sign}{secs // 3600}:{secs // 60 % 60:02d}:{secs % 60:02d}.{frac:06d}"

    edges = st.sampled_from([-top, top, 0, -1, -10**6 - 250_000, 86_400 * 10**6, -86_400 * 10**6 - 1])
    return st.one_of(edges, st.integers(-top, top)).map(fmt)


def _datetime(lo: dt.datetime, hi: dt.datetime, fsp: int) -> st.SearchStrategy[str]:
    step = 10 ** (6 - fsp)

    def fmt(v: dt.datetime) -> str:
        return v.replace(microsecond=v.microsecond - v.microsecond % step).strftime("%Y-%m-%d %H:%M:%S.%f")

    return st.one_of(st.sampled_from([lo, hi]), st.datetimes(lo, hi)).map(fmt)


CYRILLIC = "\u041f\u0440\u0438\u0432\u0435\u0442"  # Privet
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("ab \t\x00'\"\\%é中🎉𝄞"), st.characters(codec="utf-8", exclude_categories=("Cs",))
    ),
    max_size=12,
)
# MariaDB's latin1 is cp1252 (with 0x81, 0x8D, 0x8F, 0x90, 0x9D as the C1 controls).
LATIN1 = st.text(alphabet=st.sampled_from("aZ é€Ÿ\x81\x8d\x8f\x90\x9dÿ\x00\x7f"), max_size=8)
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False,
              allow_infinity=False), st.text(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8,
)
JSON_TEXT = st.one_of(
    st.sampled_from(["null", "true", "0", '""', '"é🎉"', "[]", "{}", ' { "a" : [ 1 , 2.50 ] } ', "-0", "1e3"]),
    st.builds(lambda v, ascii_: json.dumps(v, ensure_ascii=ascii_), JSON_VALUES, st.booleans()),
)

VALUES: dict[str, st.SearchStrategy[Any]] = {
    "ti": _int(-128, 127), "tiu": _int(0, 255), "si": _int(-32768, 32767), "siu": _int(0, 65535),
    "mi": _int(-8388608, 8388607), "miu": _int(0, 16777215), "i": _int(-(2**31), 2**31 - 1),
    "iu": _int(0, 2**32 - 1), "bi": _int(-(2**63), 2**63 - 1), "biu": _int(0, 2**64 - 1),
    "d1": _decimal(1, 0), "d5": _decimal(5, 5), "d18": _decimal(18, 4), "d30": _decimal(30, 10),
    "d38": _decimal(38, 0), "d65": _decimal(65, 30), "d50": _decimal(50, 0, unsigned=True),
    "f": st.one_of(st.sampled_from([-0.0, 0.0, 3.4028234663852886e38, -1.401298464324817e-45, 1.1754943508222875e-38]),
                   st.floats(width=32, allow_nan=False, allow_infinity=False)),
    "db": st.one_of(st.sampled_from([-0.0, 1.7976931348623157e308, -2.2250738585072014e-308, 5e-324]),
                    st.floats(allow_nan=False, allow_infinity=False)),
    "dt": st.one_of(st.sampled_from(["0000-00-00", "2024-00-10", "2024-02-00", "1000-01-01", "9999-12-31"]),
                    st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)).map(str)),
    "dtm": st.one_of(st.just("0000-00-00 00:00:00"), _datetime(dt.datetime(1000, 1, 1), dt.datetime.max, 0)),
    "dtm3": _datetime(dt.datetime(1000, 1, 1), dt.datetime.max, 3),
    "dtm6": st.one_of(st.just("2024-00-00 10:00:00"), _datetime(dt.datetime(1000, 1, 1), dt.datetime.max, 6)),
    "ts": st.one_of(st.just("0000-00-00 00:00:00"),
                    _datetime(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7), 0)),
    "ts1": _datetime(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 900000), 1),
    "ts6": _datetime(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 999999), 6),
    "tm": _time_text(0), "tm2": _time_text(2), "tm6": _time_text(6),
    "yr": st.one_of(st.sampled_from([0, 1901, 2155]), st.integers(1901, 2155)),
    "ch": st.one_of(st.sampled_from(["", " ", "a  ", " a", "ü" * 10]), TEXT.map(lambda s: s[:10])),
    "chn": st.sampled_from(["", "  ", "ab ", "\x00"]),
    "vc": st.one_of(st.sampled_from(["", " ", "trailing  ", "x" * 300]), TEXT),
    "tt": st.one_of(st.sampled_from(["", "t" * 255]), TEXT), "tx": TEXT, "lat": LATIN1,
    "u16": st.text(alphabet=st.sampled_from("aé 中🎉𝄞\x00"), max_size=8),
    "u16le": st.text(alphabet=st.sampled_from("aé 中🎉𝄞\x00"), max_size=8),
    "u32": st.text(alphabet=st.sampled_from("aé 中🎉𝄞\x00"), max_size=8),
    "ucs": st.text(alphabet=st.sampled_from("aé 中\u20ac"), max_size=6),
    "l2": st.text(alphabet=st.sampled_from("aŁódź ą\x00"), max_size=8),
    "c1251": st.text(alphabet=st.sampled_from("a \u20ac" + CYRILLIC), max_size=8),
    "u3": st.text(alphabet=st.sampled_from("aé 中\x00"), max_size=8),
    "bn": st.one_of(st.sampled_from([b"", b"\x00", b"\x00" * 6, b"\xff" * 6, b"a\x00"]), st.binary(max_size=6)),
    "vb": st.one_of(st.sampled_from([b"", b"\x00", b"a\x00\x00"]), st.binary(max_size=20)),
    "bl": st.one_of(st.sampled_from([b"", bytes(range(256))]), st.binary(max_size=40)),
    "js": JSON_TEXT,
    "en": st.one_of(st.sampled_from(ENUM_LABELS), st.just(0)),  # 0: the invalid value '' (index 0)
    "st": st.sets(st.sampled_from(SET_LABELS)).map(lambda s: ",".join(sorted(s))),
    "stn": st.sets(st.sampled_from(("x", "y"))).map(lambda s: ",".join(sorted(s))),
    "b1": _int(0, 1), "b10": _int(0, 1023), "b64": _int(0, 2**64 - 1),
}


def column_value(name: str) -> st.SearchStrategy[Any]:
    v = VALUES[name]
    return v if name in NOT_NULL else st.one_of(st.none(), v)


ROW = st.fixed_dictionaries({c: column_value(c) for c in COLUMNS})

# Edge rows for the lake comparison: every family's empty, zero and extreme values, and NULLs.
TOP_TIME = "838:59:59.999999"
EDGE_ROWS: list[dict[str, Any]] = [
    {"ti": -128, "tiu": 255, "si": -32768, "siu": 65535, "mi": -8388608, "miu": 16777215, "i": -(2**31),
     "iu": 2**32 - 1, "bi": -(2**63), "biu": 2**64 - 1, "d1": D(-9), "d5": D("-0.99999"),
     "d18": D("-99999999999999.9999"), "d30": D("99999999999999999999.9999999999"), "d38": D(10**38 - 1),
     "d65": D("-" + "9" * 35 + "." + "9" * 30), "d50": D(10**50 - 1), "f": -0.0, "db": -0.0,
     "dt": "0000-00-00", "dtm": "0000-00-00 00:00:00", "dtm3": "1000-01-01 00:00:00.001",
     "dtm6": "9999-12-31 23:59:59.999999", "ts": "0000-00-00 00:00:00", "ts1": "1970-01-01 00:00:01.1",
     "ts6": "2038-01-19 03:14:07.999999", "tm": "-838:59:59", "tm2": "-00:00:00.01", "tm6": TOP_TIME, "yr": 0,
     "ch": "a  ", "chn": "", "vc": "", "tt": "", "tx": "", "lat": "€\x81", "u16": "🎉 ", "u16le": "𝄞",
     "u32": "", "ucs": "中 ", "l2": "Łódź", "c1251": CYRILLIC, "u3": "", "bn": b"\x00", "vb": b"", "bl": b"",
     "js": "null", "en": 0, "st": "", "stn": "", "b1": 1, "b10": 1023, "b64": 2**64 - 1},
    {"ti": 0, "tiu": 0, "si": 0, "siu": 0, "mi": 0, "miu": 0, "i": 0, "iu": 0, "bi": 2**63 - 1, "biu": 0,
     "d1": D(0), "d5": D("0.00001"), "d18": D("0.0001"), "d30": D("-0.0000000001"), "d38": D(-(10**38) + 1),
     "d65": D("0.000000000000000000000000000001"), "d50": D(0), "f": 3.4028234663852886e38,
     "db": 1.7976931348623157e308, "dt": "2024-00-10", "dtm": "1000-01-01 00:00:00", "dtm3": "2024-02-29 12:00:00.999",
     "dtm6": "2024-00-00 10:00:00", "ts": "1970-01-01 00:00:01", "ts1": None, "ts6": "1970-01-01 00:00:01.000001",
     "tm": "838:59:59", "tm2": "-838:59:59.99", "tm6": "-" + TOP_TIME, "yr": 2155, "ch": " ", "chn": "ab ",
     "vc": "trailing  ", "tt": " ", "tx": "🎉", "lat": "",
     "u16": "", "u16le": "", "u32": "🎉中é", "ucs": "", "l2": "", "c1251": "", "u3": "中", "bn": b"\xff" * 6,
     "vb": b"a\x00\x00",
     "bl": bytes(range(256)), "js": '{"a": [1, 2.5, "é"], "b": {"c": null}}', "en": "", "st": "x,y,z",
     "stn": "x", "b1": 0, "b10": 0, "b64": 0},
    {"chn": "\x00", "js": '"x"', "en": "ü", "st": None, "b64": 2**63},  # NULL everywhere it can be
]


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def db(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, ENUM index 0
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(DDL)
    yield conn
    conn.close()



def window(params: SourceParams, before: SourceFacts, after: SourceFacts, seq: int) -> WindowPlan:
    assert before.end is not None and after.end is not None
    start = BinlogPosition(before.end.file, before.end.offset, before.identity, before.gtid_executed)
    scanner = BinlogScanner(params, after.identity)
    stop = (after.end.file, after.end.offset)
    with closing(scanner.scan_transactions(start.file, start.offset, start.gtid, start.epoch, stop=stop)) as it:
        found = list(it)
    return plan_window("vals", seq, start, found, WindowCaps())


def table_schema(params: SourceParams, name: str) -> Any:
    conn = connect(params)
    try:
        return describe_tables(conn, TableFilter((name,)), "vals")[name]
    finally:
        conn.close()


def write(conn: Any, rows: list[dict[str, Any]], updates: list[dict[str, Any]]) -> None:
    cols = ", ".join(f"`{c}`" for c in COLUMNS)
    with conn.cursor() as cur:
        for i, row in enumerate(rows, 1):
            cur.execute(
                f"INSERT INTO vals (id, {cols}) VALUES (%s, {', '.join(['%s'] * len(COLUMNS))})",
                [i, *(row.get(c, "" if c in NOT_NULL else None) for c in COLUMNS)],
            )
        for i, row in enumerate(updates, 1):
            sets = ", ".join(f"`{c}` = %s" for c in COLUMNS)
            cur.execute(f"UPDATE vals SET {sets} WHERE id = %s", [*(row.get(c) for c in COLUMNS), i])


def select_rows(conn: Any) -> dict[int, dict[str, Any]]:
    with conn.cursor() as cur:
        # FLOAT prints with 6 significant digits; as a DOUBLE it is exact (MariaDB stores no -0.0).
        cols = ", ".join("`f` + 0e0 AS `f`" if c == "f" else f"`{c}`" for c in ("id", *COLUMNS))
        cur.execute(f"SELECT {cols} FROM vals ORDER BY id")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def float_bits(name: str, v: float) -> bytes:
    return struct.pack("<f" if name == "f" else "<d", v)


def as_staged(name: str, v: Any) -> Any:
    """What SELECT returned (pymysql, session in UTC) -> the value docs/type-map.md says is staged."""
    if v is None:
        return None
    t = COLUMNS[name].split("(")[0].split(" ")[0]
    if t in ("DATE", "DATETIME", "TIMESTAMP") and isinstance(v, str):
        return None  # zero and partial dates land as NULL (pymysql returns them as text)
    if t == "TIMESTAMP":
        return v.replace(tzinfo=UTC)
    if t == "TIME":
        return (v.days * 86_400 + v.seconds) * 1_000_000 + v.microseconds
    if t == "BIT":
        n = int.from_bytes(v, "big")
        return D(n) if name == "b64" else n
    if name == "biu":
        return D(v)
    if name in ("d65", "d50"):
        return format(v, "f")
    if t == "BINARY":
        return v.ljust(6, b"\x00")
    return v


def staged_rows(root: Path, manifest: Any, table: str) -> list[dict[str, Any]]:
    return staging.read_table_changes(str(root), manifest, table).to_pylist()


def assert_value(name: str, got: Any, want: Any, what: str) -> None:
    if name in ("f", "db") and got is not None and want is not None:
        assert float_bits(name, got) == float_bits(name, want), f"{what} {name}: {got!r} vs {want!r}"
        return
    assert got == want, f"{what} column {name}: {got!r} vs {want!r}"
    assert want is None or type(got) is type(want), f"{what} column {name}: {type(got)} vs {type(want)}"


class Paths:
    """Stages one batch of writes through every path and checks them against each other and SELECT."""

    def __init__(self, params: SourceParams, conn: Any, source_db: str, tmp: Path) -> None:
        self.params, self.conn, self.db, self.tmp = params, conn, source_db, tmp
        self.name = f"{source_db}.vals"
        self.seq = 0

    def run(self, rows: list[dict[str, Any]], updates: list[dict[str, Any]]) -> tuple[Any, ...]:
        with self.conn.cursor() as cur:
            cur.execute("DELETE FROM vals")
        self.seq += 1
        before = facts_now(self.params)
        write(self.conn, rows, updates)
        after = facts_now(self.params)
        plan = window(self.params, before, after, self.seq)
        tables = TableFilter((self.name,))
        out = self.tmp / f"w{self.seq}"
        schema = table_schema(self.params, self.name)

        def lookup(s: str, t: str) -> Any:
            return schema if f"{s}.{t}" == self.name else None

        p = self.params
        staged = {
            "library": staging.stage_window(plan, read_changes(p, after.identity, plan, tables, lookup),
                                            str(out / "library")),
            "vector": staging.stage_window(
                plan, read_change_batches(p, after.identity, plan, tables, lookup, workers=0, native=True),
                str(out / "vector")),
            "python_walk": staging.stage_window(  # the fallback without the compiled row walk
                plan, read_change_batches(p, after.identity, plan, tables, lookup, workers=0, native=False),
                str(out / "python_walk")),
            "per_value": staging.stage_window(
                plan, read_change_batches(p, after.identity, plan, tables, lookup, workers=0, vectorize=False),
                str(out / "per_value")),
            "worker": staging.stage_window(
                plan, read_change_batches(p, after.identity, plan, tables, lookup, workers=1, slice_bytes=2048),
                str(out / "worker")),
        }
        reference = staged["library"]
        want = staging.read_table_changes(str(out / "library"), reference, self.name)
        # Every change names its transaction: where it began, before its own rows event (the same on every path).
        txns, versions = want["_cdc_txn"].to_pylist(), want["_cdc_version"].to_pylist()
        assert None not in txns and all(t < v for t, v in zip(txns, versions, strict=True)), (txns, versions)
        for path, m in staged.items():
            have = staging.read_table_changes(str(out / path), m, self.name)
            for col in want.column_names:
                assert have[col].equals(want[col]), (
                    f"{path} vs library: column {col}: {have[col].to_pylist()} vs {want[col].to_pylist()}"
                )
            assert m.to_json() == reference.to_json(), f"{path}: the staged window is not byte-identical"

        # Every family decodes on a vector kernel.
        from cdc_core.capture.rowdecode import slices

        decoders = [d for (spec, vec, _), d in slices._DECODERS.items() if vec and spec.shape.name == self.name]
        assert decoders
        for d in decoders:
            slow = {lay.name for lay, k in zip(d.layouts, d.kernels, strict=True) if k is None}
            assert not slow, f"columns without a vector kernel: {sorted(slow)}"

        # The snapshot path: a chunk of the whole table, read after the writes.
        identity = after.identity
        progress = snapshot_state.TableProgress(self.name, chunk_rows=1000)
        cplan = snapshot_reads.plan_next_chunk_from_source(
            p, identity, epoch=0, pipeline="vals", seq=10_000 + self.seq, progress=progress, table=schema,
            now=time.time(),
        )
        chunk = staging.stage_window(cplan, snapshot_reads.read_chunk(p, cplan, schema), str(out / "chunk"))
        assert chunk.table(self.name).columns == reference.table(self.name).columns
        last: dict[int, dict[str, Any]] = {}
        for r in staged_rows(out / "library", reference, self.name):
            last[r["id"]] = r  # in ordinal order: the last image of each row
        from_chunk = {r["id"]: r for r in staged_rows(out / "chunk", chunk, self.name)}
        selected = select_rows(self.conn)
        assert set(last) == set(from_chunk) == set(selected) == set(range(1, len(rows) + 1))
        for i, sel in selected.items():
            for c in COLUMNS:
                want_v = as_staged(c, sel[c])
                assert_value(c, last[i][c], want_v, f"row {i}: binlog vs SELECT")
                assert_value(c, from_chunk[i][c], want_v, f"row {i}: snapshot vs SELECT")
        return plan, reference, out / "library", cplan, chunk, out / "chunk"


# -------------------------------------------------------------------------------------------- tests


def test_random_values_land_identically_on_every_path(
    params: SourceParams, db: Any, source_db: str, tmp_path: Path
) -> None:
    paths = Paths(params, db, source_db, tmp_path)

    @settings(max_examples=25, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(ROW, min_size=1, max_size=5).flatmap(
        lambda rows: st.tuples(st.just(rows), st.lists(ROW, min_size=len(rows), max_size=len(rows)))))
    def check(case: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
        rows, updates = case
        paths.run(rows, updates)

    check()


def test_edge_values_land_identically_on_every_path(
    params: SourceParams, db: Any, source_db: str, tmp_path: Path
) -> None:
    Paths(params, db, source_db, tmp_path).run(EDGE_ROWS, list(reversed(EDGE_ROWS)))
    Paths(params, db, source_db, tmp_path / "2").run(EDGE_ROWS, EDGE_ROWS)


def test_text_in_an_inexact_character_set_is_refused_on_both_paths(
    params: SourceParams, db: Any, source_db: str, tmp_path: Path
) -> None:
    from cdc_core.model.errors import UnsupportedType

    with db.cursor() as cur:
        cur.execute("CREATE TABLE greek_t (id INT PRIMARY KEY, g VARCHAR(8) CHARACTER SET greek)")
    before = facts_now(params)
    with db.cursor() as cur:
        cur.execute("INSERT INTO greek_t VALUES (1, 'Ελλάδα')")
    after = facts_now(params)
    plan = window(params, before, after, 1)
    name = f"{source_db}.greek_t"
    with pytest.raises(UnsupportedType, match="character set greek"):
        table_schema_codec = table_schema(params, name)
        staging.stage_window(
            plan, read_change_batches(params, after.identity, plan, TableFilter((name,)),
                                      lambda s, t: table_schema_codec, workers=0), str(tmp_path / "b"))
    progress = snapshot_state.TableProgress(name, chunk_rows=10)
    with pytest.raises(UnsupportedType, match="character set greek"):
        schema = table_schema(params, name)
        cplan = snapshot_reads.plan_next_chunk_from_source(
            params, after.identity, epoch=0, pipeline="vals", seq=2, progress=progress, table=schema, now=time.time()
        )
        staging.stage_window(cplan, snapshot_reads.read_chunk(params, cplan, schema), str(tmp_path / "c"))


def test_edge_values_make_identical_lake_rows_on_both_paths(
    spark: Any, params: SourceParams, db: Any, source_db: str, tmp_path: Path
) -> None:
    from cdc_core.lake.delta_state import read_rows
    from spark_apps.merge import merge_window

    paths = Paths(params, db, source_db, tmp_path)
    _, binlog_m, binlog_dir, _, chunk_m, chunk_dir = paths.run(EDGE_ROWS, list(reversed(EDGE_ROWS)))
    lakes = {}
    # Each path through the small-table writer (delta-rs, the default for a table this size), and the
    # binlog window through the Spark MERGE too: every family lands the same whichever writer lands it.
    for label, m, wdir, small_rows in (
        ("binlog", binlog_m, binlog_dir, 100_000),
        ("snapshot", chunk_m, chunk_dir, 100_000),
        ("binlog-spark", binlog_m, binlog_dir, 0),
    ):
        lake = tmp_path / f"lake-{label}"
        report = merge_window(spark, m, layout.window_dir(str(wdir), m.plan.pipeline, m.plan.seq), str(lake),
                              m.plan.pipeline, m.plan.seq, 1, small_table_rows=small_rows)
        assert [t["writer"] for t in report["tables"].values()] == ["delta-rs" if small_rows else "spark"], label
        found = [p for p in lake.rglob("_delta_log")]
        assert len(found) == 1, f"{label}: Delta tables {found}"
        uri = found[0].parent
        rows = sorted(read_rows(str(uri)).to_pylist(), key=lambda r: r["id"])
        lakes[label] = [{k: v for k, v in r.items() if not k.startswith("_cdc")} for r in rows]
    assert len(lakes["binlog"]) == len(EDGE_ROWS)
    for other in ("snapshot", "binlog-spark"):
        for a, b in zip(lakes["binlog"], lakes[other], strict=True):
            for c in ("id", *COLUMNS):
                assert_value(c, a[c], b[c], f"lake row {a['id']}: binlog vs {other}")
    selected = select_rows(db)
    for r in lakes["binlog"]:
        for c in COLUMNS:
            assert_value(c, r[c], as_staged(c, selected[r["id"]][c]), f"lake row {r['id']} vs SELECT")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-x", "-q"]))
