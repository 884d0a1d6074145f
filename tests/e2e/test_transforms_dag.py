"""Transforms under Airflow (issue 36 §2; docs/transforms.md): the pipeline DAG lands a table whose e-mail
addresses are hashed, notes excluded and card numbers masked, with the hash key in the workers' environment.
The lake holds the shaped rows, and no clear value is anywhere Airflow keeps things: the task logs (`airflow
dags test` runs the tasks in-process: its output), AIRFLOW_HOME (logs, the metadata DB with the XComs), the
staging area and the lake (Parquet decoded), ZooKeeper. Windows merge on the session's warm merge server."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from cdc_core.lake import delta_state
from cdc_core.model import layout
from tests.support.e2e import CdcCase, binlog_position, sql
from tests.support.security import find_values_in_files

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("warm_merges")]

KEY = "e2e-transform-hash-key-0123456789abcdef"


def zk_text(zk: Any, path: str) -> str:
    data, _ = zk.get(path)
    return (data or b"").decode("utf-8", "replace") + "".join(zk_text(zk, f"{path}/{c}") for c in zk.get_children(path))


def test_the_dag_lands_shaped_rows_and_no_clear_value_reaches_logs_xcoms_staging_lake_or_zookeeper(
    cdc_case: CdcCase, zk_client: Any
) -> None:
    case = cdc_case
    sql(case.services, case.database,
        "CREATE TABLE people (id INT PRIMARY KEY, email VARCHAR(80), note TEXT, card VARCHAR(19), city VARCHAR(20))")
    case.write_config(binlog_position(case.services), transform={
        "hash_key": {"env": "CDC_E2E_HASH_KEY"},
        "tables": [{"match": f"{case.database}.people", "hash": ["email"], "columns": {"exclude": ["note"]},
                    "mask": {"card": "keep_last_4"}}]})
    people = [(i, f"someone{i}@private-domain.example", f"private note number {i}", f"4000 1234 5678 {i:04d}",
               "Berlin") for i in range(1, 4)]
    sql(case.services, case.database, *(f"INSERT INTO people VALUES {p!r}" for p in people),
        "UPDATE people SET email = 'changed@private-domain.example', note = 'another private note' WHERE id = 2")

    result = case.run_pipeline(env={"CDC_E2E_HASH_KEY": KEY})
    assert result.state == "success", result.explain()

    rows = {r["id"]: r for r in delta_state.read_rows(layout.table_uri(str(case.lake), case.database, "people"))
            .to_pylist()}
    emails = {1: people[0][1], 2: "changed@private-domain.example", 3: people[2][1]}
    assert {i: r["email"] for i, r in rows.items()} == {
        i: hmac.new(KEY.encode(), e.encode(), hashlib.sha256).hexdigest() for i, e in emails.items()}
    assert {i: r["card"] for i, r in rows.items()} == {i: f"***************{i:04d}"[-19:] for i in rows}
    assert all("note" not in r and r["city"] == "Berlin" for r in rows.values())

    clear = {*emails.values(), people[1][1], *(p[2] for p in people), "another private note",
             *(p[3][:-4] for p in people)}
    assert [v for v in clear if v in result.output] == [], "a clear value in the task logs"
    assert find_values_in_files([case.airflow.home, case.staging, case.lake], clear) == []
    assert [v for v in clear if v in zk_text(zk_client, case.zk_root)] == []
    xcoms = case.airflow.query("SELECT COUNT(*) FROM xcom WHERE run_id = ?", result.run_id)[0][0]
    assert xcoms >= 2  # the window's XComs were there to search (the metadata DB above)
