"""The merge job (spark_apps/merge/; spark-submit runs spark_apps/merge_window.py) against real Spark + Delta

Windows are built with `staged_builder` (manifest.py's contract), one with the real
`cdc_core.lake.staging.stage_window`; one test runs the job through `spark-submit` exactly as the DAG does.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from delta.tables import DeltaTable

from cdc_core.lake.job_specs import MergeJobSpec
from cdc_core.lake.spark_conf import delta_jars, spark_confs, spark_env
from cdc_core.model.errors import Fenced, SchemaConflict
from cdc_core.model.layout import PROJECT_ROOT
from cdc_core.model.manifest import (
    COL_COMMIT_TS,
    COL_DELETED,
    COL_DELETED_AT,
    COL_OP,
    COL_VERSION,
    COL_WINDOW_SEQ,
    Manifest,
)
from spark_apps.merge import STATUS_ALREADY, STATUS_COMMITTED, merge_window, table_uri, tombstone_uri
from spark_apps.merge.staged import can_widen
from spark_apps.merge.tables import last_txn_version
from tests.support.staged_builder import Col, VersionClock, WindowBuilder, make_plan

pytestmark = pytest.mark.integration

PIPE = "orders"
TOKEN = 0x1A2B
ID = Col("id", pa.int32(), "INT")
NOTE = Col("note", pa.string(), "STRING")
QTY = Col("qty", pa.int32(), "INT")
META = {COL_OP, COL_VERSION, COL_COMMIT_TS, COL_WINDOW_SEQ, COL_DELETED, COL_DELETED_AT}


# ------------------------------------------------------------------------------------------ helpers


def run(spark, built: tuple[Manifest, str], lake: Path, **kw: Any) -> dict[str, Any]:
    manifest, wdir = built
    pipeline = manifest.plan.pipeline.partition(".")[0]  # a group pipeline's source window: `<pipeline>.<source>`
    return merge_window(spark, manifest, wdir, str(lake), pipeline, manifest.plan.seq, TOKEN, **kw)


def uri(lake: Path, schema: str, table: str) -> str:
    return table_uri(str(lake), schema, table)


def contents(spark, lake: Path, schema: str, table: str, key: tuple[str, ...] = ("id",), meta: bool = False) -> dict:
    """{key tuple: row dict} of a lake table (metadata columns dropped unless asked for)."""
    out = {}
    for r in spark.read.format("delta").load(uri(lake, schema, table)).collect():
        d = r.asDict()
        out[tuple(d[k] for k in key)] = d if meta else {k: v for k, v in d.items() if k not in META}
    return out


def version(spark, table: str) -> int:
    return DeltaTable.forPath(spark, table).history(1).collect()[0]["version"]


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {name: t["status"] for name, t in report["tables"].items()}


# ------------------------------------------------------------------------------------- pure rules


def test_widening_rules_follow_delta():
    from pyspark.sql.types import (
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        ShortType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    assert can_widen(IntegerType(), LongType())
    assert can_widen(ShortType(), IntegerType())
    assert can_widen(IntegerType(), DoubleType())
    assert not can_widen(LongType(), DoubleType())
    assert can_widen(LongType(), DecimalType(20, 0))
    assert not can_widen(LongType(), DecimalType(19, 0))
    assert can_widen(DecimalType(10, 2), DecimalType(12, 4))
    assert not can_widen(DecimalType(10, 2), DecimalType(10, 4))  # loses integer digits
    assert can_widen(FloatType(), DoubleType())
    assert can_widen(DateType(), TimestampNTZType())
    assert not can_widen(DateType(), TimestampType())
    assert not can_widen(StringType(), IntegerType())
    assert not can_widen(LongType(), IntegerType())
    assert not can_widen(TimestampNTZType(), TimestampType())


# ---------------------------------------------------------------------------------------- types


def test_each_type_lands_exactly(spark, staging_dir, lake_dir):
    cols = [
        ID,
        Col("i8", pa.int8(), "TINYINT"),
        Col("i16", pa.int16(), "SMALLINT"),
        Col("i64", pa.int64(), "BIGINT"),
        Col("ubig", pa.decimal128(20, 0), "DECIMAL(20,0)", "bigint unsigned"),
        Col("d38", pa.decimal128(38, 10), "DECIMAL(38,10)"),
        Col("f32", pa.float32(), "FLOAT"),
        Col("f64", pa.float64(), "DOUBLE"),
        Col("day", pa.date32(), "DATE"),
        Col("dtm", pa.timestamp("us"), "TIMESTAMP_NTZ", "datetime(6)"),
        Col("ts", pa.timestamp("us", tz="UTC"), "TIMESTAMP", "timestamp(6)"),
        Col("s", pa.string(), "STRING"),
        Col("b", pa.binary(), "BINARY"),
        Col("odd name, (x)", pa.string(), "STRING"),  # needs Delta column mapping
    ]
    utc = dt.UTC
    rows = [
        {
            "id": 1,
            "i8": -128,
            "i16": -32768,
            "i64": -(2**63),
            "ubig": Decimal("18446744073709551615"),
            "d38": Decimal("9999999999999999999999999999.9999999999"),
            "f32": -3.4028234663852886e38,
            "f64": 1.7976931348623157e308,
            "day": dt.date(1000, 1, 1),
            "dtm": dt.datetime(1000, 1, 1, 0, 0, 0),
            "ts": dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=utc),
            "s": "🙂 héllo \u0000 end",
            "b": b"\x00\xff",
            "odd name, (x)": "odd",
        },
        {
            "id": 2,
            "i8": 127,
            "i16": 32767,
            "i64": 2**63 - 1,
            "ubig": Decimal(0),
            "d38": Decimal("-0.0000000001"),
            "f32": 1.5,
            "f64": 2.2250738585072014e-308,
            "day": dt.date(9999, 12, 31),
            "dtm": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            "ts": dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=utc),
            "s": "",
            "b": b"",
            "odd name, (x)": "",
        },
        {"id": 3},  # every other column NULL
    ]
    w = WindowBuilder(staging_dir, PIPE, 1)
    w.file("shop", "types", ("id",), cols, [("I", r) for r in rows])
    report = run(spark, w.build(), lake_dir, table_options={"shop.types": {"change_data_feed": True}})
    assert statuses(report) == {"shop.types": STATUS_COMMITTED}
    assert report["tables"]["shop.types"]["inserted"] == 3

    table = uri(lake_dir, "shop", "types")
    df = spark.read.format("delta").load(table)
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types == {
        "id": "int",
        "i8": "tinyint",
        "i16": "smallint",
        "i64": "bigint",
        "ubig": "decimal(20,0)",
        "d38": "decimal(38,10)",
        "f32": "float",
        "f64": "double",
        "day": "date",
        "dtm": "timestamp_ntz",
        "ts": "timestamp",
        "s": "string",
        "b": "binary",
        "odd name, (x)": "string",
        COL_OP: "string",
        COL_VERSION: "bigint",
        COL_COMMIT_TS: "timestamp",
        COL_WINDOW_SEQ: "bigint",
    }
    # TIMESTAMP is an instant: compare microseconds since the epoch, independent of any time zone.
    got = {
        r["id"]: r.asDict()
        for r in df.selectExpr("*", "unix_micros(ts) AS ts_us", f"unix_micros({COL_COMMIT_TS}) AS commit_us").collect()
    }
    for want in rows:
        have = got[want["id"]]
        for c in cols:
            if c.name == "ts":
                exp = want.get("ts")
                assert have["ts_us"] == (None if exp is None else round(exp.timestamp() * 1_000_000)), c.name
            elif c.name == "b":
                assert (None if have["b"] is None else bytes(have["b"])) == want.get("b"), c.name
            else:
                assert have[c.name] == want.get(c.name), c.name
                assert type(have[c.name]) is type(want.get(c.name)), c.name  # values, not their string forms
        assert have[COL_OP] == "I" and have[COL_WINDOW_SEQ] == 1
    detail = DeltaTable.forPath(spark, table).detail().collect()[0]
    assert detail["properties"]["delta.enableChangeDataFeed"] == "true"
    assert detail["properties"]["delta.columnMapping.mode"] == "name"


def test_window_through_real_staging(spark, staging_dir, lake_dir):
    """The staging module's files (type map, zstd, segments per shape) land exactly too."""
    from cdc_core.lake.staging import stage_window
    from cdc_core.model.changes import RowChange, SourceColumn, TableSchema

    shape = TableSchema(
        "shop",
        "real",
        (
            SourceColumn("id", "bigint unsigned", False),
            SourceColumn("amount", "decimal(10,2)"),
            SourceColumn("at", "datetime(6)"),
            SourceColumn("label", "varchar(20)", attrs=(("charset", "utf8mb4"),)),
        ),
        ("id",),
    )
    shape2 = TableSchema("shop", "real", (*shape.columns, SourceColumn("extra", "int")), ("id",))  # ADD COLUMN
    clock = VersionClock()
    changes = [
        RowChange(
            "I",
            shape,
            {
                "id": 18446744073709551615,
                "amount": Decimal("-12.50"),
                "at": dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
                "label": "ünï 🙂",
            },
            clock(),
            1,
            1.7e9,
        ),
        RowChange("I", shape, {"id": 7, "amount": None, "at": None, "label": None}, clock(), 2, 1.7e9),
        RowChange(
            "U", shape2, {"id": 7, "amount": Decimal("1.00"), "at": None, "label": "x", "extra": 5}, clock(), 3, 1.7e9
        ),
    ]
    manifest = stage_window(make_plan(PIPE, 1, events=3), changes, str(staging_dir))
    from cdc_core.model.layout import window_dir

    report = run(spark, (manifest, window_dir(str(staging_dir), PIPE, 1)), lake_dir)
    assert statuses(report) == {"shop.real": STATUS_COMMITTED}
    got = contents(spark, lake_dir, "shop", "real")
    assert got == {
        (Decimal("18446744073709551615"),): {
            "id": Decimal("18446744073709551615"),
            "amount": Decimal("-12.50"),
            "at": dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
            "label": "ünï 🙂",
            "extra": None,
        },
        (Decimal(7),): {"id": Decimal(7), "amount": Decimal("1.00"), "at": None, "label": "x", "extra": 5},
    }


