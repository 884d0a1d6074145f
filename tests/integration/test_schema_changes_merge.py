"""The merge job applies typed schema changes in binlog order (cdc_core.model.schema_evolution, docs/schema-changes.md).

Windows are built by hand (tests/support/staged_builder.py) with typed changes among their rows, merged with
the real Spark job into a real Delta lake, and each lake table is compared with what the source holds after the
same statements: rows, and columns with their types. Every table is also read with delta-rs (the pinned
`deltalake`), which must see the very same rows: no Delta feature it cannot read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_core.lake import delta_state
from cdc_core.model.manifest import COL_DELETED
from cdc_core.model.schema_changes import (
    ADD_COLUMN,
    CREATE_TABLE,
    CREATE_TABLE_LIKE,
    DROP_COLUMN,
    DROP_TABLE,
    MODIFY_COLUMN,
    RENAME_COLUMN,
    RENAME_TABLE,
    TRUNCATE_TABLE,
    ColumnSpec,
    DefaultSpec,
    SchemaChange,
)
from cdc_core.model.schema_policy import SchemaPolicy
from spark_apps.merge import STATUS_ALREADY, merge_window, table_uri
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.integration

PIPE = "ddl"
TOKEN = 0x7
ID = Col("id", pa.int32(), "INT")
V = Col("v", pa.string(), "STRING")
N = Col("n", pa.int32(), "INT")


class Lake:
    def __init__(self, spark: Any, tmp_path: Path, delete_mode: str = "hard", **kw: Any) -> None:
        self.spark = spark
        self.staging = tmp_path / "staging"
        self.root = str(tmp_path / "lake")
        self.clock = VersionClock()
        self.seq = 0
        self.delete_mode = delete_mode
        self.kw = kw

    def window(self) -> WindowBuilder:
        self.seq += 1
        return WindowBuilder(self.staging, PIPE, self.seq, self.clock)

    def land(self, w: WindowBuilder, **kw: Any) -> dict[str, Any]:
        manifest, wdir = w.build()
        return merge_window(self.spark, manifest, wdir, self.root, PIPE, w.seq, TOKEN,
                            delete_mode=self.delete_mode, **{**self.kw, **kw})

    def uri(self, table: str) -> str:
        return table_uri(self.root, "s", table)

    def rows(self, table: str, live_only: bool = True) -> list[dict[str, Any]]:
        df = self.spark.read.format("delta").load(self.uri(table))
        if live_only and COL_DELETED in df.columns:
            df = df.where(f"NOT {COL_DELETED}")
        cols = [c for c in df.columns if not c.startswith("_cdc_")]
        got = sorted((r.asDict() for r in df.select(*cols).collect()), key=lambda d: d["id"])
        # delta-rs reads the same rows (no feature it cannot read, e.g. type widening or column mapping)
        rs = delta_state.read_rows(self.uri(table))
        if live_only and COL_DELETED in rs.column_names:
            rs = rs.filter(pa.compute.invert(rs[COL_DELETED]))
        mine = sorted(({k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rs.to_pylist()),
                      key=lambda d: d["id"])
        assert mine == got, "delta-rs reads other rows than Spark"
        return got

    def types(self, table: str) -> dict[str, str]:
        df = self.spark.read.format("delta").load(self.uri(table))
        return {f.name: f.dataType.simpleString() for f in df.schema.fields if not f.name.startswith("_cdc_")}


def change(kind: str, table: str = "t", **kw: Any) -> SchemaChange:
    return SchemaChange(kind=kind, schema="s", table=table, **kw)


def col(name: str, mysql_type: str, *, nullable: bool = True, default: DefaultSpec | None = None) -> ColumnSpec:
    return ColumnSpec(name, mysql_type, nullable=nullable, default=default or DefaultSpec())


def seed(lake: Lake, n: int = 5) -> None:
    w = lake.window().file("s", "t", ["id"], [ID, V, N], [("I", {"id": i, "v": f"v{i}", "n": i}) for i in range(n)])
    lake.land(w)


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_truncate_empties_the_table_and_later_changes_apply(spark: Any, tmp_path: Path, delete_mode: str) -> None:
    lake = Lake(spark, tmp_path, delete_mode)
    seed(lake)
    w = lake.window()
    w.file("s", "t", ["id"], [ID, V, N], [("U", {"id": 1, "v": "before", "n": 1})])
    w.ddl(change(TRUNCATE_TABLE))
    w.file("s", "t", ["id"], [ID, V, N], [("I", {"id": 9, "v": "after", "n": 9})])
    lake.land(w)
    assert lake.rows("t") == [{"id": 9, "v": "after", "n": 9}]
    if delete_mode == "soft":  # the truncated rows stay as tombstones
        assert len(lake.rows("t", live_only=False)) == 6
    # a replay of the window is 'already'; a replay of the first window under a new seq (a backfill) resurrects nothing
    manifest, wdir = w.build()
    again = merge_window(spark, manifest, wdir, lake.root, PIPE, w.seq, TOKEN, delete_mode=delete_mode)
    assert again["tables"]["s.t"]["status"] == STATUS_ALREADY
    backfill = lake.window()
    backfill.file("s", "t", ["id"], [ID, V, N], [("I", {"id": i, "v": f"v{i}", "n": i}, 1100 + i) for i in range(5)])
    lake.land(backfill)
    assert lake.rows("t") == [{"id": 9, "v": "after", "n": 9}]


def test_add_column_with_default_fills_existing_rows(spark: Any, tmp_path: Path) -> None:
    lake = Lake(spark, tmp_path)
    seed(lake, 3)
    w = lake.window()
    w.file("s", "t", ["id"], [ID, V, N], [("U", {"id": 0, "v": "u0", "n": 0})])  # before the ALTER: gets 7 too
    w.ddl(change(ADD_COLUMN, column=col("d", "int", nullable=False, default=DefaultSpec("literal", "7"))))
    D = Col("d", pa.int32(), "INT")
    w.file("s", "t", ["id"], [ID, V, N, D], [("I", {"id": 5, "v": "new", "n": 5, "d": 8})])
    lake.land(w)
    assert lake.rows("t") == [
        {"id": 0, "v": "u0", "n": 0, "d": 7}, {"id": 1, "v": "v1", "n": 1, "d": 7},
        {"id": 2, "v": "v2", "n": 2, "d": 7}, {"id": 5, "v": "new", "n": 5, "d": 8},
    ]
    # NOT NULL without a DEFAULT: MySQL's implicit default ('' for text), and a nullable one stays NULL
    w = lake.window()
    w.ddl(change(ADD_COLUMN, column=col("e", "varchar(10)", nullable=False)),
          change(ADD_COLUMN, column=col("f", "int")))
    lake.land(w)
    assert {r["id"]: (r["e"], r["f"]) for r in lake.rows("t")} == {0: ("", None), 1: ("", None), 2: ("", None),
                                                                    5: ("", None)}


@pytest.mark.parametrize("mode", ["follow", "lenient"])
def test_rename_and_drop_column(spark: Any, tmp_path: Path, mode: str) -> None:
    lake = Lake(spark, tmp_path, schema_policy=SchemaPolicy(mode))
    seed(lake, 3)
    w = lake.window()
    w.ddl(change(RENAME_COLUMN, name="v", new_name="label"))
    LABEL = Col("label", pa.string(), "STRING")
    w.file("s", "t", ["id"], [ID, LABEL, N], [("U", {"id": 1, "label": "one", "n": 1})])
    w.ddl(change(DROP_COLUMN, name="n"))
    w.file("s", "t", ["id"], [ID, LABEL], [("I", {"id": 7, "label": "seven"})])
    lake.land(w)
    rows = lake.rows("t")
    if mode == "follow":
        assert lake.types("t") == {"id": "int", "label": "string"}
        assert rows == [{"id": 0, "label": "v0"}, {"id": 1, "label": "one"}, {"id": 2, "label": "v2"},
                        {"id": 7, "label": "seven"}]
    else:  # lenient: v and n stay (NULL in rows written since), label holds every row's value
        assert lake.types("t") == {"id": "int", "v": "string", "n": "int", "label": "string"}
        assert [(r["id"], r["label"]) for r in rows] == [(0, "v0"), (1, "one"), (2, "v2"), (7, "seven")]
        assert [(r["id"], r["v"], r["n"]) for r in rows] == [(0, "v0", 0), (1, None, 1), (2, "v2", 2), (7, None, None)]


def test_widening_rewrites_the_column_readable_by_delta_rs(spark: Any, tmp_path: Path) -> None:
    lake = Lake(spark, tmp_path)
    seed(lake, 3)
    w = lake.window()
    w.ddl(change(MODIFY_COLUMN, name="n", column=col("n", "bigint")))
    NB = Col("n", pa.int64(), "BIGINT")
    w.file("s", "t", ["id"], [ID, V, NB], [("I", {"id": 4, "v": "big", "n": 2**40})])
    lake.land(w)
    assert lake.types("t")["n"] == "bigint"
    assert [r["n"] for r in lake.rows("t")] == [0, 1, 2, 2**40]
    props = spark.sql(f"DESCRIBE DETAIL delta.`{lake.uri('t')}`").collect()[0]["properties"]
    assert props.get("delta.enableTypeWidening") != "true"


def test_incompatible_type_change_under_lenient_and_follow(spark: Any, tmp_path: Path) -> None:
    lake = Lake(spark, tmp_path, schema_policy=SchemaPolicy("lenient"))
    seed(lake, 2)
    w = lake.window()
    w.ddl(change(MODIFY_COLUMN, name="v", column=col("v", "int")))  # VARCHAR -> INT: the server converted
    VI = Col("v", pa.int32(), "INT")
    w.file("s", "t", ["id"], [ID, VI, N], [("I", {"id": 3, "v": 33, "n": 3})])
    lake.land(w)  # lenient keeps STRING, the new values written as text
    assert lake.types("t")["v"] == "string"
    assert [r["v"] for r in lake.rows("t")] == ["v0", "v1", "33"]

    follow = Lake(spark, tmp_path / "f")
    seed(follow, 2)
    w = follow.window()
    w.ddl(change(MODIFY_COLUMN, name="v", column=col("v", "int")))
    w.file("s", "t", ["id"], [ID, VI, N], [("I", {"id": 3, "v": 33, "n": 3})])
    report = follow.land(w)  # follow: the column takes the new type; older rows are re-read from the source
    assert follow.types("t")["v"] == "int"
    assert [r["v"] for r in follow.rows("t")] == [None, None, 33]
    assert report["rereads"][0]["table"] == "s.t"


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_drop_and_recreate_starts_clean(spark: Any, tmp_path: Path, delete_mode: str) -> None:
    lake = Lake(spark, tmp_path, delete_mode)
    seed(lake, 4)
    w = lake.window()
    w.ddl(change(DROP_TABLE))
    lake.land(w)
    assert lake.rows("t") == []
    w = lake.window()
    w.ddl(change(CREATE_TABLE, columns=(col("id", "int", nullable=False), col("w", "int")), key=("id",)))
    W = Col("w", pa.int32(), "INT")
    w.file("s", "t", ["id"], [ID, W], [("I", {"id": 1, "w": 10})])
    lake.land(w)
    assert lake.types("t") == {"id": "int", "w": "int"}
    assert lake.rows("t") == [{"id": 1, "w": 10}]


def test_ddl_on_a_table_the_lake_never_had_holds_nothing(spark: Any, tmp_path: Path) -> None:
    lake = Lake(spark, tmp_path)
    w = lake.window()
    w.ddl(change(TRUNCATE_TABLE, table="never"))
    report = lake.land(w)
    assert report["tables"]["s.never"]["status"] == "no table"
    # A window staged before CREATE TABLE ... LIKE's table stopped being named (the builder still names it): the
    # table it copies, which the lake never had, is not created. (Probed: created with no columns; `cdc verify`
    # found every column missing.)
    w = lake.window().ddl(change(CREATE_TABLE_LIKE, table="copy", to_schema="s", to_table="model"))
    w.file("s", "copy", ["id"], [ID, V], [("I", {"id": 1, "v": "a"})])
    report = lake.land(w)
    assert report["tables"]["s.model"]["status"] == "no table"
    assert not delta_state.table_exists(lake.uri("model"))
    assert lake.rows("copy") == [{"id": 1, "v": "a"}]


def test_rename_table_carries_the_rows_and_a_new_table_under_the_old_name_starts_clean(
    spark: Any, tmp_path: Path
) -> None:
    lake = Lake(spark, tmp_path)
    seed(lake, 4)
    w = lake.window()
    w.file("s", "t", ["id"], [ID, V, N], [("U", {"id": 1, "v": "before", "n": 1})])
    w.ddl(change(RENAME_TABLE, to_schema="s", to_table="t2"))
    w.file("s", "t2", ["id"], [ID, V, N], [("I", {"id": 9, "v": "after", "n": 9})])
    w.ddl(change(CREATE_TABLE, columns=(col("id", "int", nullable=False), col("w", "int")), key=("id",)))
    W = Col("w", pa.int32(), "INT")
    w.file("s", "t", ["id"], [ID, W], [("I", {"id": 1, "w": 100})])
    lake.land(w)
    assert [(r["id"], r["v"]) for r in lake.rows("t2")] == [(0, "v0"), (1, "before"), (2, "v2"), (3, "v3"),
                                                            (9, "after")]
    assert lake.rows("t") == [{"id": 1, "w": 100}]
    assert lake.types("t") == {"id": "int", "w": "int"}
    # the window replays as 'already' everywhere
    manifest, wdir = w.build()
    again = merge_window(spark, manifest, wdir, lake.root, PIPE, w.seq, TOKEN)
    assert {r["status"] for r in again["tables"].values()} == {STATUS_ALREADY}


def test_gh_ost_migration_lands_the_new_shape_in_the_real_table(spark: Any, tmp_path: Path) -> None:
    lake = Lake(spark, tmp_path)
    seed(lake, 4)
    ghost = dict(to_schema="s", to_table="t")
    w = lake.window()  # the tool builds its ghost table and alters it; the real table keeps changing
    w.ddl(change(CREATE_TABLE_LIKE, table="_t_gho", **ghost))
    w.ddl(change(ADD_COLUMN, table="_t_gho",
                 column=col("extra", "int", nullable=False, default=DefaultSpec("literal", "5"))))
    w.file("s", "t", ["id"], [ID, V, N], [("U", {"id": 2, "v": "during", "n": 2})])
    lake.land(w)
    assert "extra" not in lake.types("t")  # nothing changes until the swap
    w = lake.window()
    w.file("s", "t", ["id"], [ID, V, N], [("D", {"id": 3, "v": "v3", "n": 3})])
    w.ddl(change(RENAME_TABLE, to_schema="s", to_table="_t_del"), change(RENAME_TABLE, table="_t_gho", **ghost))
    EXTRA = Col("extra", pa.int32(), "INT")
    w.file("s", "t", ["id"], [ID, V, N, EXTRA], [("I", {"id": 8, "v": "new", "n": 8, "extra": 6})])
    w.ddl(change(DROP_TABLE, table="_t_del"))
    lake.land(w)
    assert lake.rows("t") == [
        {"id": 0, "v": "v0", "n": 0, "extra": 5}, {"id": 1, "v": "v1", "n": 1, "extra": 5},
        {"id": 2, "v": "during", "n": 2, "extra": 5}, {"id": 8, "v": "new", "n": 8, "extra": 6},
    ]
    for stray in ("_t_gho", "_t_del"):
        assert not (Path(lake.root) / "s" / stray).exists()


class _Crashed(BaseException):
    """The first attempt's end at a fault point (not an Exception: the job must not turn it into a LakeError)."""


