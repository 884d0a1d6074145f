"""History (SCD type 2) and change-log tables (cdc_core.model.output_modes) against the reference model
(tests/support/output_model.py): random change streams cut into windows, each window merged, some merged again
(a replay), a merge stopped between the change log and the history (a crash), and a backfill that delivers a
suffix of the stream again in new windows. After every window the state, history and change log equal the model
of what the lake has been given, row for row.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_core.lake import delta_state
from cdc_core.model.errors import CdcError, SchemaConflict
from cdc_core.model.layout import changelog_uri, history_uri, table_uri
from cdc_core.model.merge_semantics import STATUS_ALREADY
from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CREATE_TABLE_LIKE,
    DROP_COLUMN,
    DROP_TABLE,
    PRIMARY_KEY,
    RENAME_TABLE,
    TRUNCATE_TABLE,
    ColumnSpec,
    SchemaChange,
)
from spark_apps.merge import merge_window
from tests.support.output_model import Change, Model, whole_updates
from tests.support.output_model import random_stream as stream
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "shop"
TOKEN = 0x36
COLS = [Col("id", pa.int32(), "INT"), Col("tier", pa.string(), "STRING"), Col("visits", pa.int64(), "BIGINT")]
TABLES = {  # table -> (table options, the model's tracked columns)
    "every": ({"outputs": ["state", "history", "changelog"]}, ()),
    "tracked": ({"outputs": ["state", "history"], "track": ["tier"]}, ("tier",)),
}


class Lake:
    def __init__(self, spark: Any, staging: Path, root: Path, small_table_rows: int | None = None) -> None:
        self.spark, self.staging, self.root = spark, staging, str(root)
        self.options = {f"shop.{t}": opts for t, (opts, _) in TABLES.items()}
        self.small = {} if small_table_rows is None else {"small_table_rows": small_table_rows}
        self.writer = None if small_table_rows == 0 else "delta-rs"  # a report's `writer`: absent for Spark

    def merge(self, seq: int, changes: list[Change], **kw: Any) -> dict[str, Any]:
        w = WindowBuilder(self.staging, PIPE, seq)
        for table in TABLES:
            w.file("shop", table, ("id",), COLS, [(op, row, version) for op, row, version, _ in changes])
        manifest, wdir = w.build()
        return merge_window(self.spark, manifest, wdir, self.root, PIPE, seq, TOKEN, table_options=self.options,
                            **self.small, **kw)

    def read(self, uri: str) -> list[dict[str, Any]]:
        """The table's rows, read by delta-rs (no Spark job), times as naive UTC as Spark returns them."""
        return [{k: naive(v) if isinstance(v, dt.datetime) else v for k, v in r.items()}
                for r in delta_state.read_rows(uri).to_pylist()]

    def check(self, given: list[Change], when: str) -> None:
        """Each table's state, history and change log equal the model of the changes given so far (in binlog
        order, each once: what the source did)."""
        ordered = sorted({(c[2], c[0]): c for c in given}.values(), key=lambda c: (c[2], c[0] != "B"))
        for table, (opts, track) in TABLES.items():
            model = Model(("id",), track).apply(ordered)
            state = {r["id"]: {c.name: r[c.name] for c in COLS} for r in self.read(table_uri(self.root, "shop", table))}
            assert state == {k[0]: v for k, v in model.state.items()}, (table, when)
            got = sorted(
                ((r["id"], r["tier"], r["visits"], r["_cdc_op"], r["_cdc_valid_from_version"],
                  r["_cdc_valid_to_version"], r["_cdc_is_current"], r["_cdc_last_version"], r["_cdc_valid_from"],
                  r["_cdc_valid_to"])
                 for r in self.read(history_uri(self.root, "shop", table))),
                key=lambda r: (r[0], r[4]),
            )
            want = sorted(
                ((v.row["id"], v.row["tier"], v.row["visits"], v.op, v.valid_from, v.valid_to, v.valid_to is None,
                  v.last_version, naive(v.valid_from_ts), naive(v.valid_to_ts))
                 for v in model.history),
                key=lambda r: (r[0], r[4]),
            )
            assert got == want, (table, when)
            if "changelog" in opts["outputs"]:
                log = sorted(((r["_cdc_version"], r["_cdc_op"], r["id"], r["tier"], r["visits"])
                              for r in self.read(changelog_uri(self.root, "shop", table))), key=repr)
                assert log == sorted(((v, op, row["id"], row["tier"], row["visits"]) for op, row, v in model.changelog),
                                     key=repr), (table, when)


