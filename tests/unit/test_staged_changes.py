"""cdc_core.lake.staged_changes: a lake table's staged changes read with Arrow, as Spark's read of them gives
them to the history and change-log writers (spark_apps/merge/targets.LakeTarget.read)."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest

from cdc_core.lake import staged_changes
from cdc_core.lake.object_store import AMBIENT
from cdc_core.model.manifest import COL_OP, COL_TXN, COL_VERSION
from tests.support.staged_builder import Col, VersionClock, WindowBuilder

pytestmark = pytest.mark.unit

ID, NOTE, N = Col("id", pa.int32(), "INT"), Col("note", pa.string(), "STRING"), Col("n", pa.int16(), "SMALLINT")


def test_every_change_of_every_member_with_lineage_bounds_and_columns_added_later(tmp_path) -> None:
    clock = VersionClock()
    w = WindowBuilder(tmp_path, "grp", 1, clock)
    w.file("shop_00", "orders", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "a"}), ("U", {"id": 1, "note": "b"})])
    w.file("shop_00", "orders", ("id",), [ID, NOTE, N], [("U", {"id": 1, "note": "c", "n": 7})])  # n added
    w.file("shop_01", "orders", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "x"}), ("D", {"id": 1, "note": "x"})])
    manifest, wdir = w.build()
    a, b = manifest.table("shop_00.orders"), manifest.table("shop_01.orders")
    alone = staged_changes.read(wdir, [staged_changes.Member(b)], AMBIENT)
    assert not isinstance(alone, str), alone
    versions_b = sorted(alone[COL_VERSION].to_pylist())

    rows = staged_changes.read(wdir, [
        staged_changes.Member(a, (("_cdc_source", "a"),)),
        staged_changes.Member(b, (("_cdc_source", "b"),), until=versions_b[1]),  # b's delete lands elsewhere
    ], AMBIENT)
    assert not isinstance(rows, str), rows
    got = sorted((r["_cdc_source"], r[COL_OP], r["id"], r["note"], r["n"], r[COL_TXN]) for r in rows.to_pylist())
    assert got == [("a", "I", 1, "a", None, None), ("a", "U", 1, "b", None, None), ("a", "U", 1, "c", 7, None),
                   ("b", "I", 1, "x", None, None)]
    assert rows.schema.field("n").type == pa.int16() and rows.schema.field("id").type == pa.int32()
    assert rows.schema.field("_cdc_commit_ts").type == pa.timestamp("us", tz="UTC")


def test_a_file_that_disagrees_with_the_manifest_is_left_to_spark(tmp_path) -> None:
    w = WindowBuilder(tmp_path, "p", 1)
    w.file("s", "t", ("id",), [ID, NOTE], [("I", {"id": 1, "note": "a"})])
    manifest, wdir = w.build()
    t = manifest.table("s.t")
    bad = replace(t, columns=(t.columns[0], replace(t.columns[1], arrow_type="int64", delta_type="BIGINT")))
    why = staged_changes.read(wdir, [staged_changes.Member(bad)], AMBIENT)
    assert isinstance(why, str) and "column 'note' is string, the window's is int64" in why


def test_no_files_is_an_empty_table_of_the_columns(tmp_path) -> None:
    w = WindowBuilder(tmp_path, "p", 1)
    w.file("s", "t", ("id",), [ID, NOTE], [])
    manifest, wdir = w.build()
    rows = staged_changes.read(wdir, [staged_changes.Member(manifest.table("s.t"))], AMBIENT)
    assert not isinstance(rows, str) and rows.num_rows == 0 and {"id", "note", COL_OP} <= set(rows.column_names)
