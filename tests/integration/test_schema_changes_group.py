"""Schema changes in a group pipeline (docs/schema-changes.md, "Group pipelines and routed tables"): a lake table
routed from several shards takes the union of their shapes, and a change on one shard acts on that shard's rows
only. Both route keys: `key: source` (rows keyed by lineage) and `key: primary_key` (a base table, and the lake
table derived from it; issue 34's case: an ADD COLUMN on one shard used to fail every run of that source).

Real MariaDB x2 (tests/support/shards.py), ZooKeeper, the `cdc` CLI, the warm merge server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_core.lake import delta_state
from tests.integration.test_group_pipeline import cdc, group_pipeline
from tests.support.source_facts import run_sql

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]


def lake(uri: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = delta_state.read_rows(uri).to_pylist()
    return {(r["_cdc_source"], r["id"]): {k: v for k, v in r.items() if not k.startswith("_cdc_")} for r in rows}


@pytest.mark.parametrize("key", ["source", "primary_key"])
def test_a_change_on_one_shard_lands_in_the_union_shape_and_only_on_its_rows(
    key: str, shard_servers: Any, services: Any, zk_root: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    shards = dict(zip(("a", "b"), list(shard_servers)[:2], strict=True))
    schema = {"a": "dshop_00", "b": "dshop_01"}
    name, config = group_pipeline(
        "dshop", shards, {sid: (sch,) for sid, sch in schema.items()},
        {"from": r"dshop_[0-9]+\.orders", "to": "dshop.orders", "key": key},
        services=services, zk_root=zk_root, tmp_path=tmp_path, monkeypatch=monkeypatch,
    )
    uri = str(tmp_path / "lake" / "dshop" / "orders")
    # globally unique ids (what key: primary_key asks of the shards)
    run_sql(shards["a"], "INSERT INTO dshop_00.orders VALUES (1, 10, 'a'), (2, 20, 'a')")
    run_sql(shards["b"], "INSERT INTO dshop_01.orders VALUES (11, 110, 'b'), (12, 120, 'b')")
    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)

    run_sql(shards["a"], "ALTER TABLE dshop_00.orders ADD COLUMN nick VARCHAR(20) NULL",
            "UPDATE dshop_00.orders SET nick = 'n1' WHERE id = 1")
    run_sql(shards["b"], "UPDATE dshop_01.orders SET amount = 111 WHERE id = 11")
    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)
    rows = lake(uri)
    assert rows[("a", 1)]["nick"] == "n1" and rows[("a", 2)]["nick"] is None
    assert rows[("b", 11)] == {"id": 11, "amount": 111, "note": "b", "nick": None}

    run_sql(shards["b"], "TRUNCATE TABLE dshop_01.orders", "INSERT INTO dshop_01.orders VALUES (13, 130, 'b')")
    run_sql(shards["a"], "ALTER TABLE dshop_00.orders DROP COLUMN note")
    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)
    rows = lake(uri)
    assert sorted(rows) == [("a", 1), ("a", 2), ("b", 13)]
    assert rows[("a", 1)]["note"] == "a"  # a drop on one shard keeps the union's column (its rows keep theirs)
    for sid in shards:
        code, out, err = cdc(config, capsys, "verify", f"{name}.{sid}")
        assert code == 0 and "equal" in out, (out, err)


@pytest.mark.parametrize("key", ["source", "primary_key"])
def test_rows_written_before_a_truncate_in_the_same_window_do_not_land(
    key: str, shard_servers: Any, services: Any, zk_root: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by the group soak with schema changes (seed 201): a window that inserts rows into a shard's table,
    truncates it and inserts again must land only the rows after the TRUNCATE (with either route key the rows
    from before it landed too: a routed table's TRUNCATE did not move its source table's floor)."""
    shards = dict(zip(("a", "b"), list(shard_servers)[:2], strict=True))
    schema = {"a": "tshop_00", "b": "tshop_01"}
    name, config = group_pipeline(
        "tshop", shards, {sid: (sch,) for sid, sch in schema.items()},
        {"from": r"tshop_[0-9]+\.orders", "to": "tshop.orders", "key": key},
        services=services, zk_root=zk_root, tmp_path=tmp_path, monkeypatch=monkeypatch,
    )
    uri = str(tmp_path / "lake" / "tshop" / "orders")
    run_sql(shards["a"], "INSERT INTO tshop_00.orders VALUES (1, 10, 'a')")
    run_sql(shards["b"], "INSERT INTO tshop_01.orders VALUES (11, 110, 'b')")
    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)
    assert sorted(lake(uri)) == [("a", 1), ("b", 11)]

    run_sql(shards["a"], "INSERT INTO tshop_00.orders VALUES (2, 20, 'a'), (3, 30, 'a')",
            "UPDATE tshop_00.orders SET amount = 11 WHERE id = 1",
            "TRUNCATE TABLE tshop_00.orders",
            "INSERT INTO tshop_00.orders VALUES (4, 40, 'a')")
    run_sql(shards["b"], "INSERT INTO tshop_01.orders VALUES (12, 120, 'b')")
    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)
    rows = lake(uri)
    assert sorted(rows) == [("a", 4), ("b", 11), ("b", 12)], rows
    for sid in shards:
        code, out, err = cdc(config, capsys, "verify", f"{name}.{sid}")
        assert code == 0 and "equal" in out, (out, err)