def naive(ts: Any) -> Any:
    """A commit time as Spark returns a TIMESTAMP (the session's zone is UTC: tests/conftest.py)."""
    return None if ts is None else ts.astimezone(dt.UTC).replace(tzinfo=None) if ts.tzinfo else ts


@pytest.mark.parametrize("writer", ["delta-rs", "spark"])
def test_history_and_changelog_equal_the_model_under_replays_crashes_and_backfills(
        spark, tmp_path, monkeypatch, writer):
    """Both writers of the history and change log: delta-rs for small tables (cdc_core.lake.history_merge,
    changelog_append), Spark's recompute and MERGEs (`small_table_rows: 0`, as for tables past the limit)."""
    rng = random.Random(1)
    changes = stream(rng, VersionClock(), 60, before_images=True)  # staged for both tables: the change log reads them
    lake = Lake(spark, tmp_path / "staging", tmp_path / "lake", small_table_rows=None if writer == "delta-rs" else 0)
    cuts = sorted({whole_updates(changes, at) for at in rng.sample(range(1, len(changes)), 3)})
    windows = [changes[a:b] for a, b in zip([0, *cuts], [*cuts, len(changes)], strict=True)]
    given: list[Change] = []
    seq = 0
    for i, w in enumerate(windows):
        seq += 1
        if i == 2:  # the job stops after the history and change log committed, before the state: the replay lands it
            monkeypatch.setenv("CDC_FAULT", "mid_outputs")
            monkeypatch.setenv("CDC_FAULT_ACTION", "raise:LakeError")
            with pytest.raises(CdcError, match="mid_outputs"):
                lake.merge(seq, w)
            monkeypatch.delenv("CDC_FAULT")
        report = lake.merge(seq, w)
        if i != 2:  # the replay after the crash finds both landed
            landed = report["tables"]["shop.every"]
            assert [landed[o].get("writer") for o in ("changelog", "history")] == [lake.writer] * 2, report
        given += w
        lake.check(given, f"window {seq}")
        if i == 1:  # the same window again: every table and output already holds it
            again = lake.merge(seq, w)
            for r in again["tables"].values():
                assert r["status"] == STATUS_ALREADY
                assert {o["status"] for o in (r.get("history"), r.get("changelog")) if o} <= {STATUS_ALREADY}
            lake.check(given, f"window {seq} again")
    # A backfill from a point in the stream: its changes again, in new windows cut elsewhere.
    since = whole_updates(changes, rng.randrange(len(changes)))
    middle = whole_updates(changes, since + 9)
    for n, part in enumerate((changes[since:middle], changes[middle:])):
        if part:
            seq += 1
            report = lake.merge(seq, part)
            if n == 0:  # changes the change log holds: the MERGE skips them, not an append; the history recomputes
                landed = report["tables"]["shop.every"]
                assert [landed[o].get("writer") for o in ("changelog", "history")] == [None, lake.writer], report
            lake.check(given, f"backfill window {seq}")


