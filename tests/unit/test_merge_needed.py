"""When the merge step skips Spark (cdc_core.run.merge_step.merge_needed): a window with no staged rows runs the
merge job only for a table the lake has, a DROP DATABASE, or a table the lake registry records (a backfill
rebuilding a deleted table whose window holds no rows must re-create it, or the next stream window refuses to
plan: the scenario tests/faults/test_fault_infra.py::test_deleted_staging_and_lake_table found)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from cdc_core.model.lake_registry import LakeRegistry, LandedTable
from cdc_core.model.positions import BinlogPosition, ServerIdentity
from cdc_core.model.schema_changes import DROP_DATABASE
from cdc_core.run.merge_step import merge_needed

pytestmark = pytest.mark.unit


def _manifest(*names: str, files: bool = False, drop_database: bool = False) -> Any:
    tables = tuple(SimpleNamespace(name=n, schema=n.partition(".")[0], table=n.partition(".")[2],
                                   files=("part-0.parquet",) if files else ()) for n in names)
    changes = (SimpleNamespace(kind=DROP_DATABASE),) if drop_database else ()
    return SimpleNamespace(tables=tables, schema_changes=changes)


def _pipeline(lake: Path, recorded: tuple[str, ...] = ()) -> Any:
    registry = LakeRegistry({
        n: LandedTable(schema=n.partition(".")[0], table=n.partition(".")[2], delta_id="id-" + n, first_seq=1,
                       first_position=BinlogPosition("mysql-bin.000001", 4, ServerIdentity("mariadb", 1)))
        for n in recorded
    })
    return SimpleNamespace(table_uri=lambda s, t: str(lake / s / t), storage=None,
                           coordinator=SimpleNamespace(read_lake=registry.to_dict))


def _create_delta_log(lake: Path, schema: str, table: str) -> None:
    log = lake / schema / table / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("{}\n")


def test_staged_rows_always_need_the_job(tmp_path: Path) -> None:
    assert merge_needed(_pipeline(tmp_path), _manifest("shop.new", files=True))


def test_ddl_of_a_table_the_lake_never_had_waits_for_its_rows(tmp_path: Path) -> None:
    assert not merge_needed(_pipeline(tmp_path), _manifest("shop.new"))
    assert not merge_needed(_pipeline(tmp_path, recorded=("shop.other",)), _manifest("shop.new"))


def test_ddl_of_a_table_the_lake_has_needs_the_job(tmp_path: Path) -> None:
    _create_delta_log(tmp_path, "shop", "orders")
    assert merge_needed(_pipeline(tmp_path), _manifest("shop.orders"))


def test_a_recorded_table_whose_delta_table_is_gone_is_rebuilt_even_without_rows(tmp_path: Path) -> None:
    assert merge_needed(_pipeline(tmp_path, recorded=("shop.events",)), _manifest("shop.events"))


def test_drop_database_needs_the_job(tmp_path: Path) -> None:
    assert merge_needed(_pipeline(tmp_path), _manifest("shop.gone", drop_database=True))