# ------------------------------------------------------------------------------------ exactly once


def test_rerun_of_the_same_window_changes_nothing(spark, staging_dir, lake_dir):
    w = WindowBuilder(staging_dir, PIPE, 1)
    w.file(
        "shop",
        "a",
        ("id",),
        [ID, NOTE],
        [("I", {"id": 1, "note": "x"}), ("I", {"id": 2, "note": "y"}), ("D", {"id": 2, "note": "y"})],
    )
    w.file("shop", "b", ("id",), [ID, QTY], [("I", {"id": 1, "qty": 3})])
    built = w.build()
    first = run(spark, built, lake_dir)
    assert statuses(first) == {"shop.a": STATUS_COMMITTED, "shop.b": STATUS_COMMITTED}
    tables = [uri(lake_dir, "shop", "a"), uri(lake_dir, "shop", "b"), tombstone_uri(str(lake_dir), "shop", "a")]
    versions = [version(spark, t) for t in tables]
    assert first["tables"]["shop.a"]["delta_version"] == versions[0]
    before = (contents(spark, lake_dir, "shop", "a", meta=True), contents(spark, lake_dir, "shop", "b", meta=True))

    again = run(spark, built, lake_dir)
    assert statuses(again) == {"shop.a": STATUS_ALREADY, "shop.b": STATUS_ALREADY}
    assert [version(spark, t) for t in tables] == versions
    assert (
        contents(spark, lake_dir, "shop", "a", meta=True),
        contents(spark, lake_dir, "shop", "b", meta=True),
    ) == before
    assert contents(spark, lake_dir, "shop", "a") == {(1,): {"id": 1, "note": "x"}}
    assert last_txn_version(spark, tables[0], PIPE) == 1


def test_interrupted_window_commits_only_the_remaining_tables(spark, staging_dir, lake_dir):
    w = WindowBuilder(staging_dir, PIPE, 1)
    w.file("shop", "a", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "x"})])
    w.file("shop", "b", ("id",), [ID, QTY], [("I", {"id": 1, "qty": 3}), ("D", {"id": 1, "qty": 3})])
    manifest, wdir = w.build()
    only_a = Manifest(plan=manifest.plan, tables=(manifest.table("shop.a"),))
    assert statuses(run(spark, (only_a, wdir), lake_dir)) == {"shop.a": STATUS_COMMITTED}
    a_version = version(spark, uri(lake_dir, "shop", "a"))

    report = run(spark, (manifest, wdir), lake_dir)
    assert statuses(report) == {"shop.a": STATUS_ALREADY, "shop.b": STATUS_COMMITTED}
    assert version(spark, uri(lake_dir, "shop", "a")) == a_version
    assert contents(spark, lake_dir, "shop", "b") == {}


def test_two_concurrent_runs_land_the_window_once(spark, staging_dir, lake_dir):
    clock = VersionClock()
    w1 = WindowBuilder(staging_dir, PIPE, 1, clock)
    w1.file("shop", "a", ("id",), [ID, NOTE], [("I", {"id": i, "note": f"n{i}"}) for i in range(1, 6)])
    run(spark, w1.build(), lake_dir)
    w2 = WindowBuilder(staging_dir, PIPE, 2, clock)
    w2.file(
        "shop",
        "a",
        ("id",),
        [ID, NOTE],
        [("U", {"id": 1, "note": "u"}), ("D", {"id": 2, "note": "n2"}), ("I", {"id": 9, "note": "new"})],
    )
    w2.file("shop", "b", ("id",), [ID, QTY], [("I", {"id": 1, "qty": 1})])
    built = w2.build()

    reports: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def one_run() -> None:
        session = spark.newSession()  # own SQL conf: the txn confs are per session
        try:
            barrier.wait()
            reports.append(run(session, built, lake_dir))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one_run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name in ("shop.a", "shop.b"):
        assert sorted(r["tables"][name]["status"] for r in reports) == sorted([STATUS_COMMITTED, STATUS_ALREADY])
    assert contents(spark, lake_dir, "shop", "a") == {
        (1,): {"id": 1, "note": "u"},
        (3,): {"id": 3, "note": "n3"},
        (4,): {"id": 4, "note": "n4"},
        (5,): {"id": 5, "note": "n5"},
        (9,): {"id": 9, "note": "new"},
    }
    # Exactly one commit of window 2 per table (main and tombstones).
    for table in (uri(lake_dir, "shop", "a"), uri(lake_dir, "shop", "b"), tombstone_uri(str(lake_dir), "shop", "a")):
        metas = [
            json.loads(r["userMetadata"])
            for r in DeltaTable.forPath(spark, table).history().collect()
            if r["userMetadata"]
        ]
        assert [m["seq"] for m in metas].count(2) == 1, table
        assert last_txn_version(spark, table, PIPE) == 2


