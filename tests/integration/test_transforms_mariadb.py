"""Transforms end to end (issue 36 §1-§2; cdc_core/model/transforms.py): a customers table with e-mail addresses,
phone and card numbers and free-text notes, landed by the `cdc` CLI through the snapshot on start, the columnar
decoder and the library decoder, with one rule that excludes, hashes, masks, truncates, filters and computes. The lake
equals the source as the rule shapes it after every run, and no clear value appears anywhere: in any staged
file (Parquet decoded), the manifests, the lake (Parquet decoded, the Delta log), the ZooKeeper records or the
logs. Windows merge on the session's warm merge server."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdc_core.cli import main
from cdc_core.lake import delta_state
from cdc_core.model.errors import ConfigError
from cdc_core.model.layout import changelog_uri
from cdc_core.model.naming import path_component
from tests.support.security import find_values_in_files

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("warm_merges")]

KEY = "integration-test-hash-key-0123456789"
TABLE = """
CREATE TABLE customers (
  id INT PRIMARY KEY, email VARCHAR(100), phone VARCHAR(30), card VARCHAR(19), note TEXT,
  country CHAR(2), city VARCHAR(40), amount DECIMAL(8,2)
)
"""
RULE = {
    "match": "{db}.customers",
    "columns": {"exclude": ["note"]},
    "hash": ["email"],
    "mask": {"card": "keep_last_4", "phone": "null"},
    "truncate": {"city": 3},
    "filter": "country = 'DE'",
    "compute": {"label": "CONCAT(country, '-', CAST(id AS CHAR))", "cents": "CAST(amount * 100 AS SIGNED)"},
}


def person(i: int, country: str) -> tuple[Any, ...]:
    return (i, f"person{i}@secret-mail.example", f"+49 170 55{i:04d}", f"4111 2222 3333 {i:04d}",
            f"confidential note {i}", country, f"Hamburg-{i}", Decimal(i) + Decimal("0.25"))


def clear_values(rows: list[tuple[Any, ...]]) -> set[str]:
    """What must never leave the source: e-mails, phones, card numbers (but the last 4), notes, full cities."""
    out = set()
    for r in rows:
        out |= {r[1], r[2], r[3][:-4], r[4], r[6]}
    return out


def expected_lake(rows: list[tuple[Any, ...]]) -> dict[int, dict[str, Any]]:
    out = {}
    for i, email, _phone, card, _note, country, city, amount in rows:
        if country != "DE":
            continue
        out[i] = {"id": i, "email": hmac.new(KEY.encode(), email.encode(), hashlib.sha256).hexdigest(),
                  "phone": None, "card": "*" * (len(card) - 4) + card[-4:], "country": country,
                  "city": city[:3], "amount": amount, "label": f"{country}-{i}", "cents": int(amount * 100)}
    return out


def source_rows(services: Any, db: str) -> list[tuple[Any, ...]]:
    conn = services.root_connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, email, phone, card, note, country, city, amount FROM customers ORDER BY id")
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


def execute(services: Any, db: str, *statements: str, rows: list[tuple[Any, ...]] = ()) -> None:
    conn = services.root_connect(db)
    try:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
            if rows:
                cur.executemany("INSERT INTO customers VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows)
        conn.commit()
    finally:
        conn.close()


def zookeeper_text(zk_client: Any, path: str) -> str:
    data, _ = zk_client.get(path)
    return (data or b"").decode("utf-8", "replace") + "".join(
        zookeeper_text(zk_client, f"{path}/{child}") for child in zk_client.get_children(path))


def test_excluded_hashed_masked_truncated_and_filtered_columns_land_shaped_on_every_path_and_never_in_the_clear(
    services: Any, source_db: str, zk_client: Any, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
) -> None:
    conn = services.airflow_connection
    monkeypatch.setenv("AIRFLOW_CONN_CDC_SOURCE_PII", json.dumps(conn))
    monkeypatch.setenv("CDC_TEST_PII_KEY", KEY)
    execute(services, source_db, TABLE, rows=[person(i, "DE" if i % 2 else "FR") for i in range(1, 7)])
    name = "pii_" + uuid.uuid4().hex[:6]
    pipeline: dict[str, Any] = {
        "name": name, "source": {"conn_id": "cdc_source_pii"}, "tables": {"include": [f"{source_db}.*"]},
        "start": {"kind": "current"},  # a new pipeline snapshots its tables first
        "zookeeper": {"hosts": services.zk_hosts, "root": zk_root},
        "staging_root": str(tmp_path / "staging"), "lake_root": str(tmp_path / "lake"), "schedule": None,
        "transform": {"hash_key": {"env": "CDC_TEST_PII_KEY"},
                      "tables": [{**RULE, "match": RULE["match"].format(db=source_db)}]},
        # A change log: updates' before images are staged and landed too, shaped by the same rule.
        "table_options": {f"{source_db}.customers": {"outputs": ["state", "changelog"]}},
    }
    config = tmp_path / "pipelines.yaml"

    # `cdc validate --check-sources` checks each rule against its table as it is, and the hash key's presence.
    bad_rule = {**pipeline["transform"]["tables"][0], "columns": {"exclude": ["id"]}}
    for transform, message in (({**pipeline["transform"], "tables": [bad_rule]}, "key column 'id' cannot be excluded"),
                               ({**pipeline["transform"], "hash_key": {"env": "CDC_TEST_NO_SUCH_KEY"}},
                                "CDC_TEST_NO_SUCH_KEY is not set")):
        config.write_text(json.dumps({"pipelines": [{**pipeline, "transform": transform}]}))
        code = main(["--config", str(config), "validate", "--check-sources"])
        _, err = capsys.readouterr()
        assert code == ConfigError.exit_code and message in err, err
    config.write_text(json.dumps({"pipelines": [pipeline]}))
    assert main(["--config", str(config), "validate", "--check-sources"]) == 0, capsys.readouterr()
    table_uri = str(tmp_path / "lake" / path_component(source_db) / "customers")
    secrets: set[str] = set()

    def run_and_check(decoder: str) -> None:
        config.write_text(json.dumps({"pipelines": [{**pipeline, "decoder": decoder}]}))
        code = main(["--config", str(config), "run", name])
        out, err = capsys.readouterr()
        assert code == 0, err
        rows = source_rows(services, source_db)
        secrets.update(clear_values(rows))
        lake = {r["id"]: r for r in delta_state.read_rows(table_uri).to_pylist()}
        assert set(next(iter(lake.values()))) >= {"id", "email", "phone", "card", "country", "city", "amount"}
        assert "note" not in next(iter(lake.values()))
        assert {i: {k: r[k] for k in expected_lake(rows)[i]} for i, r in lake.items()} == expected_lake(rows)
        logs = out + err + caplog.text
        assert not [s for s in secrets if s in logs], "a clear value in the logs"

    run_and_check("columnar")  # the snapshot on start, then the (empty) binlog
    execute(services, source_db,
            "UPDATE customers SET country = 'FR' WHERE id = 1",  # leaves the filter: deleted in the lake
            "UPDATE customers SET country = 'DE' WHERE id = 2",  # enters it: inserted
            "DELETE FROM customers WHERE id = 4",  # never in the lake: nothing changes
            "UPDATE customers SET email = 'renamed3@secret-mail.example', note = 'new secret' WHERE id = 3",
            rows=[person(7, "DE"), person(8, "FR")])
    run_and_check("columnar")
    execute(services, source_db, "UPDATE customers SET country = 'DE' WHERE id = 8",
            "UPDATE customers SET city = 'Bremerhaven-Nord', card = '5500 0000 0000 0004' WHERE id = 5",
            "DELETE FROM customers WHERE id = 7", rows=[person(9, "DE")])
    run_and_check("library")

    assert find_values_in_files([tmp_path / "staging", tmp_path / "lake"], secrets) == []
    assert list((tmp_path / "staging").rglob("part-*.before.parquet")), "no before image was staged"

    # The change log (columnar, then library decoder): each update's before image (B) inside the filter, shaped like
    # the row; one outside it (the update moved the row in) is not there; a row moved out is its B, then a delete.
    log = delta_state.read_rows(changelog_uri(str(tmp_path / "lake"), source_db, "customers")).to_pylist()
    ops: dict[int, list[str]] = {}
    for r in sorted(log, key=lambda r: (r["_cdc_version"], r["_cdc_ordinal"], r["_cdc_op"])):
        if r["_cdc_txn"] is not None:  # not the snapshot's (its rows outside the filter: deletes of their keys)
            ops.setdefault(r["id"], []).append(r["_cdc_op"])
    assert ops == {1: ["B", "D"], 2: ["U"], 3: ["B", "U"], 4: ["D"], 5: ["B", "U"], 7: ["I", "D"], 8: ["D", "U"],
                   9: ["I"]}, ops
    befores = {r["id"]: r for r in log if r["_cdc_op"] == "B"}
    old = expected_lake([person(i, "DE") for i in (1, 3, 5)])
    for i in (1, 3, 5):
        assert {k: befores[i][k] for k in old[i]} == old[i], i
        assert "note" not in befores[i]

    # `cdc verify` compares the lake with the source shaped by the same rule; a change not landed yet shows.
    assert main(["--config", str(config), "verify", name]) == 0, capsys.readouterr()
    assert f"{source_db}.customers: equal (" in capsys.readouterr().out
    execute(services, source_db, "UPDATE customers SET city = 'Xanten' WHERE id = 3")
    assert main(["--config", str(config), "verify", name]) != 0
    out, err = capsys.readouterr()
    assert "different 1 [((3,), 'city', 'Xan', 'Ham')]" in out, out + err
    zk = zookeeper_text(zk_client, zk_root)
    assert not [s for s in secrets if s in zk]