def test_a_drop_replayed_after_its_structure_committed_keeps_the_windows_older_rows_from_bringing_it_back(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window with rows before a DROP COLUMN and rows after it; the first attempt dies between the drop's
    structure commit and its mark (`mid_schema_change`), the replay finds the column already gone. It must still
    record the drop, so that the rows from before it are translated: else the MERGE adds the column back (found
    by the fault soak, seed 27: the lake kept a column the source had dropped)."""
    from cdc_core.model import faults

    lake = Lake(spark, tmp_path)
    seed(lake, 3)
    w = lake.window()
    w.file("s", "t", ["id"], [ID, V, N], [("U", {"id": 1, "v": "one", "n": 10})])
    w.ddl(change(DROP_COLUMN, name="n"))
    w.file("s", "t", ["id"], [ID, V], [("I", {"id": 7, "v": "seven"})])
    manifest, wdir = w.build()
    real = faults.point

    def crash(name: str) -> None:
        if name == "mid_schema_change":
            raise _Crashed(name)
        real(name)

    monkeypatch.setattr(faults, "point", crash)
    with pytest.raises(_Crashed):
        merge_window(spark, manifest, wdir, lake.root, PIPE, w.seq, TOKEN, delete_mode="hard")
    assert "n" not in lake.types("t")  # the structure committed, the mark not
    monkeypatch.setattr(faults, "point", real)
    merge_window(spark, manifest, wdir, lake.root, PIPE, w.seq, TOKEN, delete_mode="hard")
    assert lake.types("t") == {"id": "int", "v": "string"}
    assert lake.rows("t") == [{"id": 0, "v": "v0"}, {"id": 1, "v": "one"}, {"id": 2, "v": "v2"},
                              {"id": 7, "v": "seven"}]
