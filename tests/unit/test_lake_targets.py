"""Which staged tables decide a lake table's key when a window renames tables (spark_apps.merge.targets)."""

from __future__ import annotations

import pytest

from cdc_core.model.manifest import StagedColumn, StagedFile, StagedTable
from cdc_core.model.sources import Lineage
from spark_apps.merge.targets import LakeTarget, members_by_their_rows

pytestmark = pytest.mark.unit


def _staged(name: str, key: tuple[str, ...], files: int) -> StagedTable:
    return StagedTable("db", name, key, (), tuple(StagedFile(f"{name}/{i}.parquet", 1, 1, "x", key)
                                                   for i in range(files)), inserts=files)


def _target(name: str, *members: tuple[StagedTable, tuple[int | None, int | None]]) -> LakeTarget:
    where = Lineage("db", name, (), ())
    return LakeTarget("db", name, tuple((st, where) for st, _ in members), tuple(b for _, b in members))


def test_a_renamed_tables_rows_before_the_rename_do_not_decide_the_next_tables_key() -> None:
    """RENAME TABLE a TO c, b TO a at version 100: a's rows (all before it) land in c; lake a is b's now."""
    old_a = _staged("a", ("k1", "k2"), 2)
    b = StagedTable("db", "b", ("id",), (), ())  # named only by the RENAME
    spans = {"a": [(10, 20), (30, 99)]}
    lake_a = _target("a", (old_a, (100, None)), (b, (None, 100)))
    lake_c = _target("c", (old_a, (None, 100)))
    out_a, out_c = members_by_their_rows([lake_a, lake_c], lambda st: spans.get(st.table, []))
    assert out_a.key == ("id",)  # was ("k1", "k2"): the MERGE of lake a failed on a column b never had
    assert [m.files for m, _ in out_a.members] == [(), ()]
    assert out_c.key == ("k1", "k2") and out_c.members[0][0] == old_a  # its rows still land in c


def test_a_member_keeps_its_files_with_rows_in_range_and_unbounded_targets_stay() -> None:
    a = _staged("a", ("id",), 2)
    bounded = _target("a", (a, (50, None)))
    plain = LakeTarget("db", "t", ((a, Lineage("db", "t", (), ())),))
    assert members_by_their_rows([bounded, plain], lambda st: [(50, 60), (70, 80)]) == [bounded, plain]
    out = members_by_their_rows([bounded, plain], lambda st: [(10, 20), (50, 60)])
    assert out[0].members[0][0].files == a.files[1:] and out[1] == plain  # only the file with rows in range
    none_here = members_by_their_rows([bounded], lambda st: [None, (10, 49)])[0]
    assert none_here.members[0][0].files == ()


def test_a_name_reused_in_one_window_splits_the_staged_table_by_its_files() -> None:
    """RENAME TABLE a TO c, b TO a at version 100, with rows of `a` on both sides (one staged table, two files
    written under two keys): c takes the file before the rename with its columns and key, a the one after."""
    cols = tuple(StagedColumn(n, "int", "int32", "INT") for n in ("k1", "k2", "v", "id", "w"))
    before = StagedFile("a/0.parquet", 1, 1, "x", ("k1", "k2", "v"), key=("k1", "k2"))
    after = StagedFile("a/1.parquet", 1, 1, "y", ("id", "w"), key=("id",))
    a = StagedTable("db", "a", ("id",), cols, (before, after), inserts=1, deletes=1)
    c = StagedTable("db", "c", ("k1", "k2"), (), ())  # named by the RENAME
    spans = {"a/0.parquet": (10, 99), "a/1.parquet": (120, 130)}
    lake_a = _target("a", (a, (100, None)))
    lake_c = _target("c", (a, (None, 100)), (c, (None, None)))
    out_a, out_c = members_by_their_rows([lake_a, lake_c], lambda st: [spans[f.path] for f in st.files])
    assert out_c.key == ("k1", "k2") and [c.name for c in out_c.members[0][0].columns] == ["k1", "k2", "v"]
    assert out_c.members[0][0].files == (before,)
    assert out_a.key == ("id",) and [c.name for c in out_a.members[0][0].columns] == ["id", "w"]
    assert out_a.members[0][0].files == (after,)


def test_files_staged_before_keys_were_recorded_keep_the_tables_key() -> None:
    old = StagedFile("a/0.parquet", 1, 1, "x", ("id",))
    newer = StagedFile("a/1.parquet", 1, 1, "y", ("id",))
    a = StagedTable("db", "a", ("id",), (), (old, newer), inserts=2)
    out = members_by_their_rows([_target("a", (a, (50, None)))], lambda st: [(10, 20), (60, 70)])[0]
    assert out.key == ("id",) and out.members[0][0].files == (newer,)
    assert StagedFile.from_dict(old.to_dict()) == old and "key" not in old.to_dict()
    keyed = StagedFile("a/2.parquet", 1, 1, "z", ("id",), key=("id",))
    assert StagedFile.from_dict(keyed.to_dict()) == keyed

