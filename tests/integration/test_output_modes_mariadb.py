"""History and change-log tables end to end (issue 36 §3; docs/output-modes.md): a customers table on a real MariaDB,
landed by the `cdc` CLI through the snapshot on start and then the binlog, with `outputs: [state, history,
changelog]`, `track: [tier]` and a hashed e-mail column. The snapshot seeds both with op `S`; a tier change opens a
version, a visits change folds into the current one, two changes of one row in one transaction stay in binlog
order, a delete closes the row's version; the change log holds every change once; the hashed column is hashed in
both, and its clear value is nowhere in the lake."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from cdc_core.cli import main
from cdc_core.lake import delta_state, lake_versions
from cdc_core.model.errors import ConfigError
from cdc_core.model.layout import changelog_uri, history_uri
from tests.support.security import find_values_in_files

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]

KEY = "output-modes-test-hash-key-0123456789"


def execute(services: Any, db: str, *statements: str) -> None:
    conn = services.root_connect(db)
    try:
        conn.begin()  # the statements are one transaction
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
        conn.commit()
    finally:
        conn.close()


def hashed(email: str) -> str:
    return hmac.new(KEY.encode(), email.encode(), hashlib.sha256).hexdigest()


def test_history_and_changelog_follow_the_snapshot_and_the_binlog_with_pii_hashed(
    services: Any, source_db: str, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_OUTPUTS", json.dumps(conn))
    monkeypatch.setenv("CDC_TEST_OUTPUTS_KEY", KEY)
    execute(services, source_db,
            "CREATE TABLE customers (id INT PRIMARY KEY, email VARCHAR(80), tier VARCHAR(10), visits INT)",
            "INSERT INTO customers VALUES (1, 'one@secret.example', 'gold', 0), (2, 'two@secret.example', 'silver', 0),"
            " (3, 'three@secret.example', 'gold', 5)")
    name = "hist_" + uuid.uuid4().hex[:6]
    table = f"{source_db}.customers"
    pipeline: dict[str, Any] = {
        "name": name, "source": {"conn_id": "cdc_source_outputs"}, "tables": {"include": [f"{source_db}.*"]},
        "start": {"kind": "current"},  # a new pipeline snapshots its tables first
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
        "table_options": {table: {"outputs": ["state", "history", "changelog"], "track": ["tier"]}},
        "transform": {"hash_key": {"env": "CDC_TEST_OUTPUTS_KEY"}, "tables": [{"match": table, "hash": ["email"]}]},
    }
    config = tmp_path / "pipelines.yaml"
    # `cdc validate --check-sources` checks a history's tracked columns against what the table lands.
    bad = {**pipeline, "table_options": {table: {"outputs": ["state", "history"], "track": ["email", "level"]}}}
    config.write_text(json.dumps({"pipelines": [bad]}))
    assert main(["--config", str(config), "validate", "--check-sources"]) == ConfigError.exit_code
    assert "track names ['level'], which the table does not have" in capsys.readouterr().err
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    assert main(["--config", str(config), "validate", "--check-sources"]) == 0, capsys.readouterr()
    lake = str(tmp_path / "lake")

    def run() -> None:
        code = main(["--config", str(config), "run", name])
        assert code == 0, capsys.readouterr().err

    def history() -> list[dict[str, Any]]:
        rows = delta_state.read_rows(history_uri(lake, source_db, "customers")).to_pylist()
        return sorted(rows, key=lambda r: (r["id"], r["_cdc_valid_from_version"]))

    def changelog() -> list[dict[str, Any]]:
        rows = delta_state.read_rows(changelog_uri(lake, source_db, "customers")).to_pylist()
        return sorted(rows, key=lambda r: (r["_cdc_version"], r["_cdc_ordinal"], r["_cdc_op"]))  # B before U

    run()  # the snapshot (and the empty binlog after it)
    assert [(r["id"], r["tier"], r["_cdc_op"], r["_cdc_is_current"]) for r in history()] == [
        (1, "gold", "S", True), (2, "silver", "S", True), (3, "gold", "S", True)]
    assert sorted((r["id"], r["_cdc_op"], r["email"]) for r in changelog()) == [
        (1, "S", hashed("one@secret.example")), (2, "S", hashed("two@secret.example")),
        (3, "S", hashed("three@secret.example"))]

    execute(services, source_db,
            "UPDATE customers SET visits = visits + 1 WHERE id = 2",  # untracked: folds into the current version
            "UPDATE customers SET tier = 'silver' WHERE id = 1",  # tracked: a new version
            "UPDATE customers SET tier = 'platinum' WHERE id = 1",  # the same transaction and second: after it
            "DELETE FROM customers WHERE id = 3",
            "INSERT INTO customers VALUES (4, 'four@secret.example', 'bronze', 1)")
    execute(services, source_db, "UPDATE customers SET email = 'new-two@secret.example', visits = 7 WHERE id = 2")
    run()

    got = history()
    assert [(r["id"], r["tier"], r["visits"], r["_cdc_op"], r["_cdc_is_current"]) for r in got] == [
        (1, "gold", 0, "S", False), (1, "silver", 0, "U", False), (1, "platinum", 0, "U", True),
        (2, "silver", 7, "S", True),  # every change of id 2 left its tier: one version, the newest values
        (3, "gold", 5, "S", False),
        (4, "bronze", 1, "I", True),
    ]
    assert got[3]["email"] == hashed("new-two@secret.example")
    # Each closed version ends where the next one starts (binlog order, not the clock: one second, one
    # transaction), and a delete ends the row's last one.
    assert got[0]["_cdc_valid_to_version"] == got[1]["_cdc_valid_from_version"]
    assert got[1]["_cdc_valid_to_version"] == got[2]["_cdc_valid_from_version"] > got[1]["_cdc_valid_from_version"]
    assert got[1]["_cdc_valid_to"] == got[2]["_cdc_valid_from"]
    assert got[2]["_cdc_valid_to"] is None and got[2]["_cdc_valid_to_version"] is None
    assert got[4]["_cdc_valid_to_version"] > got[4]["_cdc_valid_from_version"]
    assert got[3]["_cdc_last_version"] > got[3]["_cdc_valid_from_version"]  # the folded-in changes

    log = changelog()
    # Each update comes with its before image (op B, the binlog's, transformed like the row: the old e-mail hashed),
    # with the update's version, ordinal and transaction.
    assert [(r["id"], r["_cdc_op"]) for r in log[3:]] == [
        (2, "B"), (2, "U"), (1, "B"), (1, "U"), (1, "B"), (1, "U"), (3, "D"), (4, "I"), (2, "B"), (2, "U")]
    assert [(r["tier"], r["visits"]) for r in log[3:]] == [
        ("silver", 0), ("silver", 1), ("gold", 0), ("silver", 0), ("silver", 0), ("platinum", 0), ("gold", 5),
        ("bronze", 1), ("silver", 1), ("silver", 7)]
    assert [r["email"] for r in log[-2:]] == [hashed("two@secret.example"), hashed("new-two@secret.example")]
    for before, update in itertools.pairwise(log[3:]):
        if before["_cdc_op"] == "B":
            assert update["_cdc_op"] == "U"
            assert [before[c] for c in ("id", "_cdc_version", "_cdc_ordinal", "_cdc_commit_ts", "_cdc_txn")] == [
                update[c] for c in ("id", "_cdc_version", "_cdc_ordinal", "_cdc_commit_ts", "_cdc_txn")]
    assert len({(r["id"], r["_cdc_version"], r["_cdc_op"]) for r in log}) == len(log) == 13
    # Each change names its transaction (where it began in the binlog); the snapshot's rows none.
    txns = [r["_cdc_txn"] for r in log]
    assert txns[:3] == [None, None, None]
    assert len(set(txns[3:11])) == 1 and txns[11] > txns[3], txns  # one transaction, then the next
    assert all(r["_cdc_txn"] < r["_cdc_version"] for r in log[3:])

    # Consistent cuts name the history and change log with the state (docs/lake-versions.md): the newest at their
    # current versions, the snapshot's window at the versions that held only the snapshot's rows.
    capsys.readouterr()
    assert main(["--config", str(config), "versions", name, "--check"]) == 0, capsys.readouterr().err
    newest = json.loads(capsys.readouterr().out)["tables"][table]
    assert newest["version"] == DeltaTable(f"{lake}/{source_db}/customers").version()
    assert newest["outputs"]["history"]["version"] == DeltaTable(history_uri(lake, source_db, "customers")).version()
    assert newest["outputs"]["changelog"]["version"] == DeltaTable(
        changelog_uri(lake, source_db, "customers")).version()
    recorded = lake_versions.read_checkpoints(lake, name)
    first = lake_versions.load_cut(lake, name, window=min(r["seq"] for r in recorded if r["output"] == "history"))
    at_first = lake_versions.read_table(first, table, output="history").to_pylist()
    assert sorted((r["id"], r["_cdc_op"], r["_cdc_is_current"]) for r in at_first) == [
        (1, "S", True), (2, "S", True), (3, "S", True)]
    assert len(lake_versions.read_table(first, table, output="changelog")) == 3
    assert main(["--config", str(config), "versions", name, "--sql"]) == 0
    assert "VERSION AS OF" in capsys.readouterr().out.split(f"-- {table} (history)")[0].splitlines()[-1]

    # The state table is as always; `cdc verify` compares it with the source.
    assert main(["--config", str(config), "verify", name]) == 0, capsys.readouterr()
    secrets = ["one@secret.example", "two@secret.example", "three@secret.example", "four@secret.example",
               "new-two@secret.example"]
    assert find_values_in_files([tmp_path / "staging", tmp_path / "lake"], set(secrets)) == []
