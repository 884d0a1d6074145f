"""Which staged tables decide a lake table's key when a window renames tables (spark_apps.merge.targets)."""

from __future__ import annotations

import pytest

from cdc_core.model.manifest import StagedFile, StagedTable
from cdc_core.model.sources import Lineage
from spark_apps.merge.targets import LakeTarget, without_rowless_members

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
    out_a, out_c = without_rowless_members([lake_a, lake_c], lambda st: spans.get(st.table, []))
    assert out_a.key == ("id",)  # was ("k1", "k2"): the MERGE of lake a failed on a column b never had
    assert [m.files for m, _ in out_a.members] == [(), ()]
    assert out_c.key == ("k1", "k2") and out_c.members[0][0] == old_a  # its rows still land in c


def test_a_member_with_rows_in_its_range_and_unbounded_targets_stay() -> None:
    a = _staged("a", ("id",), 2)
    bounded = _target("a", (a, (50, None)))
    plain = LakeTarget("db", "t", ((a, Lineage("db", "t", (), ())),))
    out = without_rowless_members([bounded, plain], lambda st: [(10, 20), (50, 60)])
    assert out == [bounded, plain]
    none_here = without_rowless_members([bounded], lambda st: [None, (10, 49)])[0]
    assert none_here.members[0][0].files == ()
