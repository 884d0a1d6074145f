"""Which schema changes of a window may be applied concurrently (spark_apps/merge/schema.py
`SchemaChanges.independent_changes`): groups that share no lake table, each in binlog order. Pure: the method
reads only the window's changes, routes and source."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdc_core.model.schema_changes import SchemaChange
from cdc_core.model.schema_window import ROLE_MOVED_IN, LakeChange, WindowChanges
from cdc_core.model.sources import Route
from spark_apps.merge.schema import SchemaChanges

pytestmark = pytest.mark.unit


def _groups(changes: list[LakeChange], routes: tuple[Route, ...] = ()) -> list[list[str]]:
    run = SimpleNamespace(window=WindowChanges(tuple(changes)), routes=routes, source=None)
    return [[f"{lc.lake[1]}:{lc.change.kind}" for lc in g] for g in SchemaChanges.independent_changes(run)]  # type: ignore[arg-type]


def _own(table: str, kind: str = "add_column", **kw: str) -> LakeChange:
    return LakeChange(("s", table), SchemaChange(kind, "s", table, **kw))  # type: ignore[arg-type]


def test_tables_that_share_nothing_are_groups_of_their_own_in_binlog_order() -> None:
    changes = [_own("a"), _own("b"), _own("a", "drop_column"), _own("c")]
    assert _groups(changes) == [["a:add_column", "a:drop_column"], ["b:add_column"], ["c:add_column"]]


def test_a_rename_joins_its_source_and_target_and_whatever_touches_either() -> None:
    rename = SchemaChange("rename_table", "s", "b", to_schema="s", to_table="a")
    changes = [
        _own("b"),
        LakeChange(("s", "a"), rename, role=ROLE_MOVED_IN, source=("s", "b")),
        LakeChange(("s", "b"), rename),  # the source's side: dropped
        _own("c"),
        _own("a", "drop_column"),
    ]
    assert _groups(changes) == [
        ["b:add_column", "a:rename_table", "b:rename_table", "a:drop_column"],
        ["c:add_column"],
    ]


def test_create_like_and_a_swaps_ghost_join_the_tables_they_name() -> None:
    like = SchemaChange("create_table_like", "s", "l1", to_schema="s", to_table="s1")
    changes = [_own("s1"), LakeChange(("s", "l1"), like), _own("t"), LakeChange(("s", "t"), SchemaChange(
        "add_column", "s", "t"), ghost="_t_gho"), _own("_t_gho")]
    assert _groups(changes) == [["s1:add_column", "l1:create_table_like"], ["t:add_column", "t:add_column",
                                                                           "_t_gho:add_column"]]


def test_source_tables_routed_into_one_lake_table_are_one_group() -> None:
    routes = (Route(pattern=r"s\.orders_\d+", target="s.orders"),)
    changes = [_own("orders_1"), _own("other"), _own("orders_2")]
    assert _groups(changes, routes) == [["orders_1:add_column", "orders_2:add_column"], ["other:add_column"]]