@pytest.mark.parametrize("writer", ["spark", "delta-rs"])
def test_a_run_landing_the_window_in_the_gap_after_the_first_read_lands_nothing_twice(
    spark, staging_dir, lake_dir, monkeypatch, writer
):
    """The gap `MergeRun.unlanded` leaves open: the job's first read found the tables without the window and does
    not read their txn again before landing them. Another run of the same window landing them in that gap
    (forced here: it runs whole just before this run's schema phase) must be found by the writer itself (delta-rs's
    check inside its commit, Delta's txn identity for Spark): one commit of the window per table and tombstone
    table, the rows as the window leaves them, one of created `shop.b`."""
    from spark_apps.merge.land import MergeRun

    small = 0 if writer == "spark" else MergeJobSpec.small_table_rows
    clock = VersionClock()
    w1 = WindowBuilder(staging_dir, PIPE, 1, clock)
    w1.file("shop", "a", ("id",), [ID, NOTE], [("I", {"id": i, "note": f"n{i}"}) for i in range(1, 6)])
    run(spark, w1.build(), lake_dir, small_table_rows=small)
    w2 = WindowBuilder(staging_dir, PIPE, 2, clock)
    w2.file("shop", "a", ("id",), [ID, NOTE],
            [("U", {"id": 1, "note": "u"}), ("D", {"id": 2, "note": "n2"}), ("I", {"id": 9, "note": "new"})])
    w2.file("shop", "b", ("id",), [ID, QTY], [("I", {"id": 1, "qty": 1})])  # created by this window
    built = w2.build()

    real_phase = MergeRun.schema_phase
    other: list[dict[str, Any]] = []

    def other_run_lands_first(self: Any, targets: Any, parallelism: int = 1) -> None:
        if not other:  # this run, past its first read: the other run of the window goes whole now
            other.append({})
            other[0] = run(spark.newSession(), built, lake_dir, small_table_rows=small)
        real_phase(self, targets, parallelism)

    monkeypatch.setattr(MergeRun, "schema_phase", other_run_lands_first)
    ours = run(spark, built, lake_dir, small_table_rows=small)
    monkeypatch.setattr(MergeRun, "schema_phase", real_phase)

    assert statuses(other[0]) == {"shop.a": STATUS_COMMITTED, "shop.b": STATUS_COMMITTED}
    assert statuses(ours) == {"shop.a": STATUS_ALREADY, "shop.b": STATUS_ALREADY}, ours["tables"]
    assert contents(spark, lake_dir, "shop", "a") == {
        (1,): {"id": 1, "note": "u"}, (3,): {"id": 3, "note": "n3"}, (4,): {"id": 4, "note": "n4"},
        (5,): {"id": 5, "note": "n5"}, (9,): {"id": 9, "note": "new"},
    }
    assert contents(spark, lake_dir, "shop", "b") == {(1,): {"id": 1, "qty": 1}}
    for table in (uri(lake_dir, "shop", "a"), uri(lake_dir, "shop", "b"), tombstone_uri(str(lake_dir), "shop", "a")):
        seqs = [json.loads(r["userMetadata"])["seq"] for r in DeltaTable.forPath(spark, table).history().collect()
                if r["userMetadata"]]
        assert seqs.count(2) == 1, (table, seqs)
        assert last_txn_version(spark, table, PIPE) == 2


# --------------------------------------------------------------------------------- change semantics


def test_replayed_older_windows_change_nothing(spark, staging_dir, lake_dir):
    """Windows 1..3, then their content again under seq 4, 5, 6 (a backfill): no deleted row comes back."""
    clock = VersionClock()
    specs = []
    w = WindowBuilder(staging_dir, PIPE, 1, clock)
    w.file("shop", "a", ("id",), [ID, NOTE], [("I", {"id": k, "note": f"v1-{k}"}) for k in (1, 2, 3)])
    specs.append(w)
    w = WindowBuilder(staging_dir, PIPE, 2, clock)
    w.file("shop", "a", ("id",), [ID, NOTE], [("U", {"id": 1, "note": "v2-1"}), ("D", {"id": 2, "note": "v1-2"})])
    specs.append(w)
    w = WindowBuilder(staging_dir, PIPE, 3, clock)
    w.file(
        "shop",
        "a",
        ("id",),
        [ID, NOTE],
        [
            ("D", {"id": 3, "note": "v1-3"}),
            ("I", {"id": 4, "note": "v3-4"}),
            ("D", {"id": 1, "note": "v2-1"}),
            ("I", {"id": 1, "note": "v3-1"}),
        ],
    )
    specs.append(w)
    for w in specs:
        run(spark, w.build(), lake_dir)
    expected = {(1,): {"id": 1, "note": "v3-1"}, (4,): {"id": 4, "note": "v3-4"}}
    assert contents(spark, lake_dir, "shop", "a") == expected
    settled = contents(spark, lake_dir, "shop", "a", meta=True)

    for seq, old in zip((4, 5, 6), specs):
        replay = WindowBuilder(staging_dir, PIPE, seq, clock, kind="backfill").extend(old.files)
        assert statuses(run(spark, replay.build(), lake_dir)) == {"shop.a": STATUS_COMMITTED}
        assert contents(spark, lake_dir, "shop", "a") == expected, f"after replaying window {old.seq}"
    # Rows keep the version of the change that last wrote them: no older change won. (Re-applying the
    # identical change is allowed, `>=`, so _cdc_window_seq may name the replay.)
    now = contents(spark, lake_dir, "shop", "a", meta=True)
    assert {k: v[COL_VERSION] for k, v in now.items()} == {k: v[COL_VERSION] for k, v in settled.items()}


def test_key_lifecycle_inside_and_across_windows(spark, staging_dir, lake_dir):
    clock = VersionClock()
    w = WindowBuilder(staging_dir, PIPE, 1, clock)
    w.file(
        "shop",
        "a",
        ("id",),
        [ID, NOTE],
        [
            ("I", {"id": 1, "note": "a"}),
            ("U", {"id": 1, "note": "b"}),
            ("D", {"id": 1, "note": "b"}),
            ("I", {"id": 1, "note": "c"}),  # insert/update/delete/re-insert inside one window
            ("I", {"id": 2, "note": "x"}),
            ("U", {"id": 2, "note": "y"}),
            ("D", {"id": 2, "note": "y"}),
            ("I", {"id": 5, "note": "pk"}),
            ("D", {"id": 5, "note": "pk"}),
            ("I", {"id": 6, "note": "pk"}),  # UPDATE of the key 5 -> 6
        ],
    )
    report = run(spark, w.build(), lake_dir)
    assert report["tables"]["shop.a"]["inserted"] == 2 and report["tables"]["shop.a"]["deleted"] == 0
    assert contents(spark, lake_dir, "shop", "a") == {(1,): {"id": 1, "note": "c"}, (6,): {"id": 6, "note": "pk"}}

    w = WindowBuilder(staging_dir, PIPE, 2, clock)
    w.file("shop", "a", ("id",), [ID, NOTE], [("D", {"id": 1, "note": "c"}), ("I", {"id": 2, "note": "back"})])
    report = run(spark, w.build(), lake_dir)
    assert (report["tables"]["shop.a"]["deleted"], report["tables"]["shop.a"]["inserted"]) == (1, 1)
    w = WindowBuilder(staging_dir, PIPE, 3, clock)
    w.file("shop", "a", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "again"}), ("U", {"id": 6, "note": "u"})])
    run(spark, w.build(), lake_dir)
    assert contents(spark, lake_dir, "shop", "a") == {
        (1,): {"id": 1, "note": "again"},
        (2,): {"id": 2, "note": "back"},
        (6,): {"id": 6, "note": "u"},
    }