def test_a_history_that_outgrows_the_small_table_limit_goes_to_spark_with_deletion_vectors(spark, tmp_path):
    """delta-rs lands a history while it holds at most `small_table_rows` rows (created without deletion
    vectors); the window that finds it past the limit turns them on and lands through Spark, and so do the
    windows after it; the history equals the model throughout."""
    rng = random.Random(3)
    changes = stream(rng, VersionClock(), 40)
    lake = Lake(spark, tmp_path / "staging", tmp_path / "lake", small_table_rows=12)
    writers, given = [], []
    for seq, at in enumerate(range(0, len(changes), 5), start=1):
        w = changes[at:at + 5]
        writers.append(lake.merge(seq, w)["tables"]["shop.tracked"]["history"].get("writer"))
        given += w
        lake.check(given, f"window {seq}")
    first_spark = writers.index(None)
    assert first_spark > 0 and writers[:first_spark] == ["delta-rs"] * first_spark, writers
    assert set(writers[first_spark:]) == {None}, writers
    props = delta_state.open_table(history_uri(lake.root, "shop", "tracked")).metadata().configuration
    assert props.get("delta.enableDeletionVectors") == "true"


WRITERS = pytest.mark.parametrize("small_table_rows", [100_000, 0], ids=["delta-rs", "spark"])  # both writers


@WRITERS
def test_history_and_changelog_follow_truncates_and_column_changes_and_refuse_a_key_change(spark, tmp_path,
                                                                                         small_table_rows):
    """A TRUNCATE closes every current version and is one `T` row of the change log; a column added shows from
    the first change that has it; a dropped one keeps its older values. A change of the primary key, which
    identifies versions and changes, is refused before anything of its window lands."""
    root, staging = str(tmp_path / "lake"), tmp_path / "staging"
    options = {"s.t": {"outputs": ["state", "history", "changelog"]}}
    clock = VersionClock()
    id_, v, n, d = (Col("id", pa.int32(), "INT"), Col("v", pa.string(), "STRING"), Col("n", pa.int32(), "INT"),
                    Col("d", pa.int32(), "INT"))

    def land(w: WindowBuilder) -> dict[str, Any]:
        manifest, wdir = w.build()
        return merge_window(spark, manifest, wdir, root, PIPE, w.seq, TOKEN, table_options=options,
                            small_table_rows=small_table_rows)

    def read(uri: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in spark.read.format("delta").load(uri).collect()]

    land(WindowBuilder(staging, PIPE, 1, clock).file(
        "s", "t", ["id"], [id_, v, n], [("I", {"id": i, "v": f"v{i}", "n": i}) for i in range(3)]))
    w = WindowBuilder(staging, PIPE, 2, clock)
    w.file("s", "t", ["id"], [id_, v, n], [("B", {"id": 1, "v": "v1", "n": 1}), ("U", {"id": 1, "v": "x", "n": 1})])
    w.ddl(SchemaChange(kind=TRUNCATE_TABLE, schema="s", table="t"))
    w.file("s", "t", ["id"], [id_, v, n], [("I", {"id": 9, "v": "v9", "n": 9})])
    w.ddl(SchemaChange(kind=ADD_COLUMN, schema="s", table="t", column=ColumnSpec("d", "int")))
    w.file("s", "t", ["id"], [id_, v, n, d], [("I", {"id": 10, "v": "v10", "n": 10, "d": 5})])
    w.ddl(SchemaChange(kind=DROP_COLUMN, schema="s", table="t", name="n"))
    w.file("s", "t", ["id"], [id_, v, d], [("B", {"id": 9, "v": "v9", "d": None}), ("U", {"id": 9, "v": "v9", "d": 1})])
    land(w)
    truncated = w.schema_changes[0].version

    history = sorted(read(history_uri(root, "s", "t")), key=lambda r: (r["id"], r["_cdc_valid_from_version"]))
    assert [(r["id"], r["v"], r["n"], r["d"], r["_cdc_op"], r["_cdc_is_current"]) for r in history] == [
        (0, "v0", 0, None, "I", False), (1, "v1", 1, None, "I", False), (1, "x", 1, None, "U", False),
        (2, "v2", 2, None, "I", False),
        (9, "v9", 9, None, "I", False), (9, "v9", None, 1, "U", True),  # n dropped, d set: a new version
        (10, "v10", 10, 5, "I", True),
    ]
    assert [r["_cdc_valid_to_version"] for r in history if r["id"] in (0, 2)] == [truncated, truncated]
    assert history[2]["_cdc_valid_to_version"] == truncated and history[1]["_cdc_valid_to_version"] < truncated
    log = sorted(read(changelog_uri(root, "s", "t")), key=lambda r: (r["_cdc_version"], r["_cdc_op"]))
    assert [(r["_cdc_op"], r["id"]) for r in log] == [("I", 0), ("I", 1), ("I", 2), ("B", 1), ("U", 1), ("T", None),
                                                      ("I", 9), ("I", 10), ("B", 9), ("U", 9)]
    assert log[5]["_cdc_version"] == truncated
    # Before images in the shape of their update's file: n before the DROP, d (NULL before the update) after it.
    assert [(r["v"], r["n"], r["d"]) for r in (log[3], log[4], log[8], log[9])] == [
        ("v1", 1, None), ("x", 1, None), ("v9", None, None), ("v9", None, 1)]
    assert (log[3]["_cdc_ordinal"], log[8]["_cdc_ordinal"]) == (log[4]["_cdc_ordinal"], log[9]["_cdc_ordinal"])
    state = sorted((r["id"], r["v"], r["d"]) for r in read(table_uri(root, "s", "t")))
    assert state == [(9, "v9", 1), (10, "v10", 5)]

    w = WindowBuilder(staging, PIPE, 3, clock)
    w.ddl(SchemaChange(kind=PRIMARY_KEY, schema="s", table="t", key=("id", "v")))
    w.file("s", "t", ["id", "v"], [id_, v, d], [("I", {"id": 11, "v": "v11", "d": 0})])
    with pytest.raises(SchemaConflict, match=r"table s\.t keeps a history or change log .* it changes the key"):
        land(w)
    for uri in (table_uri(root, "s", "t"), history_uri(root, "s", "t"), changelog_uri(root, "s", "t")):
        assert delta_state.last_txn_version(uri, PIPE) == 2, uri


