"""A group pipeline as an operator runs it: three MariaDB servers (shards) with overlapping keys, routed into one
lake table through the `cdc` CLI, exactly once per source.

Real MariaDB x3 (tests/support/shards.py), ZooKeeper and Spark (the session's warm merge server). The oracle:
the lake table equals the union of the sources' tables, each row under (`_cdc_source`, `_cdc_source_table`,
id), nothing lost, duplicated or wrong; each source's state lives under its own ZooKeeper path and its own
Delta txnAppId.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.cli import main
from cdc_core.lake import delta_state
from cdc_core.model.errors import PartialFailure
from cdc_core.model.lake_writers import WRITER_PROPERTY, writer_pipeline
from tests.support.source_facts import drop_databases, run_sql

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server

SOURCES = ("a", "b", "c")
# Which schemas live on which server: two on the first (equal keys in two schemas of one server), one each
# on the others.
SCHEMAS = {"a": ("shop_00", "shop_01"), "b": ("shop_02",), "c": ("shop_03",)}


def cdc(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["--config", str(config), *args])
    out, err = capsys.readouterr()
    try:
        parsed = json.loads(out) if out.strip().startswith(("{", "[")) else out
    except ValueError:
        parsed = out
    return code, parsed, err


def source_rows(shard: Any, schemas: tuple[str, ...], source: str) -> set[tuple[Any, ...]]:
    out = set()
    conn = shard.root_connect()
    try:
        with conn.cursor() as cur:
            for schema in schemas:
                cur.execute(f"SELECT id, amount, note FROM `{schema}`.orders")
                out |= {(source, f"{schema}.orders", *row) for row in cur.fetchall()}
    finally:
        conn.close()
    return out


def lake_rows(uri: str) -> set[tuple[Any, ...]]:
    rows = delta_state.read_rows(uri, columns=["_cdc_source", "_cdc_source_table", "id", "amount", "note"])
    listed = [tuple(r.values()) for r in rows.to_pylist()]
    assert len(listed) == len(set(listed)), "duplicate rows in the lake"
    return set(listed)


ORDERS_DDL = "CREATE TABLE `{s}`.orders (id INT PRIMARY KEY, amount INT NOT NULL, note VARCHAR(20))"


def group_pipeline(
    prefix: str, shards: dict[str, Any], schemas: dict[str, tuple[str, ...]], route: dict[str, str], *,
    services: Any, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> tuple[str, Path]:
    """A group pipeline over `shards` (source id -> shard server), each with fresh `schemas[id]` holding `orders`,
    every `<prefix>_*.orders` captured and routed by `route`; sources start at their binlog's end. Returns
    (pipeline name, config file). Other tests' `<prefix>_*` schemas on the shards are dropped first: they would
    be captured too."""
    suffix = uuid.uuid4().hex[:6]
    sources = []
    for sid, shard in shards.items():
        conn = {"conn_type": "mysql", "host": shard.mysql_host, "port": shard.mysql_port,
                "login": shard.mysql_user, "password": shard.mysql_password}
        conn_id = f"{prefix}_{sid}_{suffix}"
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        drop_databases(shard, prefix + r"\_%")
        run_sql(shard, *(stmt for schema in schemas[sid]
                         for stmt in (f"CREATE DATABASE `{schema}`", ORDERS_DDL.format(s=schema))))
        sources.append({"id": sid, "conn_id": conn_id, "start": shard.binlog_end()})
    name = f"{prefix}_{suffix}"
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [{
        "name": name, "sources": sources, "tables": {"include": [f"{prefix}_*.orders"]}, "routes": [route],
        "snapshot": {"on_start": False}, "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
    }]}))
    return name, config


def test_three_shards_land_in_one_table_exactly_once_and_a_stopped_shard_does_not_stop_the_others(
    shard_servers: Any, services: Any, zk_client: Any, zk_root: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    shards = dict(zip(SOURCES, list(shard_servers)[:3], strict=True))
    name, config = group_pipeline("shop", shards, SCHEMAS, {"from": r"shop_[0-9]+\.orders", "to": "shop.orders"},
                                  services=services, zk_root=zk_root, tmp_path=tmp_path, monkeypatch=monkeypatch)
    code, out, err = cdc(config, capsys, "validate", "--check-sources")
    assert code == 0, (out, err)
    assert "sources=['a', 'b', 'c']" in out and r"route 1: 'shop_[0-9]+\\.orders' -> shop.orders" in out
    for sid, schemas in SCHEMAS.items():  # where each source's tables land
        assert all(f"source {sid}: {s}.orders -> shop.orders (route 1)" in out for s in schemas), out

    # Equal keys everywhere; row 4 moves from shard a to shard b, keeping its key; DDL on shard b only.
    for sid, shard in shards.items():
        for schema in SCHEMAS[sid]:
            run_sql(shard, f"INSERT INTO `{schema}`.orders VALUES (1, 10, '{schema}'), (2, 20, NULL), (3, 30, 'x')",
                    f"UPDATE `{schema}`.orders SET amount = amount + 1 WHERE id = 2")
    run_sql(shards["a"], "INSERT INTO shop_00.orders VALUES (4, 40, 'to move')",
            "DELETE FROM shop_00.orders WHERE id = 4")
    run_sql(shards["b"], "INSERT INTO shop_02.orders VALUES (4, 40, 'moved from shop_00')",
            "ALTER TABLE shop_02.orders ADD COLUMN coupon VARCHAR(12) NULL",
            "INSERT INTO shop_02.orders VALUES (104, 40, 'with coupon', 'SAVE10')")

    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0, (out, err)
    assert out["failed"] == [] and set(out["sources"]) == set(SOURCES), out
    uri = str(tmp_path / "lake" / "shop" / "orders")
    expected = set().union(*(source_rows(shards[s], SCHEMAS[s], s) for s in SOURCES))
    assert lake_rows(uri) == expected
    assert len(expected) == 4 * 3 + 2  # three rows in each schema; shop_02 also has the moved 4 and 104
    assert ("b", "shop_02.orders", 4, 40, "moved from shop_00") in expected
    assert not any(r[:3] == ("a", "shop_00.orders", 4) for r in lake_rows(uri))
    coupons = delta_state.read_rows(uri, columns=["_cdc_source_table", "id", "coupon"]).to_pylist()
    assert {(r["_cdc_source_table"], r["id"]) for r in coupons if r["coupon"]} == {("shop_02.orders", 104)}

    # Each source's state under its own node and its own Delta identity; one writer: the pipeline.
    base = f"{zk_root}/pipelines/{name}"
    assert sorted(zk_client.get_children(f"{base}/sources")) == list(SOURCES)
    assert zk_client.exists(f"{base}/cursor") is None
    table = DeltaTable(uri)
    for sid in SOURCES:
        assert zk_client.exists(f"{base}/sources/{sid}/cursor") is not None
        assert (table.transaction_version(f"{name}.{sid}") or 0) >= 1
    record = table.metadata().configuration.get(WRITER_PROPERTY)
    assert writer_pipeline(record) == name
    assert json.loads(record)["sources"] == list(SOURCES) and json.loads(record)["routes"][0]["to"] == "shop.orders"

    # Shard c stops: a and b still land, c is shown failing with the reason; the run exits 9 (partial).
    run_sql(shards["a"], "UPDATE shop_01.orders SET note = 'after c stopped' WHERE id = 1")
    run_sql(shards["c"], "INSERT INTO shop_03.orders VALUES (9, 90, 'before the stop')")
    shards["c"].stop_mariadb()
    try:
        code, out, err = cdc(config, capsys, "run", name)
        assert code == PartialFailure.exit_code, (out, err)
        assert "1 of 3 sources failed (c: SourceError" in err
        assert out["failed"] == ["c"] and out["sources"]["c"]["error"].startswith("SourceError"), out
        assert out["sources"]["a"]["windows"], out
        rows_a = {r for r in lake_rows(uri) if r[0] == "a"}
        assert rows_a == source_rows(shards["a"], SCHEMAS["a"], "a")
        code, status, err = cdc(config, capsys, "status", name)
        assert code == 0, err
        assert status["failing"] == ["c"], status
        assert status["sources"]["c"]["last_error"]["resolved"] is False
    finally:
        shards["c"].start_mariadb()
        shards["c"].wait_mariadb()

    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0, (out, err)
    assert lake_rows(uri) == set().union(*(source_rows(shards[s], SCHEMAS[s], s) for s in SOURCES))
    code, status, err = cdc(config, capsys, "status", name)
    assert status["failing"] == [], status

    # One source on its own: `--source` for every per-source command (the old `<pipeline>.<source>` warns).
    code, out, err = cdc(config, capsys, "run", name, "--source", "b")
    assert code == 0 and list(out["sources"]) == ["b"], (out, err)
    code, out, err = cdc(config, capsys, "resolve", name, "--source", "b")
    assert code == 0 and out["rule"] and "deprecated" not in err, (out, err)
    code, old, err = cdc(config, capsys, "resolve", f"{name}.b")
    assert code == 0 and old["label"] == out["label"] and f"write `{name} --source b`" in err, (old, err)
    code, out, err = cdc(config, capsys, "resolve", name)
    assert code == 2 and "group pipeline" in err and "--source a" in err
    for sid in SOURCES:  # each source's tables against its own rows of the shared lake table
        code, out, err = cdc(config, capsys, "verify", name, "--source", sid)
        assert code == 0 and out.count("equal") >= len(SCHEMAS[sid]), (out, err)

    # Housekeeping cleans each source's own staged windows (under <staging>/<pipeline>/sources/<id>/).
    from cdc_core.cli import source_params_for
    from cdc_core.lake import staging
    from cdc_core.model.config import load_config
    from cdc_core.run import housekeeping
    from cdc_core.run.group import PipelineGroup

    pc = load_config(config).pipeline(name)
    with PipelineGroup.open(pc, lambda s: source_params_for(pc, s)) as group:
        grant = group.first.acquire("test/cleanup")
        try:
            for sid in SOURCES:
                unit = group.unit(sid)
                staged = staging.list_windows(unit.staging_root, unit.name)
                assert staged, sid
                out = housekeeping.clean_staging(unit.coordinator, grant, unit.staging_root, 3600,
                                                 now=time.time() + 7200)
                assert out["windows_deleted"] == len(staged), (sid, out)
                assert staging.list_windows(unit.staging_root, unit.name) == []
        finally:
            group.first.release(grant)


def test_global_keys_rows_moved_between_shards_end_as_one_row_per_key(
    shard_servers: Any, services: Any, zk_root: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """`key: primary_key` in a group pipeline (docs/group-pipelines.md, "Global keys"): the shards keep ids
    globally unique and rows move between them (a DELETE on one server, an INSERT with the same id on the
    other). The lake table has one row per id, from whichever shard holds it now, whatever order the two
    sides of a move land in: one run lands source a's window, then b's, so id 2 (a -> b) lands its delete
    first and id 10 (b -> a) its insert first. The intermediate states, and a crash between the base and
    the derived commit, are tested on the merge job itself (tests/integration/test_merge_window.py)."""
    shards = dict(zip(("a", "b"), list(shard_servers)[:2], strict=True))
    schema = {"a": "gshop_00", "b": "gshop_01"}
    name, config = group_pipeline(
        "gshop", shards, {sid: (sch,) for sid, sch in schema.items()},
        {"from": r"gshop_[0-9]+\.orders", "to": "gshop.orders", "key": "primary_key"},
        services=services, zk_root=zk_root, tmp_path=tmp_path, monkeypatch=monkeypatch,
    )
    uri = str(tmp_path / "lake" / "gshop" / "orders")

    def expected() -> dict[int, tuple[Any, ...]]:
        out: dict[int, tuple[Any, ...]] = {}
        for sid, shard in shards.items():
            for row in source_rows(shard, (schema[sid],), sid):
                assert row[2] not in out, f"id {row[2]} on two shards: the test broke its own guarantee"
                out[row[2]] = row
        return out

    def lake() -> dict[int, tuple[Any, ...]]:
        rows = delta_state.read_rows(uri, columns=["_cdc_source", "_cdc_source_table", "id", "amount", "note"])
        listed = [tuple(r.values()) for r in rows.to_pylist()]
        by_id = {r[2]: r for r in listed}
        assert len(by_id) == len(listed), f"two rows for one id: {sorted(listed)}"
        return by_id

    run_sql(shards["a"], "INSERT INTO gshop_00.orders VALUES (1, 10, 'a'), (2, 20, 'a'), (3, 30, 'a')")
    run_sql(shards["b"], "INSERT INTO gshop_01.orders VALUES (10, 100, 'b'), (11, 110, 'b')")
    run_sql(shards["a"], "DELETE FROM gshop_00.orders WHERE id = 2",
            "INSERT INTO gshop_00.orders VALUES (10, 101, 'moved to a')",
            "UPDATE gshop_00.orders SET amount = 11 WHERE id = 1")
    run_sql(shards["b"], "DELETE FROM gshop_01.orders WHERE id = 10",
            "INSERT INTO gshop_01.orders VALUES (2, 21, 'moved to b')")
    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)
    assert lake() == expected()
    assert lake()[2] == ("b", "gshop_01.orders", 2, 21, "moved to b")
    assert lake()[10] == ("a", "gshop_00.orders", 10, 101, "moved to a")
    from cdc_core.capture.source import TableFilter
    from cdc_core.run.housekeeping import discover_tables

    found = discover_tables(str(tmp_path / "lake"), TableFilter(include=("gshop.orders",)))  # what maintenance keeps
    assert sorted(t.kind for t in found) == ["base", "table", "tombstones"]  # the base's tombstones (hard deletes)
    for sid in shards:  # each source's table against its rows of the lake table
        code, out, err = cdc(config, capsys, "verify", name, "--source", sid)
        assert code == 0 and "equal" in out, (out, err)


def test_a_shard_stopped_while_its_window_is_staged_fails_only_that_source_until_it_restarts(
    shard_servers: Any, services: Any, zk_root: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A source's server stops in the middle of a run, while that source's own window is being read: the `cdc run`
    process (a subprocess, paused at the fault point `mid_stage_before` with its binlog reader set up) is resumed
    after the server stopped. That source fails with a SourceError and is shown failing; the next source of the
    same run still lands its window (the run exits 9: a partial failure). Once the server is back, the next run
    re-stages the planned window (plans are immutable) and the lake equals the union of the shards, nothing lost or
    doubled."""
    first, second = list(shard_servers)[:2]
    shards = {"b": second, "a": first}  # b runs first: it is the one stopped
    schemas = {"b": ("mshop_01",), "a": ("mshop_00",)}
    name, config = group_pipeline("mshop", shards, schemas, {"from": r"mshop_[0-9]+\.orders", "to": "mshop.orders"},
                                  services=services, zk_root=zk_root, tmp_path=tmp_path, monkeypatch=monkeypatch)
    for sid, shard in shards.items():
        schema = schemas[sid][0]
        run_sql(shard, *(f"INSERT INTO `{schema}`.orders VALUES ({i}, {i * 10}, '{sid}')" for i in range(1, 6)))
    uri = str(tmp_path / "lake" / "mshop" / "orders")

    once = tmp_path / "fault-once"
    env = {**os.environ, "CDC_FAULT": "mid_stage_before", "CDC_FAULT_ACTION": "stop", "CDC_FAULT_ONCE": str(once)}
    proc = subprocess.Popen([sys.executable, "-m", "cdc_core.cli", "--config", str(config), "run", name],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    paused = Path(f"{once}.mid_stage_before.pid")
    try:
        deadline = time.monotonic() + 600
        while not paused.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached b's staging"
            time.sleep(0.5)
        shards["b"].stop_mariadb()
        os.kill(int(paused.read_text()), signal.SIGCONT)
        out, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    try:
        assert proc.returncode == PartialFailure.exit_code, (out, err[-3000:])
        result = json.loads(out)
        assert result["failed"] == ["b"] and result["sources"]["b"]["error"].startswith("SourceError"), result
        assert result["sources"]["a"]["windows"], result  # the other source's window landed in the same run
        assert {r for r in lake_rows(uri) if r[0] == "a"} == source_rows(shards["a"], schemas["a"], "a")
        code, status, err = cdc(config, capsys, "status", name)
        assert code == 0 and status["failing"] == ["b"], (status, err)
    finally:
        shards["b"].start_mariadb()
        shards["b"].wait_mariadb()

    code, out, err = cdc(config, capsys, "run", name)
    assert code == 0 and out["failed"] == [], (out, err)
    assert lake_rows(uri) == set().union(*(source_rows(shards[s], schemas[s], s) for s in shards))
    code, status, err = cdc(config, capsys, "status", name)
    assert status["failing"] == [], status