def test_composite_keys(spark, staging_dir, lake_dir):
    cols = [Col("tenant", pa.string(), "STRING"), ID, NOTE]
    key = ("tenant", "id")
    clock = VersionClock()
    w = WindowBuilder(staging_dir, PIPE, 1, clock)
    w.file("shop", "c", key, cols, [("I", {"tenant": t, "id": i, "note": f"{t}{i}"}) for t in "ab" for i in (1, 2)])
    run(spark, w.build(), lake_dir)
    w = WindowBuilder(staging_dir, PIPE, 2, clock)
    w.file(
        "shop",
        "c",
        key,
        cols,
        [("D", {"tenant": "a", "id": 1, "note": "a1"}), ("U", {"tenant": "b", "id": 1, "note": "B1"})],
    )
    run(spark, w.build(), lake_dir)
    assert contents(spark, lake_dir, "shop", "c", key) == {
        ("a", 2): {"tenant": "a", "id": 2, "note": "a2"},
        ("b", 1): {"tenant": "b", "id": 1, "note": "B1"},
        ("b", 2): {"tenant": "b", "id": 2, "note": "b2"},
    }


def test_table_first_seen_mid_stream(spark, staging_dir, lake_dir):
    clock = VersionClock()
    w = WindowBuilder(staging_dir, PIPE, 1, clock)
    w.file("shop", "a", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "x"})])
    run(spark, w.build(), lake_dir)
    w = WindowBuilder(staging_dir, PIPE, 2, clock)
    w.file("shop", "a", ("id",), [ID, NOTE], [("U", {"id": 1, "note": "y"})])
    w.file(
        "shop",
        "late",
        ("id",),
        [ID, QTY, Col("region", pa.string(), "STRING")],
        [("I", {"id": 1, "qty": 1, "region": "eu"}), ("D", {"id": 0, "qty": None, "region": "us"})],
    )
    report = run(spark, w.build(), lake_dir, table_options={"shop.late": {"partition_by": ["region"]}})
    assert statuses(report) == {"shop.a": STATUS_COMMITTED, "shop.late": STATUS_COMMITTED}
    assert contents(spark, lake_dir, "shop", "late") == {(1,): {"id": 1, "qty": 1, "region": "eu"}}
    detail = DeltaTable.forPath(spark, uri(lake_dir, "shop", "late")).detail().collect()[0]
    assert list(detail["partitionColumns"]) == ["region"]
    assert last_txn_version(spark, uri(lake_dir, "shop", "late"), PIPE) == 2


def test_columns_added_dropped_and_widened(spark, staging_dir, lake_dir):
    clock = VersionClock()
    a = Col("a", pa.string(), "STRING")
    w = WindowBuilder(staging_dir, PIPE, 1, clock)
    w.file(
        "shop",
        "t",
        ("id",),
        [ID, a, QTY],
        [("I", {"id": 1, "a": "a1", "qty": 1}), ("I", {"id": 2, "a": "a2", "qty": 2})],
    )
    run(spark, w.build(), lake_dir)

    # Between windows: ADD COLUMN c (odd name), qty INT -> BIGINT.
    c = Col("c c", pa.string(), "STRING")
    qty64 = Col("qty", pa.int64(), "BIGINT")
    w = WindowBuilder(staging_dir, PIPE, 2, clock)
    w.file("shop", "t", ("id",), [ID, a, qty64, c], [("U", {"id": 1, "a": "a1", "qty": 2**40, "c c": "c1"})])
    run(spark, w.build(), lake_dir)
    assert contents(spark, lake_dir, "shop", "t") == {
        (1,): {"id": 1, "a": "a1", "qty": 2**40, "c c": "c1"},
        (2,): {"id": 2, "a": "a2", "qty": 2, "c c": None},
    }

    # Inside one window: ADD COLUMN d, then DROP COLUMN a, with DECIMAL widening of d in between.
    d1, d2 = Col("d", pa.decimal128(10, 2), "DECIMAL(10,2)"), Col("d", pa.decimal128(12, 4), "DECIMAL(12,4)")
    w = WindowBuilder(staging_dir, PIPE, 3, clock)
    w.file(
        "shop",
        "t",
        ("id",),
        [ID, a, qty64, c, d1],
        [("I", {"id": 3, "a": "a3", "qty": 3, "c c": "c3", "d": Decimal("1.25")})],
    )
    w.file(
        "shop",
        "t",
        ("id",),
        [ID, a, qty64, c, d2],
        [("U", {"id": 2, "a": "a2", "qty": 2, "c c": "c2", "d": Decimal("2.1234")})],
    )
    w.file(
        "shop",
        "t",
        ("id",),
        [ID, qty64, c, d2],
        [
            ("I", {"id": 4, "qty": 4, "c c": "c4", "d": None}),
            ("U", {"id": 3, "qty": 33, "c c": "c3", "d": Decimal("3.5")}),
        ],
    )
    run(spark, w.build(), lake_dir)
    table = uri(lake_dir, "shop", "t")
    types = {f.name: f.dataType.simpleString() for f in spark.read.format("delta").load(table).schema.fields}
    assert (types["qty"], types["d"], types["a"]) == ("bigint", "decimal(12,4)", "string")
    assert contents(spark, lake_dir, "shop", "t") == {
        (1,): {"id": 1, "a": "a1", "qty": 2**40, "c c": "c1", "d": None},
        (2,): {"id": 2, "a": "a2", "qty": 2, "c c": "c2", "d": Decimal("2.1234")},
        (3,): {"id": 3, "a": None, "qty": 33, "c c": "c3", "d": Decimal("3.5000")},  # written after DROP a
        (4,): {"id": 4, "a": None, "qty": 4, "c c": "c4", "d": None},
    }

    # Next window without column a at all: a stays in Delta, NULL for rows written now.
    w = WindowBuilder(staging_dir, PIPE, 4, clock)
    w.file("shop", "t", ("id",), [ID, qty64, c, d2], [("U", {"id": 1, "qty": 1, "c c": "c1", "d": None})])
    run(spark, w.build(), lake_dir)
    assert contents(spark, lake_dir, "shop", "t")[(1,)] == {"id": 1, "a": None, "qty": 1, "c c": "c1", "d": None}

    # An incompatible change fails the window, naming table and column, and commits nothing.
    before = version(spark, table)
    w = WindowBuilder(staging_dir, PIPE, 5, clock)
    w.file("shop", "t", ("id",), [ID, Col("a", pa.int32(), "INT"), qty64], [("I", {"id": 9, "a": 1, "qty": 1})])
    with pytest.raises(SchemaConflict, match=r"shop\.t column 'a'"):
        run(spark, w.build(), lake_dir)
    assert version(spark, table) == before