@WRITERS
def test_a_tables_changes_reach_its_history_and_change_log_when_it_goes_in_a_window_with_renames(
        spark, tmp_path, small_table_rows):
    """A window with a rename in it: the changes `t` made before it was dropped, and those `u` made before it was
    renamed to a table keeping no history, are in their histories and change logs, closed by the DROP and the
    rename. (Until 2026-12-03 such rows reached neither: they were placed only where the state takes rows.)"""
    root, staging = str(tmp_path / "lake"), tmp_path / "staging"
    options = {f"s.{t}": {"outputs": ["state", "history", "changelog"]} for t in ("t", "u")}
    clock = VersionClock()
    cols = [Col("id", pa.int32(), "INT"), Col("v", pa.string(), "STRING")]

    def land(w: WindowBuilder) -> dict[str, Any]:
        manifest, wdir = w.build()
        return merge_window(spark, manifest, wdir, root, PIPE, w.seq, TOKEN, table_options=options,
                            small_table_rows=small_table_rows)

    w = WindowBuilder(staging, PIPE, 1, clock)
    for t in ("t", "u", "x"):
        w.file("s", t, ["id"], cols, [("I", {"id": i, "v": f"{t}{i}"}) for i in range(3)])
    land(w)
    w = WindowBuilder(staging, PIPE, 2, clock)
    w.file("s", "t", ["id"], cols,
           [("B", {"id": 1, "v": "t1"}), ("U", {"id": 1, "v": "x1"}), ("I", {"id": 4, "v": "t4"})])
    w.file("s", "u", ["id"], cols,
           [("B", {"id": 1, "v": "u1"}), ("U", {"id": 1, "v": "y1"}), ("D", {"id": 2, "v": "u2"})])
    w.ddl(SchemaChange(kind=RENAME_TABLE, schema="s", table="x", to_schema="s", to_table="y"))
    w.file("s", "t", ["id"], cols, [("B", {"id": 2, "v": "t2"}), ("U", {"id": 2, "v": "x2"})])
    w.ddl(SchemaChange(kind=RENAME_TABLE, schema="s", table="u", to_schema="s", to_table="u2"))
    w.file("s", "u2", ["id"], cols, [("I", {"id": 9, "v": "u9"})])
    w.ddl(SchemaChange(kind=DROP_TABLE, schema="s", table="t"))
    land(w)
    dropped, renamed = w.schema_changes[2].version, w.schema_changes[1].version

    def history(t: str) -> list[tuple[Any, ...]]:
        return sorted((r["id"], r["v"], r["_cdc_op"], r["_cdc_valid_to_version"])
                      for r in delta_state.read_rows(history_uri(root, "s", t)).to_pylist())

    def log(t: str) -> list[tuple[Any, ...]]:
        return sorted(((r["_cdc_op"], r["id"], r["v"]) for r in delta_state.read_rows(changelog_uri(root, "s", t))
                       .to_pylist() if r["_cdc_window_seq"] == 2), key=repr)

    v = {r["_cdc_op"] + str(r["id"]): r["_cdc_version"] for r in delta_state.read_rows(changelog_uri(root, "s", "t"))
         .to_pylist() if r["_cdc_window_seq"] == 2 and r["_cdc_op"] == "U"}
    assert history("t") == [(0, "t0", "I", dropped), (1, "t1", "I", v["U1"]), (1, "x1", "U", dropped),
                            (2, "t2", "I", v["U2"]), (2, "x2", "U", dropped), (4, "t4", "I", dropped)]
    assert log("t") == sorted([("B", 1, "t1"), ("U", 1, "x1"), ("I", 4, "t4"), ("B", 2, "t2"), ("U", 2, "x2"),
                               ("T", None, None)], key=repr)
    u_update = next(r["_cdc_version"] for r in delta_state.read_rows(changelog_uri(root, "s", "u")).to_pylist()
                    if r["_cdc_op"] == "U")
    assert history("u") == [(0, "u0", "I", renamed), (1, "u1", "I", u_update), (1, "y1", "U", renamed),
                            (2, "u2", "I", v_deleted := history("u")[3][3])]
    assert v_deleted is not None and v_deleted < renamed
    assert log("u") == sorted([("B", 1, "u1"), ("U", 1, "y1"), ("D", 2, "u2"), ("T", None, None)], key=repr)
    assert sorted((r["id"], r["v"]) for r in delta_state.read_rows(table_uri(root, "s", "u2")).to_pylist()) == [
        (0, "u0"), (1, "y1"), (9, "u9")]
    assert delta_state.read_rows(table_uri(root, "s", "t")).num_rows == 0
    # A replay changes nothing.
    again = land(w)
    assert {r["status"] for r in again["tables"].values()} == {STATUS_ALREADY}
    assert len(history("t")) == 6 and len(log("t")) == 6 and len(log("u")) == 4


