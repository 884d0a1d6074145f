"""Every mapped type end to end: MariaDB -> binlog reader -> staging -> Parquet, compared with SELECT.

Edge values go into a real table, the window holding them is read with `binlog.read_changes` and staged
with `staging.stage_window`, and the staged values must equal what `SELECT` returns (converted only as
docs/type-map.md documents: TIME as microseconds, BIT as a number, zero dates as NULL, ...).
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture.binlog import read_changes
from cdc_core.capture.source import SourceParams, TableFilter
from cdc_core.lake import staging
from tests.support.all_types_mariadb import (
    COLUMNS,
    DDL,
    ROWS,
    assert_same,
    insert,
    schemas_from,
    select_rows,
    window,
)
from tests.support.source_facts import facts_now

pytestmark = pytest.mark.integration

D = decimal.Decimal


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def db(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # allow zero dates
        cur.execute("SET SESSION time_zone = '+00:00'")  # TIMESTAMP values in UTC both ways
    yield conn
    conn.close()


# -------------------------------------------------------------------------------------------- tests


def test_every_type_stages_exactly_what_select_returns(
    params: SourceParams, db: Any, source_db: str, staging_dir: Path
) -> None:
    with db.cursor() as cur:
        cur.execute(DDL)
    before = facts_now(params)
    for row in ROWS:
        insert(db, row)
    inserted = select_rows(db)
    with db.cursor() as cur:
        cur.execute("UPDATE all_types SET vc = 'changed 🙂', tm6 = '-00:00:01.25', b5 = 7 WHERE id = 1")
        cur.execute("DELETE FROM all_types WHERE id = 2")
    final = select_rows(db)
    after = facts_now(params)

    plan = window(params, before, after)
    items = read_changes(params, after.identity, plan, TableFilter((f"{source_db}.*",)), schemas_from(params))
    root = str(staging_dir)
    manifest = staging.stage_window(plan, items, root)
    assert staging.read_manifest(root, plan.pipeline, plan.seq) == manifest
    staging.verify_window(root, manifest)

    t = manifest.table(f"{source_db}.all_types")
    assert (t.inserts, t.updates, t.deletes) == (3, 1, 1)
    assert [c.name for c in t.columns] == COLUMNS
    by_name = {c.name: c for c in t.columns}
    assert by_name["biu"].delta_type == "DECIMAL(20,0)"
    assert by_name["js"].mysql_type == "json"
    assert by_name["d65"].delta_type == "STRING"
    assert by_name["tm6"].delta_type == "BIGINT"

    staged = staging.read_table_changes(root, manifest, t.name).to_pylist()
    assert [(r["_cdc_op"], r["id"]) for r in staged] == [("I", 1), ("I", 2), ("I", 3), ("U", 1), ("D", 2)]
    for r in staged[:3]:
        assert_same(r, inserted[r["id"]], f"insert of id {r['id']}")
    assert_same(staged[3], final[1], "update of id 1")
    assert_same(staged[4], inserted[2], "delete of id 2 (before image)")
    # Some of the values asserted above, spelled out.
    assert staged[0]["biu"] == D(18446744073709551615)
    assert staged[0]["bn"] == b"\xff\x00\xff\x00"  # the binlog drops trailing 0x00 of BINARY(4)
    assert staged[0]["st"] == "x,z" and staged[2]["stn"] == ""
    assert staged[1]["tm6"] == -3_600_000_001 and staged[3]["tm6"] == -1_250_000  # negative fractional TIME
    assert staged[2]["yr"] == 0 and staged[2]["dt"] is None and staged[2]["ts"] is None


def test_ddl_mid_window_stages_two_files_from_the_real_binlog(
    params: SourceParams, db: Any, source_db: str, staging_dir: Path
) -> None:
    with db.cursor() as cur:
        cur.execute("CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(20), age TINYINT UNSIGNED)")
    before = facts_now(params)
    with db.cursor() as cur:
        cur.execute("INSERT INTO people VALUES (1, 'ann', 200)")
        cur.execute("ALTER TABLE people DROP COLUMN age, ADD COLUMN born DATE")
        cur.execute("INSERT INTO people VALUES (2, 'bob', '2001-02-03')")
    after = facts_now(params)
    plan = window(params, before, after)
    items = read_changes(params, after.identity, plan, TableFilter((f"{source_db}.*",)), schemas_from(params))
    manifest = staging.stage_window(plan, items, str(staging_dir))
    t = manifest.table(f"{source_db}.people")
    assert [f.columns for f in t.files] == [("id", "name", "age"), ("id", "name", "born")]
    assert [c.name for c in t.columns] == ["id", "name", "age", "born"]
    assert any("ALTER TABLE people" in e.query for e in manifest.ddl)
    got = staging.read_table_changes(str(staging_dir), manifest, t.name).to_pylist()
    assert [(r["id"], r["age"], r["born"]) for r in got] == [(1, 200, None), (2, None, dt.date(2001, 2, 3))]
