"""Zero and partial dates (`0000-00-00`, `2024-00-10`, TIMESTAMP's zero) on every capture path, both modes.

They have no exact value in Arrow or Delta. With `zero_dates: refuse` (the default) every path (the vector
kernels, the per-value decoder, a decode worker process, python-mysql-replication's row decoding, the
snapshot's SELECT) refuses the window with an UnsupportedType that names the table, the column, the value and
the ways out; with `zero_dates: null` every path lands them as NULL, and agrees with the others. Then the
pipeline, end to end with the `cdc` CLI: the default refuses, nothing is acked or merged, and after the config
is switched to `null` the same window lands.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from cdc_core.capture import snapshot_reads
from cdc_core.capture.binlog import BinlogScanner, read_change_batches, read_changes
from cdc_core.capture.source import SourceFacts, SourceParams, TableFilter, connect, describe_tables
from cdc_core.cli import main
from cdc_core.lake import delta_state, staging
from cdc_core.model import snapshot_state
from cdc_core.model.errors import UnsupportedType
from cdc_core.model.naming import path_component
from cdc_core.model.positions import BinlogPosition
from cdc_core.model.window_plan import WindowCaps, WindowPlan
from cdc_core.model.windows import plan_window
from tests.support.source_facts import facts_now

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]  # windows merge on a warm server

TABLE = """
CREATE TABLE zd (
  id INT PRIMARY KEY, d DATE, dtm DATETIME, dtm6 DATETIME(6), ts TIMESTAMP NULL, ts3 TIMESTAMP(3) NULL,
  ok DATE
)
"""
# One zero or partial value per date column, each in a row of its own, plus a row of exact values.
ZERO_ROWS = {
    1: ("d", "0000-00-00"),
    2: ("d", "2024-00-10"),
    3: ("dtm", "0000-00-00 00:00:00"),
    4: ("dtm6", "2024-02-00 10:00:00.5"),
    5: ("ts", "0000-00-00 00:00:00"),
    6: ("ts3", "0000-00-00 00:00:00"),
}


@pytest.fixture
def params(services: Any) -> SourceParams:
    return SourceParams(**services.source_params)


@pytest.fixture
def db(services: Any, source_db: str) -> Iterator[Any]:
    conn = services.root_connect(source_db)
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # what lets a server store zero and partial dates
        cur.execute("SET SESSION time_zone = '+00:00'")
    yield conn
    conn.close()


def window(params: SourceParams, before: SourceFacts, after: SourceFacts) -> WindowPlan:
    assert before.end is not None and after.end is not None
    start = BinlogPosition(before.end.file, before.end.offset, before.identity, before.gtid_executed)
    scanner = BinlogScanner(params, after.identity)
    stop = (after.end.file, after.end.offset)
    with closing(scanner.scan_transactions(start.file, start.offset, start.gtid, start.epoch, stop=stop)) as it:
        found = list(it)
    return plan_window("zd", 1, start, found, WindowCaps())


def lookup(params: SourceParams) -> Callable[[str, str], Any]:
    def schema(db: str, table: str) -> Any:
        conn = connect(params)
        try:
            return describe_tables(conn, TableFilter((f"{db}.{table}",)), "zd").get(f"{db}.{table}")
        finally:
            conn.close()

    return schema


def write_rows(db: Any, ids: list[int]) -> None:
    with db.cursor() as cur:
        for i in ids:
            col, value = ZERO_ROWS[i]
            cur.execute(f"INSERT INTO zd (id, `{col}`, ok) VALUES (%s, %s, '2024-02-29')", (i, value))


def test_every_capture_path_refuses_a_zero_date_by_default_and_lands_null_when_asked(
    params: SourceParams, db: Any, source_db: str, tmp_path: Path
) -> None:
    with db.cursor() as cur:
        cur.execute(TABLE)
    tables = TableFilter((f"{source_db}.*",))
    schemas = lookup(params)
    for i, (col, value) in ZERO_ROWS.items():
        before = facts_now(params)
        write_rows(db, [i])
        plan = window(params, before, facts_now(params))
        paths: dict[str, Callable[[str], Any]] = {
            "library": lambda mode: read_changes(params, plan.start.server, plan, tables, schemas, zero_dates=mode),
            "vector": lambda mode: read_change_batches(
                params, plan.start.server, plan, tables, schemas, workers=0, zero_dates=mode),
            "per_value": lambda mode: read_change_batches(
                params, plan.start.server, plan, tables, schemas, workers=0, vectorize=False, zero_dates=mode),
            "worker": lambda mode: read_change_batches(
                params, plan.start.server, plan, tables, schemas, workers=1, zero_dates=mode),
        }
        staged = {}
        for path, read in paths.items():
            with pytest.raises(UnsupportedType) as err:
                staging.stage_window(plan, read("refuse"), str(tmp_path / f"refused-{i}-{path}"))
            msg = str(err.value)
            assert f"{source_db}.zd" in msg and repr(col) in msg and "zero_dates: null" in msg, (path, msg)
            assert not (tmp_path / f"refused-{i}-{path}").exists() or not any(
                (tmp_path / f"refused-{i}-{path}").rglob("manifest.json")), path  # nothing staged as complete
            staged[path] = staging.stage_window(plan, read("null"), str(tmp_path / f"null-{i}-{path}"))
        reference = staged["library"]
        for path, m in staged.items():
            assert m.to_json() == reference.to_json(), f"{path}: null mode differs from the library path"
        rows = staging.read_table_changes(str(tmp_path / f"null-{i}-library"), reference, f"{source_db}.zd")
        got = rows.to_pylist()
        assert len(got) == 1 and got[0]["id"] == i and got[0][col] is None and got[0]["ok"] is not None

    # The snapshot path: one chunk of the whole table (all six rows) read by SELECT.
    schema = schemas(source_db, "zd")
    identity = facts_now(params).identity
    progress = snapshot_state.TableProgress(f"{source_db}.zd", chunk_rows=1000)
    cplan = snapshot_reads.plan_next_chunk_from_source(
        params, identity, epoch=0, pipeline="zd", seq=100, progress=progress, table=schema, now=time.time()
    )
    with pytest.raises(UnsupportedType) as err:
        refused = snapshot_reads.read_chunk(params, cplan, schema, zero_dates="refuse")
        staging.stage_window(cplan, refused, str(tmp_path / "c1"))
    assert f"{source_db}.zd" in str(err.value) and "zero_dates: null" in str(err.value)
    nulled = snapshot_reads.read_chunk(params, cplan, schema, zero_dates="null")
    chunk = staging.stage_window(cplan, nulled, str(tmp_path / "c2"))
    rows = {r["id"]: r for r in staging.read_table_changes(str(tmp_path / "c2"), chunk, f"{source_db}.zd").to_pylist()}
    assert set(rows) == set(ZERO_ROWS)
    for i, (col, _) in ZERO_ROWS.items():
        assert rows[i][col] is None and rows[i]["ok"] is not None


def cdc(config: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["--config", str(config), *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 and out.strip().startswith("{") else out), err


def test_the_pipeline_refuses_by_default_acks_nothing_and_lands_after_switching_to_null(
    services: Any, db: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_ZD", json.dumps(conn))
    with db.cursor() as cur:
        cur.execute(TABLE)
    name = "zd_" + uuid.uuid4().hex[:6]
    pipeline: dict[str, Any] = {
        "name": name, "source": {"conn_id": "cdc_source_zd"}, "tables": {"include": [f"{source_db}.*"]},
        "start": services.binlog_end(), "snapshot": {"on_start": False},
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
    }
    config = tmp_path / "pipelines.yaml"
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    write_rows(db, [1, 3, 5])

    code, out, err = cdc(config, capsys, "run", name)
    assert code == UnsupportedType.exit_code, (out, err)
    assert "zero_dates: null" in err and f"{source_db}.zd" in err
    code, status, err = cdc(config, capsys, "status", name)
    assert code == 0, err
    assert (status["cursor"] or {}).get("seq") in (None, 0)
    table_uri = str(tmp_path / "lake" / path_component(source_db) / "zd")
    assert not delta_state.table_exists(table_uri)  # nothing merged

    config.write_text(json.dumps({"pipelines": [{**pipeline, "zero_dates": "null"}]}))
    code, _, err = cdc(config, capsys, "run", name)
    assert code == 0, err
    rows = {r["id"]: r for r in delta_state.read_rows(table_uri, columns=["id", "d", "dtm", "ts", "ok"]).to_pylist()}
    assert set(rows) == {1, 3, 5}
    assert rows[1]["d"] is None and rows[3]["dtm"] is None and rows[5]["ts"] is None
    assert all(r["ok"] is not None for r in rows.values())