@WRITERS
def test_history_and_changelog_follow_an_online_schema_change_tools_swap_and_refuse_its_key_change(
        spark, tmp_path, small_table_rows):
    """gh-ost: the ghost is made and altered in one window, swapped in the next. The history and change log go on
    through the swap (until 2026-12-03 every swap was refused for a table keeping them); a ghost's change of the
    key is refused in the window that makes it, before anything of it lands."""
    root, staging = str(tmp_path / "lake"), tmp_path / "staging"
    options = {"s.t": {"outputs": ["state", "history", "changelog"]}}
    clock = VersionClock()
    cols = [Col("id", pa.int32(), "INT"), Col("v", pa.string(), "STRING")]
    extra = Col("extra", pa.int32(), "INT")
    ghost = {"schema": "s", "table": "_t_gho", "to_schema": "s", "to_table": "t"}

    def land(w: WindowBuilder) -> dict[str, Any]:
        manifest, wdir = w.build()
        return merge_window(spark, manifest, wdir, root, PIPE, w.seq, TOKEN, table_options=options,
                            small_table_rows=small_table_rows)

    land(WindowBuilder(staging, PIPE, 1, clock).file("s", "t", ["id"], cols,
                                                     [("I", {"id": i, "v": f"v{i}"}) for i in range(3)]))
    w = WindowBuilder(staging, PIPE, 2, clock)
    w.ddl(SchemaChange(kind=CREATE_TABLE_LIKE, **ghost))
    w.ddl(SchemaChange(kind=ADD_COLUMN, schema="s", table="_t_gho", column=ColumnSpec("extra", "int")))
    w.file("s", "t", ["id"], cols, [("B", {"id": 1, "v": "v1"}), ("U", {"id": 1, "v": "during"})])
    land(w)
    w = WindowBuilder(staging, PIPE, 3, clock)
    w.ddl(SchemaChange(kind=RENAME_TABLE, schema="s", table="t", to_schema="s", to_table="_t_del"),
          SchemaChange(kind=RENAME_TABLE, **ghost))
    w.file("s", "t", ["id"], [*cols, extra], [("I", {"id": 8, "v": "new", "extra": 6}),
                                              ("D", {"id": 2, "v": "v2", "extra": None})])
    w.ddl(SchemaChange(kind=DROP_TABLE, schema="s", table="_t_del"))
    land(w)
    history = sorted((r["id"], r["v"], r["extra"], r["_cdc_op"], r["_cdc_is_current"])
                     for r in delta_state.read_rows(history_uri(root, "s", "t")).to_pylist())
    assert history == [(0, "v0", None, "I", True), (1, "during", None, "U", True), (1, "v1", None, "I", False),
                       (2, "v2", None, "I", False), (8, "new", 6, "I", True)]
    log = sorted(((r["_cdc_op"], r["id"]) for r in delta_state.read_rows(changelog_uri(root, "s", "t")).to_pylist()
                  if r["_cdc_window_seq"] > 1), key=repr)
    assert log == sorted([("B", 1), ("U", 1), ("I", 8), ("D", 2)], key=repr)
    assert sorted(r["id"] for r in delta_state.read_rows(table_uri(root, "s", "t")).to_pylist()) == [0, 1, 8]

    w = WindowBuilder(staging, PIPE, 4, clock)
    w.ddl(SchemaChange(kind=CREATE_TABLE_LIKE, **ghost))
    w.ddl(SchemaChange(kind=PRIMARY_KEY, schema="s", table="_t_gho", key=("id", "v")))
    w.file("s", "t", ["id"], [*cols, extra], [("I", {"id": 9, "v": "v9", "extra": 1})])
    with pytest.raises(SchemaConflict, match=r"table s\.t keeps a history or change log .* it changes the key"):
        land(w)
    for uri in (table_uri(root, "s", "t"), history_uri(root, "s", "t"), changelog_uri(root, "s", "t")):
        assert delta_state.last_txn_version(uri, PIPE) == 3, uri