def test_soft_delete_mode(spark, staging_dir, lake_dir):
    clock = VersionClock()
    w1 = WindowBuilder(staging_dir, PIPE, 1, clock)
    w1.file("shop", "s", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "x"}), ("I", {"id": 2, "note": "y"})])
    run(spark, w1.build(), lake_dir, delete_mode="soft")
    w2 = WindowBuilder(staging_dir, PIPE, 2, clock)
    w2.file("shop", "s", ("id",), [ID, NOTE], [("D", {"id": 1, "note": "x"}), ("D", {"id": 7, "note": "never seen"})])
    built2 = w2.build()
    report = run(spark, built2, lake_dir, delete_mode="soft")
    assert report["tables"]["shop.s"]["updated"] == 1
    del_version = w2.files[0].changes[0][2]

    got = contents(spark, lake_dir, "shop", "s", meta=True)
    assert got[(1,)][COL_DELETED] is True and got[(1,)]["note"] == "x"
    assert got[(1,)][COL_VERSION] == del_version
    assert got[(1,)][COL_DELETED_AT] == got[(1,)][COL_COMMIT_TS]
    assert got[(2,)][COL_DELETED] is False and got[(2,)][COL_DELETED_AT] is None
    assert got[(7,)][COL_DELETED] is True  # the row is its own tombstone
    assert not DeltaTable.isDeltaTable(spark, tombstone_uri(str(lake_dir), "shop", "s"))

    # Replaying window 1 (older insert) leaves the row deleted; a newer re-insert revives it.
    run(spark, WindowBuilder(staging_dir, PIPE, 3, clock).extend(w1.files).build(), lake_dir, delete_mode="soft")
    assert contents(spark, lake_dir, "shop", "s", meta=True)[(1,)][COL_DELETED] is True
    w4 = WindowBuilder(staging_dir, PIPE, 4, clock)
    w4.file("shop", "s", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "again"})])
    run(spark, w4.build(), lake_dir, delete_mode="soft")
    row = contents(spark, lake_dir, "shop", "s", meta=True)[(1,)]
    assert (row["note"], row[COL_DELETED], row[COL_DELETED_AT], row[COL_WINDOW_SEQ]) == ("again", False, None, 4)


def test_fence_check_stops_before_the_next_table(spark, staging_dir, lake_dir):
    w = WindowBuilder(staging_dir, PIPE, 1)
    w.file("shop", "a", ("id",), [ID], [("I", {"id": 1})])
    w.file("shop", "b", ("id",), [ID], [("I", {"id": 1})])
    checks = {"n": 0}

    def fence() -> None:
        checks["n"] += 1
        if DeltaTable.isDeltaTable(spark, uri(lake_dir, "shop", "a")) and last_txn_version(
            spark, uri(lake_dir, "shop", "a"), PIPE
        ):
            raise Fenced("fenced: lease lost (test)")

    with pytest.raises(Fenced, match="fenced"):
        run(spark, w.build(), lake_dir, fence_check=fence, parallelism=1)
    assert last_txn_version(spark, uri(lake_dir, "shop", "a"), PIPE) == 1
    assert not DeltaTable.isDeltaTable(spark, uri(lake_dir, "shop", "b"))


# ------------------------------------------------------------------------------ concurrent tables


def test_tables_land_concurrently_each_with_its_own_txn_identity(spark, staging_dir, lake_dir):
    """Eight tables through three writer sessions: every commit carries its own table's metadata and the
    window's txn exactly once, and a replay (one table lost its commit: a new table) re-lands only it."""
    names = [f"t{i}" for i in range(8)]
    w = WindowBuilder(staging_dir, PIPE, 1)
    for i, n in enumerate(names):
        w.file(
            "many", n, ("id",), [ID, NOTE],
            [("I", {"id": k, "note": f"{n}-{k}"}) for k in range(1, 4 + i)] + [("D", {"id": 1, "note": f"{n}-1"})],
        )
    built = w.build()
    report = run(spark, built, lake_dir, parallelism=3)
    assert set(statuses(report).values()) == {STATUS_COMMITTED}
    assert list(report["tables"]) == [f"many.{n}" for n in names]  # manifest order, whatever finished first
    for i, n in enumerate(names):
        assert contents(spark, lake_dir, "many", n) == {(k,): {"id": k, "note": f"{n}-{k}"} for k in range(2, 4 + i)}
        for table in (uri(lake_dir, "many", n), tombstone_uri(str(lake_dir), "many", n)):
            metas = [
                json.loads(r["userMetadata"])
                for r in DeltaTable.forPath(spark, table).history().collect()
                if r["userMetadata"]
            ]
            assert [m["seq"] for m in metas] == [1], table
            assert all(m["table"] in (f"many.{n}", f"tombstones of many.{n}") for m in metas), (table, metas)
            assert last_txn_version(spark, table, PIPE) == 1
    # The window's session never kept a writer's txn identity.
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None

    again = run(spark, built, lake_dir, parallelism=3)
    assert set(statuses(again).values()) == {STATUS_ALREADY}


def test_a_failed_table_fails_the_window_and_a_retry_lands_only_the_rest(spark, staging_dir, lake_dir):
    w = WindowBuilder(staging_dir, PIPE, 1)
    for n in ("a", "b", "c", "d"):
        w.file("fail", n, ("id",), [ID, NOTE], [("I", {"id": 1, "note": n})])
    manifest, wdir = w.build()
    # Table c cannot take the window: its lake table has an incompatible column type.
    spark.sql(f"CREATE TABLE delta.`{uri(lake_dir, 'fail', 'c')}` (id INT, note INT) USING DELTA")
    with pytest.raises(SchemaConflict, match=r"fail\.c"):
        run(spark, (manifest, wdir), lake_dir, parallelism=2)
    shutil.rmtree(uri(lake_dir, "fail", "c"))  # the operator's way out: rebuild the table
    report = run(spark, (manifest, wdir), lake_dir, parallelism=2)
    assert report["tables"]["fail.c"]["status"] == STATUS_COMMITTED
    for n in ("a", "b", "d"):
        # Committed by the failed attempt (a and b start before c fails; d may or may not have).
        assert report["tables"][f"fail.{n}"]["status"] in (STATUS_ALREADY, STATUS_COMMITTED)
        assert contents(spark, lake_dir, "fail", n) == {(1,): {"id": 1, "note": n}}
    assert report["tables"]["fail.a"]["status"] == STATUS_ALREADY
    assert contents(spark, lake_dir, "fail", "c") == {(1,): {"id": 1, "note": "c"}}


def test_fenced_concurrent_run_starts_no_new_table(spark, staging_dir, lake_dir):
    w = WindowBuilder(staging_dir, PIPE, 1)
    for i in range(6):
        w.file("fence", f"t{i}", ("id",), [ID], [("I", {"id": 1})])
    lost = threading.Event()

    def fence() -> None:
        if lost.is_set():
            raise Fenced("fenced: lease lost (test)")
        if any(
            DeltaTable.isDeltaTable(spark, uri(lake_dir, "fence", f"t{i}"))
            and last_txn_version(spark, uri(lake_dir, "fence", f"t{i}"), PIPE)
            for i in range(6)
        ):
            lost.set()
            raise Fenced("fenced: lease lost (test)")

    with pytest.raises(Fenced, match="fenced"):
        run(spark, w.build(), lake_dir, fence_check=fence, parallelism=2)
    landed = [i for i in range(6) if last_txn_version(spark, uri(lake_dir, "fence", f"t{i}"), PIPE)]
    assert 1 <= len(landed) <= 2, landed  # only the tables already running when the lease was lost


