"""The small-table writer (cdc_core.lake.small_writer, delta-rs) against the Spark MERGE it stands in for.

Every window runs twice: into a lake where Spark merges every table (`small_table_rows=0`) and into one
where delta-rs lands the small ones (the default). After each window both lakes must hold the same rows,
metadata columns and types (read with Spark), the same txn versions, and the reports the same counts;
each window also says which writer the second lake must have used. Plus what only the new writer has:
the pinned-version commit against a concurrent writer (a zombie), and the hand-over to Spark with
deletion vectors once a table outgrows the limit.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_core.lake import small_writer
from cdc_core.lake.delta_state import last_txn_version
from cdc_core.model.layout import tombstone_uri
from cdc_core.model.manifest import COL_DELETED, COL_VERSION
from spark_apps.merge import STATUS_ALREADY, STATUS_COMMITTED, merge_window, table_uri
from tests.support.delta_rs import open_stale_first
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "orders"
TOKEN = 0x51
ID = Col("id", pa.int32(), "INT")
COLS = [
    ID,
    Col("Note", pa.string(), "STRING"),  # mixed case: delta-rs predicates must quote it
    Col("qty", pa.int64(), "BIGINT"),
    Col("price", pa.decimal128(10, 2), "DECIMAL(10,2)"),
    Col("ts", pa.timestamp("us", tz="UTC"), "TIMESTAMP", "timestamp(6)"),
    Col("dtm", pa.timestamp("us"), "TIMESTAMP_NTZ", "datetime(6)"),
    Col("day", pa.date32(), "DATE"),
    Col("b", pa.binary(), "BINARY"),
    Col("f", pa.float64(), "DOUBLE"),
]
UTC = dt.UTC
DV = "delta.enableDeletionVectors"


def row(i: int, note: str | None = "n", **kw: Any) -> dict[str, Any]:
    base = {
        "id": i,
        "Note": note,
        "qty": i * 10_000_000_000,
        "price": Decimal(f"{i}.25"),
        "ts": dt.datetime(2024, 1, 1, 0, 0, i, 123456, tzinfo=UTC),
        "dtm": dt.datetime(1000, 1, 1, 0, 0, i),
        "day": dt.date(9999, 12, 31),
        "b": bytes([i, 0, 255]),
        "f": i / 3,
    }
    return {**base, **kw}


class Twin:
    """Two lakes fed the same windows: `spark` merges every table with Spark, `small` the default."""

    def __init__(self, spark: Any, staging_dir: Path, tmp_path: Path, **kw: Any) -> None:
        self.spark = spark
        self.staging_dir = staging_dir
        self.lakes = {"spark": tmp_path / "lake-spark", "small": tmp_path / "lake-small"}
        self.kw = kw
        self.clock = VersionClock()

    def window(self, seq: int) -> WindowBuilder:
        return WindowBuilder(self.staging_dir, PIPE, seq, self.clock)

    def land(self, w: WindowBuilder, writers: dict[str, str] | None, **kw: Any) -> dict[str, Any]:
        """Both lakes take the window; `writers`: {table: the small lake's expected writer} (None: any)."""
        built = w.build()
        reports = {}
        for name, lake in self.lakes.items():
            rows = 0 if name == "spark" else kw.get("small_table_rows", small_writer.DEFAULT_MAX_ROWS)
            manifest, wdir = built
            reports[name] = merge_window(
                self.spark, manifest, wdir, str(lake), PIPE, manifest.plan.seq, TOKEN,
                **{**self.kw, **kw, "small_table_rows": rows},
            )
        got = {t: r.get("writer") for t, r in reports["small"]["tables"].items()}
        assert writers is None or got == writers
        assert all(r.get("writer") in ("spark", None) for r in reports["spark"]["tables"].values())
        for table, r in reports["spark"]["tables"].items():
            other = reports["small"]["tables"][table]
            counts = ("status", "inserted", "updated", "deleted")
            assert {k: r[k] for k in counts} == {k: other[k] for k in counts}, table
            schema, _, name = table.partition(".")
            self.assert_same(schema, name, w.seq)
        return reports["small"]

    def detail(self, lake: str, schema: str, table: str) -> dict[str, Any]:
        uri = table_uri(str(self.lakes[lake]), schema, table)
        return DeltaTable.forPath(self.spark, uri).detail().collect()[0].asDict()

    def rows(self, lake: str, schema: str, table: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
        df = self.spark.read.format("delta").load(table_uri(str(self.lakes[lake]), schema, table))
        types = sorted((f.name, f.dataType.simpleString()) for f in df.schema.fields)
        rows = sorted((r.asDict() for r in df.collect()), key=lambda d: repr(sorted(d.items())))
        return types, rows

    def tombstones(self, lake: str, schema: str, table: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
        df = self.spark.read.format("delta").load(tombstone_uri(str(self.lakes[lake]), schema, table))
        return sorted((f.name, f.dataType.simpleString()) for f in df.schema.fields), sorted(
            (r.asDict() for r in df.collect()), key=lambda d: repr(sorted(d.items())))

    def assert_same(self, schema: str, table: str, seq: int) -> None:
        a, b = self.rows("spark", schema, table), self.rows("small", schema, table)
        assert a[0] == b[0], "column types differ"
        assert a[1] == b[1], "rows differ"
        props = [
            {k: v for k, v in self.detail(lake, schema, table)["properties"].items() if k != DV}
            for lake in self.lakes
        ]
        assert props[0] == props[1], "table properties differ (deletion vectors aside)"
        for lake in self.lakes.values():
            assert last_txn_version(table_uri(str(lake), schema, table), PIPE) == seq


def test_hard_deletes_updates_duplicates_and_replays_land_as_spark_lands_them(spark, staging_dir, tmp_path):
    checkpoint_often = {"shop.t": {"properties": {"delta.checkpointInterval": "2"}}}
    twin = Twin(spark, staging_dir, tmp_path, table_options=checkpoint_often)
    w1 = twin.window(1).file("shop", "t", ("id",), COLS, [("I", row(i)) for i in range(1, 6)] + [("I", {"id": 6})])
    twin.land(w1, {"shop.t": "delta-rs"})  # created small and first rows landed, by delta-rs
    from deltalake import DeltaTable as RsTable

    created = RsTable(table_uri(str(twin.lakes["small"]), "shop", "t")).history()[-1]
    assert (created["operation"], created["clientVersion"].split(":")[0]) == ("CREATE TABLE", "delta-rs.py-1.6.6")

    # Updates, a key changed twice in the window (the last change wins), an insert; a column dropped
    # at the source mid-window (the second file lacks `f`: NULL, as Spark conforms it).
    w2 = twin.window(2)
    w2.file("shop", "t", ("id",), COLS, [("U", row(1, "u1")), ("U", row(3, "u3a")), ("U", row(3, "u3b"))])
    w2.file("shop", "t", ("id",), COLS[:-1], [("I", row(7, None)), ("U", row(2, "u2"))])
    report = twin.land(w2, {"shop.t": "delta-rs"})
    assert (report["tables"]["shop.t"]["inserted"], report["tables"]["shop.t"]["updated"]) == (1, 3)

    # The same window again: already landed (found before any writer starts), nothing written.
    again = twin.land(twin.window(2).extend(w2.files), {"shop.t": None})
    assert again["tables"]["shop.t"]["status"] == STATUS_ALREADY

    # A delete: delta-rs appends it to the tombstone table (which it creates, without deletion vectors),
    # then merges; the tombstones are Spark's (the table is checkpointed by now, by delta-rs: Spark reads it).
    w3 = twin.window(3).file("shop", "t", ("id",), COLS, [("D", row(4)), ("U", row(9)), ("D", row(9))])
    twin.land(w3, {"shop.t": "delta-rs"})
    assert twin.tombstones("small", "shop", "t") == twin.tombstones("spark", "shop", "t")
    assert [r["id"] for r in twin.tombstones("small", "shop", "t")[1]] == [4, 9]
    # An older window replayed later (older versions): the tombstone keeps key 4 deleted, the version
    # test keeps rows 1-3 as window 2 left them. Tombstones newer than the window: Spark again.
    twin.land(twin.window(4).extend(w1.files), {"shop.t": "spark"})
    # A fresh window after that: delta-rs again (no delete, no tombstone newer than it).
    w5 = twin.window(5).file("shop", "t", ("id",), COLS, [("U", row(5, "u5")), ("I", row(8))])
    twin.land(w5, {"shop.t": "delta-rs"})
    small = twin.lakes["small"]
    assert list((small / "shop" / "t" / "_delta_log").glob("*.checkpoint.parquet"))  # Spark read them above
    assert not DeltaTable.forPath(spark, table_uri(str(small), "shop", "t")).detail().collect()[0][
        "properties"
    ].get("delta.enableDeletionVectors")


def test_soft_deletes_and_replays_that_change_nothing(spark, staging_dir, tmp_path):
    twin = Twin(spark, staging_dir, tmp_path, delete_mode="soft")
    w1 = twin.window(1).file("shop", "s", ("id",), COLS, [("I", row(1)), ("I", row(2))])
    twin.land(w1, {"shop.s": "delta-rs"})
    w2 = twin.window(2).file("shop", "s", ("id",), COLS, [("D", row(1)), ("D", row(9, "never seen"))])
    report = twin.land(w2, {"shop.s": "delta-rs"})
    assert report["tables"]["shop.s"]["updated"] == 1
    # Window 1 replayed: every change is older than the lake's rows, so delta-rs writes no MERGE commit;
    # the window's txn must still land (a commit of the txn alone).
    report = twin.land(twin.window(3).extend(w1.files), {"shop.s": "delta-rs"})
    assert report["tables"]["shop.s"]["status"] == STATUS_COMMITTED
    _, rows = twin.rows("small", "shop", "s")
    assert {r["id"]: r[COL_DELETED] for r in rows} == {1: True, 2: False, 9: True}
    w4 = twin.window(4).file("shop", "s", ("id",), COLS, [("I", row(1, "again"))])
    twin.land(w4, {"shop.s": "delta-rs"})


def test_keys_with_nulls_composite_and_routed_tables(spark, staging_dir, tmp_path):
    """A key that may be NULL (a table keyed by its full row) matches NULL-safe, as Spark's <=>."""
    twin = Twin(spark, staging_dir, tmp_path)
    a, b = Col("a", pa.int32(), "INT"), Col("b", pa.string(), "STRING")
    w1 = twin.window(1).file("shop", "k", ("a", "b"), [a, b], [("I", {"a": 1, "b": None}), ("I", {"a": 1, "b": "x"})])
    twin.land(w1, {"shop.k": "delta-rs"})
    w2 = twin.window(2).file("shop", "k", ("a", "b"), [a, b], [("I", {"a": 1, "b": None}), ("I", {"a": 2, "b": None})])
    twin.land(w2, {"shop.k": "delta-rs"})
    _, rows = twin.rows("small", "shop", "k")
    assert sorted((r["a"], r["b"] or "") for r in rows) == [(1, ""), (1, "x"), (2, "")]


def test_a_table_that_outgrows_the_limit_goes_to_spark_with_deletion_vectors(spark, staging_dir, tmp_path):
    twin = Twin(spark, staging_dir, tmp_path)
    w1 = twin.window(1).file("shop", "g", ("id",), COLS, [("I", row(i)) for i in range(1, 3)])
    twin.land(w1, {"shop.g": "delta-rs"}, small_table_rows=3)
    uri = table_uri(str(twin.lakes["small"]), "shop", "g")
    props = DeltaTable.forPath(spark, uri).detail().collect()[0]["properties"]
    assert "delta.enableDeletionVectors" not in props  # created small
    w2 = twin.window(2).file("shop", "g", ("id",), COLS, [("I", row(i)) for i in range(3, 5)])
    twin.land(w2, {"shop.g": "spark"}, small_table_rows=3)
    detail = DeltaTable.forPath(spark, uri).detail().collect()[0]
    assert detail["properties"]["delta.enableDeletionVectors"] == "true"
    assert "deletionVectors" in detail["tableFeatures"]
    # Small again by rows, but its protocol now has deletion vectors: delta-rs must never write it.
    w3 = twin.window(3).file("shop", "g", ("id",), COLS, [("U", row(1, "u"))])
    twin.land(w3, {"shop.g": "spark"}, small_table_rows=100)


def small_job(built: Any, lake: Path, table: str) -> small_writer.SmallMerge:
    manifest, wdir = built
    st = next(t for t in manifest.tables if t.table == table)
    return small_writer.SmallMerge(
        uri=table_uri(str(lake), st.schema, st.table), label=st.name, window_dir=wdir,
        members=(small_writer.Member(st),), key=st.key, delete_mode="hard", app_id=PIPE,
        seq=manifest.plan.seq, user_metadata=f"test {manifest.plan.seq}", max_rows=1000,
    )


def test_a_writer_that_checked_an_older_version_cannot_commit_on_top_of_a_newer_one(spark, staging_dir, tmp_path,
                                                                                     monkeypatch):
    """The zombie case: delta-rs read the table at version V, another run of the same window committed V+1
    meanwhile. The commit (no retries) fails; the writer re-reads the txn, finds the window landed and
    reports 'already', writing nothing. A stale reader of a later window fails the same way, then reads
    the table again and lands once."""
    from deltalake import DeltaTable as RsTable

    twin = Twin(spark, staging_dir, tmp_path)
    twin.land(twin.window(1).file("shop", "z", ("id",), COLS, [("I", row(1))]), {"shop.z": "delta-rs"})
    lake = twin.lakes["small"]
    uri = table_uri(str(lake), "shop", "z")

    stale = RsTable(uri)  # version V, before window 2
    w2 = twin.window(2).file("shop", "z", ("id",), COLS, [("U", row(1, "once"))])
    built2 = w2.build()
    assert small_writer.land(small_job(built2, lake, "z"), lambda: None) == small_writer.Landed(
        "committed", updated=1, version=stale.version() + 1
    )  # the other run lands window 2 as V+1
    before = RsTable(uri).version()
    monkeypatch.setattr(small_writer, "open_table", lambda _uri, _storage=None: stale)
    assert small_writer.land(small_job(built2, lake, "z"), lambda: None) == small_writer.Landed("already")
    assert RsTable(uri).version() == before  # nothing written on top

    stale = RsTable(uri)  # version V', before window 3
    w3 = twin.window(3).file("shop", "z", ("id",), COLS, [("U", row(1, "w3"))])
    monkeypatch.undo()
    assert small_writer.land(small_job(w3.build(), lake, "z"), lambda: None).status == "committed"
    w4 = twin.window(4).file("shop", "z", ("id",), COLS, [("U", row(1, "w4"))])
    opened = open_stale_first(monkeypatch, stale)
    landed = small_writer.land(small_job(w4.build(), lake, "z"), lambda: None)
    assert (landed.status, landed.updated, opened["n"]) == ("committed", 1, 2)
    rows = [r.asDict() for r in spark.read.format("delta").load(uri).collect()]
    assert [(r["Note"], r[COL_VERSION] == w4.files[0].changes[0][2]) for r in rows] == [("w4", True)]
    assert last_txn_version(uri, PIPE) == 4


def test_the_fence_is_checked_before_the_commit(spark, staging_dir, tmp_path):
    from cdc_core.model.errors import Fenced

    twin = Twin(spark, staging_dir, tmp_path)
    twin.land(twin.window(1).file("shop", "f", ("id",), COLS, [("I", row(1))]), {"shop.f": "delta-rs"})
    uri = table_uri(str(twin.lakes["small"]), "shop", "f")
    w2 = twin.window(2).file("shop", "f", ("id",), COLS, [("U", row(1, "zombie"))])

    def fenced() -> None:
        raise Fenced("fenced: lease lost (test)")

    with pytest.raises(Fenced):
        small_writer.land(small_job(w2.build(), twin.lakes["small"], "f"), fenced)
    assert last_txn_version(uri, PIPE) == 1


def test_readers_filtering_on_timestamps_find_every_row_delta_rs_wrote(spark, staging_dir, tmp_path):
    """delta-rs writes timestamp statistics truncated to milliseconds (and TIMESTAMP_NTZ ones with a space):
    Spark's data skipping must still find rows a microsecond past a statistic."""
    twin = Twin(spark, staging_dir, tmp_path)
    rows = [row(1, ts=dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC), dtm=dt.datetime(2024, 1, 1, 0, 0, 0, 1)),
            row(2, ts=dt.datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC), dtm=dt.datetime(2024, 1, 1, 0, 0, 0, 999))]
    twin.land(twin.window(1).file("shop", "ts", ("id",), COLS, [("I", r) for r in rows]), {"shop.ts": "delta-rs"})
    df = spark.read.format("delta").load(table_uri(str(twin.lakes["small"]), "shop", "ts"))
    for where, ids in (
        ("ts > TIMESTAMP'2024-01-01 00:00:00.000500Z'", [2]),
        ("ts = TIMESTAMP'2024-01-01 00:00:00.000999Z'", [2]),
        ("dtm > TIMESTAMP_NTZ'2024-01-01 00:00:00.000500'", [2]),
        ("dtm >= TIMESTAMP_NTZ'2024-01-01 00:00:00.000001'", [1, 2]),
    ):
        assert sorted(r["id"] for r in df.where(where).select("id").collect()) == ids, where


def test_partitioned_tables_land_as_spark_lands_them(spark, staging_dir, tmp_path):
    """`partition_by` from the table options: delta-rs creates the table with it, and updates that move a
    row to another partition (or to the NULL partition) land as with Spark."""
    twin = Twin(spark, staging_dir, tmp_path, table_options={"shop.p": {"partition_by": ["day"]}})
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    w1 = twin.window(1).file("shop", "p", ("id",), COLS, [("I", row(1, day=d1)), ("I", row(2, day=d1)),
                                                          ("I", row(3, day=None))])
    twin.land(w1, {"shop.p": "delta-rs"})
    w2 = twin.window(2).file("shop", "p", ("id",), COLS, [("U", row(1, "moved", day=d2)), ("U", row(3, day=d1)),
                                                          ("U", row(2, "gone", day=None))])
    twin.land(w2, {"shop.p": "delta-rs"})
    for lake in twin.lakes:
        assert twin.detail(lake, "shop", "p")["partitionColumns"] == ["day"]


@settings(max_examples=4, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    delete_mode=st.sampled_from(["hard", "soft"]),
    windows=st.lists(
        st.lists(st.tuples(st.sampled_from("IUD"), st.integers(1, 6), st.sampled_from(["a", "b", None])),
                 min_size=1, max_size=6),
        min_size=1, max_size=3,
    ),
    replay=st.booleans(),
)
def test_random_windows_land_alike_through_both_writers(
    spark: Any, staging_dir: Path, tmp_path_factory: pytest.TempPathFactory, delete_mode: str,
    windows: list[list[tuple[str, int, str | None]]], replay: bool,
) -> None:
    """One merge semantics (cdc_core.model.merge_semantics) rendered for both writers: random windows of inserts,
    updates and deletes (a key changed several times in a window, deletes of keys never seen, a window replayed
    under a later seq: older changes), landed by Spark alone and by delta-rs where it may, end in the same table."""
    tmp = tmp_path_factory.mktemp("twin")
    twin = Twin(spark, tmp / "staging", tmp, delete_mode=delete_mode)
    built = []
    for seq, changes in enumerate(windows, start=1):
        w = twin.window(seq).file("shop", "p", ("id",), COLS, [(op, row(k, note)) for op, k, note in changes])
        twin.land(w, None)
        built.append(w)
    if replay:
        twin.land(twin.window(len(windows) + 1).extend(built[0].files), None)