# Under both route keys the history is keyed by (lineage, id) and the assertions are the same: Spark's recompute
# runs once, under `key: primary_key` (its lake table derived from a base), delta-rs under both.
@pytest.mark.parametrize(("route_key", "small_table_rows"), [
    pytest.param("source", 100_000, id="source-delta-rs"),
    pytest.param("primary_key", 100_000, id="primary_key-delta-rs"),
    pytest.param("primary_key", 0, id="primary_key-spark"),
])
def test_group_pipelines_keep_a_history_per_source_row_landed_once_per_source_window(spark, tmp_path, route_key,
                                                                                     small_table_rows):
    """A group pipeline's routed table (docs/group-pipelines.md) with a history and a change log: each source's
    windows land as that source's commits (txn app id `<pipeline>.<source>`), its rows keyed by their lineage
    (`key: source`), or like the derived table's base (`key: primary_key`): the same id on two shards has two
    histories, and a replay of one source's window is recognised as that source's."""
    from cdc_core.model.sources import Route

    root, staging = str(tmp_path / "lake"), tmp_path / "staging"
    routes = [Route(r"shop_[0-9]+\.orders", "shop.orders", key=route_key)]
    options = {"shop.orders": {"outputs": ["state", "history", "changelog"]}}
    cols = [Col("id", pa.int32(), "INT"), Col("note", pa.string(), "STRING")]
    clock = VersionClock()

    def land(source: str, seq: int, shard: str, changes: list[tuple[Any, ...]]) -> dict[str, Any]:
        w = WindowBuilder(staging, f"grp.{source}", seq, clock).file(shard, "orders", ("id",), cols, changes)
        manifest, wdir = w.build()
        return merge_window(spark, manifest, wdir, root, "grp", seq, TOKEN, source=source, routes=routes,
                            table_options=options, small_table_rows=small_table_rows)

    inserted, updated = clock(), clock()
    a1 = [("I", {"id": 1, "note": "a1"}, inserted), ("B", {"id": 1, "note": "a1"}, updated),  # B: the before image
          ("U", {"id": 1, "note": "a1'"}, updated)]
    land("a", 1, "shop_00", a1)
    land("b", 1, "shop_02", [("I", {"id": 1, "note": "b1"})])
    again = land("a", 1, "shop_00", a1)
    assert again["tables"]["shop.orders"]["status"] == STATUS_ALREADY
    land("b", 2, "shop_02", [("D", {"id": 1, "note": "b1"})])

    lake = Lake(spark, staging, tmp_path / "lake")
    history = sorted((r["_cdc_source"], r["id"], r["note"], r["_cdc_op"], r["_cdc_is_current"])
                     for r in lake.read(history_uri(root, "shop", "orders")))
    assert history == [("a", 1, "a1", "I", False), ("a", 1, "a1'", "U", True), ("b", 1, "b1", "I", False)]
    log = sorted((r["_cdc_source"], r["_cdc_version"], r["_cdc_op"], r["note"])
                 for r in lake.read(changelog_uri(root, "shop", "orders")))
    assert [(s, op, note) for s, _, op, note in log] == [
        ("a", "I", "a1"), ("a", "B", "a1"), ("a", "U", "a1'"), ("b", "I", "b1"), ("b", "D", "b1")]
    for uri in (history_uri(root, "shop", "orders"), changelog_uri(root, "shop", "orders")):
        assert (delta_state.last_txn_version(uri, "grp.a"), delta_state.last_txn_version(uri, "grp.b")) == (1, 2)