# ------------------------------------------------------------------------------------ spark-submit


def test_spark_submit_as_the_dag_runs_it(services, staging_dir, lake_dir, tmp_path, zk_client, zk_root):
    w = WindowBuilder(staging_dir, PIPE, 1)
    w.file(
        "shop",
        "a",
        ("id",),
        [ID, NOTE],
        [("I", {"id": 1, "note": "x"}), ("I", {"id": 2, "note": "y"}), ("D", {"id": 2, "note": "y"})],
    )
    _manifest, wdir = w.build()
    lease = f"{zk_root}/pipelines/{PIPE}/lease"
    zk_client.ensure_path(f"{zk_root}/pipelines/{PIPE}")
    zk_client.create(lease, b"{}")
    token = zk_client.exists(lease).czxid

    confs = {k: v for k, v in spark_confs().items() if k != "spark.jars"}
    cmd = ["spark-submit", "--master", "local[2]", "--jars", ",".join(delta_jars())]
    for k, v in sorted(confs.items()):
        cmd += ["--conf", f"{k}={v}"]
    report_path = tmp_path / "reports" / "w1.json"

    def submit(tok: int) -> subprocess.CompletedProcess[str]:
        spec = MergeJobSpec(
            window_dir=wdir, lake_root=str(lake_dir), pipeline=PIPE, seq=1, token=tok, report=str(report_path),
            zk_hosts=services.zk_hosts, zk_root=zk_root,
        )
        args = [str(PROJECT_ROOT / "spark_apps" / "merge_window.py"), *spec.args()]
        env = {**os.environ, **spark_env()}
        return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, check=False, cwd=tmp_path)

    proc = submit(token)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == json.loads(report_path.read_text())
    assert report["pipeline"] == PIPE and report["seq"] == 1 and report["token"] == token
    assert report["tables"]["shop.a"]["status"] == STATUS_COMMITTED
    assert report["tables"]["shop.a"]["inserted"] == 1

    fenced = submit(token + 1)
    assert fenced.returncode == Fenced.exit_code
    # spark-submit merges the Python driver's stderr into its own stdout.
    assert "merge_window: Fenced: fenced" in fenced.stdout + fenced.stderr


@pytest.mark.parametrize("writer", ["spark", "delta-rs"])
def test_spark_submit_killed_while_tables_merge_concurrently_then_replayed(
    spark, staging_dir, lake_dir, tmp_path, writer
):
    """SIGKILL of the job (fault point mid_merge: the first table committed, the others of the first
    batch still merging), then the replay: every table equals its source, one commit of the window each, in
    the table and in its tombstone table (a delete per table, hard mode). Spark merges them when the small-table
    writer is off; by default delta-rs does."""
    names = [f"t{i}" for i in range(6)]
    w = WindowBuilder(staging_dir, PIPE, 1)
    source: dict[str, dict[tuple[int], dict[str, Any]]] = {}
    for i, n in enumerate(names):
        rows = [("I", {"id": k, "note": f"{n}-{k}"}) for k in range(1, 5 + i)]
        w.file("kill", n, ("id",), [ID, NOTE], [*rows, ("U", {"id": 2, "note": "upd"}), ("D", {"id": 1, "note": "x"})])
        source[n] = {(k,): {"id": k, "note": "upd" if k == 2 else f"{n}-{k}"} for k in range(2, 5 + i)}
    _manifest, wdir = w.build()
    confs = {k: v for k, v in spark_confs().items() if k != "spark.jars"}
    cmd = ["spark-submit", "--master", "local[2]", "--jars", ",".join(delta_jars())]
    for k, v in sorted(confs.items()):
        cmd += ["--conf", f"{k}={v}"]
    report_path = tmp_path / "reports" / "w1.json"
    spec = MergeJobSpec(
        window_dir=wdir, lake_root=str(lake_dir), pipeline=PIPE, seq=1, token=TOKEN, report=str(report_path),
        parallelism=3, small_table_rows=0 if writer == "spark" else MergeJobSpec.small_table_rows,
    )
    args = [str(PROJECT_ROOT / "spark_apps" / "merge_window.py"), *spec.args()]

    def submit(fault: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **spark_env(), "CDC_FAULT": fault}
        return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, check=False, cwd=tmp_path)

    killed = submit("mid_merge")
    assert killed.returncode != 0 and not report_path.exists(), killed.stdout[-3000:] + killed.stderr[-3000:]
    assert "parallelism=3" in killed.stdout + killed.stderr  # three writers were running
    landed = [n for n in names if last_txn_version(spark, uri(lake_dir, "kill", n), PIPE) == 1]
    assert 1 <= len(landed) <= 3, landed  # killed after the first table: the rest of the batch did not finish

    # A table whose tombstones landed before the kill replays on Spark: they are newer than the window's
    # changes, which must then be checked against them (the small-table writer does not).
    tombs_first = {n for n in names if last_txn_version(spark, tombstone_uri(str(lake_dir), "kill", n), PIPE) == 1}
    replay = submit("")
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]
    report = json.loads(report_path.read_text())
    for n in names:
        expected = STATUS_ALREADY if n in landed else STATUS_COMMITTED
        assert report["tables"][f"kill.{n}"]["status"] == expected, (n, landed, report["tables"])
        if expected == STATUS_COMMITTED:
            assert report["tables"][f"kill.{n}"]["writer"] == ("spark" if n in tombs_first else writer)
        assert contents(spark, lake_dir, "kill", n) == source[n]
        for table in (uri(lake_dir, "kill", n), tombstone_uri(str(lake_dir), "kill", n)):
            seqs = [
                json.loads(r["userMetadata"])["seq"]
                for r in DeltaTable.forPath(spark, table).history().collect()
                if r["userMetadata"]
            ]
            assert seqs == [1], (table, seqs)