@WRITERS
def test_versions_are_decided_by_the_tracked_values_not_their_hash(spark, tmp_path, small_table_rows):
    """Spark's history decides versions on a hash of the tracked values and checks equal hashes value by value
    (the delta-rs writer compares values): values that hash alike but differ (a NULL moved from one column to
    another, which a hash that skips NULLs cannot see) open a new version, and values equal as `<=>` compares them
    (-0.0 and 0.0) fold, as the model says."""
    root, staging = str(tmp_path / "lake"), tmp_path / "staging"
    options = {"s.h": {"outputs": ["state", "history"], "track": ["a", "b", "x"]}}
    cols = [Col("id", pa.int32(), "INT"), Col("a", pa.int32(), "INT"), Col("b", pa.int32(), "INT"),
            Col("x", pa.float64(), "DOUBLE"), Col("c", pa.string(), "STRING")]
    clock = VersionClock()
    given: list[Change] = []

    def land(seq: int, rows: list[tuple[str, dict[str, Any]]]) -> None:
        changes = [(op, row, clock()) for op, row in rows]
        given.extend((op, row, v, VersionClock.commit_ts(v)) for op, row, v in changes)
        manifest, wdir = WindowBuilder(staging, PIPE, seq).file("s", "h", ("id",), cols, changes).build()
        report = merge_window(spark, manifest, wdir, root, PIPE, seq, TOKEN, table_options=options,
                              small_table_rows=small_table_rows)
        assert report["tables"]["s.h"]["history"].get("writer") == ("delta-rs" if small_table_rows else None)

    land(1, [("I", {"id": 1, "a": None, "b": 1, "x": 0.0, "c": "p"}),
             ("I", {"id": 2, "a": 2, "b": None, "x": 1.5, "c": "p"})])
    land(2, [("U", {"id": 1, "a": 1, "b": None, "x": 0.0, "c": "p"}),  # the NULL moved: a new version
             ("U", {"id": 2, "a": None, "b": 2, "x": 1.5, "c": "p"}),  # the same, inside one window below
             ("U", {"id": 2, "a": 2, "b": None, "x": 1.5, "c": "q"})])
    land(3, [("U", {"id": 1, "a": 1, "b": None, "x": -0.0, "c": "q"}),  # equal tracked values: folds in
             ("U", {"id": 1, "a": 1, "b": None, "x": 0.0, "c": "r"})])

    model = Model(("id",), ("a", "b", "x")).apply(given)
    got = sorted(((r["id"], r["a"], r["b"], r["c"], r["_cdc_op"], r["_cdc_valid_from_version"],
                   r["_cdc_valid_to_version"], r["_cdc_last_version"])
                  for r in spark.read.format("delta").load(history_uri(root, "s", "h")).collect()),
                 key=lambda r: (r[0], r[5]))
    want = sorted(((v.row["id"], v.row["a"], v.row["b"], v.row["c"], v.op, v.valid_from, v.valid_to, v.last_version)
                   for v in model.history), key=lambda r: (r[0], r[5]))
    assert got == want
    assert [(r[0], r[3]) for r in got] == [(1, "p"), (1, "r"), (2, "p"), (2, "p"), (2, "q")]


def test_every_column_type_lands_alike_in_history_and_change_log_through_both_writers(spark, tmp_path, caplog):
    """The every-type table (tests/support/all_types.py, staged by the product's own staging): its history and change
    log read from the staged files with Arrow and landed by delta-rs equal what Spark's read and MERGEs land, value for
    value, through an insert window and an update window."""
    import logging

    from cdc_core.lake import staging
    from cdc_core.model import layout
    from cdc_core.model.changes import RowChange
    from tests.support.all_types import ALL_TYPES, ROWS, changes_for, make_plan

    rows = [r for r, _ in ROWS]
    updates = [RowChange("U", ALL_TYPES, {**r, "vc": f"{r.get('vc')}!"}, 5000 + i, i + 1, 1_700_000_100.0 + i, 5000)
               for i, r in enumerate(rows)]
    options = {"shop.all_types": {"outputs": ["state", "history", "changelog"]}}
    lakes: dict[str, list[list[str]]] = {}
    for writer, small in (("delta-rs", 100_000), ("spark", 0)):
        staging_root, root = str(tmp_path / writer / "staging"), str(tmp_path / writer / "lake")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="cdc.merge"):
            for seq, changes in ((1, changes_for(rows)), (2, updates)):
                manifest = staging.stage_window(make_plan(seq, end=9000 * seq), iter(changes), staging_root)
                report = merge_window(spark, manifest, layout.window_dir(staging_root, "demo", seq), root, "demo",
                                      seq, TOKEN, table_options=options, small_table_rows=small)
                landed = report["tables"]["shop.all_types"]
                assert [landed[o].get("writer") for o in ("changelog", "history")] == (
                    ["delta-rs"] * 2 if small else [None] * 2), report
        if small:  # the Arrow read served every column: no table fell back to Spark's read
            assert "merge.spark_read" not in caplog.text, caplog.text
        lakes[writer] = [sorted(repr(sorted(r.items())) for r in delta_state.read_rows(u).to_pylist())
                         for u in (history_uri(root, "shop", "all_types"), changelog_uri(root, "shop", "all_types"))]
    got, want = lakes["delta-rs"], lakes["spark"]
    assert [len(t) for t in got] == [2 * len(rows), 2 * len(rows)]  # two versions per row, two changes per row
    assert got == want