def test_a_table_of_another_pipeline_is_refused_before_anything_is_written(spark, staging_dir, lake_dir):
    """One writer per Delta table (cdc_core.model.lake_writers): the creator is recorded; another pipeline's window
    that includes the table fails before writing any of its tables; a table without a record is claimed."""
    from cdc_core.model.errors import LakeError
    from cdc_core.model.lake_writers import WRITER_PROPERTY, writer_pipeline
    from spark_apps.merge import TableOptions, create_table_sql, metadata_columns

    w = WindowBuilder(staging_dir, PIPE, 1)
    w.file("own", "a", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "mine"})])
    run(spark, w.build(), lake_dir)
    a = uri(lake_dir, "own", "a")
    props = DeltaTable.forPath(spark, a).detail().collect()[0]["properties"]
    assert writer_pipeline(props[WRITER_PROPERTY]) == PIPE
    a_version = version(spark, a)

    other = WindowBuilder(staging_dir, "intruder", 1)
    other.file("own", "b", ("id",), [ID, NOTE], [("I", {"id": 7, "note": "new table first"})])
    other.file("own", "a", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "theirs"}), ("I", {"id": 2, "note": "x"})])
    with pytest.raises(LakeError) as err:
        run(spark, other.build(), lake_dir)
    msg = str(err.value)
    assert "own.a" in msg and repr(PIPE) in msg and "'intruder'" in msg and "lake_root" in msg
    assert version(spark, a) == a_version and contents(spark, lake_dir, "own", "a") == {(1,): {"id": 1, "note": "mine"}}
    assert not DeltaTable.isDeltaTable(spark, uri(lake_dir, "own", "b"))  # nothing of the window was written

    # A table created without a writer record (before the rule existed) is claimed by its first merge.
    legacy = uri(lake_dir, "own", "legacy")
    from pyspark.sql.types import IntegerType, StringType

    columns = [("id", IntegerType()), ("note", StringType()), *metadata_columns("hard")]
    spark.sql(create_table_sql(legacy, "own.legacy", columns, TableOptions()))
    w2 = WindowBuilder(staging_dir, PIPE, 2)
    w2.file("own", "legacy", ("id",), [ID, NOTE], [("I", {"id": 5, "note": "claimed"})])
    run(spark, w2.build(), lake_dir)
    props = DeltaTable.forPath(spark, legacy).detail().collect()[0]["properties"]
    assert writer_pipeline(props[WRITER_PROPERTY]) == PIPE
    assert contents(spark, lake_dir, "own", "legacy") == {(5,): {"id": 5, "note": "claimed"}}
    third = WindowBuilder(staging_dir, "intruder", 2)
    third.file("own", "legacy", ("id",), [ID, NOTE], [("D", {"id": 5, "note": "claimed"})])
    with pytest.raises(LakeError):
        run(spark, third.build(), lake_dir)
    assert contents(spark, lake_dir, "own", "legacy") == {(5,): {"id": 5, "note": "claimed"}}


# ------------------------------------------------------------------------------------ group pipelines


def test_routed_tables_of_two_sources_land_in_one_table_under_their_lineage(spark, staging_dir, lake_dir):
    """Group pipelines (docs/group-pipelines.md): equal keys of two schemas of source a and of source b land side by
    side under (_cdc_source, _cdc_source_table, id); a column only one shard has is added; each source's window is its
    own idempotent write (txnAppId grp.a / grp.b), so a replay of one is recognised and never mistaken for the other."""
    from cdc_core.model.sources import Route

    routes = [Route(r"shop_[0-9]+\.orders", "shop.orders")]
    coupon = Col("coupon", pa.string(), "STRING")
    a1 = WindowBuilder(staging_dir, "grp.a", 1)
    a1.file("shop_00", "orders", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "a0-1"}), ("I", {"id": 2, "note": "x"})])
    a1.file("shop_01", "orders", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "a1-1"})])
    b1 = WindowBuilder(staging_dir, "grp.b", 1)
    b1.file("shop_02", "orders", ("id",), [ID, NOTE, coupon], [("I", {"id": 1, "note": "b2-1", "coupon": "SAVE"})])
    report = run(spark, a1.build(), lake_dir, source="a", routes=routes)
    assert statuses(report) == {"shop.orders": STATUS_COMMITTED}
    run(spark, b1.build(), lake_dir, source="b", routes=routes)
    key = ("_cdc_source", "_cdc_source_table", "id")
    got = contents(spark, lake_dir, "shop", "orders", key=key)
    assert {k: (r["note"], r["coupon"]) for k, r in got.items()} == {
        ("a", "shop_00.orders", 1): ("a0-1", None), ("a", "shop_00.orders", 2): ("x", None),
        ("a", "shop_01.orders", 1): ("a1-1", None), ("b", "shop_02.orders", 1): ("b2-1", "SAVE"),
    }
    table = uri(lake_dir, "shop", "orders")
    assert last_txn_version(spark, table, "grp.a") == 1 and last_txn_version(spark, table, "grp.b") == 1
    assert statuses(run(spark, a1.build(), lake_dir, source="a", routes=routes)) == {"shop.orders": STATUS_ALREADY}

    # Source a's window 2 deletes its shop_00 row 1: only that row goes, shop_01's and b's row 1 stay.
    a2 = WindowBuilder(staging_dir, "grp.a", 2, clock=a1.clock)
    a2.file("shop_00", "orders", ("id",), [ID, NOTE], [("D", {"id": 1, "note": "a0-1"})])
    run(spark, a2.build(), lake_dir, source="a", routes=routes)
    assert set(contents(spark, lake_dir, "shop", "orders", key=key)) == {
        ("a", "shop_00.orders", 2), ("a", "shop_01.orders", 1), ("b", "shop_02.orders", 1),
    }


def test_routed_tables_of_different_shapes_in_one_window_land_small(spark, staging_dir, lake_dir):
    """Found by the group soak with schema changes (seed 203): a window with rows of two routed tables of one source
    where one has a column the other lacks failed for good in the small-table writer ("Schema at index 1 was
    different": the members' changes were concatenated as they were, not in the union shape)."""
    from cdc_core.model.sources import Route

    routes = [Route(r"shop_[0-9]+\.orders", "shop.orders")]
    coupon = Col("coupon", pa.string(), "STRING")
    clock = VersionClock()
    for seq in (1, 2):
        w = WindowBuilder(staging_dir, "grp.a", seq, clock=clock)
        w.file("shop_00", "orders", ("id",), [ID, NOTE], [("I", {"id": seq, "note": f"a0-{seq}"})])
        w.file("shop_01", "orders", ("id",), [ID, NOTE, coupon],
               [("I", {"id": seq, "note": f"a1-{seq}", "coupon": "C"})])
        report = run(spark, w.build(), lake_dir, source="a", routes=routes)
        assert statuses(report) == {"shop.orders": STATUS_COMMITTED}, report
    assert report["tables"]["shop.orders"]["writer"] == "delta-rs"  # the second window: the small-table writer's
    got = contents(spark, lake_dir, "shop", "orders", key=("_cdc_source", "_cdc_source_table", "id"))
    assert {k: (r["note"], r["coupon"]) for k, r in got.items()} == {
        ("a", "shop_00.orders", 1): ("a0-1", None), ("a", "shop_00.orders", 2): ("a0-2", None),
        ("a", "shop_01.orders", 1): ("a1-1", "C"), ("a", "shop_01.orders", 2): ("a1-2", "C"),
    }


def test_incompatible_routed_columns_fail_the_window_naming_both_tables(spark, staging_dir, lake_dir):
    from cdc_core.model.errors import SchemaConflict
    from cdc_core.model.sources import Route

    routes = [Route(r"shop_[0-9]+\.orders", "shop.orders")]
    w = WindowBuilder(staging_dir, "grp.a", 1)
    w.file("shop_00", "orders", ("id",), [ID, QTY], [("I", {"id": 1, "qty": 3})])
    w.file("shop_01", "orders", ("id",), [ID, Col("qty", pa.string(), "STRING")], [("I", {"id": 1, "qty": "three"})])
    with pytest.raises(SchemaConflict) as err:
        run(spark, w.build(), lake_dir, source="a", routes=routes)
    msg = str(err.value)
    assert "shop_00.orders" in msg and "shop_01.orders" in msg and "'qty'" in msg and "route" in msg
    assert not DeltaTable.isDeltaTable(spark, uri(lake_dir, "shop", "orders"))  # nothing was written

    # The same pair across two windows: the lake table holds qty INT from shop_00; shop_01's window is refused,
    # naming the lake table, the source table and the column.
    ok = WindowBuilder(staging_dir, "grp.a", 2)
    ok.file("shop_00", "orders", ("id",), [ID, QTY], [("I", {"id": 1, "qty": 3})])
    run(spark, ok.build(), lake_dir, source="a", routes=routes)
    bad = WindowBuilder(staging_dir, "grp.a", 3, clock=ok.clock)
    bad.file("shop_01", "orders", ("id",), [ID, Col("qty", pa.string(), "STRING")], [("I", {"id": 1, "qty": "3"})])
    with pytest.raises(SchemaConflict) as err:
        run(spark, bad.build(), lake_dir, source="a", routes=routes)
    msg = str(err.value)
    assert "shop.orders (routed from shop_01.orders)" in msg and "'qty'" in msg, msg


# ------------------------------------------------------------------------- global keys (derived tables)


def _global_routes():
    from cdc_core.model.sources import Route

    return [Route(r"shop_[0-9]+\.orders", "shop.orders", key="primary_key")]


class _Window:
    """One window of source `src` (seq given) of pipeline `grp`, changes of shop_<nn>.orders."""

    def __init__(self, staging_dir: Path, src: str, seq: int) -> None:
        self.b = WindowBuilder(staging_dir, f"grp.{src}", seq)
        self.src = src

    def changes(self, shard: str, *ch: tuple[str, int, str | None, int]) -> _Window:
        self.b.file(shard, "orders", ("id",), [ID, NOTE],
                    [(op, {"id": i, "note": note}, change_version_at(t)) for op, i, note, t in ch])
        return self


def change_version_at(t: int) -> int:
    """A change version whose commit time is t (VersionClock: offset units of 1.001 ms): equal t, equal time."""
    from cdc_core.model.positions import change_version

    return change_version(0, "mysql-bin.000001", t)


def test_global_keys_derived_table_moves_both_ways_in_any_landing_order(spark, staging_dir, lake_dir, monkeypatch):
    """A group pipeline's `key: primary_key` route (docs/group-pipelines.md, "Global keys"): each source lands in
    the lineage-keyed base, the lake table holds one row per id, recomputed from the base for the ids a window
    touched (alive row with the latest commit time, ties: the smaller source id). A row moved A -> B and back,
    each time with the two sources' windows landing in the other order, ends as exactly one row; a crash
    between the base commit and the derived commit is replayed to the same result."""
    import spark_apps.merge.land as job
    from cdc_core.model.layout import base_uri

    routes = _global_routes()

    def land(w: _Window) -> dict[str, Any]:
        return run(spark, w.b.build(), lake_dir, source=w.src, routes=routes, group_sources=("a", "b"))

    def lake() -> dict[int, tuple[str, str | None]]:
        got = contents(spark, lake_dir, "shop", "orders", key=("id",))
        return {k[0]: (r["_cdc_source"], r["note"]) for k, r in got.items()}

    land(_Window(staging_dir, "a", 1).changes("shop_00", ("I", 1, "v1", 1100), ("I", 2, "a2", 1200)))
    report = land(_Window(staging_dir, "b", 1).changes("shop_10", ("I", 3, "b3", 1300)))
    assert statuses(report) == {"shop.orders": STATUS_COMMITTED} and report["tables"]["shop.orders"]["base"]
    assert lake() == {1: ("a", "v1"), 2: ("a", "a2"), 3: ("b", "b3")}

    # Move id 1 from a to b in the same second (equal commit times): b's insert lands first. The base
    # holds a's old row (1100) and b's (2000): b's is newer. Then a's delete: b's is the only one.
    land(_Window(staging_dir, "b", 2).changes("shop_10", ("I", 1, "moved", 2000)))
    assert lake()[1] == ("b", "moved")
    land(_Window(staging_dir, "a", 2).changes("shop_00", ("D", 1, "v1", 2000)))
    assert lake() == {1: ("b", "moved"), 2: ("a", "a2"), 3: ("b", "b3")}

    # And back, the other order: b's delete lands first (no alive row: the id is briefly gone), then a's
    # insert, whose job crashes between the base commit and the derived commit, and is replayed.
    land(_Window(staging_dir, "b", 3).changes("shop_10", ("D", 1, "moved", 3000)))
    assert 1 not in lake()

    class Crash(BaseException):
        pass

    real_point = job.faults.point

    def crash(name: str) -> None:
        if name == "mid_derive":
            raise Crash
        real_point(name)

    a3 = _Window(staging_dir, "a", 3).changes("shop_00", ("I", 1, "back", 3000))
    monkeypatch.setattr(job.faults, "point", crash)
    with pytest.raises(Crash):
        land(a3)
    monkeypatch.setattr(job.faults, "point", real_point)
    table, base = uri(lake_dir, "shop", "orders"), base_uri(str(lake_dir), "shop", "orders")
    assert last_txn_version(spark, base, "grp.a") == 3 and last_txn_version(spark, table, "grp.a") == 2
    assert 1 not in lake()  # the base holds the window, the lake table not yet
    assert statuses(land(a3)) == {"shop.orders": STATUS_COMMITTED}
    assert last_txn_version(spark, table, "grp.a") == 3
    assert lake() == {1: ("a", "back"), 2: ("a", "a2"), 3: ("b", "b3")}
    assert statuses(land(a3)) == {"shop.orders": STATUS_ALREADY}  # a replay after the derived commit

    # Equal commit times and two alive rows (a's update and b's insert of id 2 in one second, a's delete
    # not landed yet): the smaller source id wins until a's delete lands.
    land(_Window(staging_dir, "a", 4).changes("shop_00", ("U", 2, "a2-upd", 4000)))
    land(_Window(staging_dir, "b", 4).changes("shop_11", ("I", 2, "b2", 4000)))
    assert lake()[2] == ("a", "a2-upd")
    land(_Window(staging_dir, "a", 5).changes("shop_00", ("D", 2, "a2-upd", 4001)))
    assert lake() == {1: ("a", "back"), 2: ("b", "b2"), 3: ("b", "b3")}

    # The base keeps every source's own rows exactly (what verify and a rebuild read).
    rows = spark.read.format("delta").load(base).collect()
    assert sorted((r["_cdc_source"], r["_cdc_source_table"], r["id"], r["note"]) for r in rows) == [
        ("a", "shop_00.orders", 1, "back"), ("b", "shop_10.orders", 3, "b3"), ("b", "shop_11.orders", 2, "b2"),
    ]


def test_global_keys_soft_deletes_keep_the_latest_tombstone(spark, staging_dir, lake_dir):
    """Soft deletes with a derived table: a row moved a -> b shows b's alive row (a's tombstone loses to an alive
    row); a row deleted on every source stays as its latest tombstone."""
    routes = _global_routes()

    def land(w: _Window) -> None:
        run(spark, w.b.build(), lake_dir, source=w.src, routes=routes, group_sources=("a", "b"), delete_mode="soft")

    land(_Window(staging_dir, "a", 1).changes("shop_00", ("I", 1, "a1", 1000), ("I", 2, "a2", 1000)))
    land(_Window(staging_dir, "b", 1).changes("shop_10", ("I", 1, "moved", 1500)))
    land(_Window(staging_dir, "a", 2).changes("shop_00", ("D", 1, "a1", 1500), ("D", 2, "a2", 1600)))
    got = contents(spark, lake_dir, "shop", "orders", key=("id",), meta=True)
    assert {k[0]: (r["_cdc_source"], r["note"], r[COL_DELETED]) for k, r in got.items()} == {
        1: ("b", "moved", False), 2: ("a", "a2", True),
    }
